"""Per-file statistics: the Arrow type of parsed stats for a schema, and columnar parsing of the JSON.

Stats are keyed by physical column names (as Delta writes them under column mapping). Both functions take
the (logical, top-level) columns whose bounds and null counts are wanted: parsing fewer columns is much
cheaper, since the reader converts only the values it keeps.

What is corrupt and what is dropped: a stats string must be a JSON object. Text that is not JSON, JSON that is
not an object (``[1,2]``, ``123``, ``"s"``, ``null``, the empty string) and counts that are not counts
(numRecords or a nullCount below 0 or beyond int64) raise StatsParseError, which callers turn into a
CorruptLogError naming the table, version, log file and data file. Treating such stats as absent would read
the same rows, but they are the mark of a broken writer, and delta-kernel-rs (so deltalake) refuses to read the
table at all. A bound that the column's type cannot hold (a long beyond int64, a decimal beyond its precision
or scale, a float beyond double, NaN) is dropped: no bound is safe, a wrong one makes readers skip rows.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.delta.schema import DataType, PrimitiveType, StructField, StructType
from airflow_deltaberg.core.delta.stats import stats_template
from airflow_deltaberg.core.errors import StatsCountError, StatsParseError

_INTS = {"byte", "short", "integer", "long"}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: The fields of a stats object that are counts: below 0 or beyond int64 they are corrupt, not droppable.
_COUNT_FIELDS = ("numRecords", "nullCount")


def value_type(t: PrimitiveType) -> pa.DataType | None:
    """The Arrow type a column's stats (and its partition values) are read as; None for types without min/max."""
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
        return value_type(t)
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
        # flatten(): a child's values under a null struct are undefined (pyarrow leaves zeros there); readers of
        # the children (Iceberg metrics) would take them for bounds.
        present = arr.flatten() if arr.null_count else [arr.field(i) for i in range(arr.type.num_fields)]
        children = []
        for f in target:
            idx = arr.type.get_field_index(f.name)
            child = present[idx] if idx >= 0 else pa.nulls(len(arr), f.type)
            children.append(conform(child, f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=arr.is_null())
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(arr), target)


def parse_stats(stats: pa.Array, schema: StructType, columns: Sequence[str] | None = None) -> pa.StructArray:
    """Parse a column of stats JSON strings (nulls allowed) into ``stats_type(schema, columns)``.

    Raises StatsParseError, naming the row, for stats that are corrupt (see the module docstring)."""
    target = stats_type(schema, columns)
    n = len(stats)
    if n == 0:
        return pa.nulls(0, target)
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks()
    if stats.null_count == n:
        return pa.nulls(n, target)
    stats = _as_text(stats)
    present = stats.drop_null() if stats.null_count else stats
    _check_objects(present, stats)
    parse_type = _json_parse_type(target)
    parsed = _read_columnar(present, parse_type)
    if parsed is None:
        # Rare values the columnar reader refuses (e.g. NaN or Infinity float bounds, numbers beyond int64): parse
        # row by row, numbers as exact decimals (a float would move a decimal bound below or above its value), and
        # drop a bound that cannot be held rather than guess it.
        rows = []
        for i, text in enumerate(present.to_pylist()):
            try:
                value = json.loads(text, parse_float=Decimal)
            except ValueError as exc:
                raise StatsParseError(f"stats that are not JSON ({exc}): {text[:120]!r}", _row(stats, i)) from exc
            try:
                rows.append(_sanitize_stats(value, parse_type))
            except StatsCountError as exc:
                raise StatsParseError(f"stats whose {exc} (numRecords and nullCount are counts, 0 to 2^63-1): "
                                      f"{text[:120]!r}", _row(stats, i)) from exc
        parsed = _nulls_inherited(pa.array(rows, parse_type))
    result = conform(parsed, target)
    if stats.null_count:
        # Scatter the parsed rows back to their positions; files without stats get a null struct.
        valid = to_numpy(stats.is_valid())
        positions = np.cumsum(valid) - 1
        result = result.take(from_numpy(np.where(valid, positions, 0).astype(np.int64), mask=~valid))
    bad = negative_count(result)
    if bad is not None:
        row, what = bad
        raise StatsParseError(f"stats whose {what} is below 0 (a count): {stats[row].as_py()[:120]!r}", row)
    return result


