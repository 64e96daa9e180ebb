"""Arrays for planning tests: the shapes, strides and addresses of a product without its memory."""

import numpy as np


def stored(shape, dtype="float16", offset=0):
    """A C-ordered array of ``shape`` whose memory is never touched (planning reads shapes,
    strides and addresses only): a few bytes viewed with zero-copy strides, its base 256-byte
    aligned plus ``offset`` elements."""
    dt = np.dtype(dtype)
    buf = np.zeros(256 + 64, np.uint8)
    start = (-buf.ctypes.data) % 256 + offset * dt.itemsize
    strides, acc = [], dt.itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return np.lib.stride_tricks.as_strided(buf[start:start + 16].view(dt), shape, tuple(reversed(strides)))
