"""Per-file statistics: the Arrow type of parsed stats for a schema, and columnar parsing of the JSON.

Stats are keyed by physical column names (as Delta writes them under column mapping). Both functions take
the (logical, top-level) columns whose bounds and null counts are wanted: parsing fewer columns is much
cheaper, since the reader converts only the values it keeps.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.delta.schema import DataType, PrimitiveType, StructField, StructType

_INTS = {"byte", "short", "integer", "long"}


class StatsParseError(ValueError):
    """A stats string that is not JSON; ``row`` is its index in the array given to ``parse_stats``, ``path`` the
    data file of its add once a caller knows it. Callers that know where the row comes from turn it into a
    CorruptLogError naming the table, version and file."""

    def __init__(self, message: str, row: int, path: str | None = None) -> None:
        super().__init__(message)
        self.row = row
        self.path = path

    def moved(self, offset: int) -> StatsParseError:
        """The same error for a row ``offset`` further on (the array was a slice starting there)."""
        return StatsParseError(str(self), self.row + offset, self.path)

    def of(self, path: str | None) -> StatsParseError:
        """The same error, naming the data file whose add holds the stats."""
        return StatsParseError(str(self), self.row, path)

    def describe(self) -> str:
        return f"the add of {self.path} has {self}"


def _value_type(t: PrimitiveType) -> pa.DataType | None:
    name = t.name
    if name in _INTS:
        return pa.int64()
    if name in ("float", "double"):
        return pa.float64()
    if name == "string":
        return pa.string()
    if name == "boolean":
        return pa.bool_()
    if name == "date":
        return pa.date32()
    if name == "timestamp":
        return pa.timestamp("us", "UTC")
    if name == "timestamp_ntz":
        return pa.timestamp("us")
    if t.is_decimal:
        precision, scale = t.precision_scale
        if precision <= 38:
            return pa.decimal128(precision, scale)
    return None  # binary, variant, void, geospatial: no min/max in Delta stats


def _bounds_type(schema_fields: Sequence[StructField]) -> pa.StructType:
    fields = []
    for f in schema_fields:
        t = _bounds_field_type(f.type)
        if t is not None:
            fields.append(pa.field(f.physical_name, t))
    return pa.struct(fields)


def _bounds_field_type(t: DataType) -> pa.DataType | None:
    if isinstance(t, StructType):
        inner = _bounds_type(t.fields)
        return inner if inner.num_fields else None
    if isinstance(t, PrimitiveType):
        return _value_type(t)
    return None


def _null_count_type(schema_fields: Sequence[StructField]) -> pa.StructType:
    fields = []
    for f in schema_fields:
        if isinstance(f.type, StructType):
            fields.append(pa.field(f.physical_name, _null_count_type(f.type.fields)))
        else:
            fields.append(pa.field(f.physical_name, pa.int64()))
    return pa.struct(fields)


def stats_type(schema: StructType, columns: Sequence[str] | None = None) -> pa.StructType:
    """The Arrow type of a parsed ``stats`` value for a table schema: numRecords, tightBounds, and minValues,
    maxValues and nullCount for every column, or only for ``columns`` (logical top-level names; ``[]`` for
    none). Raises KeyError for a name that is not a column."""
    fields = schema.fields if columns is None else [schema.field(name) for name in dict.fromkeys(columns)]
    bounds = _bounds_type(fields)
    return pa.struct(
        [
            ("numRecords", pa.int64()),
            ("minValues", bounds),
            ("maxValues", bounds),
            ("nullCount", _null_count_type(fields)),
            ("tightBounds", pa.bool_()),
        ]
    )


def _json_parse_type(t: pa.DataType) -> pa.DataType:
    """The type pyarrow's JSON reader can produce on the way to ``t`` (dates arrive as strings)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_parse_type(f.type)) for f in t])
    if pa.types.is_date(t):
        return pa.string()
    return t


