"""A data file's add action (its Delta stats, its size) checked against the file itself.

Delta readers, and Iceberg readers through the bounds the converter writes, skip a file whose stats exclude a
predicate: stats that do not cover the file's data lose rows. This module compares one file's parsed stats
(numRecords, and per primitive column outside lists and maps: minValues, maxValues, nullCount) with its footer
(rows; the smallest minimum, largest maximum and summed null counts of its row groups) and says where they
disagree; where the footer has no statistics for a column (Photon writes none; INT96 timestamps have no usable
order), with the column's values when the caller lets it read them. ``size_mismatch`` compares the logged size
with the file's (Iceberg readers seek the footer from it). ``validate --data-checks`` and ``convert
--verify-stats`` both use them.

What counts as covering, by Delta's own rules (PROTOCOL.md, "Per-file Statistics"):

* numRecords must equal the file's rows; nullCount must equal the footer's null count (with tight bounds; with
  wide bounds only 0 and numRecords say something, and are checked as such);
* minValues must not be above the footer's minimum, maxValues not below its maximum. Timestamps: Delta
  truncates both down to milliseconds, so a maximum equal to the footer's truncated to milliseconds covers.
  Strings: Delta cuts a minimum to a prefix (still not above) and a maximum to a prefix plus a tie-breaker
  character (U+007F; U+FFFD in older versions); a maximum that is such a cut of the footer's (ends with a
  tie-breaker, or is at least the table's prefix length) covers. Footer strings of 16 bytes or more may
  themselves be cut by their writer (parquet-rs: to 64 bytes, the maximum's last character incremented): a
  Delta value agreeing with such a prefix is not flagged. Floats compare at the column's precision (a float
  stat printed as ``3.14`` is the float32 3.1400001); NaN and infinite values say nothing. Decimals, dates,
  integers, booleans compare exactly;
* a column the file does not have (added to the schema after the file was written) is null in every row: its
  stats may give no bounds, and a null count below the rows (0 with wide bounds) is wrong;
* skipped, never flagged: partition columns (not in the file), columns whose file type cannot be compared with
  the Delta type (``file_types`` reports those), columns without footer statistics when no values may be read,
  and the bounds and null counts of a file with a deletion vector (Delta's stats then describe the rows not
  deleted, the file all of them; its numRecords is still the file's rows), except bounds of a column the file
  does not have.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.delta.file_checks.bounded_read import used_values
from airflow_deltaberg.core.delta.file_checks.file_types import logical_type
from airflow_deltaberg.core.delta.schema import PrimitiveType, StructField, StructType

#: Delta's tie-breaker after a cut string maximum: U+007F (Delta on Spark 4.x), U+FFFD (earlier versions); U+FFFF
#: and U+10FFFF by other writers.
TIE_BREAKERS = "\x7f\ufffd\uffff\U0010ffff"
#: Footer strings at least this long (UTF-8 bytes) may have been cut by the parquet writer.
FOOTER_CUT_BYTES = 16
DEFAULT_STRING_PREFIX = 32
STRING_PREFIX_PROPERTY = "delta.dataSkippingStringPrefixLength"

_INTS = {"byte", "short", "integer", "long"}
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH = dt.datetime(1970, 1, 1)
_UNIT_MICROS = {"milliseconds": (1000, 1), "microseconds": (1, 1), "nanoseconds": (1, 1000)}


@dataclass(frozen=True)
class StatsColumn:
    """A primitive column outside lists and maps, as Delta keeps stats for it."""

    name: str  # the logical path, dotted, for messages
    physical: tuple[str, ...]  # the keys of its stats, and its names in the data files
    field_ids: tuple[int | None, ...]  # id mode: its column ids along the path (the files' field ids), else None
    type: PrimitiveType


def stats_columns(schema: StructType, column_mapping_mode: str,
                  partition_columns: Sequence[str] = ()) -> list[StatsColumn]:
    """The columns whose stats a data file can be checked for (partition columns are not in the files)."""
    mapped = column_mapping_mode in ("name", "id")
    out: list[StatsColumn] = []

    def walk(fields: Sequence[StructField], logical: tuple[str, ...], physical: tuple[str, ...],
             ids: tuple[int | None, ...]) -> None:
        for f in fields:
            if not logical and f.name in partition_columns:
                continue
            path = (*logical, f.name)
            names = (*physical, f.physical_name if mapped else f.name)
            # Only id mode resolves file columns by field id; name mode and no mapping resolve them by name.
            field_ids = (*ids, f.column_mapping_id if column_mapping_mode == "id" else None)
            if isinstance(f.type, StructType):
                walk(f.type.fields, path, names, field_ids)
            elif isinstance(f.type, PrimitiveType):
                out.append(StatsColumn(".".join(path), names, field_ids, f.type))

    walk(schema.fields, (), (), ())
    return out


def string_prefix_length(configuration: Mapping[str, str]) -> int:
    """The length Delta cuts string stats to (the table property, else Delta's default 32)."""
    try:
        return int(configuration.get(STRING_PREFIX_PROPERTY, DEFAULT_STRING_PREFIX))
    except ValueError:
        return DEFAULT_STRING_PREFIX


@dataclass
class _FooterColumn:
    """One column's statistics over every row group of a file."""

    nulls: int | None  # None: a row group has no null count
    low: Any = None  # the smallest minimum, as compared (None: unknown)
    high: Any = None
    bounds_known: bool = True  # False: a row group with values has no min/max
    float32: bool = False  # stored as FLOAT: Delta's stats compare at that precision (a column widened to double
    # keeps its float files, whose stats were printed from floats)


#: Reads top-level columns of the file by their names in it, in slices of rows (``FileFooter.read_columns``).
ColumnReader = Callable[[Sequence[str]], Iterable[pa.Table]]


def size_mismatch(size: int | None, footer: Any) -> str | None:
    """Where a logged ``add.size`` differs from the size of the file (``footer``: a FileFooter)."""
    if size is None or size == footer.size:
        return None
    return f"size {size} but the file has {footer.size} bytes"


def stats_mismatches(stats: Mapping[str, Any] | None, footer: pq.FileMetaData, columns: Sequence[StatsColumn], *,
                     has_deletion_vector: bool = False, string_prefix: int = DEFAULT_STRING_PREFIX,
                     read_columns: ColumnReader | None = None,
                     deleted_rows: Callable[[], np.ndarray] | None = None) -> list[str]:
    """Where one file's parsed Delta stats (a row of ``stats_parsed``, as ``to_pylist`` gives it) do not cover the
    data its parquet ``footer`` describes: one message per disagreement, empty when none (or no stats).
    ``read_columns``: how to read the values of columns the footer has no statistics for (else they are skipped).

    A file with a deletion vector: its stats describe its rows before or after the deletes (``tightBounds``), so
    only the bounds are checked, against the rows it keeps; ``deleted_rows`` gives the deleted row indexes (without
    it, or ``read_columns``, such a file's columns are not checked). The footer's bounds suffice when they lie
    within the stats' (the kept rows lie within them too); otherwise the kept rows' values are read."""
    if not stats:
        return []
    problems = []
    num_records = stats.get("numRecords")
    if num_records is not None and num_records != footer.num_rows:
        problems.append(f"numRecords {num_records} but the file has {footer.num_rows} rows")
    tight = stats.get("tightBounds") is not False
    index = _footer_index(footer)
    if index is None:
        return problems
    by_values: list[tuple[StatsColumn, int, Any, Any, Any]] = []
    kept_by_values: list[tuple[StatsColumn, int, Any, Any]] = []
    for column in columns:
        low, high, nulls = (_dig(stats.get(key), column.physical) for key in ("minValues", "maxValues", "nullCount"))
        if low is None and high is None and nulls is None:
            continue
        leaf = index.find(column)
        if leaf is None:
            if not index.has_node(column):
                problems.extend(_absent_column_problem(column, low, high, nulls, footer.num_rows, tight,
                                                       has_deletion_vector))
            continue
        if has_deletion_vector:
            if deleted_rows is not None and read_columns is not None and (low is not None or high is not None):
                found = _footer_column(footer, leaf, column.type)
                if found is None or not found.bounds_known or any(
                        _bound_problems(column, low, high, found, string_prefix)):
                    kept_by_values.append((column, leaf, low, high))
            continue
        found = _footer_column(footer, leaf, column.type)
        unknown = found is None or (nulls is not None and found.nulls is None) or (
            (low is not None or high is not None) and not found.bounds_known)
        if unknown and read_columns is not None:
            by_values.append((column, leaf, low, high, nulls))
            continue
        if found is None:
            continue
        problems.extend(_column_problems(column, low, high, nulls, found, num_records, tight, string_prefix))
    if by_values:
        assert read_columns is not None
        found_by_leaf = _values_columns(read_columns, index, [(column, leaf) for column, leaf, *_ in by_values])
        for column, leaf, low, high, nulls in by_values:
            found = found_by_leaf[leaf]
            if found is not None:
                problems.extend(_column_problems(column, low, high, nulls, found, num_records, tight, string_prefix))
    if kept_by_values:
        assert read_columns is not None and deleted_rows is not None
        deleted = np.unique(deleted_rows().astype(np.int64))
        found_by_leaf = _values_columns(read_columns, index, [(column, leaf) for column, leaf, *_ in kept_by_values],
                                        deleted)
        for column, leaf, low, high in kept_by_values:
            found = found_by_leaf[leaf]
            if found is not None and found.bounds_known:
                problems.extend(f"{problem} (of the rows its deletion vector keeps)"
                                for problem in _bound_problems(column, low, high, found, string_prefix))
    return problems


def _values_columns(read_columns: ColumnReader, index: _FooterIndex, wanted: Sequence[tuple[StatsColumn, int]],
                    deleted: np.ndarray | None = None) -> dict[int, _FooterColumn | None]:
    """The null count and bounds of each wanted leaf from its values, read a slice at a time (without the rows
    ``deleted``, sorted row indexes, when given) and merged."""
    out: dict[int, _FooterColumn | None] = {}
    offset = 0
    for part in read_columns(sorted({index.names[leaf][0] for _, leaf in wanted})):
        rows = part.num_rows
        if deleted is not None:
            gone = deleted[np.searchsorted(deleted, offset):np.searchsorted(deleted, offset + rows)] - offset
            if len(gone):
                kept = np.ones(rows, dtype=bool)
                kept[gone] = False
                part = part.filter(pa.array(kept))
        offset += rows
        for column, leaf in wanted:
            found = _values_column(part, index.names[leaf], column.type)
            out[leaf] = found if leaf not in out else _merged(out[leaf], found)
    return out


def _merged(a: _FooterColumn | None, b: _FooterColumn | None) -> _FooterColumn | None:
    """Two slices' values of one column as one."""
    if a is None or b is None:
        return None
    lows = [v for v in (a.low, b.low) if v is not None]
    highs = [v for v in (a.high, b.high) if v is not None]
    return _FooterColumn(nulls=None if a.nulls is None or b.nulls is None else a.nulls + b.nulls,
                         low=min(lows) if lows else None, high=max(highs) if highs else None,
                         bounds_known=a.bounds_known and b.bounds_known, float32=a.float32)


def _column_problems(column: StatsColumn, low: Any, high: Any, nulls: Any, found: _FooterColumn,
                     num_records: int | None, tight: bool, string_prefix: int) -> list[str]:
    problems: list[str] = []
    if nulls is not None and found.nulls is not None:
        problems.extend(_null_count_problem(column, nulls, found.nulls, num_records, tight))
    if found.bounds_known:
        problems.extend(_bound_problems(column, low, high, found, string_prefix))
    return problems


def _absent_column_problem(column: StatsColumn, low: Any, high: Any, nulls: Any, rows: int, tight: bool,
                           has_deletion_vector: bool) -> Iterator[str]:
    """A column the file does not have reads as null in every row."""
    claims = [name for name, value in (("a minValues", low), ("a maxValues", high)) if value is not None]
    if nulls is not None and not has_deletion_vector and rows and (nulls < rows if tight else nulls == 0):
        claims.append(f"a nullCount of {nulls} (of {rows} rows)")
    if claims:
        yield f"column {column.name}: not in the file (every value null), but the stats give {', '.join(claims)}"


def _dig(value: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    return value


def _null_count_problem(column: StatsColumn, nulls: int, found: int, num_records: int | None,
                        tight: bool) -> Iterator[str]:
    if tight and nulls != found:
        yield f"column {column.name}: nullCount {nulls} but the file has {found} nulls"
    elif not tight and nulls == 0 and found:
        yield f"column {column.name}: nullCount 0 but the file has {found} nulls"
    elif not tight and num_records is not None and nulls == num_records and found < nulls:
        yield f"column {column.name}: nullCount {nulls} (every row) but the file has {found} nulls"


def _bound_problems(column: StatsColumn, low: Any, high: Any, found: _FooterColumn, string_prefix: int
                    ) -> Iterator[str]:
    kind = _kind(column.type)
    delta_low = _delta_value(low, column.type, found.float32)
    delta_high = _delta_value(high, column.type, found.float32)
    if delta_low is not None and found.low is not None and _min_above(kind, delta_low, found.low):
        yield (f"column {column.name}: minValues {_shown(low)} is above the smallest value in the file "
               f"({_shown_found(found.low, column.type)})")
    if delta_high is not None and found.high is not None and _max_below(kind, delta_high, found.high,
                                                                           string_prefix):
        yield (f"column {column.name}: maxValues {_shown(high)} is below the largest value in the file "
               f"({_shown_found(found.high, column.type)})")


def _min_above(kind: str, delta: Any, footer: Any) -> bool:
    if kind == "string":
        return delta > footer and not (len(footer.encode()) >= FOOTER_CUT_BYTES and delta.startswith(footer))
    return delta > footer


def _max_below(kind: str, delta: Any, footer: Any, string_prefix: int) -> bool:
    if kind == "timestamp":
        return delta < footer - footer % 1000  # Delta truncates to milliseconds (Python's % floors)
    if kind != "string":
        return delta < footer
    if delta >= footer:
        return False
    cut = delta.rstrip(TIE_BREAKERS)
    if footer.startswith(cut) and (cut != delta or len(cut) >= string_prefix):
        return False  # Delta's own cut of the maximum
    return not (len(footer.encode()) >= FOOTER_CUT_BYTES and delta.startswith(footer[:-1]))


def _kind(t: PrimitiveType) -> str:
    name = t.name
    if name in _INTS:
        return "int"
    if name in ("float", "double"):
        return name
    if name in ("timestamp", "timestamp_ntz"):
        return "timestamp"
    if t.is_decimal:
        return "decimal"
    return name  # string, date, boolean, binary, ...


def _delta_value(value: Any, t: PrimitiveType, float32: bool = False) -> Any:
    """A parsed Delta stat as compared with the footer's (None: not comparable)."""
    if value is None:
        return None
    kind = _kind(t)
    if kind == "timestamp" and isinstance(value, dt.datetime):
        epoch = _EPOCH_UTC if value.tzinfo is not None else _EPOCH
        return (value - epoch) // dt.timedelta(microseconds=1)
    if kind == "date" and isinstance(value, dt.date):
        return (value - _EPOCH.date()).days
    if kind in ("float", "double"):
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        return float(np.float32(value)) if kind == "float" or float32 else float(value)
    if kind == "decimal":
        return Decimal(value) if isinstance(value, (int, Decimal)) else None
    if kind in ("int", "boolean", "string"):
        return value
    return None


@dataclass
class _FooterIndex:
    """The columns of a file reached through structs only: each leaf's column index by its name path and by its
    field id path (when every level has one), the name path of each leaf, and every node (leaf or group)."""

    leaves: dict[tuple[str, tuple[Any, ...]], int]
    names: dict[int, tuple[str, ...]]
    nodes: set[tuple[str, tuple[Any, ...]]]

    def find(self, column: StatsColumn) -> int | None:
        leaf = self.leaves.get(("name", column.physical))
        if leaf is None and None not in column.field_ids:
            leaf = self.leaves.get(("id", column.field_ids))
        return leaf

    def has_node(self, column: StatsColumn) -> bool:
        """Whether the file has anything at the column's place (a leaf, or a group: a type ``file_types`` judges)."""
        return ("name", column.physical) in self.nodes or (
            None not in column.field_ids and ("id", column.field_ids) in self.nodes)


def _footer_index(footer: pq.FileMetaData) -> _FooterIndex | None:
    """The footer's columns (``_FooterIndex``); None when its schema cannot be read or its leaves are out of step
    with its columns (nothing is then matched, rather than the wrong column)."""
    try:
        schema = footer.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError):
        return None
    index = _FooterIndex({}, {}, set())
    leaves = 0

    def walk(field: pa.Field, names: tuple[str, ...], ids: tuple[int | None, ...], plain: bool) -> None:
        meta = field.metadata or {}
        names = (*names, field.name)
        try:
            ids = (*ids, int(meta[FIELD_ID]) if FIELD_ID in meta else None)
        except ValueError:
            ids = (*ids, None)
        if plain:
            index.nodes.add(("name", names))
            if None not in ids:
                index.nodes.add(("id", ids))
        t = field.type
        if pa.types.is_struct(t):
            for child in t:
                walk(child, names, ids, plain)
        elif pa.types.is_map(t):
            walk(t.key_field, names, ids, False)
            walk(t.item_field, names, ids, False)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            walk(t.value_field, names, ids, False)
        else:
            nonlocal leaves
            if plain:
                index.leaves[("name", names)] = leaves
                index.names[leaves] = names
                if None not in ids:
                    index.leaves[("id", ids)] = leaves
            leaves += 1

    for f in schema:
        walk(f, (), (), True)
    if leaves != footer.num_columns:
        return None
    return index


def _footer_column(footer: pq.FileMetaData, index: int, t: PrimitiveType) -> _FooterColumn | None:
    """The statistics of column ``index`` over the row groups, values as ``_delta_value`` gives Delta's; None
    when its physical or logical type cannot be compared with a Delta column of type ``t``."""
    convert = _footer_converter(footer.schema.column(index), t)
    if convert is None:
        return None
    found = _FooterColumn(nulls=0, float32=footer.schema.column(index).physical_type == "FLOAT")
    for g in range(footer.num_row_groups):
        row_group = footer.row_group(g)
        if row_group.num_rows == 0:
            continue
        chunk = row_group.column(index)
        st = chunk.statistics
        if st is None:
            found.nulls, found.bounds_known = None, False
            continue
        if st.has_null_count and found.nulls is not None:
            found.nulls += st.null_count
        else:
            found.nulls = None
        if not st.has_min_max:
            if not (st.has_null_count and st.null_count >= chunk.num_values):
                found.bounds_known = False  # values but no bounds
            continue
        try:
            low, high = convert(st, True), convert(st, False)
        except (ValueError, UnicodeDecodeError, OverflowError):
            low = high = None
        if low is None or high is None:
            found.bounds_known = False
            continue
        found.low = low if found.low is None else min(found.low, low)
        found.high = high if found.high is None else max(found.high, high)
    return found


def _values_column(table: pa.Table, names: tuple[str, ...], t: PrimitiveType) -> _FooterColumn | None:
    """The null count and bounds of a leaf (``names``: its path in the file) from its values, as
    ``_footer_column`` gives them from statistics; None when its type cannot be compared with Delta type ``t``."""
    if table.schema.get_field_index(names[0]) < 0:
        return None
    values: pa.Array = table.column(names[0]).combine_chunks()
    for name in names[1:]:
        if not pa.types.is_struct(values.type) or values.type.get_field_index(name) < 0:
            return None
        values = values.flatten()[values.type.get_field_index(name)]  # with the parents' nulls
    nulls = values.null_count
    # A dictionary-encoded slice (bounded_read): its bounds from the values it uses, never decoded row by row.
    values = used_values(values)
    convert = _values_converter(values.type, t)
    if convert is None:
        return None
    found = _FooterColumn(nulls=nulls, float32=pa.types.is_float32(values.type))
    present = values.drop_null()
    if pa.types.is_floating(values.type):
        present = present.filter(pc.is_finite(present))
    if len(present):
        extremes = pc.min_max(present)
        found.low, found.high = convert(extremes["min"]), convert(extremes["max"])
    return found


def _values_converter(arrow_type: pa.DataType, t: PrimitiveType) -> Callable[[pa.Scalar], Any] | None:
    """A function (arrow scalar) -> comparable value, as ``_footer_converter`` gives them, for a column read
    as ``arrow_type`` and compared with Delta type ``t``."""
    kind = _kind(t)
    if kind == "int" and pa.types.is_integer(arrow_type) and pa.types.is_signed_integer(arrow_type):
        return lambda v: v.as_py()
    if kind == "boolean" and pa.types.is_boolean(arrow_type):
        return lambda v: int(v.as_py())
    if kind in ("float", "double") and (pa.types.is_floating(arrow_type) or pa.types.is_signed_integer(arrow_type)):
        single = kind == "float" or pa.types.is_float32(arrow_type)
        return lambda v: float(np.float32(v.as_py())) if single else float(v.as_py())
    if kind == "decimal" and (pa.types.is_decimal(arrow_type) or pa.types.is_signed_integer(arrow_type)):
        return lambda v: Decimal(v.as_py())
    if kind == "string" and (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)):
        return lambda v: v.as_py()
    if kind == "date" and pa.types.is_date32(arrow_type):
        return lambda v: v.cast(pa.int32()).as_py()
    if kind == "timestamp" and pa.types.is_timestamp(arrow_type):
        multiply, divide = {"s": (1_000_000, 1), "ms": (1000, 1), "us": (1, 1), "ns": (1, 1000)}[arrow_type.unit]
        return lambda v: v.cast(pa.int64()).as_py() * multiply // divide
    if kind == "timestamp" and pa.types.is_date32(arrow_type):  # widened date -> timestamp_ntz
        return lambda v: v.cast(pa.int32()).as_py() * 86_400_000_000
    return None


