"""Numpy views of Arrow columns in Iceberg's physical representation (no per-row Python).

Values under null slots are whatever the buffers hold: callers mask them with ``validity``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_deltaberg.core.iceberg.avro.avro_encode import binary_parts


def validity(arr: pa.Array) -> np.ndarray | None:
    """True where a value is present; None when the column has no nulls."""
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)


def _fixed_width_view(arr: pa.Array, dtype: np.dtype) -> np.ndarray:
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return np.zeros(n, dtype)
    return np.frombuffer(buf, dtype, count=arr.offset + n)[arr.offset :]


def int_values(arr: pa.Array) -> np.ndarray:
    """Ints, dates (days), times and timestamps (microseconds) as signed numpy ints of their own width."""
    t = arr.type
    if pa.types.is_timestamp(t) and t.unit != "us":
        arr = arr.cast(pa.timestamp("us", t.tz))
    elif pa.types.is_time(t) and not (pa.types.is_time64(t) and t.unit == "us"):
        arr = arr.cast(pa.time64("us"))
    elif pa.types.is_date64(t):
        arr = arr.cast(pa.date32())
    elif pa.types.is_boolean(t):
        return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), np.int32)
    t = arr.type
    if pa.types.is_integer(t):
        kind = "i" if pa.types.is_signed_integer(t) else "u"
    elif pa.types.is_date32(t) or pa.types.is_time64(t) or pa.types.is_timestamp(t):
        kind = "i"
    else:
        raise TypeError(f"expected an integer, date, time or timestamp column, got {t}")
    values = _fixed_width_view(arr, np.dtype(f"<{kind}{t.bit_width // 8}"))
    if kind == "u":
        values = values.astype(np.int64 if t.bit_width >= 32 else np.int32)
    return values


def float_bytes(arr: pa.Array, width: int) -> np.ndarray:
    """(n, width) little-endian IEEE 754 bytes of a float (4) or double (8) column."""
    target = pa.float32() if width == 4 else pa.float64()
    if arr.type != target:
        arr = arr.cast(target)
    values = _fixed_width_view(arr, np.dtype(f"<f{width}"))
    return values.view(np.uint8).reshape(len(arr), width)


def bool_bytes(arr: pa.Array) -> np.ndarray:
    """(n, 1) bytes 0x00 / 0x01."""
    values = np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), bool)
    return values.view(np.uint8).reshape(-1, 1)


def as_binary(arr: pa.Array) -> pa.Array:
    """A string/binary-like column as ``binary`` (UTF-8 bytes for strings), nulls kept."""
    t = arr.type
    if pa.types.is_binary(t):
        return arr
    if pa.types.is_string(t):
        return arr.view(pa.binary())
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return arr.cast(pa.string()).view(pa.binary())
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return arr.cast(pa.binary())
    if isinstance(t, pa.BaseExtensionType):
        return as_binary(arr.storage)
    raise TypeError(f"expected a string or binary column, got {t}")


def fixed_bytes(arr: pa.Array, width: int) -> np.ndarray:
    """(n, width) bytes of a fixed-size binary column (fixed(L), uuid)."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    n = len(arr)
    if pa.types.is_fixed_size_binary(arr.type) and arr.type.byte_width == width:
        buf = arr.buffers()[1]
        if n == 0 or buf is None:
            return np.zeros((n, width), np.uint8)
        raw = np.frombuffer(buf, np.uint8, count=(arr.offset + n) * width)[arr.offset * width :]
        return raw.reshape(n, width)
    offsets, data = binary_parts(as_binary(arr))
    lens = np.diff(offsets)
    valid = validity(arr)
    if np.any((lens if valid is None else lens[valid]) != width):
        raise ValueError(f"expected values of {width} bytes")
    idx = offsets[:-1, None] + np.arange(width)
    raw = np.frombuffer(data, np.uint8)
    if raw.size == 0:
        return np.zeros((n, width), np.uint8)
    return raw[np.minimum(idx, raw.size - 1)]


def decimal_unscaled_le(arr: pa.Array, precision: int, scale: int) -> np.ndarray:
    """(n, 16) little-endian two's complement unscaled values, rescaled to ``scale``."""
    target = pa.decimal128(precision, scale)
    if arr.type != target:
        arr = arr.cast(target)
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return np.zeros((n, 16), np.uint8)
    raw = np.frombuffer(buf, np.uint8, count=(arr.offset + n) * 16)[arr.offset * 16 :]
    return raw.reshape(n, 16)


def decimal_required_bytes(precision: int) -> int:
    """Bytes of the Avro fixed that holds any unscaled value of ``precision`` digits."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size
