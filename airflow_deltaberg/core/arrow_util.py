"""numpy -> Arrow without ``pa.array``: pyarrow's ``pa.array`` imports pandas on first use when it is
installed (a fixed cost of a second or so per process on a busy 2-core machine, more than the whole log
replay of a mid-size table), while building from buffers does not."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: The Arrow field metadata key under which pyarrow reads and writes a Parquet column's field id.
FIELD_ID = b"PARQUET:field_id"

_TYPES = {
    np.dtype(np.int8): pa.int8(),
    np.dtype(np.int16): pa.int16(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.uint8): pa.uint8(),
    np.dtype(np.uint32): pa.uint32(),
    np.dtype(np.uint64): pa.uint64(),
    np.dtype(np.float32): pa.float32(),
    np.dtype(np.float64): pa.float64(),
}


def _validity(mask: np.ndarray | None, n: int) -> pa.Buffer | None:
    if mask is None or not mask.any():
        return None
    return pa.py_buffer(np.packbits(~mask.astype(bool), bitorder="little"))


def from_numpy(values: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """A 1-d numeric or boolean numpy array as an Arrow array; ``mask`` marks nulls (True = null)."""
    values = np.ascontiguousarray(values)
    n = len(values)
    validity = _validity(mask, n)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), n, [validity, data])
    arrow_type = _TYPES.get(values.dtype)
    if arrow_type is None:
        raise TypeError(f"no Arrow type for numpy dtype {values.dtype}")
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(values)])


def strings(values: list[str]) -> pa.Array:
    """A short list of (non-null) strings as an Arrow string array, without ``pa.array``."""
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(encoded), buffers)


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A null-free numeric or boolean Arrow array as numpy, read from its buffers (see the module note)."""
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:
            return to_numpy(values.chunk(0))
        parts = [to_numpy(c) for c in values.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=_dtype(values.type))
    if values.null_count:
        raise ValueError("to_numpy needs an array without nulls (fill them first)")
    n, offset = len(values), values.offset
    data = values.buffers()[1]
    if pa.types.is_boolean(values.type):
        if data is None:
            return np.zeros(n, dtype=bool)
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        return bits[offset : offset + n].astype(bool)
    dtype = _dtype(values.type)
    if data is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=n, offset=offset * dtype.itemsize)


def _dtype(arrow_type: pa.DataType) -> np.dtype:
    for dtype, candidate in _TYPES.items():
        if candidate == arrow_type:
            return dtype
    if pa.types.is_boolean(arrow_type):
        return np.dtype(bool)
    raise TypeError(f"no numpy dtype for {arrow_type}")
