"""The kernel ladder: each rung's CUDA source with its host code beside it
(kernels/<family>/<rung>.py), and the registry that indexes them."""
