"""fp32_tc on ec_wgmma split over K (SPLITK 1, 3, 8) against cuBLAS SGEMM: relative Frobenius
error against FP64 at 256 x 256 x K, U(-1, 1) and log-uniform 2^-20..2^20 inputs (which choose
FP16 and TF32 parts).  `gemmlab accuracy` runs 256 x 256 on ec_wmma, which auto takes there.

    python3 benchmarks/experiments/ec_split_accuracy.py
"""
import torch, gemmlab
torch.backends.cuda.matmul.allow_tf32 = False
g = torch.Generator(device="cuda").manual_seed(0)
def data(kind, m, k):
    if kind == "uniform":
        return torch.rand(m, k, device="cuda", generator=g, dtype=torch.float64) * 2 - 1
    s = torch.randint(0, 2, (m, k), device="cuda", generator=g).double() * 2 - 1
    return s * torch.exp2(torch.rand(m, k, device="cuda", generator=g, dtype=torch.float64) * 40 - 20)
for kind in ("uniform", "log_uniform"):
    for K in (4096, 65536, 131072):
        a64, b64 = data(kind, 256, K), data(kind, K, 256)
        a, b = a64.float(), b64.float()
        ref = a.double() @ b.double()
        err = lambda c: float((c.double() - ref).norm() / ref.norm())
        row = [f"{kind:12} K={K:6}", f"sgemm {err(a @ b):.2e}"]
        for s in (1, 3, 8):
            c = gemmlab.matmul(a, b, precision="fp32_tc", kernel="ec_wgmma", SPLITK=s)
            row.append(f"split{s} {err(c):.2e} [{gemmlab.last_plan().method}]")
        print("  ".join(row), flush=True)
