import torch, gemmlab
torch.backends.cuda.matmul.allow_tf32 = False
n = 4096
a = torch.rand(n, n, device="cuda") * 2 - 1
b = torch.rand(n, n, device="cuda") * 2 - 1
c = torch.empty(n, n, device="cuda")
for name, bb in (("NN", b), ("NT", b.t())):
    gemmlab.matmul(a, bb, out=c)
    torch.cuda.synchronize()
    print(name, gemmlab.last_plan().describe(), flush=True)
