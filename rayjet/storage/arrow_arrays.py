"""Arrow arrays to and from Python and numpy values without importing pandas.

``pa.array`` and ``Array.to_numpy`` ask pandas whether the values are pandas objects, and
the first time in a process that imports pandas: about 0.25 s and 47 MB in every replica
host, a first delivery waiting on it. These builders put the buffers together themselves
(``Array.from_buffers``), which never asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_INT32_MAX = (1 << 31) - 1
INT64 = pa.int64()
BINARY = pa.binary()


def _numpy_dtype(kind: pa.DataType) -> np.dtype:
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        return np.dtype(np.int64)
    if pa.types.is_integer(kind):
        sign = "u" if pa.types.is_unsigned_integer(kind) else "i"
        return np.dtype(f"{sign}{kind.bit_width // 8}")
    if pa.types.is_floating(kind):
        return np.dtype(f"f{kind.bit_width // 8}")
    raise TypeError(f"not a fixed-width number type: {kind}")


def numbers(values: Any, kind: pa.DataType = INT64) -> pa.Array:
    """A null-free array of ``kind`` (an integer, float or timestamp type) from a sequence
    or numpy array of numbers."""
    arr = np.ascontiguousarray(values, dtype=_numpy_dtype(kind))
    return pa.Array.from_buffers(kind, len(arr), [None, pa.py_buffer(arr)], null_count=0)


def validity(null: np.ndarray) -> pa.Buffer | None:
    """Arrow's validity bitmap for rows marked in the boolean array ``null`` (None when no
    row is null)."""
    if not null.any():
        return None
    return pa.py_buffer(np.packbits(~null, bitorder="little"))


def binaries(values: Sequence[bytes | str | None], kind: pa.DataType = BINARY
             ) -> pa.Array:
    """A binary or string array from bytes, str (UTF-8 encoded) or None (null) values."""
    n = len(values)
    null = np.fromiter((v is None for v in values), dtype=bool, count=n)
    parts = [b"" if v is None else v.encode() if isinstance(v, str) else v for v in values]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=n), out=offsets[1:])
    data = pa.py_buffer(b"".join(parts))
    bitmap = validity(null)
    nulls = int(null.sum())
    if offsets[-1] <= _INT32_MAX:
        return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(offsets.astype(np.int32)),
                                               data], null_count=nulls)
    large = pa.large_string() if pa.types.is_string(kind) else pa.large_binary()
    big = pa.Array.from_buffers(large, n, [bitmap, pa.py_buffer(offsets), data],
                                null_count=nulls)
    return big.cast(kind)


def empty(kind: pa.DataType) -> pa.Array:
    """An array of no values of ``kind``."""
    return pa.nulls(0, kind)


def to_numbers(arr: pa.Array, fill: int = 0) -> np.ndarray:
    """A fixed-width number array's values as a numpy array (nulls as ``fill``)."""
    if arr.null_count:
        arr = arr.fill_null(fill)
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    dtype = _numpy_dtype(arr.type)
    if not len(arr):
        return np.empty(0, dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr) + arr.offset
                         )[arr.offset:].copy()
