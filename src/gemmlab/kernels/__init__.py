"""The kernel ladder: CUDA sources and the registry that describes them."""