def _footer_converter(column: pq.ColumnSchema, t: PrimitiveType) -> Any:
    """A function (statistics, minimum?) -> comparable value, for a footer column read as Delta type ``t``."""
    physical = column.physical_type
    logical = logical_type(column)
    kind_of_file = logical.get("Type", "None")
    kind = _kind(t)
    plain_int = physical in ("INT32", "INT64") and (kind_of_file == "None" or
                                                      (kind_of_file == "Int" and logical.get("isSigned", True)))

    def raw(st: Any, low: bool) -> Any:
        return st.min_raw if low else st.max_raw

    if kind == "int" and plain_int:
        return raw
    if kind == "boolean" and physical == "BOOLEAN":
        return lambda st, low: int(raw(st, low))
    if kind in ("float", "double") and (physical in ("FLOAT", "DOUBLE") or plain_int):
        def floats(st: Any, low: bool) -> float | None:
            value = float(raw(st, low))
            if not math.isfinite(value):
                return None
            return float(np.float32(value)) if kind == "float" or physical == "FLOAT" else value
        return floats
    if kind == "decimal" and (kind_of_file == "Decimal" or plain_int):
        def decimals(st: Any, low: bool) -> Decimal | None:
            value = st.min if low else st.max
            return Decimal(value) if isinstance(value, (int, Decimal)) else None
        return decimals
    if kind == "string" and physical == "BYTE_ARRAY" and kind_of_file in ("String", "None", "Enum", "Json"):
        def strings(st: Any, low: bool) -> str:
            value = raw(st, low)
            return value.decode() if isinstance(value, bytes) else str(value)
        return strings
    if kind == "date" and physical == "INT32" and kind_of_file == "Date":
        return raw
    if kind == "timestamp" and physical == "INT64" and kind_of_file == "Timestamp":
        multiply, divide = _UNIT_MICROS.get(logical.get("timeUnit", ""), (0, 0))
        if not multiply:
            return None
        return lambda st, low: raw(st, low) * multiply // divide  # floor: nanoseconds to microseconds
    if kind == "timestamp" and physical == "INT32" and kind_of_file == "Date":  # widened date -> timestamp_ntz
        return lambda st, low: raw(st, low) * 86_400_000_000
    return None  # INT96, binary, mismatched types: nothing to compare


def _shown(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return repr(value) if isinstance(value, str) else str(value)


def _shown_found(value: Any, t: PrimitiveType) -> str:
    kind = _kind(t)
    if kind == "timestamp":
        shown = _EPOCH + dt.timedelta(microseconds=value)
        return shown.isoformat() + ("+00:00" if t.name == "timestamp" else "")
    if kind == "date":
        return (_EPOCH.date() + dt.timedelta(days=value)).isoformat()
    return repr(value) if isinstance(value, str) else str(value)
