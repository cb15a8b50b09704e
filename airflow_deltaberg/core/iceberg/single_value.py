"""Iceberg binary single-value serialization (spec Appendix D), a column at a time.

These are the bytes stored in manifest lower/upper bounds and in partition field summaries.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from airflow_deltaberg.core.iceberg.arrow_values import (
    as_binary,
    bool_bytes,
    decimal_unscaled_le,
    fixed_bytes,
    float_bytes,
    int_values,
    validity,
)

_INT32_RANGE = (-(2**31), 2**31 - 1)


def serialize_bounds(arr: pa.Array | pa.ChunkedArray, iceberg_type: IcebergType) -> pa.Array:
    """The single-value serialization of every value of ``arr`` read as ``iceberg_type``; nulls stay null.

    Types of one width come back as ``fixed_size_binary`` (a view of one byte matrix, which the manifest
    encoder copies as a block), the others as ``binary``.

    int/date: 4-byte little-endian; long/time/timestamp(tz): 8-byte little-endian (microseconds);
    float/double: IEEE 754 little-endian; string: UTF-8 bytes; binary/fixed/uuid: the bytes;
    boolean: one byte 0x00/0x01; decimal: unscaled value, big-endian two's complement, fewest bytes.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    valid = validity(arr)
    t = iceberg_type
    if isinstance(t, (StringType, BinaryType)):
        return as_binary(arr)
    if isinstance(t, DecimalType):
        return _decimal_minimal(arr, t, valid)
    if isinstance(t, BooleanType):
        mat = bool_bytes(arr)
    elif isinstance(t, (IntegerType, DateType)):
        values = int_values(arr)
        live = values if valid is None else values[valid]
        if live.size and (live.min() < _INT32_RANGE[0] or live.max() > _INT32_RANGE[1]):
            raise ValueError(f"value out of range for {t}")
        mat = values.astype("<i4").view(np.uint8).reshape(-1, 4)
    elif isinstance(t, (LongType, TimeType, TimestampType, TimestamptzType)):
        mat = int_values(arr).astype("<i8", copy=False).view(np.uint8).reshape(-1, 8)
    elif isinstance(t, FloatType):
        mat = float_bytes(arr, 4)
    elif isinstance(t, DoubleType):
        mat = float_bytes(arr, 8)
    elif isinstance(t, UUIDType):
        mat = fixed_bytes(arr, 16)
    elif isinstance(t, FixedType):
        mat = fixed_bytes(arr, len(t))
    else:
        raise TypeError(f"no single-value serialization for {t}")
    n, width = mat.shape
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), n, [_bitmap(valid), pa.py_buffer(np.ascontiguousarray(mat).reshape(-1))],
        null_count=0 if valid is None else int(n - valid.sum()),
    )


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _binary(data: np.ndarray, lens: np.ndarray, valid: np.ndarray | None) -> pa.BinaryArray:
    n = len(lens)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    null_count = 0 if valid is None else int(n - valid.sum())
    return pa.BinaryArray.from_buffers(
        pa.binary(), n, [_bitmap(valid), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=null_count
    )


def _decimal_minimal(arr: pa.Array, t: DecimalType, valid: np.ndarray | None) -> pa.BinaryArray:
    big_endian = decimal_unscaled_le(arr, t.precision, t.scale)[:, ::-1]
    n = len(arr)
    sign = big_endian[:, 0] >> 7
    fill = (sign * 0xFF).astype(np.uint8)
    is_fill = big_endian == fill[:, None]
    all_fill = is_fill.all(axis=1)
    # Leading bytes that only repeat the sign can go, as long as the first kept byte still carries the sign.
    lead = np.where(all_fill, 15, np.argmin(is_fill, axis=1))
    first = big_endian[np.arange(n), lead]
    start = lead - (((first >> 7) != sign) & ~all_fill)
    lens = 16 - start
    mask = np.arange(16) >= start[:, None]
    if valid is not None:
        mask &= valid[:, None]
        lens = np.where(valid, lens, 0)
    return _binary(big_endian[mask], lens, valid)
