"""Integer constants the host shares with the CUDA sources, read from the sources.

A constant that both sides need (a type code in a template argument, a block
size, a tile shape, a buffer size) is written once, in the .cu or .cuh file
where it belongs, as one plain line inside ``namespace gemmlab``::

    constexpr int WGMMA_EPI_BYTES = 8192;     // a comment may follow

``read_constants(path)`` returns every such line of one file as a dict, so that
Python can use the value instead of repeating the number.  Only literal
decimal (or 0x hexadecimal) values are read: a line whose value is an
expression (``constexpr int ROWS = THREADS / TILE;``) is the file's business and
is skipped.  Results are cached per file.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent

_LINE = re.compile(
    r"^[ \t]*constexpr[ \t]+int[ \t]+([A-Za-z_]\w*)[ \t]*=[ \t]*(-?(?:0[xX][0-9a-fA-F]+|\d+))[ \t]*;", re.M
)


def read_constants(path: str | Path) -> dict[str, int]:
    """``{NAME: value}`` for every ``constexpr int NAME = VALUE;`` line of the file.

    ``path`` may be absolute or relative to the kernels folder
    (``"tensor/04_wgmma.cu"``, ``"include/gemmlab/type_codes.cuh"``).  A name
    defined twice with different values is an error.
    """
    p = Path(path)
    if not p.is_absolute():
        p = KERNEL_DIR / p
    return dict(_read(str(p.resolve())))


@functools.lru_cache(maxsize=None)
def _read(path: str) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for name, value in _LINE.findall(Path(path).read_text()):
        v = int(value, 0)
        if out.setdefault(name, v) != v:
            raise ValueError(f"{path}: {name} is defined twice, as {out[name]} and {v}")
    return tuple(out.items())
