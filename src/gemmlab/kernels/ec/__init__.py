"""FP32-accurate GEMM on tensor cores (error correction): each rung's host code
beside its .cu file, and the host launch of the exponent histogram."""
