"""The FP32 ladder on CUDA cores: each rung's host code beside its .cu file."""
