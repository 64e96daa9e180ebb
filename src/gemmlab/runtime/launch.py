"""Launching a compiled kernel on a caller's stream."""

from __future__ import annotations

_streams: dict[int, object] = {}


def stream_from_handle(handle: int):
    """A cuda.core Stream wrapping a foreign ``cudaStream_t`` (not owned, not destroyed)."""
    from cuda.core import LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM, Stream
    if handle == 0 or handle == 1:
        return LEGACY_DEFAULT_STREAM
    if handle == 2:
        return PER_THREAD_DEFAULT_STREAM
    s = _streams.get(handle)
    if s is None:
        s = _streams[handle] = Stream.from_handle(handle)
    return s


def launch(kernel, grid, block, smem_bytes: int, stream_handle: int, *args) -> None:
    from cuda.core import LaunchConfig, launch as cc_launch
    config = LaunchConfig(grid=tuple(grid), block=tuple(block), shmem_size=smem_bytes)
    cc_launch(stream_from_handle(stream_handle), config, kernel, *args)
