"""The WMMA fragment lab: fragment maps (fragments) and compiling your own
kernels against gemmlab's device headers (wmma_ext)."""
