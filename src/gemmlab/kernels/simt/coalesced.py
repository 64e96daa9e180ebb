"""Rung 2, 02_coalesced.cu: rung 1 with threadIdx.x walking N instead of M."""

from __future__ import annotations

from .naive import untiled_spec

SPEC = untiled_spec("coalesced", 2, "one thread per output; threadIdx.x walks N, so a warp reads contiguous memory")
