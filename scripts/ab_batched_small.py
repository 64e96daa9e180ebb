"""A/B, on a GPU: batches of small matrices (attention within windows) on the batch rungs
(batched_small, batched_small_mma) beside the tiled arms auto took before them (rung 8 and
wgmma / mma_pipelined at 64 x 64 tiles), kernel="auto" and torch.matmul, timed by the bench
harness (tools.bench.timing.time_rounds: the public call, host time included, L2 flushed
before every run, the arms interleaved round after round); each arm's output is checked
against FP64 first, after NaN poisoning.  (benchmarks/NOTES.md, "Batches of small matrices".)

    python3 scripts/ab_batched_small.py --dtype fp32,bf16 --json OUT.json     # on the GPU
    python3 scripts/ab_batched_small.py --list                                # no GPU: the products
"""

import argparse
import json
import sys

# (label, batch, M, N, K, layouts): Swin-T's window attention (7 x 7 windows, heads of 32) in
# its forward and backward products and later stages, Swin-V2's 8 x 8 windows, other heads,
# small cubes, K past one staged chunk, smaller batches and odd sizes.
SHAPES = [
    ("swin qk", 6144, 49, 49, 32, "NT"),
    ("swin pv", 6144, 49, 32, 49, "NN"),
    ("swin dP = dO V^T", 6144, 49, 49, 32, "NT"),
    ("swin dV = P^T dO", 6144, 49, 32, 49, "TN"),
    ("swin dQ = dS K", 6144, 49, 32, 49, "NN"),
    ("swin dK = dS^T Q", 6144, 49, 32, 49, "TN"),
    ("swin s3 qk", 1536, 49, 49, 32, "NT"),
    ("swin s3 pv", 1536, 49, 32, 49, "NN"),
    ("swin s4 qk", 768, 49, 49, 32, "NT"),
    ("swinv2 w8 qk", 6144, 64, 64, 32, "NT"),
    ("swinv2 w8 pv", 6144, 64, 32, 64, "NN"),
    ("w7 head64 qk", 3072, 49, 49, 64, "NT"),
    ("w7 head64 pv", 3072, 49, 64, 49, "NN"),
    ("s=64 qk", 2048, 64, 64, 64, "NT"),
    ("s=64 pv", 2048, 64, 64, 64, "NN"),
    ("head16 qk", 6144, 49, 49, 16, "NT"),
    ("16^3", 32768, 16, 16, 16, "NN"),
    ("32^3", 8192, 32, 32, 32, "NN"),
    ("k=96", 2048, 64, 64, 96, "NT"),
    ("k=128", 2048, 64, 64, 128, "NT"),
    ("k=128 49", 2048, 49, 49, 128, "NT"),
    ("batch 2", 2, 49, 49, 32, "NT"),
    ("batch 8", 8, 49, 49, 32, "NT"),
    ("batch 64", 64, 49, 49, 32, "NT"),
    ("batch 512", 512, 49, 49, 32, "NT"),
    ("odd 33x20x40", 4096, 33, 20, 40, "TT"),
    ("5x64x64", 4096, 5, 64, 64, "NN"),
]
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
PIPELINED_64 = dict(BM=64, BN=64, BK=16, WM=32, WN=32, WNITER=2, TM=4, STAGES=4)
ARMS = {
    "float32": [("auto", {}), ("batched_small", {}), ("pipelined", PIPELINED_64)],
    "16-bit": [
        ("auto", {}),
        ("batched_small_mma", {}),
        ("batched_small", {}),
        ("wgmma", dict(BM=64, BN=64, STAGES=4)),
        ("mma_pipelined", dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=4)),
    ],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="fp32,bf16", help="comma list of fp32, bf16, fp16")
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--list", action="store_true", help="print the products and exit (no GPU)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        ap.error(f"unknown --dtype {', '.join(bad)}; choose from {', '.join(DTYPES)}")
    if args.list:
        for d in dtypes:
            for shape in SHAPES:
                print(d, *shape)
        return 0
    import torch

    import gemmlab
    from gemmlab.tools.bench.suites import bench_gpu
    from gemmlab.tools.bench.timing import time_rounds

    gpu = bench_gpu()
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, dt):
        return torch.rand(*shape, device="cuda", generator=gen, dtype=dt).mul_(2).sub_(1)

    records = []
    for name in dtypes:
        dt = getattr(torch, DTYPES[name])
        arms = ARMS["float32" if name == "fp32" else "16-bit"]
        for label, B, M, N, K, ops in SHAPES:
            a = rnd(B, M, K, dt=dt) if ops[0] == "N" else rnd(B, K, M, dt=dt).transpose(-1, -2)
            b = rnd(B, K, N, dt=dt) if ops[1] == "N" else rnd(B, N, K, dt=dt).transpose(-1, -2)
            c = torch.empty(B, M, N, device="cuda", dtype=dt)
            ref = torch.matmul(a.double(), b.double())
            rec = {"label": label, "shape": [B, M, N, K], "ops": ops, "dtype": name, "arms": []}
            calls, errors = {"torch": lambda: torch.matmul(a, b, out=c)}, {}
            for kernel, params in arms:
                try:
                    c.fill_(float("nan"))
                    gemmlab.matmul(a, b, out=c, kernel=kernel, **params)
                    torch.cuda.synchronize()
                except (ValueError, TypeError) as exc:  # a rung that does not run here
                    rec["arms"].append({"arm": f"{kernel} {params}", "failed": str(exc)[:200]})
                    continue
                arm = f"{kernel}: {gemmlab.last_plan().describe()}"
                errors[arm] = float((c.double() - ref).norm() / ref.norm())

                def call(kernel=kernel, params=params):
                    gemmlab.matmul(a, b, out=c, kernel=kernel, **params)

                calls[arm] = call
            timed = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=args.rounds, reps=5, budget_s=0.05)
            t_torch = timed["torch"].ms * 1e3
            for arm, err in errors.items():
                t = timed[arm].ms * 1e3
                rec["arms"].append({"arm": arm, "us": t, "pct_torch": 100 * t_torch / t, "rel_err": err})
            rec["torch_us"] = t_torch
            records.append(rec)
            print(
                f"{name} {label:18s} {B}x{M}x{N}x{K} {ops} torch {t_torch:7.1f} | "
                + " | ".join(
                    f"{r['arm'][:30]} {r.get('us', 0):7.1f} {r.get('pct_torch', 0):5.1f}%" for r in rec["arms"]
                ),
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu.name, "how": __doc__, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