def _as_text(stats: pa.Array) -> pa.Array:
    """The stats as a string column of valid UTF-8: binary and large columns (a checkpoint written with another
    type for ``add.stats``) are read as text; any other type, or bytes that are not UTF-8 (a commit line the log
    reader kept as it was), raise StatsParseError naming the row."""
    if not (pa.types.is_string(stats.type) or pa.types.is_large_string(stats.type) or pa.types.is_binary(stats.type)
            or pa.types.is_large_binary(stats.type)):
        first = int(np.flatnonzero(to_numpy(stats.is_valid()))[0])
        raise StatsParseError(f"stats that are not JSON text (a column of {stats.type}): {stats[first]}", first)
    try:
        text = stats if pa.types.is_string(stats.type) else stats.cast(pa.string())
        text.validate(full=True)  # a string column read from bytes may hold invalid UTF-8
        return text
    except pa.ArrowInvalid:
        raw = stats.view(pa.binary()) if pa.types.is_string(stats.type) else stats.cast(pa.large_binary())
        for i, value in enumerate(raw.to_pylist()):  # only to name the row at fault
            try:
                if value is not None:
                    value.decode()
            except UnicodeDecodeError as exc:
                raise StatsParseError(f"stats that are not UTF-8 text ({exc})", i) from exc
        raise


def _nulls_inherited(arr: pa.Array) -> pa.Array:
    """``arr`` with every struct's nulls carried down to its children: under a null struct (``"maxValues": 5``)
    pa.array leaves zeros in the children, which readers of a child would take for bounds."""
    return _rebuilt(arr, _nulls_inherited) if pa.types.is_struct(arr.type) else arr


def _rebuilt(arr: pa.StructArray, change: Callable[[pa.Array], pa.Array]) -> pa.StructArray:
    """A struct array with ``change`` applied to each child, the struct's nulls carried down to the children."""
    if not arr.type.num_fields:
        return arr
    children = arr.flatten() if arr.null_count else [arr.field(i) for i in range(arr.type.num_fields)]
    return pa.StructArray.from_arrays([change(c) for c in children], fields=list(arr.type),
                                      mask=arr.is_null() if arr.null_count else None)


def _row(stats: pa.Array, i: int) -> int:
    """The index in ``stats`` of the ``i``-th non-null value."""
    return int(np.flatnonzero(to_numpy(stats.is_valid()))[i]) if stats.null_count else i


def _check_objects(present: pa.Array, stats: pa.Array) -> None:
    """Raise StatsParseError for the first string that is not a JSON object. pyarrow's NDJSON reader must never
    see one: it crashes the process on a first line ``null``, and shifts rows on an empty line."""
    starts = pc.starts_with(present, "{")
    if starts.null_count == 0 and pc.all(starts).as_py():
        return
    for i in np.flatnonzero(~to_numpy(starts.fill_null(False))):
        text = present[int(i)].as_py()
        if text.lstrip().startswith("{"):
            continue  # leading whitespace: the reader skips it, and a bad object is caught like any other
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise StatsParseError(f"stats that are not JSON ({exc}): {text[:120]!r}", _row(stats, int(i))) from exc
        raise StatsParseError(f"stats that are JSON but not an object ({type(value).__name__}): {text[:120]!r}",
                              _row(stats, int(i)))


def _read_columnar(present: pa.Array, parse_type: pa.StructType) -> pa.StructArray | None:
    """The stats read column by column: the strings laid out like the first by the template decoder, the others
    by pyarrow's JSON reader (the same values either way); None when the reader refuses a value or reads a string
    as more than one row (two objects in one string, or a line break inside one)."""
    decoded = stats_template.decode(present, parse_type)
    if decoded is None:
        parsed = _read_json(present, parse_type)
    elif len(decoded[1]) == len(present):
        parsed = decoded[0]
    else:
        fast, rows = decoded
        rest = np.ones(len(present), dtype=bool)
        rest[rows] = False
        slow = _read_json(present.filter(from_numpy(rest)), parse_type)
        if slow is None:
            return None
        order = np.empty(len(present), dtype=np.int64)
        order[rows] = np.arange(len(rows))
        order[rest] = np.arange(len(rows), len(present))
        parsed = pa.concat_arrays([fast, slow]).take(from_numpy(order))
    if parsed is None:
        return None
    return pa.StructArray.from_arrays(
        [_holdable_bounds(parsed.field(i)) if f.name in _BOUND_FIELDS else parsed.field(i)
         for i, f in enumerate(parse_type)],
        fields=list(parse_type),
    )


def _read_json(present: pa.Array, parse_type: pa.StructType) -> pa.StructArray | None:
    """The stats read by pyarrow's JSON reader, or None when it refuses a value or reads a string as more than
    one row."""
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
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(present):
        return None
    return pa.StructArray.from_arrays([table.column(f.name).combine_chunks() for f in parse_type],
                                      fields=list(parse_type))


_BOUND_FIELDS = ("minValues", "maxValues")


def _holdable_bounds(arr: pa.Array) -> pa.Array:
    """Bounds as the columnar reader gave them, without those the row-by-row parser drops too: floats that are
    NaN or infinite (the reader takes bare NaN and Infinity), decimals beyond the column's precision (the reader
    stores 1234.5 in a decimal(5,2) when its digits fit before rescaling)."""
    if pa.types.is_struct(arr.type):
        return _rebuilt(arr, _holdable_bounds)
    keep = None
    if pa.types.is_floating(arr.type):
        keep = pc.is_finite(arr)
    elif pa.types.is_decimal(arr.type) and arr.type.precision < 38:
        limit = pa.scalar(Decimal(10) ** (arr.type.precision - arr.type.scale), pa.decimal128(38, arr.type.scale))
        keep = pc.less(pc.abs(arr.cast(pa.decimal128(38, arr.type.scale))), limit)
    if keep is None or pc.all(keep.fill_null(True)).as_py():
        return arr
    return pc.if_else(keep, arr, pa.scalar(None, arr.type))


