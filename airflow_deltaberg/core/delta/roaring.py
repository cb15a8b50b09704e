"""Roaring bitmap decoding with numpy: the 32-bit portable format and Delta's 64-bit RoaringBitmapArray.

References: RoaringFormatSpec (cookie header, descriptive header, offset header, array / bitmap / run
containers; "Extension for 64-bit implementations") and the Delta protocol's "Deletion Vector Format"
(a little-endian magic number before the 64-bit bitmap). All numbers are little-endian.
"""

from __future__ import annotations

import numpy as np

from airflow_deltaberg.core.errors import RoaringFormatError

SERIAL_COOKIE_NO_RUNCONTAINER = 12346
SERIAL_COOKIE = 12347
NO_OFFSET_THRESHOLD = 4
ARRAY_MAX_CARDINALITY = 4096
BITMAP_BYTES = 8192
#: RoaringBitmapArray magic numbers: the portable layout of the protocol, and delta-spark's native one
#: (a 32-bit count, then per 32-bit key 0, 1, ...: a 32-bit size and the bitmap), which delta-spark also reads.
PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376


def _uint(buf: memoryview, pos: int, size: int) -> int:
    if pos + size > len(buf):
        raise RoaringFormatError(f"truncated: needs {pos + size} bytes, has {len(buf)}")
    return int.from_bytes(buf[pos : pos + size], "little")


def _u16(buf: memoryview, pos: int, count: int) -> np.ndarray:
    if pos + 2 * count > len(buf):
        raise RoaringFormatError(f"truncated: needs {pos + 2 * count} bytes, has {len(buf)}")
    return np.frombuffer(buf, dtype="<u2", count=count, offset=pos)


def _run_values(pairs: np.ndarray) -> np.ndarray:
    """Values of (start, length - 1) run pairs, ascending."""
    starts = pairs[0::2].astype(np.int64)
    lengths = pairs[1::2].astype(np.int64) + 1
    if (starts + lengths > 1 << 16).any():
        raise RoaringFormatError("a run goes past the end of its container")
    if len(starts) > 1 and (starts[1:] < starts[:-1] + lengths[:-1]).any():
        raise RoaringFormatError("runs overlap or are not ascending")
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if len(ends) else 0, dtype=np.int64) + np.repeat(starts - (ends - lengths), lengths)


def decode_bitmap32(data: bytes | memoryview, start: int = 0) -> tuple[np.ndarray, int]:
    """The ascending uint32 values of the portable 32-bit bitmap at ``start``, and the offset just after it."""
    buf = memoryview(data)
    cookie = _uint(buf, start, 4)
    if cookie & 0xFFFF == SERIAL_COOKIE:
        count = (cookie >> 16) + 1
        flag_bytes = (count + 7) // 8
        if start + 4 + flag_bytes > len(buf):
            raise RoaringFormatError("truncated run flags")
        flags = np.frombuffer(buf, dtype=np.uint8, count=flag_bytes, offset=start + 4)
        runs = np.unpackbits(flags, bitorder="little")[:count].astype(bool)
        pos = start + 4 + flag_bytes
        has_offsets = count >= NO_OFFSET_THRESHOLD
    elif cookie == SERIAL_COOKIE_NO_RUNCONTAINER:
        count = _uint(buf, start + 4, 4)
        if count > 1 << 16:
            raise RoaringFormatError(f"{count} containers (at most 65536)")
        runs = np.zeros(count, dtype=bool)
        pos = start + 8
        has_offsets = True
    else:
        raise RoaringFormatError(f"unknown roaring cookie {cookie}")
    header = _u16(buf, pos, 2 * count).reshape(count, 2)
    keys = header[:, 0].astype(np.uint32)
    cardinalities = header[:, 1].astype(np.int64) + 1
    if count > 1 and (keys[1:] <= keys[:-1]).any():
        raise RoaringFormatError("container keys are not ascending")
    pos += 4 * count + (4 * count if has_offsets else 0)
    parts = []
    for i in range(count):
        if runs[i]:
            n_runs = _uint(buf, pos, 2)
            low = _run_values(_u16(buf, pos + 2, 2 * n_runs))
            pos += 2 + 4 * n_runs
        elif cardinalities[i] <= ARRAY_MAX_CARDINALITY:
            low = _u16(buf, pos, int(cardinalities[i]))
            if len(low) > 1 and (low[1:] <= low[:-1]).any():
                raise RoaringFormatError("array container values are not ascending")
            pos += 2 * len(low)
        else:
            if pos + BITMAP_BYTES > len(buf):
                raise RoaringFormatError("truncated bitmap container")
            bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8, count=BITMAP_BYTES, offset=pos), bitorder="little")
            low = np.flatnonzero(bits)
            pos += BITMAP_BYTES
        if len(low) != cardinalities[i]:
            raise RoaringFormatError(f"container {i} holds {len(low)} values, its header says {cardinalities[i]}")
        parts.append((np.uint32(keys[i]) << np.uint32(16)) | low.astype(np.uint32))
    values = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)
    return values, pos


def decode_bitmap64(data: bytes | memoryview, start: int = 0) -> tuple[np.ndarray, int]:
    """The ascending uint64 values of a portable 64-bit bitmap (64-bit bucket count, then per bucket a
    32-bit key and a 32-bit bitmap), and the offset just after it."""
    buf = memoryview(data)
    buckets = _uint(buf, start, 8)
    pos = start + 8
    parts = []
    previous = -1
    for _ in range(buckets):
        key = _uint(buf, pos, 4)
        if key <= previous:
            raise RoaringFormatError("bucket keys are not ascending")
        previous = key
        low, pos = decode_bitmap32(buf, pos + 4)
        parts.append((np.uint64(key) << np.uint64(32)) | low.astype(np.uint64))
    values = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    return values, pos


def _decode_native(buf: memoryview, pos: int) -> tuple[np.ndarray, int]:
    count = _uint(buf, pos, 4)
    pos += 4
    parts = []
    for key in range(count):
        size = _uint(buf, pos, 4)
        low = decode_bitmap32(buf[: pos + 4 + size], pos + 4)[0] if size else np.empty(0, np.uint32)
        parts.append((np.uint64(key) << np.uint64(32)) | low.astype(np.uint64))
        pos += 4 + size
    return (np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)), pos


def decode_roaring_bitmap_array(data: bytes | memoryview) -> np.ndarray:
    """The ascending uint64 values of a Delta RoaringBitmapArray (magic number, then the bitmap)."""
    buf = memoryview(data)
    magic = _uint(buf, 0, 4)
    if magic == PORTABLE_MAGIC:
        values, _ = decode_bitmap64(buf, 4)
        if (values >> np.uint64(63)).any():
            raise RoaringFormatError("a bucket key has its most significant bit set")
    elif magic == NATIVE_MAGIC:
        values, _ = _decode_native(buf, 4)
    else:
        raise RoaringFormatError(f"unexpected RoaringBitmapArray magic number {magic}")
    return values
