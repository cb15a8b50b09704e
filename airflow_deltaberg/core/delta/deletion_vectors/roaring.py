"""Delta's 64-bit RoaringBitmapArray decoded with pyroaring (CRoaring).

The Delta protocol's "Deletion Vector Format": a little-endian magic number, then the bitmap. The portable layout
is CRoaring's 64-bit portable format (RoaringFormatSpec, "Extension for 64-bit implementations"); delta-spark's
native layout, which delta-spark also reads, is a 32-bit count, then per 32-bit key 0, 1, ... a 32-bit size and a
portable 32-bit bitmap. CRoaring validates what it deserializes (cookie, container kinds and sizes, ascending keys
and values); a refusal is a RoaringFormatError. pyroaring decodes 6-146x faster than the numpy decoder it replaced
(docs/LIBRARIES.md, benchmarks/bench_roaring.py).
"""

from __future__ import annotations

import numpy as np
from pyroaring import BitMap, BitMap64

from airflow_deltaberg.core.errors import RoaringFormatError

#: RoaringBitmapArray magic numbers: the portable layout of the protocol, and delta-spark's native one.
PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376


def _uint32(data: bytes, pos: int) -> int:
    if pos + 4 > len(data):
        raise RoaringFormatError(f"truncated: needs {pos + 4} bytes, has {len(data)}")
    return int.from_bytes(data[pos : pos + 4], "little")


def _deserialize(cls: type[BitMap] | type[BitMap64], data: bytes) -> BitMap | BitMap64:
    try:
        return cls.deserialize(data)
    except (ValueError, IndexError) as exc:  # CRoaring says only that it refused: a short or malformed bitmap
        raise RoaringFormatError(f"truncated or malformed bitmap of {len(data)} bytes: {exc}") from exc


def _decode_native(data: bytes) -> np.ndarray:
    count, pos, parts = _uint32(data, 4), 8, []
    for key in range(count):
        size = _uint32(data, pos)
        if pos + 4 + size > len(data):
            raise RoaringFormatError(f"truncated: bitmap {key} needs {pos + 4 + size} bytes, has {len(data)}")
        if size:
            low = np.frombuffer(_deserialize(BitMap, data[pos + 4 : pos + 4 + size]).to_array(), dtype=np.uint32)
            parts.append((np.uint64(key) << np.uint64(32)) | low.astype(np.uint64))
        pos += 4 + size
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def decode_roaring_bitmap_array(data: bytes | memoryview) -> np.ndarray:
    """The ascending uint64 values of a Delta RoaringBitmapArray (magic number, then the bitmap)."""
    data = bytes(data)
    magic = _uint32(data, 0)
    if magic == NATIVE_MAGIC:
        return _decode_native(data)
    if magic != PORTABLE_MAGIC:
        raise RoaringFormatError(f"unexpected RoaringBitmapArray magic number {magic}")
    bitmap = _deserialize(BitMap64, data[4:])
    if bitmap and bitmap.max() >> 63:
        raise RoaringFormatError("a bucket key has its most significant bit set")
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64)