def negative_count(stats: pa.StructArray) -> tuple[int, str] | None:
    """The first row of parsed stats (a ``stats_type``) with a numRecords or nullCount below 0, and which one."""
    for name in _COUNT_FIELDS:
        index = stats.type.get_field_index(name)
        if index < 0:
            continue
        for path, counts in _int_leaves(pc.struct_field(stats, [index]), (name,)):
            if counts.null_count == len(counts) or pc.min(counts).as_py() >= 0:
                continue
            row = int(np.flatnonzero(to_numpy(pc.less(counts, 0).fill_null(False)))[0])
            return row, f"{path[0]} of column {'.'.join(path[1:])}" if len(path) > 1 else path[0]
    return None


def _int_leaves(arr: pa.Array, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], pa.Array]]:
    if pa.types.is_struct(arr.type):
        for i, f in enumerate(arr.type):
            yield from _int_leaves(pc.struct_field(arr, [i]), (*path, f.name))
    elif pa.types.is_integer(arr.type):
        yield path, arr


def _ndjson_buffer(strings: pa.StringArray) -> pa.Buffer:
    """The strings one per line, as one buffer, without a Python object per string."""
    # joining each string with "" using "\n" appends a newline to each; the fresh array's data buffer
    # is then exactly the NDJSON payload.
    lines = pc.binary_join_element_wise(strings, "", "\n")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1)
    return lines.buffers()[2][: int(offsets[-1])]


def _sanitize_stats(value: Any, t: pa.StructType) -> dict[str, Any]:
    """A stats object as ``t`` wants it: counts checked (``StatsCountError``), bounds that do not fit dropped."""
    if not isinstance(value, dict):
        raise StatsCountError(f"value is a JSON {type(value).__name__}")  # _check_objects let no such row through
    out = {}
    for f in t:
        item = value.get(f.name)
        out[f.name] = _count(item, f.type, (f.name,)) if f.name in _COUNT_FIELDS else _sanitize(item, f.type)
    return out


def _count(value: Any, t: pa.DataType, path: tuple[str, ...]) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            return None
        return {f.name: _count(value.get(f.name), f.type, (*path, f.name)) for f in t}
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX:
        what = f"{path[0]} of column {'.'.join(path[1:])}" if len(path) > 1 else path[0]
        raise StatsCountError(f"{what} {value} is beyond int64")
    return _sanitize(value, t)


def _sanitize(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            return None
        return {f.name: _sanitize(value.get(f.name), f.type) for f in t}
    if pa.types.is_integer(t):
        if isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX:
            return value
        return None
    if pa.types.is_floating(t):
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) and math.isfinite(value):
            as_float = float(value)
            return as_float if math.isfinite(as_float) else None  # beyond double: no bound rather than infinity
        return None
    if pa.types.is_boolean(t):
        return value if isinstance(value, bool) else None
    if pa.types.is_string(t):
        return value if isinstance(value, str) else None
    if pa.types.is_decimal(t):
        if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
            return None
        return _decimal(value, t.precision, t.scale)
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


def _decimal(value: Any, precision: int, scale: int) -> Decimal | None:
    """The value as a decimal of the column's precision and scale, or None when it is not one exactly."""
    try:
        with localcontext() as context:
            context.prec = 80  # beyond decimal(38)'s digits: quantize must not round them
            exact = Decimal(str(value))
            scaled = exact.quantize(Decimal(1).scaleb(-scale))
    except InvalidOperation:
        return None
    if scaled != exact or len(scaled.as_tuple().digits) > precision:
        return None
    return scaled

# The protocol's checkpoint schema example names the null counts of stats_parsed "nullCounts"; Delta (and
# the per-file stats JSON) call them "nullCount". Read both.
STATS_STRUCT_ALIASES = {"nullCounts": "nullCount"}


def conform_stats(struct: pa.Array, target: pa.StructType) -> pa.Array:
    """A checkpoint's ``stats_parsed`` as ``target``: fields matched by name, missing ones null."""
    if pa.types.is_struct(struct.type) and any(f.name in STATS_STRUCT_ALIASES for f in struct.type):
        names = [STATS_STRUCT_ALIASES.get(f.name, f.name) for f in struct.type]
        if len(set(names)) == len(names):
            struct = pa.StructArray.from_arrays([struct.field(i) for i in range(len(names))], names=names,
                                                mask=struct.is_null())
    return conform(struct, target)