def conform(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast ``arr`` to ``target``, matching struct fields by name (missing ones become null)."""
    if arr.type == target:
        return arr
    if pa.types.is_struct(target):
        if not pa.types.is_struct(arr.type):
            return pa.nulls(len(arr), target)
        children = []
        for f in target:
            idx = arr.type.get_field_index(f.name)
            child = arr.field(idx) if idx >= 0 else pa.nulls(len(arr), f.type)
            children.append(conform(child, f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=arr.is_null())
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(arr), target)


def parse_stats(stats: pa.Array, schema: StructType, columns: Sequence[str] | None = None) -> pa.StructArray:
    """Parse a column of stats JSON strings (nulls allowed) into ``stats_type(schema, columns)``."""
    target = stats_type(schema, columns)
    n = len(stats)
    if n == 0:
        return pa.nulls(0, target)
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks()
    if stats.null_count == n:
        return pa.nulls(n, target)
    present = stats.drop_null() if stats.null_count else stats
    parse_type = _json_parse_type(target)
    try:
        table = pj.read_json(
            pa.BufferReader(_ndjson_buffer(present)),
            # Blocks of 4 MB keep the reader's threads evenly busy on a chunk of a few tens of MB (16 MB: 20%
            # slower on 2 cores).
            read_options=pj.ReadOptions(block_size=4 << 20),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema(list(parse_type)), unexpected_field_behavior="ignore"
            ),
        )
        parsed = pa.StructArray.from_arrays(
            [table.column(f.name).combine_chunks() for f in parse_type], fields=list(parse_type)
        )
    except pa.ArrowInvalid:
        # Rare values the columnar reader refuses (e.g. NaN or Infinity float bounds): parse row by row, numbers
        # as exact decimals (a float would move a decimal bound below or above its value), and drop such a float
        # bound rather than guess it. Text that is not JSON at all raises StatsParseError naming its row.
        rows = []
        for i, text in enumerate(present.to_pylist()):
            try:
                value = json.loads(text, parse_float=Decimal)
            except ValueError as exc:
                row = int(np.flatnonzero(to_numpy(stats.is_valid()))[i]) if stats.null_count else i
                raise StatsParseError(f"stats that are not JSON ({exc}): {text[:120]!r}", row) from exc
            rows.append(_sanitize(value, parse_type))
        parsed = pa.array(rows, parse_type)
    result = conform(parsed, target)
    if stats.null_count:
        # Scatter the parsed rows back to their positions; files without stats get a null struct.
        valid = to_numpy(stats.is_valid())
        positions = np.cumsum(valid) - 1
        result = result.take(from_numpy(np.where(valid, positions, 0).astype(np.int64), mask=~valid))
    return result


def _ndjson_buffer(strings: pa.StringArray) -> pa.Buffer:
    """The strings one per line, as one buffer, without a Python object per string."""
    # joining each string with "" using "\n" appends a newline to each; the fresh array's data buffer
    # is then exactly the NDJSON payload.
    lines = pc.binary_join_element_wise(strings, "", "\n")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1)
    return lines.buffers()[2][: int(offsets[-1])]


def _sanitize(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            return None
        return {f.name: _sanitize(value.get(f.name), f.type) for f in t}
    if pa.types.is_integer(t):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if pa.types.is_floating(t):
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        return None
    if pa.types.is_boolean(t):
        return value if isinstance(value, bool) else None
    if pa.types.is_string(t):
        return value if isinstance(value, str) else None
    if pa.types.is_decimal(t):
        if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
            return None
        return _decimal(value)
    if pa.types.is_timestamp(t):
        return _timestamp(value, utc=t.tz is not None)
    return None


def _timestamp(value: Any, *, utc: bool) -> dt.datetime | None:
    """A timestamp stat as Delta writes it (ISO 8601; with an offset for timestamp, without for timestamp_ntz)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if utc:
        return parsed.astimezone(dt.timezone.utc) if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.replace(tzinfo=None) if parsed.tzinfo is None else None


def _decimal(value: Any) -> Any:
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None

