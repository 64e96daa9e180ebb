"""The executor: plans bound to a GPU, and the prepared calls that repeat them.

A :class:`Launcher` is one plan made ready to launch: the kernel loaded, its
shared-memory limit raised, launch shapes per batch chunk built, and its launches
as steps (gemmlab.kernels.steps): a kernel, a launch shape and arguments with slots
for the pointers, the two scalars and the workspaces.  Its :meth:`Launcher.run` fills
the slots and enqueues each step.  What a rung launches besides its kernel comes from
step builders its KernelSpec supplies (pre-passes, a split's reduction or own
workspaces, a method chosen on the GPU); nothing here knows a particular rung.
Arguments a rung builds itself (Launching.kernel_args, a pre-pass's) are kept per set of
addresses, and copied with the addresses replaced for new ones (_address_moves).
A :class:`PreparedCall` is everything one signature of
``gemmlab.matmul`` runs (a launcher, the operand swap of a column-major out,
the host loop over batch dimensions that do not fit gridDim.z, how to allocate
the result, where the operands sit relative to each other), stored in
:data:`CACHE` under a key of cheap attribute reads, so that repeated calls do
no validation or planning at all (gemmlab.core.api builds the key).

Every launch goes to the caller's current stream; workspaces are stream-ordered
allocations, so calls are asynchronous and can be captured in CUDA graphs.  A
method chosen from the data (methods.CHOSEN_ON_GPU) is chosen on the GPU too
(:class:`_MethodChooser`): nothing is read back during the call.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import threading
from collections import OrderedDict

import numpy as np

from .methods import CHOSEN_ON_GPU, EC_PRECISIONS, MethodChoice, choice_of_record
from .arrays import ITEMSIZE, allocator, ordered_strides, stored_order, stream_getter
from ..kernels.steps import Reduction, fixup_needs, standard_steps
from .planner import (
    Batching,
    Call,
    KernelView,
    Plan,
    batch_groups,
    kernel_view,
    matrix_layout,
    plan_call,
    plan_for_choice,
    result_side,
    storage_itemsize,
    batching,
    band_holds,
    bands_of,
    family_call,
    measured_shape,
    thin_batch_call,
    _bands,
    with_bands,
    with_size,
    without_objects,
)
from ..runtime import compile as rt_compile
from ..runtime.device import GPUInfo, make_current
from ..runtime.launch import (
    DEFAULT_DYNAMIC_SMEM,
    LaunchShape,
    MAP_BYTES,
    PackedArgs,
    Recording,
    Replay,
    allow_dynamic_smem,
    clusters_that_fit,
    is_tensor_map,
    launch_shaped,
    recording,
    stream_is_capturing,
    stream_workspace,
    workspace_generation,
    zero_async,
)
from ..runtime.tma import Operands, moved_map, replace_address

log = logging.getLogger("gemmlab")

GRID_Z_MAX = 65535  # batches per launch (gridDim.z); more are launched in chunks
INT32_MAX = 2**31 - 1
SPLITK_WORKSPACE_LIMIT = 256 * 2**20  # bytes of split-K workspace per launch (batches are chunked)
# Bytes of a batched kernel's own workspace per launch (a pre-pass's output: split parts,
# staged copies; batches are chunked): larger than split-K's, so that a chunk of big
# matrices (P @ V at S = 4096: 132 MiB each) still has enough tiles for every SM.
BATCH_WORKSPACE_LIMIT = 2**30

# Own-args kernels: argument sets kept per launcher (by addresses).  A set not kept costs a
# copy of an earlier one with the addresses replaced (_new_args), a few microseconds; the
# bound keeps CACHE's signatures at about 1 KB a set, 256 KB each at most.
ARGS_KEPT = 256
# Recordings of a prepared call's repeated addresses that may fail to give a Replay (the first
# may allocate its kept workspaces) before it stops recording them.
REPLAY_TRIES = 2


def _keep(memo: dict, key, value) -> None:
    """memo[key] = value, in a memo of at most ARGS_KEPT entries (a program of many
    addresses starts it again)."""
    if len(memo) >= ARGS_KEPT:
        memo.clear()
    memo[key] = value


_f32_memo: dict = {}


def f32(x) -> np.float32:
    """np.float32(x), memoised for the few values alpha and beta usually take
    (building a NumPy scalar costs more than the rest of a launch's arguments)."""
    v = _f32_memo.get(x)
    if v is None:
        v = np.float32(x)
        if len(_f32_memo) < 256:
            _f32_memo[x] = v
    return v


class Launcher:
    """A plan bound to ``gpu``, to leading dimensions ``lds`` = (lda, ldb, ldc)
    and to ``batch`` products ``strides`` elements apart (A, B, C; 0 repeats a
    matrix), which go to gridDim.z GRID_Z_MAX at a time.  Kernels with their own
    argument builder take GRID_Z_MAX matrices per launch too where it builds a whole
    batch's (Launching.batched_args: 3-D tensor maps, a persistent loop over every matrix's
    tiles; a pre-pass's workspace at most BATCH_WORKSPACE_LIMIT bytes a launch), else
    one launch per matrix."""

    def __init__(
        self,
        p: Plan,
        gpu: GPUInfo,
        lds: tuple[int, int, int],
        batch: int = 1,
        strides: tuple[int, int, int] = (0, 0, 0),
        bias_strides: tuple[int, int, int] | None = None,
    ):
        p.spec.check_arch(gpu.arch, gpu.name, p.problem.dtype)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("preparing %s on %s", p.describe(), gpu.name)
        make_current(gpu.ordinal)
        self.plan, self.gpu, self.batch = p, gpu, batch
        self.kernel = rt_compile.load_kernel(p.spec.source_path, p.name_expression, gpu.arch)
        self.geo = geo = p.spec.launch(p.params, p.problem)
        if geo.smem_bytes > DEFAULT_DYNAMIC_SMEM:
            if geo.smem_bytes > gpu.max_smem_per_block_optin:
                raise ValueError(
                    f"{p.describe()} needs {geo.smem_bytes} bytes of shared memory per block; "
                    f"{gpu.name} allows {gpu.max_smem_per_block_optin}"
                )
            allow_dynamic_smem(self.kernel, geo.smem_bytes, gpu.ordinal)
        pr = p.problem
        self.item_in, self.item_out = storage_itemsize(pr.dtype), ITEMSIZE[pr.out_dtype]
        self._bind(tuple(lds), tuple(strides))
        self.splits = splits = p.spec.splits(p.params)
        run = p.spec.launching
        self.prepass = p.spec.pre_pass(p.problem)
        self.own_args = run.kernel_args is not None or self.prepass is not None
        self.batched_args = self.own_args and run.batched_args
        # Kernels that can read a method chosen on the GPU take its record's address
        # last: none (0) unless run() is given one.
        self.reads_choice = run.reads_choice
        self.extra = p.extra_args() + ((0,) if self.reads_choice else ())
        if splits > 1:
            self._ws_what = f"{p.describe()} (split-K)"
        self._cluster_grid = None
        self._sized(geo)
        # A bias the kernel adds in its epilogue (Launching.epilogue_bias): its element strides
        # (rows, columns, matrices), where this launcher can take one -- one launch of the
        # kernel's own arguments, no pre-pass, K unsplit or split in the kernel, K not 0 --
        # else None (run() and direct() then take bias = 0 only).
        self.bias_strides = None
        if (
            bias_strides is not None
            and run.epilogue_bias is not None
            and run.epilogue_bias(p, bias_strides)
            and run.kernel_args is not None
            and self.prepass is None
            and (splits == 1 or self.fixup_bytes is not None)
            and pr.K != 0
            and (batch == 1 or self.batched_args and len(self.chunks) == 1)
        ):
            self.bias_strides = tuple(bias_strides)

    def resized(self, p: Plan, lds: tuple[int, int, int], strides: tuple[int, int, int]) -> "Launcher":
        """This launcher for ``p``: the same kernel and parameters on a problem of other
        sizes (a family's member, executor.Family), the same batch, K not 0 where this
        launcher's was not, with leading dimensions ``lds`` (a matrix of one stored row has
        its width as one) and matrices ``strides`` apart (a contiguous array's follow its
        sizes).  What depends on the sizes -- the launch shapes, the split's
        workspaces, the scalars -- is made again, and nothing kept per call is shared: its
        arguments are built for the new sizes."""
        new = object.__new__(Launcher)
        new.__dict__.update(self.__dict__)
        new.plan = p
        if lds != self.lds or strides != self.strides:
            new._bind(lds, strides)
        new._sized(p.spec.launch(p.params, p.problem))
        return new

    def _bind(self, lds: tuple[int, int, int], strides: tuple[int, int, int]) -> None:
        """The leading dimensions and matrix strides, and the kernels' argument types of them."""
        self.lds, self.strides = lds, strides
        self.lda, self.ldb, self.ldc = (np.int32(x) for x in lds)
        self.sa, self.sb, self.sc = (np.int64(x) for x in strides)

    @property
    def stages(self) -> bool:
        """Whether a launch first copies operands it cannot read in place (Launching.staging)."""
        return self.prepass is not None and self.prepass is self.plan.spec.launching.staging

    def _sized(self, geo) -> None:
        """What depends on the plan's sizes (M, N, K), given its launch shape ``geo``."""
        p, batch, strides, splits = self.plan, self.batch, self.strides, self.splits
        pr, run = p.problem, p.spec.launching
        self.geo = geo
        M, N, K = pr.M, pr.N, pr.K
        # A split the kernel adds up itself (Launching.split_fixup): its workspaces' bytes per
        # matrix, (partial tiles, counters); None where a reduction kernel adds the slices.
        self.fixup_bytes = run.split_fixup(p.params, pr) if splits > 1 and run.split_fixup else None
        # 16-bit outputs: the kernels handle alpha == 0, except split over K with a reduction
        # kernel, where the partial products would read A and B; the reduction in C's dtype
        # does it then.  K == 0 always takes the reduction: empty operands may have no memory
        # at all (a null address no tensor map can describe).
        self.quick_ok = pr.out_dtype == "float32" or (splits > 1 and self.fixup_bytes is None) or pr.K == 0
        self.k_zero = pr.K == 0
        per_launch = GRID_Z_MAX
        if splits > 1:
            per_matrix = self.fixup_bytes[0] if self.fixup_bytes else 4 * splits * M * N
            per_launch = max(1, min(per_launch, SPLITK_WORKSPACE_LIMIT // max(1, per_matrix)))
        if self.batched_args:  # the kernel's work index (matrix, tile) is a 32-bit int; its smallest tile is 64 x 64
            per_launch = max(1, min(per_launch, INT32_MAX // max(1, -(-M // 64) * -(-N // 64))))
        if self.batched_args and run.batch_workspace is not None:
            per_launch = max(1, min(per_launch, BATCH_WORKSPACE_LIMIT // max(1, run.batch_workspace(pr))))
        # One entry per gridDim.z chunk: byte offsets of its first A, B, C and its launch shapes.
        self.chunks = []
        for z0 in range(0, batch, per_launch):
            nz = min(per_launch, batch - z0)
            self.chunks.append(
                (
                    z0 * strides[0] * self.item_in,
                    z0 * strides[1] * self.item_in,
                    z0 * strides[2] * self.item_out,
                    nz,
                    LaunchShape((geo.grid[0], geo.grid[1], nz), geo.block, geo.smem_bytes, geo.cluster),
                )
            )
        self._steps = None  # standard-args kernels: their steps, built at the first call
        self._fixup_needs = {}  # a split's own workspaces, by matrices per launch
        self._split_needs = {}  # ... or its slices' workspace, by the same
        self._shape = None  # own-args kernels: the launch shape of the first launch, once the grid is known
        # own-args kernels: launch shapes by matrices per launch (after a pre-pass: by (matrices,
        # whether a choice record is read), the latter a programmatic dependent launch)
        self._shapes = {}
        # kernel_args' arguments, kept per addresses (None: a kernel with a pre-pass, kept apart).
        self._args_memo = {} if run.kernel_args is not None and self.prepass is None else None
        # (A, B, C, alpha, beta, bias[, the split's workspaces]) -> the whole argument tuple, for direct()
        self._full_memo = {}
        # kernel_args' launches by kind of call (everything but the addresses): the first one
        # built and where it holds the addresses (_address_moves), or False (_new_args)
        self._args_moves = {}
        self._prepass_memo = {}  # a pre-pass kernel's launches, by addresses, scalars and workspace
        # ... and by the same without the addresses: an earlier build and where it holds them
        # (_address_moves), or False where it cannot be moved to other addresses
        self._prepass_moves = {}
        self._prepass_bytes = {}  # ... and its workspace's size, by (matrices, strides, choice or not)
        self.args_mk = (np.int32(M), np.int32(N), np.int32(K))
        # The reduction's steps: split-K's second kernel, and BLAS's quick return.
        self.reduction = Reduction(
            self.gpu.arch, pr.dtype, pr.out_dtype, M, N, splits, self.ldc, self.sc, [c[3] for c in self.chunks]
        )

    # -- the per-call part ---------------------------------------------------------------
    def run(
        self,
        stream: int,
        A: int,
        B: int,
        C: int,
        alpha,
        beta,
        choice: int = 0,
        report: int = 0,
        workspace=None,
        bias: int = 0,
        fixup=None,
    ) -> None:
        """Enqueue the product on ``stream``: C = alpha * op(A) @ op(B) + beta * C for
        every matrix of the batch (A, B, C: device addresses of the first ones).
        ``choice``: the address of a method choice made on the GPU, for kernels
        that read one (the launch does nothing if it chose another method);
        ``report``: where a pre-pass that makes the choice copies it (0: nowhere);
        ``workspace``: the pre-pass's workspace, taken by the caller (one launch, no
        split-K: shared_prepass_bytes), else taken here from the stream.
        ``bias``: the address of a bias the kernel adds in its epilogue (bias_strides is
        set; alpha != 0), 0 for none.  ``fixup``: the workspaces of a split the kernel adds
        up itself (_take_fixup), taken by the caller for the one launch, else taken here."""
        if bias and (self.bias_strides is None or alpha == 0):
            raise ValueError(f"{self.plan.describe()}: this launch cannot add a bias in its epilogue")
        if self.quick_ok and (alpha == 0 or self.k_zero):
            self._quick_return(stream, C, beta)
            return
        if self.own_args:
            self._run_own_args(stream, A, B, C, alpha, beta, choice, report, workspace, bias, fixup)
            return
        steps = self._steps
        if steps is None:
            steps = self._steps = self._standard_steps()
        alpha32, beta32 = f32(alpha), f32(beta)
        for need, chunk in steps:  # the batch chunks, each its steps on a workspace of its own, or none
            if need is None:
                for step in chunk:
                    launch_shaped(step.kernel, step.shape, stream, step.fill(A, B, C, alpha32, beta32, 0, choice))
                continue
            ws = stream_workspace(self.gpu, stream, need.nbytes, need.what, need.hint, slot=need.slot)
            try:
                w = int(ws.handle)
                for step in chunk:
                    launch_shaped(step.kernel, step.shape, stream, step.fill(A, B, C, alpha32, beta32, w, choice))
            finally:
                ws.close(stream)  # given back in stream order, after the steps that read it

    def _standard_steps(self) -> tuple:
        """The steps of a kernel with the standard arguments, built at its first call."""
        red = self.reduction if self.splits > 1 else None
        return standard_steps(
            self.kernel,
            self.chunks,
            self.args_mk,
            (self.lda, self.ldb, self.ldc),
            (self.sa, self.sb, self.sc),
            self.extra,
            red,
            getattr(self, "_ws_what", ""),
        )

    def _split_k(self, stream: int, jobs, alpha, beta, partials, choice: int = 0) -> None:
        """Split-K over the batch chunks ``jobs`` = [(C of the chunk, its matrices,
        job), ...]: the partial products go to a workspace on the caller's stream
        (stream-ordered, so concurrent calls on other streams get their own;
        splits * M * N floats per matrix), written by ``partials(job, workspace)``;
        then one more kernel adds them into C with alpha and beta, in C's dtype
        (``choice``: a method chosen on the GPU, which the reduction reads too)."""
        red = self.reduction
        for i, (c, nz, job) in enumerate(jobs):
            need = self._split_needs.get(nz)
            if need is None:
                need = self._split_needs[nz] = red.need(nz, self._ws_what)
            ws = stream_workspace(self.gpu, stream, need.nbytes, need.what, need.hint, slot=need.slot)
            try:
                w = int(ws.handle)
                partials(job, w)
                # with a choice record, added only if it chose this launcher's method
                kernel, shape, args = red.reduce(i, w, c, f32(alpha), f32(beta), choice)
                launch_shaped(kernel, shape, stream, args)
            finally:
                ws.close(stream)  # given back in stream order, after the reduction

    def direct(self):
        """A function (stream, A, B, C, alpha, beta) -> None for the common case of
        one launch with the standard arguments (one batch chunk, no split-K), or of a
        kernel that builds its own (one batch chunk, unsplit or split in the kernel):
        the same launches as run(), with every constant bound in the closure, so that a
        repeated call spends as little Python as possible.  None where run() is needed;
        run() also takes over for alpha == 0 (BLAS's quick return)."""
        memo = _f32_memo
        one_launch = self.batch == 1 or self.batched_args and len(self.chunks) == 1
        if self.own_args and self._args_memo is not None and self.fixup_bytes is not None and one_launch:
            return self._direct_fixup()
        if self.own_args and self._args_memo is not None and self.splits == 1 and one_launch:
            # Tensor maps of the caller's arrays (a whole batch: one launch): the
            # argument tuple is kept per (addresses, alpha, beta) by _run_own_args; any other
            # call runs it.
            full_memo, full, me, kernel = self._full_memo, self.run, self, self.kernel

            def direct_own(stream, A, B, C, alpha, beta, bias=0):
                args = full_memo.get((A, B, C, alpha, beta, bias))
                if args is None:
                    full(stream, A, B, C, alpha, beta, bias=bias)
                    return
                launch_shaped(kernel, me._shape, stream, args)

            return direct_own
        if self.own_args or self.splits != 1 or len(self.chunks) != 1 or (self.quick_ok and self.k_zero):
            return None
        kernel, shape = self.kernel, self.chunks[0][4]
        M, N, K = self.args_mk
        lda, ldb, ldc, sa, sb, sc, extra = self.lda, self.ldb, self.ldc, self.sa, self.sb, self.sc, self.extra
        quick_ok, full = self.quick_ok, self.run

        def direct(stream, A, B, C, alpha, beta):
            a32, b32 = memo.get(alpha), memo.get(beta)
            if a32 is None or b32 is None or (quick_ok and alpha == 0):
                full(stream, A, B, C, alpha, beta)
                return
            launch_shaped(kernel, shape, stream, (M, N, K, a32, A, lda, B, ldb, b32, C, ldc, sa, sb, sc) + extra)

        return direct

    def _direct_fixup(self):
        """direct() for a split the kernel adds up itself: the stream's two split-K
        workspaces (_take_fixup), then the kernel, its arguments kept per (addresses,
        alpha, beta, bias, workspaces) by _launch_own_args; run() takes any call it has not
        prepared (given the workspaces), and alpha == 0 where the quick return applies."""
        full_memo, full, me, kernel = self._full_memo, self.run, self, self.kernel
        quick_ok, k_zero, nz = self.quick_ok, self.k_zero, self.chunks[0][3]

        def direct_fixup(stream, A, B, C, alpha, beta, bias=0):
            if quick_ok and (alpha == 0 or k_zero):
                full(stream, A, B, C, alpha, beta, bias=bias)
                return
            ws, counters = me._take_fixup(stream, nz)
            try:
                args = full_memo.get((A, B, C, alpha, beta, bias, ws.handle, counters.handle))
                if args is None:
                    full(stream, A, B, C, alpha, beta, bias=bias, fixup=(ws, counters))
                    return
                launch_shaped(kernel, me._shape, stream, args)
            finally:
                counters.close(stream)  # in stream order, after the kernel
                ws.close(stream)

        return direct_fixup

    def _take_fixup(self, stream: int, nz: int) -> tuple:
        """The workspaces of a split the kernel adds up itself, for ``nz`` matrices
        (steps.fixup_needs: the partial tiles, then the counters), given back with
        .close(stream), the counters first."""
        needs = self._fixup_needs.get(nz)
        if needs is None:
            needs = self._fixup_needs[nz] = fixup_needs(self.fixup_bytes, nz, self._ws_what)
        (part, count), capturing = needs, stream_is_capturing(stream)
        ws = stream_workspace(self.gpu, stream, part.nbytes, part.what, part.hint, slot=part.slot, capturing=capturing)
        try:
            counters = stream_workspace(
                self.gpu,
                stream,
                count.nbytes,
                count.what,
                count.hint,
                slot=count.slot,
                zero_new=count.zero_new,
                capturing=capturing,
            )
        except BaseException:
            ws.close(stream)
            raise
        return ws, counters

    def _quick_return(self, stream: int, C: int, beta) -> None:
        """BLAS quick return: the product is empty (alpha == 0 or K == 0), so C =
        beta * C without reading A or B (NaN or Inf in them must not reach C)."""
        red, beta32 = self.reduction, f32(beta)
        for i, (_, _, dc, _, _) in enumerate(self.chunks):
            kernel, shape, args = red.quick_return(i, C + dc, beta32)
            launch_shaped(kernel, shape, stream, args)

    def _run_own_args(
        self,
        stream: int,
        A: int,
        B: int,
        C: int,
        alpha,
        beta,
        choice: int = 0,
        report: int = 0,
        workspace=None,
        bias: int = 0,
        fixup=None,
    ) -> None:
        """A kernel whose spec builds its arguments: one launch per batch chunk where it
        takes a whole batch (Launching.batched_args: 3-D tensor maps), else one per matrix
        (``choice``, where the method is chosen on the GPU, the address of the record
        the kernels read; ``fixup``: see run())."""
        if self.batched_args:
            jobs = [(A + da, B + db, C + dc, nz) for da, db, dc, nz, _ in self.chunks]
        else:
            sa, sb, sc = (
                self.strides[0] * self.item_in,
                self.strides[1] * self.item_in,
                self.strides[2] * self.item_out,
            )
            jobs = [(A + z * sa, B + z * sb, C + z * sc, 1) for z in range(self.batch)]
        if self.splits > 1 and self.fixup_bytes is None:  # the workspace as C, alpha = 1, beta = 0
            self._split_k(
                stream,
                [(c, nz, (a, b, nz)) for a, b, c, nz in jobs],
                alpha,
                beta,
                lambda job, w: self._own_partials(stream, *job, w, choice, report),
                choice,
            )
            return
        self._launch_own_args(
            stream, jobs, self.lds[2], self.strides, alpha, beta, choice, report, workspace, bias, fixup
        )

    def _own_partials(self, stream: int, a: int, b: int, nz: int, w: int, choice: int = 0, report: int = 0) -> None:
        """Split-K's partial products of a kernel that builds its arguments, into the workspace at
        ``w`` (``choice``: the record of a method chosen on the GPU, or 0)."""
        self._launch_own_args(
            stream,
            [(a, b, w, nz)],
            self.args_mk[1],
            (self.strides[0], self.strides[1], self.reduction.slice_elems),
            1.0,
            0.0,
            choice,
            report,
        )

    def _launch_own_args(
        self,
        stream: int,
        jobs,
        ldc: int,
        strides,
        alpha,
        beta,
        choice: int = 0,
        report: int = 0,
        workspace=None,
        bias: int = 0,
        fixup=None,
    ) -> None:
        """Launch the kernel on each job (A, B, C, matrices) with ``ldc`` and the batch ``strides``
        (``bias``, ``fixup``: see run()).  A split the kernel adds up itself takes its two
        workspaces per job (_take_fixup), unless the caller gave them for the one job."""
        if self.fixup_bytes is None:
            self._launch_jobs(stream, jobs, ldc, strides, alpha, beta, choice, report, workspace, bias)
            return
        for job in jobs:
            taken = self._take_fixup(stream, job[3]) if fixup is None else None
            try:
                self._launch_jobs(
                    stream, [job], ldc, strides, alpha, beta, choice, report, workspace, bias, fixup or taken
                )
            finally:
                if taken is not None:
                    taken[1].close(stream)  # in stream order, after the kernel
                    taken[0].close(stream)

    def _launch_jobs(
        self,
        stream: int,
        jobs,
        ldc: int,
        strides,
        alpha,
        beta,
        choice: int = 0,
        report: int = 0,
        workspace=None,
        bias: int = 0,
        fixup=None,
    ) -> None:
        """_launch_own_args's launches, ``fixup`` the split's workspaces (for one job) or None."""
        bias_ops = (bias,) + self.bias_strides if bias else ()
        if self.prepass is not None:
            self._launch_after_prepass(stream, jobs, ldc, strides, alpha, beta, choice, report, workspace, fixup)
            return
        lda, ldb, _ = self.lds
        split = (int(fixup[0].handle), int(fixup[1].handle)) if fixup is not None else ()
        parts = dict(zip(("partials", "counters"), split))
        alpha32, beta32, memo = f32(alpha), f32(beta), self._args_memo
        for a, b, c, nz in jobs:
            # The arguments of these addresses, built once; alpha and beta (the
            # standard arguments 3 and 8) filled in per call.
            args = memo.get((a, b, c, nz, beta == 0, bias) + split)
            if args is not None:
                args = PackedArgs(args[:3] + (alpha32,) + args[4:8] + (beta32,) + args[9:])
            else:
                ops = Operands(a, lda, b, ldb, c, ldc, nz, *strides, *bias_ops, **parts)
                args = self._new_args(stream, ops, alpha, beta)
            if len(jobs) == 1 and (self.splits == 1 or fixup is not None):
                # what direct() launches for these addresses, scalars (and workspaces)
                _keep(self._full_memo, (a, b, c, alpha, beta, bias) + split, args)
            launch_shaped(self.kernel, self._shapes[nz], stream, args)

    def _launch_after_prepass(
        self,
        stream: int,
        jobs,
        ldc: int,
        strides,
        alpha,
        beta,
        choice: int,
        report: int = 0,
        workspace=None,
        fixup=None,
    ) -> None:
        """A kernel with a pre-pass (spec.PrePass): per job, a workspace
        from the caller's stream, the pre-pass's launches, then the kernel's.  What they
        launch is built once per set of everything it depends on -- the job's addresses,
        ldc and strides, alpha and beta, the choice record's address, the workspace's --
        where the workspace's address repeats: one the stream keeps, or one too large to
        keep, which the pool hands the stream again at the next call (building them costs
        far more host time than enqueueing them); a graph's own workspace gets them built
        for its call only.
        With a choice record the kernel is a programmatic dependent launch (it waits for the
        pre-pass itself: LaunchShape's pdl), so that its launch and set-up overlap the
        pre-pass's last blocks.  ``workspace``: one the caller took for the one job (its
        bytes: shared_prepass_bytes), used and left to the caller to give back; ``fixup``:
        the workspaces of a split the kernel adds up itself (one job), taken before this one
        (runtime.launch.stream_workspace: the slots' order)."""
        for a, b, c, nz in jobs:
            ws = (
                workspace
                if workspace is not None
                else stream_workspace(
                    self.gpu, stream, self._prepass_workspace_bytes(a, b, nz, strides, choice), self.prepass.what
                )
            )
            try:
                launches, args, shape = self._after_prepass(
                    stream, a, b, c, nz, ldc, strides, alpha, beta, choice, report, ws, fixup
                )
                for kernel, pre_shape, pre_args in launches:
                    launch_shaped(kernel, pre_shape, stream, pre_args)
                launch_shaped(self.kernel, shape, stream, args)
            finally:
                if ws is not workspace:
                    ws.close(stream)  # in stream order, after the kernel that reads it

    def _after_prepass(
        self,
        stream: int,
        a: int,
        b: int,
        c: int,
        nz: int,
        ldc: int,
        strides,
        alpha,
        beta,
        choice: int,
        report: int,
        ws,
        fixup=None,
    ) -> tuple:
        """_build_after_prepass's launches of one job on the workspace ``ws`` (and a split's
        ``fixup`` workspaces), from the memo where their addresses repeat."""
        split = (int(fixup[0].handle), int(fixup[1].handle)) if fixup is not None else ()
        key = (a, b, c, nz, ldc, strides, alpha, beta, choice, report, ws.handle) + split
        repeats = ws.repeats and (fixup is None or fixup[0].repeats and fixup[1].repeats)
        built = self._prepass_memo.get(key) if repeats else None
        if built is None:
            lda, ldb, _ = self.lds
            ops = Operands(a, lda, b, ldb, c, ldc, nz, *strides, **dict(zip(("partials", "counters"), split)))
            build = functools.partial(self._build_after_prepass, stream, alpha=alpha, beta=beta, choice=choice)
            build = functools.partial(build, workspace=ws.handle, report=report)
            if not repeats:
                return build(ops)
            # Calls that differ only in A, B and C (not in their alignment) build the same
            # launches with those addresses in the same places: the first build is kept, with
            # where they are, and copied for the others.
            kind = (a % PROBE_ALIGN, b % PROBE_ALIGN, c % PROBE_ALIGN) + key[3:]
            moves = self._prepass_moves.get(kind)
            if moves:
                built = _moved(moves, (a, b, c))
            else:
                built = build(ops)
                if moves is None:  # a kind's first call: not probed (SEEN_ONCE)
                    _keep(self._prepass_moves, kind, SEEN_ONCE)
                elif moves == SEEN_ONCE:
                    at = _address_moves(built, build(_shifted(ops, (a, b, c, 0, 0, 0))), (a, b, c))
                    _keep(self._prepass_moves, kind, Moves(built, at) if at is not None else False)
            _keep(self._prepass_memo, key, built)
        return built

    def call_launches(
        self, stream: int, A: int, B: int, C: int, alpha, beta, choice: int, report: int, workspace
    ) -> tuple | None:
        """What run() launches for one call of a launcher whose pre-pass takes the caller's
        ``workspace`` (shared_prepass_bytes: one launch of the whole batch), as (kernel, shape,
        arguments) triples, without launching them: for a caller that keeps a whole call's
        launches."""
        launches, args, shape = self._after_prepass(
            stream, A, B, C, self.chunks[0][3], self.lds[2], self.strides, alpha, beta, choice, report, workspace
        )
        return launches + ((self.kernel, shape, args),)

    def _prepass_workspace_bytes(self, a: int, b: int, nz: int, strides, choice: int) -> int:
        """The bytes of the pre-pass workspace of a launch of ``nz`` matrices at A = ``a``, B =
        ``b`` with these batch strides (``choice``: whether a choice record is read), computed
        once per shape and alignment (a staging copy takes the operands off the 16-byte grid)."""
        key = (nz, strides, choice != 0, a & 15, b & 15)
        nbytes = self._prepass_bytes.get(key)
        if nbytes is None:
            lda, ldb, ldc = self.lds
            nbytes = self._prepass_bytes[key] = self.prepass.workspace_bytes(
                self.plan, Operands(a, lda, b, ldb, 0, ldc, nz, *strides), choice
            )
        return nbytes

    def shared_prepass_bytes(self) -> int:
        """The bytes of the pre-pass workspace of this launcher's one launch with a choice
        record (a whole batch in one chunk, no split-K), which a caller may take once for
        several launchers of the same layout (_MethodChooser's candidates); 0 where its
        launches take their own (no pre-pass, split-K, several launches)."""
        if (
            self.prepass is None
            or self.splits != 1
            or len(self.chunks) != 1
            or (not self.batched_args and self.batch > 1)
        ):
            return 0
        return self._prepass_workspace_bytes(0, 0, self.chunks[0][3], self.strides, 1)

    def _build_after_prepass(
        self, stream: int, ops: Operands, alpha, beta, choice: int, workspace: int, report: int = 0
    ) -> tuple:
        """(the pre-pass's launches, the kernel's arguments, its launch shape) for
        _launch_after_prepass."""
        geo = self.geo
        launches, args = self.prepass.build(self.plan, self.gpu, ops, alpha, beta, choice, workspace, report)
        # Launched as often as the memo finds them: packed for the driver once.
        launches = tuple((kernel, shape, PackedArgs(a)) for kernel, shape, a in launches)
        key = (ops.batch, bool(choice))
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = LaunchShape(
                self._grid(ops.batch, stream), geo.block, geo.smem_bytes, geo.cluster, pdl=bool(choice)
            )
        return launches, PackedArgs(args), shape

    def _grid(self, nz: int, stream: int) -> tuple[int, int, int]:
        """The grid of a launch of ``nz`` matrices: the spec's, and for a persistent grid of
        clusters only as many as can run at once (a GPC whose free SMs do not divide by the
        cluster size leaves some unused), split in the kernel no more blocks than SMs."""
        geo = self.plan.spec.launch(self.plan.params, self.plan.problem, nz) if self.batched_args else self.geo
        grid = geo.grid
        if geo.persistent and geo.cluster != (1, 1, 1):
            if self._cluster_grid is None:
                fit = clusters_that_fit(self.kernel, grid, geo.block, geo.smem_bytes, geo.cluster, stream)
                if fit < 1:
                    raise RuntimeError(
                        f"{self.plan.describe()}: no cluster of {geo.cluster} blocks fits on {self.gpu.name}"
                    )
                self._cluster_grid = fit * geo.cluster[0]
            grid = (min(grid[0], self._cluster_grid), 1, 1)
        if self.fixup_bytes is not None and geo.persistent:
            # A split the kernel adds up itself waits on other blocks' work items, so every
            # block must be resident at once: no more blocks than this GPU's SMs, whatever
            # count the plan was made for.
            cl = geo.cluster[0]
            grid = (min(grid[0], max(cl, self.gpu.sm_count // cl * cl)), 1, 1)
        return grid

    def _new_args(self, stream, ops: Operands, alpha, beta) -> PackedArgs:
        """The packed arguments of a launch on addresses this launcher has not seen: a copy of
        the first launch of the same kind with the addresses replaced (_moved) -- a few
        microseconds, so that a model whose activations move between steps pays no more --
        else built by Launching.kernel_args, and at a kind's second set of addresses built once
        more with the addresses moved, to learn where they sit (_address_moves, as after a
        pre-pass)."""
        addresses = (ops.A, ops.B, ops.C, ops.bias, ops.partials, ops.counters)
        kind = tuple(x % PROBE_ALIGN for x in addresses) + (ops.batch, alpha, beta) + tuple(map(bool, addresses))
        moves = self._args_moves.get(kind)
        if moves:
            return _moved(moves, addresses)[1]
        args = self._memo_args(stream, ops, alpha, beta)
        args = PackedArgs(args[:3] + (f32(alpha),) + args[4:8] + (f32(beta),) + args[9:])
        if moves is None:  # a kind's first call: not probed (SEEN_ONCE)
            _keep(self._args_moves, kind, SEEN_ONCE)
        elif moves == SEEN_ONCE:
            p = self.plan
            moved = p.spec.launching.kernel_args(p, self.gpu, stream, _shifted(ops, addresses), alpha, beta)
            moved = PackedArgs(moved[:3] + (f32(alpha),) + moved[4:8] + (f32(beta),) + moved[9:])
            shape = self._shapes[ops.batch]
            at = _address_moves(((), args, shape), ((), moved, shape), addresses)
            _keep(self._args_moves, kind, Moves(((), args, shape), at) if at is not None else False)
        return args

    def _memo_args(self, stream, ops: Operands, alpha, beta):
        p, geo = self.plan, self.geo
        args = p.spec.launching.kernel_args(p, self.gpu, stream, ops, alpha, beta)
        split = (ops.partials, ops.counters) if ops.partials else ()
        _keep(self._args_memo, (ops.A, ops.B, ops.C, ops.batch, beta == 0, ops.bias) + split, args)
        if ops.batch not in self._shapes:
            self._shapes[ops.batch] = LaunchShape(self._grid(ops.batch, stream), geo.block, geo.smem_bytes, geo.cluster)
        if self._shape is None:
            self._shape = self._shapes[ops.batch]
        return args


# A launch a kernel builds itself (kernel_args, or after a pre-pass) is built a second time
# with its addresses -- A, B, C, then the bias and a split's two workspaces where it has them
# -- moved by PROBE_SHIFTS bytes, to learn which of its arguments hold them
# (_address_moves); calls whose addresses agree modulo PROBE_ALIGN (every alignment a build
# looks at: 16 bytes for TMA, less for vector loads) copy those launches.  The shifts keep
# every such alignment.  The probe waits for a kind's second set of addresses (SEEN_ONCE
# marks the first): a call made once -- a size a model meets once, as an expert's share of
# the tokens -- pays one build, not two.
PROBE_ALIGN = 16
PROBE_SHIFTS = tuple(k << 12 for k in range(1, 7))
SEEN_ONCE = ()


def _shifted(ops: Operands, addresses) -> Operands:
    """``ops`` with each of ``addresses`` (A, B, C, bias, partials, counters, in that order)
    that is not 0 moved by its PROBE_SHIFTS; the others as they are."""
    names = ("A", "B", "C", "bias", "partials", "counters")
    return dataclasses.replace(ops, **{n: x + d for n, x, d in zip(names, addresses, PROBE_SHIFTS) if x})


def _address_moves(first, second, addresses):
    """Where two builds of the same launches ((pre-pass launches, the kernel's arguments,
    its shape): Launcher._build_after_prepass, or no pre-pass), the second with
    ``addresses`` moved by PROBE_SHIFTS (_shifted), hold those addresses: ((launch,
    argument, which address), ...) -- the kernel's arguments counted as the last launch --
    for pointers and for tensor maps over an operand (one read or written in place); None
    where they differ in anything else (a value derived from an address), which no copy
    can reproduce."""
    (pre1, args1, shape1), (pre2, args2, shape2) = first, second

    def shapes(pre, shape):  # kernels and launch shapes, by value (a build may make new LaunchShapes)
        return [(k, s.grid, s.block, s.smem_bytes, s.cluster, s.pdl) for k, s, _ in pre + ((None, shape, None),)]

    if shapes(tuple(pre1), shape1) != shapes(tuple(pre2), shape2):
        return None
    at = []
    for j, (t1, t2) in enumerate(zip([x[2] for x in pre1] + [args1], [x[2] for x in pre2] + [args2])):
        if len(t1) != len(t2):
            return None
        for i, (x, y) in enumerate(zip(t1, t2)):
            if type(x) is not type(y):
                return None
            if type(x) is int:
                if x != y:
                    which = [w for w, a in enumerate(addresses) if a and x == a and y == a + PROBE_SHIFTS[w]]
                    if not which:
                        return None
                    at.append((j, i, which[0]))
            elif isinstance(x, np.generic):
                if not x == y:
                    return None
            elif not _same_map(x, y):  # a tensor map: over A, B or C, or nothing a copy can follow
                which = [w for w, a in enumerate(addresses) if a and _same_map(moved_map(x, a + PROBE_SHIFTS[w]), y)]
                if not which:
                    return None
                at.append((j, i, which[0]))
    return tuple(at)


def _same_map(x, y) -> bool:
    """Whether two tensor maps encode the same (their bytes; objects that stand for maps in
    tests compare as they define)."""
    if is_tensor_map(x):
        return ctypes.string_at(x.getPtr(), MAP_BYTES) == ctypes.string_at(y.getPtr(), MAP_BYTES)
    return x == y


class Moves:
    """Where a build's addresses sit (_address_moves' ``at``, over the launches ``built``),
    with what every copy needs worked out once: whether the GEMM's arguments are a packed
    launch with tensor maps (rebound) or a tuple (copied), and the positions of each."""

    __slots__ = ("built", "at", "packed", "copied", "values", "maps")

    def __init__(self, built, at):
        launches, args, _ = built
        gemm = len(launches)
        self.built, self.at = built, at
        self.packed = any(is_tensor_map(x) for x in args)
        # the positions copied into argument tuples (the pre-pass's, and an unpacked GEMM's)
        self.copied = tuple((j, i, w) for j, i, w in at if j < gemm or not self.packed)
        # a packed GEMM's: (position, which address) of values and of tensor maps
        ints = [(i, w) for j, i, w in at if j == gemm and self.packed]
        self.values = tuple((i, w) for i, w in ints if type(args[i]) is int)
        self.maps = tuple((i, w) for i, w in ints if type(args[i]) is not int)


def _moved(moves: Moves, addresses, scalars=()):
    """The launches ``moves.built`` with the addresses at ``moves.at`` (_address_moves)
    replaced by ``addresses`` (in _address_moves' order): the argument tuples copied (a
    tensor map among them copied and pointed at its new address), or the GEMM's packed
    launch rebound (MapParams) where it has tensor maps.  ``scalars``: (position, value)
    pairs of the GEMM's arguments replaced too (a caller whose kind of launch leaves alpha
    and beta open)."""
    launches, args, shape = moves.built
    tuples = [list(x[2]) for x in launches]
    if not moves.packed:
        tuples.append(list(args))
    for j, i, which in moves.copied:
        x = tuples[j][i]
        tuples[j][i] = addresses[which] if type(x) is int else moved_map(x, addresses[which])
    moved = tuple((k, s, PackedArgs(t)) for (k, s, _), t in zip(launches, tuples))
    if not moves.packed:
        for i, value in scalars:
            tuples[-1][i] = value
        return moved, PackedArgs(tuples[-1]), shape
    values = tuple([(i, addresses[w]) for i, w in moves.values]) + tuple(scalars)
    maps = tuple([(i, addresses[w]) for i, w in moves.maps])
    return moved, PackedArgs.of(args.packed().rebound(values, maps, replace_address)), shape


# -- launching a plan on raw pointers (the harness's kernel-only path) -----------------------

_launchers: OrderedDict = OrderedDict()
_launchers_lock = threading.Lock()
LAUNCHERS_KEPT = 256


def launcher(p: Plan, gpu: GPUInfo, lds, batch: int = 1, strides=(0, 0, 0)) -> Launcher:
    """The Launcher of a plan, built once per plan, GPU, leading dimensions and batch."""
    key = (p.key, gpu.ordinal, gpu.arch, tuple(int(x) for x in lds), batch, tuple(strides))
    found = _launchers.get(key)
    if found is None:
        found = Launcher(p, gpu, lds, batch, strides)
        with _launchers_lock:
            _launchers[key] = found
            while len(_launchers) > LAUNCHERS_KEPT:
                _launchers.popitem(last=False)
    return found


def run_plan(
    p: Plan,
    gpu: GPUInfo,
    stream: int,
    A_ptr: int,
    lda: int,
    B_ptr: int,
    ldb: int,
    C_ptr: int,
    ldc: int,
    alpha,
    beta,
    *,
    batch: int = 1,
    strides: tuple[int, int, int] = (0, 0, 0),
) -> None:
    """Launch an already validated plan on raw device pointers: what the
    benchmark's kernel-only figure and the tuner time.  ``batch`` products, the
    i-th at A_ptr + i * strides[0] elements (B and C likewise)."""
    launcher(p, gpu, (lda, ldb, ldc), batch, strides).run(stream, A_ptr, B_ptr, C_ptr, alpha, beta)


# -- prepared calls ---------------------------------------------------------------------------


class _MethodChooser:
    """A method chosen on the GPU, in stream order, so that a call never waits for the host
    and can be captured in a CUDA graph: per call, the choice's steps (the rung's
    Launching.gpu_choice) on a small stream-ordered workspace, then every candidate
    launcher (methods.CHOSEN_ON_GPU) with the record's address, of which those not chosen
    return at once.  The choice's launches are kept per (A, B, workspace), each candidate's
    by its Launcher, so that a repeated call builds no arguments; :meth:`plan` reads the
    choice back when asked."""

    def __init__(
        self, base: Plan, precision: str, gpu: GPUInfo, kernel: str, tile_params: dict, lds, bt: Batching, ops_a, ops_b
    ):
        make_current(gpu.ordinal)
        self.base, self.precision, self.gpu = base, precision, gpu
        self.single = bt.nz == 1
        methods, self.scaled_only = CHOSEN_ON_GPU[precision]
        plans = [plan_for_choice(base, MethodChoice(m), gpu, kernel, tile_params, bt.nz) for m in methods]
        self.candidates = [(p, Launcher(p, gpu, lds, bt.nz, bt.strides)) for p in plans]
        self.steps = plans[0].spec.launching.gpu_choice(gpu, plans, ops_a, ops_b, self.scaled_only)
        # One pre-pass workspace for every candidate (they lay their parts out alike), taken
        # once a call where each candidate is one launch: 0 where each takes its own.
        sizes = [run.shared_prepass_bytes() for _, run in self.candidates]
        self.shared_bytes = max(sizes) if all(sizes) else 0
        self.shared_what = self.candidates[0][1].prepass.what if self.shared_bytes else ""
        self._reports = None  # where each candidate copies the record, known at the first call
        self._kept = {}  # (A, B, workspace) -> the choice's memsets, launches and record address
        self._kept_calls = {}  # a call's addresses, scalars and workspaces -> every candidate's launches
        self.pending = PlanChosenOnGPU(self)

    def run(self, stream: int, A: int, B: int, C: int, alpha, beta, offsets) -> "PlanChosenOnGPU":
        steps, reports = self.steps, self._reports
        if reports is None:
            steps.report(stream)
            reports = self._reports = tuple(steps.candidate_report(i) for i in range(len(self.candidates)))
        # Whether the stream is being captured, asked once for the workspaces below.
        capturing = stream_is_capturing(stream)
        # Kept per stream, so that its address repeats and the launches built on it are kept too.
        need = steps.need
        ws = stream_workspace(
            self.gpu, stream, need.nbytes, need.what, slot=need.slot, zero_new=need.zero_new, capturing=capturing
        )
        parts = None
        try:
            if steps.builds_launches:  # steps of its own before the candidates'
                built = self._kept.get((A, B, ws.handle)) if ws.kept else None
                if built is None:
                    built = steps.steps(A, B, ws.handle)
                    if ws.kept:
                        _keep(self._kept, (A, B, ws.handle), built)
                memsets, launches, record = built
                for ptr, nbytes in memsets:
                    zero_async(ptr, nbytes, stream)
                for kernel, shape, args in launches:
                    launch_shaped(kernel, shape, stream, args)
            else:
                record = steps.steps(A, B, ws.handle)[2]
            # One launch a candidate: their pre-passes share one workspace (the "scratch" slot,
            # after the choice's), taken once.
            if self.shared_bytes and len(offsets) == 1:
                parts = stream_workspace(self.gpu, stream, self.shared_bytes, self.shared_what, capturing=capturing)
            calls = None
            if parts is not None:
                ((da, db, dc),) = offsets
                calls = self._call_launches(stream, A + da, B + db, C + dc, alpha, beta, record, ws, parts)
            if calls is not None:
                for kernel, shape, args in calls:
                    launch_shaped(kernel, shape, stream, args)
            else:
                for (_, run), report in zip(self.candidates, reports):
                    for da, db, dc in offsets:
                        run.run(stream, A + da, B + db, C + dc, alpha, beta, record, report, parts)
        finally:
            if parts is not None:
                parts.close(stream)  # in stream order, after the kernels that read the parts
            ws.close(stream)  # in stream order, after the launches that read the record
        return self.pending

    def _call_launches(self, stream: int, A: int, B: int, C: int, alpha, beta, record: int, ws, parts) -> tuple:
        """Every candidate's launches of this call on the shared parts workspace, in order (the
        candidates' Launcher.call_launches), kept per set of what they depend on where both
        workspaces' addresses repeat, so that a repeated call goes from its workspaces straight
        to its first launch."""
        key = (A, B, C, alpha, beta, record, self._reports[0], parts.handle)
        kept = ws.kept and parts.repeats
        calls = self._kept_calls.get(key) if kept else None
        if calls is None:
            calls = ()
            for (_, run), report in zip(self.candidates, self._reports):
                calls += run.call_launches(stream, A, B, C, alpha, beta, record, report, parts)
            if kept:
                _keep(self._kept_calls, key, calls)
        return calls

    def plan(self) -> Plan:
        """The plan of the method this prepared call last chose (a synchronisation:
        the GPU's record is read back), with the method, the scales and why."""
        record = self.steps.record()
        choice = choice_of_record(record, self.scaled_only) if record is not None else None
        if choice is None:
            return dataclasses.replace(
                self.base,
                method=self.precision,
                reason="chosen on the GPU by each run of the call; none has run yet "
                "(a call captured in a CUDA graph and not replayed)",
            )
        p = next(p for p, _ in self.candidates if p.problem.dtype == choice.kernel_dtype)
        reason = with_bands(choice.reason, bands_of(p.problem, self.single))
        return dataclasses.replace(p, extra=choice.extra, method=choice.method, reason=reason)


class PlanChosenOnGPU:
    """What PreparedCall.run returns for a method chosen on the GPU: the plan,
    read only when asked (gemmlab.last_plan calls :meth:`resolve`)."""

    __slots__ = ("chooser",)

    def __init__(self, chooser: _MethodChooser):
        self.chooser = chooser

    def resolve(self) -> Plan:
        return self.chooser.plan()


class PreparedCall:
    """What one signature of gemmlab.matmul runs, with the pointers left open."""

    def __init__(self, call: Call, gpu: GPUInfo, kernel: str, tile_params: dict, precision, bias=None):
        C = call.C if call.C is not None else result_side(call)
        ptrs = {
            "A": call.A.operand.ptr,
            "B": call.B.operand.ptr,
            "C": call.C.operand.ptr if call.C is not None else 0,
        }  # a new result: aligned
        kv: KernelView = kernel_view(call, C, ptrs)
        self.swap = C.layout == "T"  # out^T = op(b)^T op(a)^T: the kernel's A is b
        bt = batching(kv)
        p = plan_call(call, kv, bt, gpu, kernel, tile_params, precision)
        if p.method == "fp32":
            # The precision's product, too thin for the tensor cores to pay, runs as FP32 on
            # the CUDA cores: no method to choose from the data.
            call = dataclasses.replace(call, dtypes={**call.dtypes, "dtype": "float32"})
            precision = None
        self.empty = 0 in call.result_shape
        self.device, self.gpu = call.device, gpu
        # The caller's stream and, without out, the result: of a's kind (PyTorch or CuPy).
        kind = call.A.operand.kind
        self.stream = stream_getter(kind)
        self.alloc = (
            None if call.C is not None else allocator(kind, call.result_shape, call.device, call.dtypes["out_dtype"])
        )
        ia, ic = kv.itemsize["A"], kv.itemsize["C"]
        self.offsets = tuple((oa * ia, ob * ia, oc * ic) for oa, ob, oc in bt.offsets)
        lds = (kv.A.ld, kv.B.ld, kv.C.ld)
        self.chooser = None
        if precision in CHOSEN_ON_GPU and call.alpha != 0 and call.K != 0 and not self.empty:

            def stored(side, rows, cols, k):  # every matrix of A (B) as stored: byte offset, shape, batch
                r, c = (rows, cols) if side.layout == "N" else (cols, rows)
                return [(off[k], r, c, side.ld, bt.nz, bt.strides[k]) for off in self.offsets]

            self.chooser = _MethodChooser(
                p,
                precision,
                gpu,
                kernel,
                tile_params,
                lds,
                bt,
                stored(kv.A, kv.M, call.K, 0),
                stored(kv.B, call.K, kv.N, 1),
            )
        elif precision in CHOSEN_ON_GPU:  # nothing is read: no statistics needed
            p = dataclasses.replace(
                p, method=precision, reason="alpha = 0, K = 0 or an empty result: A and B are not read"
            )
        elif precision in EC_PRECISIONS:
            p = dataclasses.replace(p, method=precision)
        self.plan = p
        # A bias (core.bias.BiasView) the kernel may add in its epilogue: its strides, swapped
        # with the product where the kernel computes out^T.
        bias_strides = None
        if bias is not None and bias.strides is not None and bt.offsets == ((0, 0, 0),):
            rs, cs, zs = bias.strides
            bias_strides = (cs, rs, zs) if self.swap else (rs, cs, zs)
        self.launcher = None if self.empty or self.chooser else Launcher(p, gpu, lds, bt.nz, bt.strides, bias_strides)
        # One launch with the standard arguments, no method to choose: the launcher's closure.
        self.direct = None
        # Calls of several steps by (stream, addresses, alpha, beta): a Replay of the recorded
        # call, or how many recordings of it could not be replayed (run()).
        self._replays = {}
        one_launch = self.launcher is not None and self.chooser is None and self.offsets == ((0, 0, 0),)
        if one_launch:
            self.direct = self.launcher.direct()
        # Whether run() adds a bias in the kernel's epilogue (else the caller adds it after),
        # and where the bias sits relative to its address (it must not meet out).
        self.fuses_bias = one_launch and self.launcher.bias_strides is not None
        self.bias_span = bias.span_from_ptr() if bias is not None else None
        # Where the operands sit relative to their data pointers, for the overlap check with out.
        self.spans = None
        if call.C is not None:
            self.spans = tuple(
                (lo - S.operand.ptr, hi - S.operand.ptr)
                for S in (call.A, call.B, call.C)
                for lo, hi in (S.operand.span(),)
            )

    def overlaps(self, A: int, B: int, C: int) -> bool:
        """Whether out's memory meets a's or b's at these addresses (then the full
        validation runs again and names the problem)."""
        (alo, ahi), (blo, bhi), (clo, chi) = self.spans
        lo, hi = C + clo, C + chi
        return (lo < A + ahi and A + alo < hi) or (lo < B + bhi and B + blo < hi)

    def bias_overlaps(self, bias: int, C: int) -> bool:
        """Whether the bias at ``bias`` meets out's memory at ``C``."""
        (blo, bhi), (clo, chi) = self.bias_span, self.spans[2]
        return bias + blo < C + chi and C + clo < bias + bhi

    def run(self, A: int, B: int, C: int, alpha, beta, stream: int, bias: int = 0) -> "Plan | PlanChosenOnGPU":
        """Enqueue the call on ``stream`` (a, b, out at A, B, C); returns the plan that
        ran (for a method chosen on the GPU, a PlanChosenOnGPU that reads it when asked).
        ``bias``: the address of a bias the kernel adds in its epilogue (fuses_bias is set,
        alpha != 0), 0 for none."""
        if self.swap:
            A, B = B, A
        if bias:  # one launch of the kernel's own arguments (fuses_bias)
            if self.direct is not None:
                self.direct(stream, A, B, C, alpha, beta, bias)
            else:
                self.launcher.run(stream, A, B, C, alpha, beta, bias=bias)
            return self.plan
        if self.direct is not None:
            self.direct(stream, A, B, C, alpha, beta)
            return self.plan
        if self.empty:
            return self.plan
        # A call of several steps: enqueued again as recorded where these addresses and
        # scalars ran before on this stream (runtime.launch.Replay), unless a recording of
        # its own is open (gemmlab.torch.native must see every launch).
        key = (stream, A, B, C, alpha, beta)
        seen = self._replays.get(key)
        if type(seen) is Replay:
            if recording() is None and seen.enqueue(stream):
                return seen.result
            if seen.stale():  # a workspace it used was replaced: recorded again at the next call
                self._replays[key] = 0
            return self._run_steps(stream, A, B, C, alpha, beta)
        if seen is None or seen >= REPLAY_TRIES or recording() is not None:
            if seen is None:  # a first call of these addresses: recorded if they come again
                _keep(self._replays, key, 0)
            return self._run_steps(stream, A, B, C, alpha, beta)
        generation = workspace_generation()  # read first: a workspace replaced meanwhile spoils it
        with Recording() as rec:
            result = self._run_steps(stream, A, B, C, alpha, beta)
        replay = Replay.of(rec, stream, result, generation)
        _keep(self._replays, key, replay if replay is not None else seen + 1)
        return result

    def _run_steps(self, stream: int, A: int, B: int, C: int, alpha, beta) -> "Plan | PlanChosenOnGPU":
        """run()'s call of several steps, built from the launchers (and the method chooser)."""
        if self.chooser is not None:
            return self.chooser.run(stream, A, B, C, alpha, beta, self.offsets)
        for da, db, dc in self.offsets:
            self.launcher.run(stream, A + da, B + db, C + dc, alpha, beta)
        return self.plan


class Family:
    """What every size of a family shares with a prepared call (gemmlab.core.api's family
    key: the signature with the rows of op(a) and out, a weight gradient's K in a and b, and a
    thin batch's N and K (a decode step's cache length) replaced by their band's top,
    planner.size_band, k_banded and n_banded): the validated call, its operands' objects left
    out (a family must not keep the caller's arrays alive), what PreparedCall was given, and
    the first prepared call.  :meth:`member` prepares another size of the bands without
    validating or choosing again: the signature vouches for everything but the sizes.  Where
    the first prepared call is one launch of one plan (no method chosen on the GPU) it is
    derived from that one (_derived: the plan, the launcher's shapes and scalars and the
    overlap spans made for the new sizes, its arguments built at the first launch); else, for
    one matrix, :func:`planner.with_size` redoes what depends on the sizes and plan_call finds
    the band's plan (CALL_PLANS).  A thin batch (planner.thin_batch_call) has a family only
    where its members can be derived."""

    def __init__(self, call: Call, gpu: GPUInfo, kernel: str, tile_params: dict, precision, bias, first):
        self.call, self.gpu, self.kernel, self.tile_params = call, gpu, kernel, tile_params
        self.precision, self.bias = precision, bias
        self.template = None
        if (
            first is not None
            and first.launcher is not None
            and first.chooser is None
            and first.offsets == ((0, 0, 0),)
            and not first.swap
            and not first.launcher.stages
        ):
            self._derivable(first)

    @classmethod
    def of(
        cls, call: Call, gpu: GPUInfo, kernel: str, tile_params: dict, precision, bias=None, first=None
    ) -> "Family | None":
        """The family of a prepared call (``first``, of ``call``) of one matrix each, a and b
        2-D, op(a) at least planner.BAND_MIN rows or K banded (planner.family_call), or of a
        thin batch without a bias whose members ``first`` can be derived for
        (planner.thin_batch_call); None for any other."""
        thin = thin_batch_call(call)
        if not (thin and bias is None) and not family_call(call):
            return None
        if bias is not None:
            bias = dataclasses.replace(bias, operand=dataclasses.replace(bias.operand, obj=None))
        family = cls(without_objects(call), gpu, kernel, dict(tile_params), precision, bias, first)
        return None if thin and family.template is None else family

    def _derivable(self, first: "PreparedCall") -> None:
        """Keep what _derived needs of ``first`` where its plan is its bands' (the plan of
        the band's top applied to its size) and no staging copy runs (its launches follow
        the sizes; its bytes are priced at the bands' tops: planner.plan_call)."""
        call, p = self.call, first.plan
        A, B = call.A, call.B
        M, N, K = A.rows, B.cols, call.K
        nz = first.launcher.batch  # one launch over the batch (offsets: one)
        measured = measured_shape(self.gpu, self.kernel, call.dtypes["dtype"], A.layout + B.layout, nz)
        Mt, Nt, Kt, bands = _bands(M, N, K, A.layout, B.layout, nz == 1)
        if measured is not None and (Mt, Nt, Kt) != _bands(M, N, K, A.layout, B.layout, nz == 1, measured)[:3]:
            return  # a shape the tuned table measured: its own plan, not the bands'
        # The reason of the bands' plan (for_size appended the bands to it)
        reason, suffix = p.reason, f"chosen for {bands}"
        if bands and reason == suffix:
            reason = ""
        elif bands and reason.endswith("; " + suffix):
            reason = reason[: -len(suffix) - 2]
        elif bands:
            return  # chosen for its exact size (planner.band_holds), not the bands'
        self.measured, self.tops, self.reason, self.nz = measured, (Mt, Nt, Kt), reason, nz
        self.ia = ITEMSIZE.get(A.operand.dtype_name, 4)
        self.ic = ITEMSIZE[call.dtypes["out_dtype"]]
        self.widths = self._widths_on_grid(M, N, K)
        # A thin batch's operands stored in an order (arrays.stored_order) have strides that
        # follow the sizes: a new result always, a cache grown by concatenation too.
        self.forms = (None, None, None)
        if call.batch_shape:
            self.forms = tuple(
                "C" if S is None else stored_order(S.operand.shape, S.operand.strides) for S in (A, B, call.C)
            )
        self.follows = any(self.forms)
        strides = self._strides(self._shapes(M, N, K))
        self.batch_aligned = None
        if self.follows:
            zs = self._batch_strides(strides)
            if zs != first.launcher.strides:
                return  # batch strides _batch_strides does not reproduce: every size planned in full
            self.batch_aligned = self._on_grid(zs)
        if self._lds(M, N, K, strides) != first.launcher.lds:
            return  # leading dimensions _lds does not reproduce: every size planned in full
        self.first_plan = p
        self.template = first

    def _shapes(self, M: int, N: int, K: int) -> tuple[tuple, tuple, tuple]:
        """The shapes of a, b and out (as stored: a transposed operand's last two axes
        swapped) at these sizes."""
        call = self.call
        bs = call.batch_shape
        return (
            bs + ((K, M) if call.A.trans else (M, K)),
            bs + ((N, K) if call.B.trans else (K, N)),
            bs + (M, N),
        )

    def _strides(self, shapes) -> tuple:
        """The element strides of a, b and out at ``shapes``: the first's, or their stored
        order's at the new sizes (self.forms; a new result's, C order's, are not needed where
        its strides do not follow: one matrix)."""
        call = self.call
        return tuple(
            ordered_strides(shape, form) if form else S.operand.strides if S is not None else None
            for S, shape, form in zip((call.A, call.B, call.C), shapes, self.forms)
        )

    def _batch_strides(self, strides) -> tuple[int, int, int] | None:
        """The elements between a launch's matrices of a, b and out with these strides
        (planner.batching's, of one group: the first's batch is one launch), or None where
        they would not be one group or their 16-byte alignment would differ from the first's."""
        bs = self.call.batch_shape
        groups = batch_groups(bs, *(tuple(0 if n == 1 else s for n, s in zip(bs, st)) for st in strides))
        if len(groups) != 1 or groups[0][0] != self.nz:
            return None
        zs = tuple(groups[0][1])
        if self.batch_aligned is not None and self._on_grid(zs) != self.batch_aligned:
            return None
        return zs

    def _on_grid(self, zs) -> tuple[bool, bool, bool]:
        return (zs[0] * self.ia % 16 == 0, zs[1] * self.ia % 16 == 0, zs[2] * self.ic % 16 == 0)

    def _lds(self, M: int, N: int, K: int, strides) -> tuple[int, int, int] | None:
        """The leading dimensions of a, b and out at these sizes and ``strides``
        (planner.matrix_layout: a matrix of one stored row, as a decode step's query or
        scores are, has its width as one), or None where a layout would differ from the
        first's."""
        call, lds = self.call, []
        for S, rows, cols, is_input, st in (
            (call.A, M, K, True, strides[0]),
            (call.B, K, N, True, strides[1]),
            (call.C, M, N, False, strides[2]),
        ):
            if S is None:  # a new result, C-ordered
                lds.append(max(N, 1))
                continue
            rs, cs = st[-2:]
            found = matrix_layout((rows, cols), (cs, rs) if S.trans else (rs, cs), unit_column_major=is_input)
            if found is None or found[0] != S.layout:
                return None
            lds.append(found[1])
        return tuple(lds)

    def _widths_on_grid(self, M: int, N: int, K: int) -> tuple[bool, bool, bool]:
        """Whether the stored rows of a, b and out are 16-byte multiples at these sizes (the
        alignment a plan's instantiation depends on; the rest -- addresses, leading
        dimensions, batch strides -- the signature holds)."""
        call = self.call
        wa = K if call.A.layout == "N" else M
        wb = N if call.B.layout == "N" else K
        return (wa * self.ia % 16 == 0, wb * self.ia % 16 == 0, N * self.ic % 16 == 0)

    def member(self, M: int, N: int, K: int, a, pa: int, b, pb: int, out, pc: int) -> "PreparedCall | None":
        """The prepared call of this family's call of M x N over K (a at ``pa``, b at ``pb``;
        out at ``pc``, or None); None where the exact size needs the full path (a copy, or a
        thin batch's member that cannot be derived)."""
        if self.template is not None:
            found = self._derived(M, N, K)
            if found is not None or self.call.batch_shape:  # a thin batch: derived or planned in full
                return found
        call = with_size(self.call, M, K, a, pa, b, pb, out, pc)
        if call is None:
            return None
        return PreparedCall(call, self.gpu, self.kernel, self.tile_params, self.precision, self.bias)

    def _derived(self, M: int, N: int, K: int) -> "PreparedCall | None":
        """The member of M x N over K derived from the family's first prepared call, or None
        where its plan could differ from the first's but for the sizes: other bands' tops (a
        measured shape), or a stored row on the 16-byte grid where the first's was not (or
        the other way round).  The plan's instantiation is the first's: every rung's template
        arguments depend on the parameters, dtypes, layouts and alignments, never on the
        sizes."""
        call = self.call
        if self._widths_on_grid(M, N, K) != self.widths:
            return None
        shapes = self._shapes(M, N, K)
        strides = self._strides(shapes)
        lds = self._lds(M, N, K, strides)
        zs = self._batch_strides(strides) if self.follows else self.template.launcher.strides
        if lds is None or zs is None:
            return None
        Mt, Nt, Kt, bands = _bands(M, N, K, call.A.layout, call.B.layout, self.nz == 1, self.measured)
        if (Mt, Nt, Kt) != self.tops:
            return None
        t, p = self.template, self.first_plan
        if bands and not band_holds(p, M, N, K, self.nz, self.kernel, self.tile_params):
            return None  # the rung's rule decides by this exact size: the full path plans it
        # The plan: the first's, at these sizes (planner.for_size without the re-validation).
        problem = object.__new__(type(p.problem))
        problem.__dict__.update(p.problem.__dict__)
        problem.__dict__["M"], problem.__dict__["N"], problem.__dict__["K"] = M, N, K
        plan = object.__new__(type(p))
        plan.__dict__.update(p.__dict__)
        plan.__dict__["problem"] = problem
        plan.__dict__["reason"] = with_bands(self.reason, bands)
        new = object.__new__(PreparedCall)
        new.__dict__.update(t.__dict__)
        new.plan = plan
        new.launcher = launcher = t.launcher.resized(plan, lds, zs)
        new.direct = launcher.direct() if t.direct is not None else None
        new._replays = {}  # recorded for these sizes only
        if t.alloc is not None:
            new.alloc = allocator(call.A.operand.kind, shapes[2], call.device, call.dtypes["out_dtype"])
        if t.spans is not None:
            new.spans = tuple(S.operand.reach(x, st) for S, x, st in zip((call.A, call.B, call.C), shapes, strides))
        return new


class PreparedCache:
    """Prepared calls by signature: bounded (the oldest goes first), shared by
    every thread (a lock guards changes; reads are single dict operations).  Beside
    them, as many families (:class:`Family`) by family key."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._d: OrderedDict = OrderedDict()
        self._families: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def family(self, key) -> Family | None:
        return self._families.get(key)

    def put_family(self, key, family: Family) -> None:
        with self._lock:
            self._families[key] = family
            while len(self._families) > self.size:
                self._families.popitem(last=False)

    def get(self, key):
        """The PreparedCall (or gemmlab.core.api's CopiedCall) kept for a signature, or None."""
        # No reordering on a hit: hashing the key once more would cost a repeated call
        # about half a microsecond, so the oldest signature goes first (FIFO), which
        # differs from least-recently-used only in programs with more signatures than
        # the cache holds.
        return self._d.get(key)

    def put(self, key, prepared) -> None:
        with self._lock:
            self._d[key] = prepared
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._families.clear()

    def __len__(self) -> int:
        return len(self._d)


CACHE = PreparedCache()
