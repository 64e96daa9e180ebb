"""EC rung 2, ec/02_ec_wgmma.cu (Hopper): A and B split once into their two parts by
a pre-pass (split_pack.cu), then wgmma from a TMA ring of four part tiles a stage.

Beside the spec: the split pre-pass's launches and the GEMM's arguments (the tensor
maps of the four parts), built for a workspace the executor takes from the caller's
stream (spec.PrePass), so that a prepared call keeps them per set of addresses.  A
batch is one launch of each: the pre-pass splits every matrix (gridDim.y), the maps
are 3-D over the parts of the whole batch and the GEMM's persistent loop walks every
matrix's tiles (as the wgmma rung's).  SPLITK splits K over the work items as the wgmma
rung does, but the FP32 partial tiles go to a workspace that simt/splitk_reduce.cu adds
into C (executor.Launcher runs both; wgmma adds its slices in the kernel);
ec_wgmma_auto_split is kernel="auto"'s rule for it.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ...runtime.tma import Operands, tensor_map
from . import ec_wgmma_cost
from .choose_method import GPUChoice
from ..spec import (
    EC_METHODS,
    KERNEL_DIR,
    Ask,
    Constraint,
    KernelSpec,
    Launching,
    Launch,
    Offer,
    PrePass,
    Problem,
    Rules,
    TileParam,
    cdiv,
)
from ..tensor.wgmma_tma import HOPPER_NEEDS, WGMMA_SM90, WGMMA_SMEM_LIMIT, standard_args
from ..simt.pipelined import SHALLOW_SPLITK_VALUES, fill_split
from ..cuda_constants import read_constants

# 128 x 96 tiles (two consumer warpgroups of 64 x 96, four sets of accumulators each),
# or with FOLD (three sets) up to 128 x 128; a ring stage holds hi and lo of A (128 rows
# of 128 bytes) and of B^T (BN rows).
_K = read_constants("ec/02_ec_wgmma.cu")
EC_WGMMA_BM, EC_WGMMA_BN, EC_WGMMA_THREADS = _K["EC_WGMMA_BM"], _K["EC_WGMMA_BN"], _K["EC_WGMMA_THREADS"]
EC_WGMMA_FOLD_BN, EC_WGMMA_TAIL_COUNTERS = _K["EC_WGMMA_FOLD_BN"], _K["EC_WGMMA_TAIL_COUNTERS"]
EC_WGMMA_STAGED_C_BYTES = _K["EC_WGMMA_STAGED_C_BYTES"]
# precision="fp16_ec" (FP16 parts as they are, no scale) runs the four-set kernel unless the
# caller names BN or FOLD: FOLD's lo, in hi's units, has FP16's absolute quantum 2^-24, which
# only the scale fp32_tc's choice applies puts far below every value (planner.plan_call).
EC_WGMMA_UNSCALED_PARAMS = {"BN": EC_WGMMA_BN, "FOLD": 0, "STAGES": 4}
# The default tile: FOLD's 128 x 128 (faster than 128 x 96 with four sets: benchmarks/NOTES.md);
# kernel="auto"'s rules count tiles of this width.
EC_WGMMA_DEFAULT_BN, EC_WGMMA_DEFAULT_FOLD = EC_WGMMA_FOLD_BN, 1

# The split pre-pass: (METHOD, stored layout of A, stored layout of B).
EC_SPLIT_PACK_SOURCE = KERNEL_DIR / "ec" / "split_pack.cu"
_P = read_constants("ec/split_pack.cu")
EC_SPLIT_PACK_TILE, EC_SPLIT_PACK_THREADS = _P["EC_SPLIT_PACK_TILE"], _P["EC_SPLIT_PACK_THREADS"]
# Blocks per SM of the split pre-pass's grid: 8 x 256 threads fill an SM's 2048.
EC_SPLIT_PACK_BLOCKS_PER_SM = 8


def ec_split_pack_kernel(method: str, op_a: str, op_b: str, fold: int = 0) -> str:
    return f"gemmlab::ec_split_pack<{EC_METHODS[method]}, {fold}, '{op_a}', '{op_b}'>"


EC_SPLIT_PACK_KERNELS = tuple(
    ec_split_pack_kernel(m, op_a, op_b, fold) for m in EC_METHODS for fold in (0, 1) for op_a in "NT" for op_b in "NT"
)

# fp32_tc's pre-pass on FOLD (split_scaled.cu): scales per row of op(A) and column of op(B),
# the method chosen in the same pass.  (layouts, cluster size)
EC_SPLIT_SCALED_SOURCE = KERNEL_DIR / "ec" / "split_scaled.cu"
_S = read_constants("ec/split_scaled.cu")
EC_SCALED_THREADS, EC_SCALED_SEGMENTS = _S["EC_SCALED_THREADS"], _S["EC_SCALED_SEGMENTS"]
EC_SCALED_CHUNK, EC_SCALED_MAX_CLUSTER = _S["EC_SCALED_CHUNK"], _S["EC_SCALED_MAX_CLUSTER"]
EC_SCALED_SHORT_CHUNK, EC_SCALED_ROWS_VALUES = _S["EC_SCALED_SHORT_CHUNK"], _S["EC_SCALED_ROWS_VALUES"]
EC_SCALED_CLUSTERS = tuple(2**i for i in range(EC_SCALED_MAX_CLUSTER.bit_length()))  # 1, 2, 4, 8
EC_SCALED_HELD_MAX_ROWS = _S["EC_SCALED_HELD_MAX_ROWS"]
# ec_split_scaled_rows: float4 a thread holds of each row, 1 .. 16 (rows of K <= 1024 of them)
EC_SCALED_ROWS_CHUNKS = tuple(2**i for i in range((EC_SCALED_ROWS_VALUES // 4).bit_length()))


# Layouts where one operand's segments lie along K in memory and the other's across: that one by
# whole rows inside the clustered kernel (its ROWS), the other clustered.
EC_SCALED_HALF_ROWS_LAYOUTS = ("NN", "TT")


def ec_split_scaled_kernel(op_a: str, op_b: str, cluster: int, chunk: int = EC_SCALED_CHUNK, rows: int = 0) -> str:
    return f"gemmlab::ec_split_scaled<'{op_a}', '{op_b}', {cluster}, {chunk}{f', {rows}' if rows else ''}>"


def ec_split_scaled_rows_kernel(chunks: int) -> str:
    return f"gemmlab::ec_split_scaled_rows<{chunks}>"


def ec_scaled_cluster(K: int) -> int:
    """Blocks that share a row's (column's) K in split_scaled.cu: the fewest of 1, 2, 4, 8
    whose shares fit the registers (EC_SCALED_CHUNK each), else 8 (longer shares are read twice)."""
    return next((cl for cl in EC_SCALED_CLUSTERS if cdiv(K, cl) <= EC_SCALED_CHUNK), EC_SCALED_MAX_CLUSTER)


# Every cluster size with 512-value chunks; K of 128 or less: one block, 128-value chunks.
EC_SPLIT_SCALED_KERNELS = (
    tuple(
        ec_split_scaled_kernel(op_a, op_b, cl, chunk)
        for op_a in "NT"
        for op_b in "NT"
        for cl, chunk in [(c, EC_SCALED_CHUNK) for c in EC_SCALED_CLUSTERS] + [(1, EC_SCALED_SHORT_CHUNK)]
    )
    + tuple(ec_split_scaled_rows_kernel(c) for c in EC_SCALED_ROWS_CHUNKS)
    + tuple(
        ec_split_scaled_kernel(lay[0], lay[1], ec_scaled_cluster(1024 * rows), EC_SCALED_CHUNK, rows)
        for lay in EC_SCALED_HALF_ROWS_LAYOUTS
        for rows in EC_SCALED_ROWS_CHUNKS
    )
)


# The whole-rows splits are taken for products of at most this many outputs (all matrices):
# above it the GEMM after them ran slower than after the clustered split, on the same parts, by
# about what the split gained, and the public call gained nothing (at the power cap a shorter
# split leaves the GEMM less of the power budget; benchmarks/NOTES.md).
EC_SCALED_ROWS_MAX_OUTPUTS = 4096 * 4096


def ec_scaled_rows_chunks(pr, ops: Operands, nz_a: int, nz_b: int) -> int:
    """float4 a thread holds of each row in split_scaled.cu's whole-rows kernel
    (ec_split_scaled_rows), or 0 where the clustered kernel runs instead: the whole-rows one
    needs every segment along K in memory (op(A) stored 'N', op(B) stored 'T': `a @ w.t()`),
    K longer than one block's share of the clustered kernel (where its clusters begin) and
    at most 16384 (64 values a thread), every row of every matrix 16-byte aligned, and a
    product of at most EC_SCALED_ROWS_MAX_OUTPUTS outputs."""
    if (
        pr.op_a != "N"
        or pr.op_b != "T"
        or not (_rows_aligned(ops.A, ops.lda, nz_a, ops.sa) and _rows_aligned(ops.B, ops.ldb, nz_b, ops.sb))
    ):
        return 0
    return _rows_chunks(pr, nz_a, nz_b)


def _rows_aligned(ptr: int, ld: int, nz: int, stride: int) -> bool:
    """Whether every stored row of an operand (of every matrix of a batch) starts 16-byte aligned."""
    return ptr % 16 == 0 and ld % 4 == 0 and (nz <= 1 or stride % 4 == 0)


def _rows_chunks(pr, nz_a: int, nz_b: int) -> int:
    """float4 of each row a thread of the whole-rows path holds, for K longer than one block's
    share of the clustered kernel and at most 16384; 0 outside that, or above
    EC_SCALED_ROWS_MAX_OUTPUTS outputs."""
    if (
        not EC_SCALED_CHUNK < pr.K <= EC_SCALED_ROWS_VALUES * EC_SCALED_THREADS
        or pr.M * pr.N * max(nz_a, nz_b, 1) > EC_SCALED_ROWS_MAX_OUTPUTS
    ):
        return 0
    return next(c for c in EC_SCALED_ROWS_CHUNKS if pr.K <= 4 * EC_SCALED_THREADS * c)


def ec_scaled_half_rows(pr, ops: Operands, nz_a: int, nz_b: int) -> int:
    """float4 a thread holds of each row of the one operand whose segments lie along K in memory
    where the other's lie across (A stored 'N' in `a @ b`, B stored 'T' in `a.t() @ w.t()`):
    split_scaled.cu's clustered kernel then splits that one by whole rows (its ROWS) and
    clusters only the other.  0: not taken (other layouts, K outside 513 .. 16384, that
    operand's rows not 16-byte aligned, more than EC_SCALED_ROWS_MAX_OUTPUTS outputs)."""
    if pr.op_a + pr.op_b not in EC_SCALED_HALF_ROWS_LAYOUTS:
        return 0
    along_k = (ops.A, ops.lda, nz_a, ops.sa) if pr.op_a == "N" else (ops.B, ops.ldb, nz_b, ops.sb)
    return _rows_chunks(pr, nz_a, nz_b) if _rows_aligned(*along_k) else 0


def ec_scaled_held_rows(K: int) -> int:
    """Rows of K the clustered kernel's blocks hold in shared memory where they split by columns
    (op(A) stored 'T', op(B) stored 'N': segments across the stored rows), 128 bytes a row: a
    block's whole share of K (a multiple of 32) up to EC_SCALED_HELD_MAX_ROWS, so that it is read
    once; a longer share, read twice either way, EC_SCALED_CHUNK rows at a time, three blocks an SM
    rather than one.  (benchmarks/NOTES.md: the split pass in shared memory.)"""
    share = max(1, cdiv(K, 32 * ec_scaled_cluster(K))) * 32  # K = 0 too: the kernel divides by it
    return share if share <= EC_SCALED_HELD_MAX_ROWS else EC_SCALED_CHUNK


def ec_scaled_tile_bytes(pr) -> int:
    """The clustered kernel's dynamic shared memory: the column tile (ec_scaled_held_rows) where
    either operand is split by columns, else none."""
    return 128 * ec_scaled_held_rows(pr.K) if pr.op_a == "T" or pr.op_b == "N" else 0


def ec_scaled_chunk(K: int) -> int:
    """Values of K per row a split_scaled.cu block holds at a time: EC_SCALED_SHORT_CHUNK where
    K fits in it (four blocks an SM instead of two, no idle slots), else EC_SCALED_CHUNK."""
    return EC_SCALED_SHORT_CHUNK if K <= EC_SCALED_SHORT_CHUNK else EC_SCALED_CHUNK


def chooses_in_split(plan) -> bool:
    """Whether ``plan`` is fp32_tc's FP16 candidate on FOLD, whose pre-pass under a choice
    made on the GPU is split_scaled.cu: it scales per row and column and writes the choice
    itself (no histograms, no choose_method.cu)."""
    return plan.spec.name == "ec_wgmma" and plan.params.get("FOLD") == 1 and plan.method == "fp16_ec"


def splits_per_row(plan, choice: int) -> bool:
    """Whether ``plan``'s pre-pass is split_scaled.cu: chooses_in_split, with a choice record."""
    return bool(choice) and chooses_in_split(plan)


def _smem(p) -> int:
    """STAGES x 2 x (128 + BN) rows of 128 bytes, two barriers per stage, the consumers' tail
    flags (16 bytes), with FOLD each consumer's BN column scales and each consumer warp's
    chunk of C in the epilogue, 1 KiB to align the ring."""
    fold = p["FOLD"] * (8 * p["BN"] + 8 * EC_WGMMA_STAGED_C_BYTES)
    return p["STAGES"] * 2 * (EC_WGMMA_BM + p["BN"]) * 128 + 16 * p["STAGES"] + 16 + fold + 1024


def _geometry(p, prob: Problem, batch: int = 1) -> Launch:
    """Persistent: one block per SM (the ring fills its shared memory), at most one per work
    item: a tile of one of the ``batch`` matrices the launch takes, SPLITK times (a slice of K
    each)."""
    items = cdiv(prob.M, EC_WGMMA_BM) * cdiv(prob.N, p["BN"]) * batch * p["SPLITK"]
    return Launch(
        grid=(max(1, min(items, prob.sm_count)), 1, 1),
        block=(EC_WGMMA_THREADS, 1, 1),
        smem_bytes=_smem(p),
        persistent=True,
    )


# kernel="auto"'s split of K (ec_wgmma_auto_split): at most this many slices, each at least
# EC_WGMMA_MIN_K_STEPS_PER_SLICE steps of EC_WGMMA_SPLIT_STEP elements of K.  The step is
# the FP16 parts' (a TF32 stage holds half as much K): both candidates of a method chosen
# on the GPU must split alike, since they write the same workspace and C.
EC_WGMMA_MAX_SPLIT = 8
EC_WGMMA_MIN_K_STEPS_PER_SLICE = 8
EC_WGMMA_SPLIT_STEP = 64


def ec_wgmma_auto_split(M: int, N: int, K: int, sm_count: int, batch: int = 1, bn: int = EC_WGMMA_DEFAULT_BN) -> int:
    """SPLITK for kernel="auto" (and precision="fp32_tc") on ec_wgmma: 1 where its 128 x bn
    tiles (of every matrix of the batch) leave at most half of the SMs idle; else
    fill_split's largest split of at most EC_WGMMA_MAX_SPLIT slices whose work items still
    fit in one round, each slice at least EC_WGMMA_MIN_K_STEPS_PER_SLICE steps of 64 of K
    (a 128-token linear layer: one row of 43-64 tiles, K of 4096 and more).  The same
    whatever the method, so that fp16_ec and tf32_ec candidates split alike.  The
    thresholds follow the wgmma rung's rule; on an H100 most split 128-token products
    ran faster, by less than their SM fill suggested, since the pre-passes are most of
    such a call; the limits themselves were not swept."""
    tiles = cdiv(M, EC_WGMMA_BM) * cdiv(N, bn) * max(batch, 1)
    if 2 * tiles >= sm_count:
        return 1
    return fill_split(
        tiles,
        cdiv(max(K, 1), EC_WGMMA_SPLIT_STEP),
        sm_count,
        most=EC_WGMMA_MAX_SPLIT,
        min_steps=EC_WGMMA_MIN_K_STEPS_PER_SLICE,
    )


# ec_wgmma on a batch (kernel="auto"): the multiply-adds the whole batch must hold to
# repay its fixed cost over ec_wmma (its split launch per candidate; measured when
# that was two launches, A's and B's, built at every call), and per matrix,
# multiply-adds per element of A and B (its pre-pass reads and writes every element
# once more than ec_wmma does).
EC_WGMMA_BATCH_MIN_MACS = 2**31
EC_WGMMA_BATCH_MIN_INTENSITY = 192
# A single product with K at least this takes ec_wgmma from a quarter of the SMs' worth of
# tiles (ec_wgmma_pays).
EC_WGMMA_LONG_K = 4096


def ec_wgmma_pays(M: int, N: int, K: int, batch: int, sm_count: int) -> bool:
    """Whether ec_wgmma, not ec_wmma, runs an error-corrected method named with
    ``kernel="auto"`` on Hopper (fp32_tc's starting point, which choose weighs against FP32
    by the cost models).  Its 128 x 96 tiles, of every matrix of the batch
    (one launch of each pass takes the whole batch), must give at least half of the
    SMs a block.  A batch must also hold EC_WGMMA_BATCH_MIN_MACS multiply-adds, and
    each matrix EC_WGMMA_BATCH_MIN_INTENSITY per element of A and B: ec_wgmma's
    split pre-pass moves every element of A and B through memory twice more than
    ec_wmma, which splits them in registers, so a product whose operands outweigh its
    tensor work (attention's P @ V: S x S times S x 128) runs faster on ec_wmma, and a
    small batch does not repay ec_wgmma's fixed cost.  A single product keeps the
    tile rule, down to a quarter of the SMs when K >= EC_WGMMA_LONG_K: a row of
    tiles with a long K runs faster on ec_wgmma than on ec_wmma.  Both kernels were
    measured through the public call on an H100 (benchmarks/NOTES.md)."""
    # The rule counts 128 x 96 tiles, those of the measurements it was fitted to (the
    # kernel's default tile is now FOLD's 128 x 128; the thresholds were not measured again).
    tiles = -(-M // EC_WGMMA_BM) * -(-N // EC_WGMMA_BN) * max(batch, 1)
    if batch <= 1 and K >= EC_WGMMA_LONG_K and 4 * tiles >= sm_count:
        return True
    if 2 * tiles < sm_count:
        return False
    if batch <= 1:
        return True
    macs = M * N * K
    return batch * macs >= EC_WGMMA_BATCH_MIN_MACS and macs >= EC_WGMMA_BATCH_MIN_INTENSITY * (M + N) * K


def _auto_hook(ask: Ask) -> Offer:
    """The error-corrected methods on sm_90a, where ec_wgmma_pays: split over K by
    ec_wgmma_auto_split (few tiles with a long K, alike for either method)."""
    if ask.arch is None or not SPEC.builds_for(ask.arch):
        return Offer(None, f"ec_wgmma runs on {WGMMA_SM90} only ({'no GPU known' if ask.arch is None else ask.arch})")
    if not ec_wgmma_pays(ask.M, ask.N, ask.K, ask.batch, ask.sm_count):
        return Offer(
            None,
            f"ec_wgmma does not pay here (ec_wgmma_pays): too few {EC_WGMMA_BM} x {EC_WGMMA_BN} "
            f"tiles for {ask.sm_count} SMs, or a batch too small or too thin for its pre-pass",
        )
    return Offer({"SPLITK": ec_wgmma_auto_split(ask.M, ask.N, ask.K, ask.sm_count, ask.batch)})


def _predicted_time(ask: Ask, params: dict, staged: bool = False):
    """Rules.time (ec_wgmma_cost): its split pass reads any layout and alignment, so nothing is staged."""
    on_grid = ask.rows_on_grid("A") and ask.rows_on_grid("B")
    return ec_wgmma_cost.estimate(ask.M, ask.N, ask.K, ask.batch, params["BN"], params["SPLITK"], ask.sm_count, on_grid)


def _matrices(ops: Operands, stride: int) -> int:
    """Matrices of an operand to split: the batch's, or one that every matrix shares (stride 0)."""
    return ops.batch if ops.batch > 1 and stride != 0 else 1


# (method, layouts, arch, grid) -> (kernel, launch shape): the pre-pass's launches are
# prepared once, so a call pays no kernel lookup or launch configuration for them.
_split_launches: dict[tuple, tuple] = {}
_SPLIT_LAUNCHES_KEPT = 256


def _split_launch(
    source, name: str, threads: int, gpu, grid: tuple[int, int, int], pdl: bool = False, smem: int = 0
) -> tuple:
    """(kernel, launch shape) of a split pre-pass instantiation ``name`` of ``source`` on
    ``grid`` with ``smem`` bytes of dynamic shared memory, loaded once.  A kernel with
    __cluster_dims__ (split_scaled.cu) brings its cluster itself: the shape names none.
    ``pdl``: a programmatic dependent launch (split_pack.cu when it reads a choice record: it
    waits for the kernel before it)."""
    key = (name, gpu.arch, grid, pdl, smem, gpu.ordinal)
    found = _split_launches.get(key)
    if found is None:
        from ...runtime import compile as rt_compile
        from ...runtime.launch import LaunchShape, allow_dynamic_smem

        kernel = rt_compile.load_kernel(source, name, gpu.arch)
        allow_dynamic_smem(kernel, smem, gpu.ordinal)  # split_scaled.cu's tile
        if len(_split_launches) >= _SPLIT_LAUNCHES_KEPT:  # a program of many shapes: start again
            _split_launches.clear()
        found = _split_launches[key] = (kernel, LaunchShape(grid, (threads, 1, 1), smem, pdl=pdl))
    return found


def _padded_k(K: int) -> int:
    """K padded to 8 elements: 16 bytes of FP16 and TF32 parts alike (the layout of a choice's workspace)."""
    return -(-K // 8) * 8


def ec_parts_bytes(prob: Problem) -> int:
    """Bytes of split parts one matrix of a batch needs at most (hi and lo of A and B^T, the
    layout for either part type): what executor.Launcher chunks a batch by."""
    return 2 * (prob.M + prob.N) * _padded_k(prob.K) * 4


def _part_layout(pr, choice) -> tuple[int, int]:
    """(bytes an element of a part is given, elements of a part's row: K padded to 16 bytes).
    With a choice record the layout serves either part type (TF32's size, K padded to 8
    elements: 16 bytes of both), so that both candidates' splits and tensor maps use the
    same buffers."""
    eb = 4 if pr.dtype == "tf32_ec" else 2
    if choice:
        return 4, _padded_k(pr.K)
    return eb, -(-pr.K // (16 // eb)) * (16 // eb)


def ec_split_bytes(pr, ops: Operands, choice) -> int:
    """Bytes of the workspace the split parts of one launch take: hi and lo of every matrix
    of A split (M x kp) and of B^T (N x kp); ``choice``: whether a choice record is read (the
    layout for either part type, and room after the parts for split_scaled.cu's inverse
    scales, a float per row of A and column of B)."""
    room, kp = _part_layout(pr, choice)
    segments = _matrices(ops, ops.sa) * pr.M + _matrices(ops, ops.sb) * pr.N
    return 2 * segments * kp * room + (4 * segments if choice else 0)


# The stream-K tail (02_ec_wgmma.cu): where a persistent grid's last round would leave SMs
# idle, its tiles are cut into as many slices of K as still run in one round (at most
# EC_WGMMA_TAIL_MAX_SLICES, each at least EC_WGMMA_TAIL_MIN_STEPS steps of EC_WGMMA_SPLIT_STEP
# elements: both candidates of a method chosen on the GPU cut alike).  A tail of two rounds or
# more cost more than it saved (each slice stores a partial tile and the last adds them),
# so where the last round's tiles are more than half the grid
# there is none.  Only with a choice record (the tiles' counters follow it) and without split-K.
EC_WGMMA_TAIL_MAX_SLICES = 8
EC_WGMMA_TAIL_MIN_STEPS = 4
_PARTIALS_ALIGN = 256


def ec_wgmma_tail(plan, batch: int, choice) -> tuple[int, int]:
    """(tiles of the tail, slices of K each) of a launch of ``batch`` matrices; (0, 1): none.
    The last round then takes about 1/slices of a tile's time, not a whole one."""
    pr, p = plan.problem, plan.params
    if not choice or p["SPLITK"] != 1:
        return 0, 1
    tiles = cdiv(pr.M, EC_WGMMA_BM) * cdiv(pr.N, p["BN"]) * max(batch, 1)
    grid = min(tiles, pr.sm_count)
    rest = tiles % grid
    if rest == 0 or 2 * rest > EC_WGMMA_TAIL_COUNTERS:
        return 0, 1
    slices = min(EC_WGMMA_TAIL_MAX_SLICES, cdiv(pr.K, EC_WGMMA_SPLIT_STEP) // EC_WGMMA_TAIL_MIN_STEPS, grid // rest)
    return (rest, slices) if slices >= 2 else (0, 1)


def _partials_offset(pr, ops: Operands, choice) -> int:
    return cdiv(ec_split_bytes(pr, ops, choice), _PARTIALS_ALIGN) * _PARTIALS_ALIGN


def ec_workspace_bytes(plan, ops: Operands, choice) -> int:
    """Bytes of the workspace of one launch (PrePass.workspace_bytes): the split parts
    (ec_split_bytes), then the stream-K tail's partial tiles, a tile a slice (ec_wgmma_tail)."""
    tail, slices = ec_wgmma_tail(plan, ops.batch, choice)
    if not tail:
        return ec_split_bytes(plan.problem, ops, choice)
    return _partials_offset(plan.problem, ops, choice) + tail * slices * EC_WGMMA_BM * plan.params["BN"] * 4


SPLIT_WHAT = "ec_wgmma, for the split parts of a and b,"


def ec_split_launches(
    pr,
    gpu,
    ops: Operands,
    scale_a: float,
    scale_b: float,
    choice: int,
    workspace: int,
    fold: int,
    per_row: bool = False,
    report: int = 0,
):
    """The launch that splits op(A) and op(B) of problem ``pr`` (dtype fp16_ec or tf32_ec)
    into their hi and lo parts with ec/split_pack.cu, into the workspace at ``workspace``
    (ec_split_bytes of it); built only, nothing launched.  Returns ([(kernel, shape,
    args)], (a_hi, a_lo, b_hi, b_lo, kp, nz_a, nz_b)): device pointers of A's parts (M x
    K) and of B's, transposed (N x K), all with rows of kp elements (K padded to 16
    bytes), and how many matrices of each are split.  One launch takes both operands
    (gridDim.z) and a batch of ``ops.batch`` matrices (gridDim.y): their parts lie one
    matrix after the other (M * kp and N * kp elements apart); an operand the batch
    shares (stride 0) is split once.  Any layout and alignment of A and B is read as
    stored.  The scaled FP16 method's scales (powers of two) are applied here.

    ``choice``: the address of a choice record made on the GPU (ec/choice.cuh), or 0.
    With one, the split runs only if the record chose ``pr.dtype``'s parts, with the
    record's scales, and the workspace is laid out for either part type.  ``fold``: lo in
    hi's units (ec_wgmma's FOLD), with the record's scales that put each matrix's largest
    value just below 2^15.  ``per_row`` (with a record, FP16 parts, FOLD:
    splits_per_row): split_scaled.cu instead, which scales each row of op(A) and column of
    op(B) and writes the record's choice (and copies the record to ``report``, where not
    0); the parts tuple then ends with the addresses of its inverse scales (after the
    parts), else with two zeros.  split_pack.cu with a record is a programmatic dependent
    launch (it waits for the kernel before it: LaunchShape's pdl)."""
    if pr.dtype not in EC_METHODS:
        raise TypeError(f"the split pre-pass is for {', '.join(EC_METHODS)}, not {pr.dtype}")
    room, kp = _part_layout(pr, choice)
    nz_a, nz_b = _matrices(ops, ops.sa), _matrices(ops, ops.sb)
    a_part, b_part = nz_a * pr.M * kp * room, nz_b * pr.N * kp * room  # bytes of each part of A, of B^T
    a_hi, a_lo = workspace, workspace + a_part
    b_hi, b_lo = workspace + 2 * a_part, workspace + 2 * a_part + b_part

    if per_row:
        return _split_scaled_launch(
            pr, gpu, ops, choice, (a_hi, a_lo, b_hi, b_lo), kp, nz_a, nz_b, workspace + 2 * (a_part + b_part), report
        )

    def blocks(rows, cols, nz):  # a few blocks per SM over the whole batch; they loop over the tiles
        tiles = -(-rows // EC_SPLIT_PACK_TILE) * -(-cols // EC_SPLIT_PACK_TILE)
        return max(1, min(tiles, -(-EC_SPLIT_PACK_BLOCKS_PER_SM * gpu.sm_count // nz)))

    grid = (max(blocks(pr.M, pr.K, nz_a), blocks(pr.K, pr.N, nz_b)), max(nz_a, nz_b), 2)
    kernel, shape = _split_launch(
        EC_SPLIT_PACK_SOURCE,
        ec_split_pack_kernel(pr.dtype, pr.op_a, pr.op_b, fold),
        EC_SPLIT_PACK_THREADS,
        gpu,
        grid,
        pdl=bool(choice),
    )
    args = (
        np.int32(pr.M),
        np.int32(pr.N),
        np.int32(pr.K),
        ops.A,
        np.int32(ops.lda),
        np.int64(ops.sa if nz_a > 1 else 0),
        np.int32(nz_a),
        np.float32(scale_a),
        ops.B,
        np.int32(ops.ldb),
        np.int64(ops.sb if nz_b > 1 else 0),
        np.int32(nz_b),
        np.float32(scale_b),
        a_hi,
        a_lo,
        b_hi,
        b_lo,
        np.int32(kp),
        choice,
    )
    return [(kernel, shape, args)], (a_hi, a_lo, b_hi, b_lo, kp, nz_a, nz_b, 0, 0)


# split_scaled.cu's grid: at most this many blocks an SM over the launch (two fit at once); a
# product with more groups of 32 rows (a batch of short-K attention products) has each cluster
# take several in turn, so that fewer blocks add to the record's sums (one global atomic each,
# all on the same few addresses: a block per group made Q @ K^T slower; benchmarks/NOTES.md).
EC_SCALED_BLOCKS_PER_SM = 16


def _grid_over_groups(
    groups_a: int, groups_b: int, cl_a: int, cl_b: int, nz_a: int, nz_b: int, sm_count: int
) -> tuple[tuple[int, int, int], int]:
    """A split_scaled.cu grid: (blocks a matrix along x, matrices, 2 operands), where ``cl_a``
    (``cl_b``) blocks take each group of op(A)'s (op(B)'s) rows together -- a cluster, or 1: a
    plain block -- and groups beyond what fits are taken in turn.  Each side has at most
    EC_SCALED_BLOCKS_PER_SM blocks an SM over the launch; x is what the larger side needs, a
    multiple of the larger cluster.  Also the blocks of it that split something (each takes
    one ticket of the record's count)."""
    nz = max(nz_a, nz_b)

    def blocks_of(groups, cl):  # the blocks along x that one side fills
        return cl * min(groups, max(1, cdiv(EC_SCALED_BLOCKS_PER_SM * sm_count, cl * 2 * nz)))

    cl = max(cl_a, cl_b)
    x = cdiv(max(blocks_of(groups_a, cl_a), blocks_of(groups_b, cl_b)), cl) * cl
    blocks = cl_a * min(groups_a, x // cl_a) * nz_a + cl_b * min(groups_b, x // cl_b) * nz_b
    return (x, nz, 2), blocks


def ec_scaled_grid(M: int, N: int, K: int, nz_a: int, nz_b: int, sm_count: int) -> tuple[tuple[int, int, int], int]:
    """The clustered kernel's grid: clusters of ec_scaled_cluster(K) blocks, groups of 32 rows."""
    cl = ec_scaled_cluster(K)
    return _grid_over_groups(cdiv(M, EC_SCALED_SEGMENTS), cdiv(N, EC_SCALED_SEGMENTS), cl, cl, nz_a, nz_b, sm_count)


def ec_scaled_rows_grid(M: int, N: int, rows: int, nz_a: int, nz_b: int, sm_count: int) -> tuple[tuple, int]:
    """ec_split_scaled_rows's grid: plain blocks, groups of ``rows`` whole rows."""
    return _grid_over_groups(cdiv(M, rows), cdiv(N, rows), 1, 1, nz_a, nz_b, sm_count)


def ec_scaled_half_rows_grid(pr, chunks: int, nz_a: int, nz_b: int, sm_count: int) -> tuple[tuple, int]:
    """The clustered kernel's grid with ROWS = ``chunks`` (ec_scaled_half_rows): a plain block a
    group of 16 / chunks whole rows of the operand stored along K, clusters of
    ec_scaled_cluster(K) blocks a group of 32 segments of the other."""
    cl, rows = ec_scaled_cluster(pr.K), EC_SCALED_ROWS_VALUES // 4 // chunks
    if pr.op_a == "N":
        return _grid_over_groups(cdiv(pr.M, rows), cdiv(pr.N, EC_SCALED_SEGMENTS), 1, cl, nz_a, nz_b, sm_count)
    return _grid_over_groups(cdiv(pr.M, EC_SCALED_SEGMENTS), cdiv(pr.N, rows), cl, 1, nz_a, nz_b, sm_count)


def _split_scaled_launch(
    pr, gpu, ops: Operands, choice: int, parts, kp: int, nz_a: int, nz_b: int, scales: int, report: int = 0
):
    """split_scaled.cu's launch (ec_split_launches with per_row): clusters of
    ec_scaled_cluster(K) blocks taking groups of 32 rows of op(A) (columns of op(B)) of each
    matrix (ec_scaled_grid), or where ec_scaled_rows_chunks allows, blocks of whole rows
    (ec_scaled_rows_grid); the inverse scales at ``scales`` (A's nz_a x M floats, then B's)."""
    chunks = ec_scaled_rows_chunks(pr, ops, nz_a, nz_b)
    half = 0 if chunks else ec_scaled_half_rows(pr, ops, nz_a, nz_b)
    if chunks:  # whole rows a block, no clusters
        rows = EC_SCALED_ROWS_VALUES // 4 // chunks
        grid, blocks = ec_scaled_rows_grid(pr.M, pr.N, rows, nz_a, nz_b, gpu.sm_count)
        name = ec_split_scaled_rows_kernel(chunks)
    elif half:  # one operand by whole rows, the other's blocks in clusters
        grid, blocks = ec_scaled_half_rows_grid(pr, half, nz_a, nz_b, gpu.sm_count)
        name = ec_split_scaled_kernel(pr.op_a, pr.op_b, ec_scaled_cluster(pr.K), EC_SCALED_CHUNK, half)
    else:
        grid, blocks = ec_scaled_grid(pr.M, pr.N, pr.K, nz_a, nz_b, gpu.sm_count)
        name = ec_split_scaled_kernel(pr.op_a, pr.op_b, ec_scaled_cluster(pr.K), ec_scaled_chunk(pr.K))
    smem = 0 if chunks else ec_scaled_tile_bytes(pr)
    kernel, shape = _split_launch(EC_SPLIT_SCALED_SOURCE, name, EC_SCALED_THREADS, gpu, grid, smem=smem)
    a_hi, a_lo, b_hi, b_lo = parts
    unscale_a, unscale_b = scales, scales + 4 * nz_a * pr.M
    args = (
        np.int32(pr.M),
        np.int32(pr.N),
        np.int32(pr.K),
        ops.A,
        np.int32(ops.lda),
        np.int64(ops.sa if nz_a > 1 else 0),
        np.int32(nz_a),
        ops.B,
        np.int32(ops.ldb),
        np.int64(ops.sb if nz_b > 1 else 0),
        np.int32(nz_b),
        a_hi,
        a_lo,
        b_hi,
        b_lo,
        np.int32(kp),
        unscale_a,
        unscale_b,
        np.int32(blocks),
        np.int32(smem // 128),
        choice,
        report,
    )
    return [(kernel, shape, args)], (a_hi, a_lo, b_hi, b_lo, kp, nz_a, nz_b, unscale_a, unscale_b)


@contextmanager
def ec_split_workspace(
    pr,
    gpu,
    stream: int,
    ops: Operands,
    scale_a: float = 1.0,
    scale_b: float = 1.0,
    choice: int = 0,
    fold: int = EC_WGMMA_DEFAULT_FOLD,
    per_row: bool = False,
    report: int = 0,
):
    """The split pre-pass alone (what the benchmark times): ec_split_launches into a
    stream-ordered workspace, launched on ``stream``; yields the parts as
    ec_split_launches returns them; freed in stream order on exit.  ``fold``: the parts
    for ec_wgmma's FOLD (its default) or for the four-set kernel; ``per_row`` (with a
    record at ``choice`` whose sums are zero): split_scaled.cu, fp32_tc's pre-pass, which
    copies the record to ``report`` where not 0."""
    from ...runtime.launch import launch_shaped, stream_workspace

    ws = stream_workspace(gpu, stream, ec_split_bytes(pr, ops, choice), SPLIT_WHAT)
    try:
        launches, parts = ec_split_launches(
            pr, gpu, ops, scale_a, scale_b, choice, int(ws.handle), fold, per_row, report
        )
        for kernel, shape, args in launches:
            launch_shaped(kernel, shape, stream, args)
        yield parts
    finally:
        ws.close(stream)


def ec_wgmma_launches(plan, gpu, ops: Operands, alpha, beta, choice: int, workspace: int, report: int = 0):
    """ec_wgmma's launches on the split workspace at ``workspace`` (PrePass.build): the
    split pre-pass's (ec_split_launches) and the GEMM's arguments: the standard eleven,
    the batch strides and the number of matrices (as the wgmma rung's: of A's and B's
    strides the kernel asks whether they are 0, and FOLD's epilogue steps by them to sum an
    element again), the tensor maps of the four parts (hi and lo of A, hi and lo of B^T),
    then scale_a and scale_b (the kernel divides them out), the address of the choice
    record made on the GPU (0: none), SPLITK, the caller's layouts (bit 0: A
    transposed, bit 1: B; for FOLD's sums again) and the addresses of split_scaled.cu's
    inverse scales (0, 0 unless splits_per_row).  Split,
    ``ops.C`` is split-K's workspace (ldc = N, alpha = 1, beta = 0: executor.Launcher) and
    C's stride is one partial product, M * N floats (02_ec_wgmma.cu).  Both operands
    are K-major, the layout TF32 wgmma needs and FP16 wgmma reads without its transpose
    bit; A's parts in 128-row boxes, B^T's in BN-row boxes, 128 bytes of K each.  Each
    map is 3-D over the parts of every matrix split (one for an operand the batch
    shares); ``report``: where
    split_scaled.cu copies the record it writes (0: nowhere)."""
    pr = plan.problem
    scale_a, scale_b = (float(x) for x in plan.extra_args())
    part, eb = ("tf32", 4) if pr.dtype == "tf32_ec" else ("float16", 2)
    one = ops.batch <= 1
    splits = plan.params["SPLITK"]
    sc = pr.M * pr.N if splits > 1 else 0 if one else ops.sc
    strides = (0, 0, sc) if one else (ops.sa, ops.sb, sc)
    batch_args = tuple(np.int64(s) for s in strides) + (np.int32(max(ops.batch, 1)),)
    launches, (a_hi, a_lo, b_hi, b_lo, kp, nz_a, nz_b, unscale_a, unscale_b) = ec_split_launches(
        pr, gpu, ops, scale_a, scale_b, choice, workspace, plan.params["FOLD"], splits_per_row(plan, choice), report
    )
    box_k, bm, bn = 128 // eb, EC_WGMMA_BM, plan.params["BN"]
    maps = tuple(
        tensor_map(ptr, rows, pr.K, kp, part, box_rows, box_k, batch=nz, batch_stride=rows * kp)
        for ptr, rows, box_rows, nz in (
            (a_hi, pr.M, bm, nz_a),
            (a_lo, pr.M, bm, nz_a),
            (b_hi, pr.N, bn, nz_b),
            (b_lo, pr.N, bn, nz_b),
        )
    )
    trans = (pr.op_a == "T") | (pr.op_b == "T") << 1
    tail, slices = ec_wgmma_tail(plan, ops.batch, choice)
    partials = workspace + _partials_offset(pr, ops, choice) if tail else 0
    return launches, standard_args(pr, ops, alpha, beta) + batch_args + maps + plan.extra_args() + (
        choice,
        np.int32(splits),
        np.int32(trans),
        unscale_a,
        unscale_b,
        np.int32(tail),
        np.int32(slices),
        partials,
    )


SPEC = KernelSpec(
    name="ec_wgmma",
    rung=2,
    family="ec",
    dtypes=tuple(EC_METHODS),
    source="ec/02_ec_wgmma.cu",
    template="gemmlab::ec_wgmma",
    description="Hopper: A and B split once into their two parts by a pre-pass, then wgmma from a TMA ring "
    "of four tiles a stage; each stage's products added outside the tensor core into blocked "
    "FP32 accumulators (FOLD: lo in hi's units, the stage's three products in one accumulator "
    "set, 128 x 128 tiles)",
    params=(
        TileParam(
            "STAGES",
            (2, 3, 4),
            3,
            "stages of the ring, each 56 KiB (64 with BN = 128): hi and lo tiles "
            "of A (128 rows) and of B^T (BN rows), 128 bytes of K",
        ),
        TileParam(
            "BN",
            (EC_WGMMA_BN, EC_WGMMA_FOLD_BN),
            EC_WGMMA_DEFAULT_BN,
            "columns of the block's tile (128 needs FOLD's three accumulator sets)",
        ),
        TileParam(
            "FOLD",
            (0, 1),
            EC_WGMMA_DEFAULT_FOLD,
            "1: lo kept in hi's units, corrections and main product of a stage in one "
            "accumulator set (the FP16 parts scaled to just below 2^15 by the method "
            "chosen on the GPU)",
        ),
        TileParam(
            "SPLITK",
            SHALLOW_SPLITK_VALUES,
            1,
            "slices of K (products with few tiles and a long K; >1 writes "
            "FP32 partial tiles to a workspace of SPLITK*M*N floats per "
            "matrix, which a reduction kernel adds into C)",
        ),
    ),
    constraints=(
        Constraint(
            "dynamic shared memory, STAGES*(32 + BN/4) KiB + 16*STAGES + 16 + (8*BN + 20480)*FOLD + 1024 bytes, "
            "must fit in the 227 KiB a Hopper block can have",
            lambda p: _smem(p) <= WGMMA_SMEM_LIMIT,
        ),
        Constraint(
            f"BN = {EC_WGMMA_FOLD_BN} needs FOLD = 1 (four sets of 64 accumulators do not fit)",
            lambda p: p["BN"] == EC_WGMMA_BN or p["FOLD"] == 1,
        ),
    ),
    template_args=lambda p, prob: (EC_METHODS[prob.dtype], p["STAGES"], p["BN"], p["FOLD"]),
    geometry=_geometry,
    variants=tuple(Problem(1, 1, 1, True, method) for method in EC_METHODS),
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    fallback="ec_wmma",
    rules=Rules(offer=_auto_hook, time=_predicted_time),
    # The persistent loop's work items are (matrix, slice of K, tile); one instantiation
    # serves split and unsplit (its output is FP32 either way).
    split_k_param="SPLITK",
    launching=Launching(
        extra_args=("scale_a", "scale_b"),
        reads_choice=True,
        gpu_choice=GPUChoice,
        prepass=PrePass(
            workspace_bytes=ec_workspace_bytes, build=ec_wgmma_launches, what=SPLIT_WHAT, chooses=chooses_in_split
        ),
        # One launch per batch (chunk): the pre-pass splits every matrix, the persistent loop
        # walks every matrix's tiles.
        batched_args=True,
        batch_workspace=ec_parts_bytes,
        packed=True,
    ),
)
