"""The tensor-core ladder (FP16, BF16, TF32): each rung's host code beside its .cu file."""
