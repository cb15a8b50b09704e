"""Delta per-file stats -> Iceberg column metrics (null counts, lower and upper bounds), kept true.

Bounds must hold for every row, or Iceberg readers skip files that match. Delta truncates timestamps to
milliseconds and strings to a prefix, so: timestamp maxima are rounded up to the last microsecond of
their millisecond, and string maxima that may have been cut are dropped (a cut prefix is below the real
maximum). Lower bounds survive both truncations as they are. Float bounds at zero cover both zeros.
Variant and geospatial columns get null counts only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg import types as it
from pyiceberg.schema import Schema

from airflow_deltaberg.core.delta.schema import PrimitiveType, StructType
from airflow_deltaberg.core.iceberg.partition import arrow_type
from airflow_deltaberg.core.iceberg.schema import VariantType
from airflow_deltaberg.core.iceberg.single_value import serialize_bounds

#: Types without Delta min/max stats to carry over: a variant has no order (Iceberg's variant bounds are per
#: shredded path), and Iceberg's geospatial bounds are bounding boxes Delta does not keep. Null counts stay.
NO_BOUNDS_TYPES = (VariantType, it.GeometryType, it.GeographyType)
STRING_PREFIX_PROPERTY = "delta.dataSkippingStringPrefixLength"
DEFAULT_STRING_PREFIX = 32


@dataclass(frozen=True)
class StatColumn:
    """A primitive column outside lists and maps: where its stats are and its Iceberg field."""

    physical_path: tuple[str, ...]
    field_id: int
    iceberg_type: it.IcebergType


def stat_columns(delta_schema: StructType, schema: Schema, mapped: bool) -> list[StatColumn]:
    out: list[StatColumn] = []

    def walk(struct: StructType, physical: tuple[str, ...], logical: tuple[str, ...]) -> Iterator[StatColumn]:
        for f in struct.fields:
            p = (*physical, f.physical_name if mapped else f.name)
            q = (*logical, f.name)
            if isinstance(f.type, StructType):
                yield from walk(f.type, p, q)
            elif isinstance(f.type, PrimitiveType):
                field = schema.find_field(".".join(q))
                yield StatColumn(p, field.field_id, field.field_type)

    out.extend(walk(delta_schema, (), ()))
    return out


def _dig(struct: pa.StructArray, path: tuple[str, ...]) -> pa.Array | None:
    arr: pa.Array = struct
    for name in path:
        if not pa.types.is_struct(arr.type) or arr.type.get_field_index(name) < 0:
            return None
        arr = arr.field(name)
    return arr


def keyed_columns(keys: list[int], columns: list[pa.Array], n: int, value_type: pa.DataType) -> pa.Array:
    """Per row, the values of ``columns`` that are not null, keyed by field id.

    The map is a struct with one child per key, named by the key, null where the row has no value: building
    it copies nothing, and the manifest encoder writes it as an Avro map a column at a time
    (``avro_iceberg``). Without columns it is a column of empty lists (Parquet cannot store an empty struct).
    """
    if not columns:
        return _empty_lists(n, pa.list_(pa.struct([("key", pa.int32()), ("value", value_type)])))
    return pa.StructArray.from_arrays(columns, names=[str(k) for k in keys])


def _empty_lists(n: int, list_type: pa.DataType) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], list_type.value_type),
                                    type=list_type)


@dataclass(frozen=True)
class FileMetrics:
    null_value_counts: pa.Array
    lower_bounds: pa.Array
    upper_bounds: pa.Array


def _round_up_millis(values: pa.Array) -> pa.Array:
    arr = np.asarray(values.cast(pa.int64()).fill_null(0))
    adjusted = np.where(arr % 1000 == 0, arr + 999, arr)
    return pa.array(adjusted, pa.int64(), mask=np.asarray(values.is_null())).cast(values.type)


def file_metrics(stats: pa.StructArray, columns: list[StatColumn], string_prefix: int) -> FileMetrics:
    """Iceberg metrics of each file from its parsed Delta stats (nulls where Delta has none)."""
    n = len(stats)
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks()
    tight = stats.field("tightBounds").fill_null(True) if n else pa.array([], pa.bool_())
    num_records = stats.field("numRecords") if n else pa.array([], pa.int64())
    keys_nc, nulls, keys_lo, lows, keys_hi, highs = [], [], [], [], [], []
    for col in columns:
        null_count = _dig(stats.field("nullCount"), col.physical_path) if n else None
        if null_count is not None and pa.types.is_integer(null_count.type):
            # With wide bounds (deletion vectors) only 0 and numRecords carry information.
            informative = pc.or_(pc.equal(null_count, 0), pc.equal(null_count, num_records))
            null_count = pc.if_else(pc.or_(tight, informative), null_count, pa.scalar(None, pa.int64()))
            keys_nc.append(col.field_id)
            nulls.append(null_count)
        if isinstance(col.iceberg_type, NO_BOUNDS_TYPES):
            continue
        target = arrow_type(col.iceberg_type)
        low = _dig(stats.field("minValues"), col.physical_path) if n else None
        high = _dig(stats.field("maxValues"), col.physical_path) if n else None
        if low is not None:
            low = _cast(low, target)
            if isinstance(col.iceberg_type, (it.FloatType, it.DoubleType)):
                low = _zero_as(low, -0.0)
            keys_lo.append(col.field_id)
            lows.append(serialize_bounds(low, col.iceberg_type))
        if high is not None:
            high = _cast(high, target)
            if isinstance(col.iceberg_type, (it.FloatType, it.DoubleType)):
                high = _zero_as(high, 0.0)
            if isinstance(col.iceberg_type, (it.TimestampType, it.TimestamptzType)):
                high = _round_up_millis(high)
            if isinstance(col.iceberg_type, it.StringType):
                maybe_cut = pc.greater_equal(pc.utf8_length(high), string_prefix)
                high = pc.if_else(maybe_cut, pa.scalar(None, pa.string()), high)
            keys_hi.append(col.field_id)
            highs.append(serialize_bounds(high, col.iceberg_type))
    return FileMetrics(
        keyed_columns(keys_nc, nulls, n, pa.int64()),
        keyed_columns(keys_lo, lows, n, pa.binary()),
        keyed_columns(keys_hi, highs, n, pa.binary()),
    )


def _zero_as(values: pa.Array, zero: float) -> pa.Array:
    """Bounds at zero widened to cover both signs: Iceberg orders -0.0 before 0.0 (Java's total order) while
    SQL engines treat them as equal, so a file with only -0.0 must not be pruned for ``x = 0.0``, nor one with
    only 0.0 for ``x = -0.0``; Delta's stats do not say which zero a file holds."""
    arr = np.asarray(values.fill_null(0.0))
    widened = np.where(arr == 0, np.asarray(zero, arr.dtype), arr)
    return pa.array(widened, values.type, mask=np.asarray(values.is_null()))


def _cast(values: pa.Array, target: pa.DataType) -> pa.Array:
    if values.type == target:
        return values
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # A stat that does not fit the current type (e.g. before a type change) is dropped, not guessed.
        return pa.nulls(len(values), target)
