"""Delta partition values: the string a file's ``partitionValues`` holds <-> the typed value (protocol, "Partition
Value Serialization"). Serialized one value at a time (a writer's partition of rows), parsed a column at a time
(the files of a table)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.delta.schema import PrimitiveType


def partition_strings(partition_values: pa.Array | pa.ChunkedArray, physical_name: str) -> pa.Array:
    """The serialized values of one partition column (``physical_name``, the key of the files' maps)."""
    if isinstance(partition_values, pa.ChunkedArray):
        partition_values = partition_values.combine_chunks()
    if not len(partition_values):
        return pa.array([], pa.string())
    same_layout = _lookup_in_same_layout(partition_values, physical_name)
    if same_layout is not None:
        return same_layout
    return pc.map_lookup(partition_values, physical_name, "first")


def _lookup_in_same_layout(maps: pa.MapArray, key: str) -> pa.Array | None:
    """``map_lookup(maps, key, "first")`` for maps that all hold ``key`` at the same position and nowhere before it
    (the files of one writer list the partition columns in one order), by position instead of a search in each
    map (~10x faster); None for other maps."""
    position = _same_layout_position(maps, key)
    if position is None:
        return None
    offsets = maps.offsets.to_numpy()
    if offsets[1] - offsets[0] == 1:
        return maps.items.slice(int(offsets[0]), len(maps))
    return maps.items.take(pa.array(offsets[:-1] + position))


def _same_layout_position(maps: pa.MapArray, key: str) -> int | None:
    """The position of ``key`` in every map when all maps hold it there and nowhere before it; None otherwise."""
    if maps.null_count:
        return None
    offsets = maps.offsets.to_numpy()
    counts = np.diff(offsets)
    width = int(counts[0])
    if width == 0 or (counts != width).any():
        return None
    keys = maps.keys
    leading = keys.slice(int(offsets[0]), width).to_pylist()
    if key not in leading:
        return None
    position = leading.index(key)
    # Every map's keys before and at the position must be those of the first map: the key is then first there.
    for ahead in range(position + 1):
        at = keys.take(pa.array(offsets[:-1] + ahead))
        if not pc.all(pc.equal(at, leading[ahead])).as_py() or at.null_count:
            return None
    return position


def rows_without_key(partition_values: pa.Array | pa.ChunkedArray, physical_name: str) -> np.ndarray:
    """Rows whose map (a file's partitionValues) does not hold ``physical_name`` at all (a null value held under
    the key is a null partition value, not a missing one); a null map lacks every key."""
    if isinstance(partition_values, pa.ChunkedArray):
        partition_values = partition_values.combine_chunks()
    if not len(partition_values) or _same_layout_position(partition_values, physical_name) is not None:
        return np.zeros(0, np.int64)  # every map holds the key at one position
    offsets = partition_values.offsets.to_numpy()
    hits = np.zeros(int(offsets[-1]) + 1, np.int64)
    keys = partition_values.keys
    start = int(offsets[0])
    equal = pc.equal(keys.slice(start, int(offsets[-1]) - start), physical_name).fill_null(False)
    hits[start + 1:int(offsets[-1]) + 1] = np.cumsum(equal.to_numpy(zero_copy_only=False))
    held = hits[offsets[1:]] - hits[offsets[:-1]]
    if partition_values.null_count:
        held[~np.asarray(partition_values.is_valid().to_numpy(zero_copy_only=False), bool)] = 0
    return np.flatnonzero(held == 0)


def partition_keys_and_rows(partition_values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """Every key of every map (a file's partitionValues), and the row each belongs to."""
    if isinstance(partition_values, pa.ChunkedArray):
        partition_values = partition_values.combine_chunks()
    if not len(partition_values):
        return pa.array([], pa.string()), np.zeros(0, np.int64)
    offsets = partition_values.offsets.to_numpy()
    start, end = int(offsets[0]), int(offsets[-1])
    keys = partition_values.keys.slice(start, end - start)
    rows = np.repeat(np.arange(len(partition_values), dtype=np.int64), np.diff(offsets))
    return keys, rows


def serialize_partition_value(value: Any, t: PrimitiveType) -> str | None:
    """A partition value as the protocol's "Partition Value Serialization" writes it (None for null).

    Timestamps are written in the recommended form: ISO8601 adjusted to UTC (``...T...Z``)."""
    if value is None:
        return None
    name = t.name
    if name == "boolean":
        return "true" if value else "false"
    if name == "timestamp":
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if name == "timestamp_ntz":
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if name == "date":
        return value.isoformat()
    if name in ("float", "double"):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"  # as Java's Double.toString, which readers parse
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _parse_timestamps(values: pa.Array, utc: bool) -> pa.Array:
    """Delta's partition timestamp text: 'YYYY-MM-DD HH:MM:SS[.ffffff]' or ISO 8601 with Z (UTC)."""
    out = []
    for v in values.to_pylist():
        if v is None:
            out.append(None)
            continue
        parsed = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
        out.append(parsed)
    return pa.array(out, pa.timestamp("us", "UTC" if utc else None))


def parse_partition_values(strings: pa.Array, target: pa.DataType) -> pa.Array:
    """Typed partition values (``target``: the Arrow type of the column's values) from Delta's serialization;
    the empty string and null mean null. Raises ValueError (or pyarrow's ArrowInvalid) for a value that does not
    parse."""
    strings = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)
    if pa.types.is_timestamp(target):
        # Values without an offset were written in the writer's zone; like Delta on Spark readers with a UTC
        # session we read them as UTC.
        return _parse_timestamps(strings, utc=target.tz is not None)
    if pa.types.is_boolean(target):
        lowered = pc.utf8_lower(strings)
        bad = pc.and_(strings.is_valid(), pc.invert(pc.is_in(lowered, pa.array(["true", "false"]))))
        if pc.any(bad).as_py():
            raise ValueError("not true/false")
        return pc.equal(lowered, "true")
    if pa.types.is_binary(target):
        return pa.array([None if v is None else v.encode("latin-1") for v in strings.to_pylist()], pa.binary())
    return strings.cast(target)
