"""A data file's columns checked against the Delta schema: each column of the schema that the file has must have
a parquet type Delta could have written for its type, and a column the schema declares NOT NULL must be in the
file and hold no null.

A log whose schema lies about its files (long where the files hold strings, decimal(38,38) over decimal(5,2)
data, a NOT NULL column no file has) makes Iceberg readers of a conversion refuse the files ("Cannot promote
...", "Field is required"), and Delta readers cast or fail. ``validate --data-checks``
(data.file-types-match-schema) and ``convert --verify-stats`` both use this module; it reads only the footer.

What Delta writes, per type (a file matches the type, or a type of the field's ``delta.typeChanges``: type
widening keeps the files written before a change):

* boolean: BOOLEAN; byte, short, integer: INT32 (no annotation, or a signed Int of up to 32 bits); long: INT64
  (no annotation or a signed Int); float: FLOAT; double: DOUBLE;
* string: BYTE_ARRAY (String, Enum, Json, or no annotation: files written before strings were annotated);
  binary: BYTE_ARRAY without annotation;
* date: INT32 Date; timestamp: INT96, or INT64 Timestamp adjusted to UTC in milliseconds or microseconds;
  timestamp_ntz: INT64 Timestamp not adjusted to UTC, in milliseconds or microseconds;
* decimal(p,s): Decimal(p,s) over INT32 (p <= 9), INT64 (p <= 18), FIXED_LEN_BYTE_ARRAY or BYTE_ARRAY;
* structs, arrays and maps: the same nesting in the file, compared leaf by leaf. variant, void, geometry and
  geography are not judged.

Columns are found as Delta readers find them: by name (the physical name under column mapping), in id mode by
field id when no name matches. A column the file lacks reads as null (columns added after the file was
written): fine unless the schema says NOT NULL. Partition columns may be in the file (materialized) or not.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.delta.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from airflow_deltaberg.core.errors import SchemaError

TYPE_CHANGES = "delta.typeChanges"
_NOT_JUDGED = ("variant", "void", "geometry", "geography")
_INT32_TYPES = {"byte": 8, "short": 16, "integer": 32}
_TIME_UNITS = ("milliseconds", "microseconds")


def type_mismatches(schema: StructType, column_mapping_mode: str, partition_columns: Sequence[str],
                    footer: pq.FileMetaData) -> list[str]:
    """Where the columns of the file ``footer`` describes do not match ``schema``: one message per column, empty
    when they match (or when the footer's schema cannot be read)."""
    try:
        arrow_schema = footer.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError):
        return []
    if sum(_leaf_count(f.type) for f in arrow_schema) != footer.num_columns:
        return []  # leaves out of step with the parquet columns: judge nothing rather than the wrong column
    walk = _Walk(footer, column_mapping_mode, frozenset(partition_columns))
    return list(walk.struct(schema.fields, list(arrow_schema), 0, (), top=True))


@dataclass(frozen=True)
class _Walk:
    footer: pq.FileMetaData
    mode: str
    partition_columns: frozenset[str]

    def struct(self, fields: Sequence[StructField], children: list[pa.Field], first_leaf: int,
               path: tuple[str, ...], *, top: bool = False) -> Iterator[str]:
        by_name: dict[str, tuple[pa.Field, int]] = {}
        by_id: dict[int, tuple[pa.Field, int]] = {}
        leaf = first_leaf
        for child in children:
            by_name.setdefault(child.name, (child, leaf))
            field_id = _field_id(child)
            if field_id is not None:
                by_id.setdefault(field_id, (child, leaf))
            leaf += _leaf_count(child.type)
        mapped = self.mode in ("name", "id")
        for f in fields:
            found = by_name.get(f.physical_name if mapped else f.name)
            if found is None and self.mode == "id" and f.column_mapping_id is not None:
                found = by_id.get(f.column_mapping_id)
            where = (*path, f.name)
            if found is None:
                if not f.nullable and not (top and f.name in self.partition_columns):
                    yield f"column {'.'.join(where)}: the schema says it is never null (NOT NULL), the file does " \
                          "not have it"
                continue
            yield from self.value(f.type, found[0], found[1], where, f, "", not f.nullable)

    def value(self, t: DataType, found: pa.Field, leaf: int, path: tuple[str, ...], owner: StructField, slot: str,
              required: bool) -> Iterator[str]:
        """``required``: the column and every parent are NOT NULL (a null anywhere in it breaks the schema)."""
        ft = found.type
        name = ".".join(path)
        if isinstance(t, StructType):
            if not pa.types.is_struct(ft):
                yield f"column {name}: the schema says a struct, the file has {_describe(ft, self.footer, leaf)}"
                return
            yield from self.struct(t.fields, list(ft), leaf, path)
        elif isinstance(t, ArrayType):
            if not (pa.types.is_list(ft) or pa.types.is_large_list(ft)):
                yield f"column {name}: the schema says an array, the file has {_describe(ft, self.footer, leaf)}"
                return
            element = _join(slot, "element")
            yield from self.value(t.element_type, ft.value_field, leaf, (*path, "element"), owner, element, False)
        elif isinstance(t, MapType):
            if not pa.types.is_map(ft):
                yield f"column {name}: the schema says a map, the file has {_describe(ft, self.footer, leaf)}"
                return
            yield from self.value(t.key_type, ft.key_field, leaf, (*path, "key"), owner, _join(slot, "key"), False)
            yield from self.value(t.value_type, ft.item_field, leaf + _leaf_count(ft.key_type), (*path, "value"),
                                  owner, _join(slot, "value"), False)
        elif isinstance(t, PrimitiveType):
            yield from self.primitive(t, ft, leaf, name, owner, slot, required)

    def primitive(self, t: PrimitiveType, ft: pa.DataType, leaf: int, name: str, owner: StructField, slot: str,
                  required: bool) -> Iterator[str]:
        if t.name.startswith(_NOT_JUDGED):
            return
        if _leaf_count(ft) != 1 or pa.types.is_nested(ft):
            yield f"column {name}: the schema says {t.name}, the file has {_describe(ft, self.footer, leaf)}"
            return
        column = self.footer.schema.column(leaf)
        accepted = [t.name, *_earlier_types(owner, slot)]
        if not any(_written_as(type_name, column) for type_name in accepted):
            yield f"column {name}: the schema says {t.name}, the file has {_describe(ft, self.footer, leaf)}"
            return
        if required:
            nulls = _null_count(self.footer, leaf)
            if nulls:
                yield f"column {name}: the schema says it is never null (NOT NULL), the file has {nulls} null(s)"


def _join(slot: str, part: str) -> str:
    return f"{slot}.{part}" if slot else part


def _earlier_types(owner: StructField, slot: str) -> list[str]:
    """The types the field at ``slot`` of ``owner`` had before type widening (``delta.typeChanges``)."""
    changes = owner.metadata.get(TYPE_CHANGES) or []
    out = []
    for change in changes if isinstance(changes, list) else []:
        if isinstance(change, dict) and str(change.get("fieldPath") or "") == slot:
            source = change.get("fromType")
            if isinstance(source, str):
                out.append(source)
    return out


def _field_id(f: pa.Field) -> int | None:
    meta = f.metadata or {}
    try:
        return int(meta[FIELD_ID]) if FIELD_ID in meta else None
    except ValueError:
        return None


def _leaf_count(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(_leaf_count(child.type) for child in t)
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1


def logical_type(column: pq.ColumnSchema) -> dict[str, Any]:
    """A parquet column's logical type as its JSON object (``{"Type": "None"}`` when it has none)."""
    return dict(_parsed_logical(column.logical_type.to_json())) if column.logical_type is not None else {}


@functools.lru_cache(maxsize=256)
def _parsed_logical(text: str) -> tuple[tuple[str, Any], ...]:
    """A logical type's JSON as items (files repeat a handful of them: parsed once)."""
    try:
        logical = json.loads(text)
    except ValueError:
        return ()
    return tuple(logical.items()) if isinstance(logical, dict) else ()


def _written_as(type_name: str, column: pq.ColumnSchema) -> bool:
    """Whether Delta writes type ``type_name`` as this parquet column."""
    physical = column.physical_type
    logical = logical_type(column)
    kind = logical.get("Type", "None")
    signed_int = kind == "None" or (kind == "Int" and logical.get("isSigned", True))
    if type_name in _INT32_TYPES:
        return physical == "INT32" and signed_int and logical.get("bitWidth", 32) <= 32
    if type_name == "long":
        return physical == "INT64" and signed_int
    if type_name in ("boolean", "float", "double"):
        return physical == {"boolean": "BOOLEAN", "float": "FLOAT", "double": "DOUBLE"}[type_name] and kind == "None"
    if type_name == "string":
        return physical == "BYTE_ARRAY" and kind in ("String", "Enum", "Json", "None")
    if type_name == "binary":
        return physical == "BYTE_ARRAY" and kind == "None"
    if type_name == "date":
        return physical == "INT32" and kind == "Date"
    if type_name in ("timestamp", "timestamp_ntz"):
        if type_name == "timestamp" and physical == "INT96":
            return True
        return (physical == "INT64" and kind == "Timestamp" and logical.get("timeUnit") in _TIME_UNITS
                and bool(logical.get("isAdjustedToUTC")) == (type_name == "timestamp"))
    if type_name.startswith("decimal"):
        try:
            precision, scale = PrimitiveType(type_name).precision_scale
        except SchemaError:
            return False
        if kind != "Decimal" or (logical.get("precision"), logical.get("scale")) != (precision, scale):
            return False
        return (physical in ("FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY") or (physical == "INT32" and precision <= 9)
                or (physical == "INT64" and precision <= 18))
    return True  # a type this module does not know: not judged


def _describe(ft: pa.DataType, footer: pq.FileMetaData, leaf: int) -> str:
    if pa.types.is_struct(ft):
        return "a struct"
    if pa.types.is_map(ft):
        return "a map"
    if pa.types.is_list(ft) or pa.types.is_large_list(ft) or pa.types.is_fixed_size_list(ft):
        return "a list"
    column = footer.schema.column(leaf)
    logical = logical_type(column)
    kind = logical.pop("Type", "None")
    if kind == "None":
        return column.physical_type
    details = ", ".join(f"{k}={v}" for k, v in logical.items()
                        if k not in ("is_from_converted_type", "force_set_converted_type"))
    return f"{column.physical_type} {kind}" + (f"({details})" if details else "")


def _null_count(footer: pq.FileMetaData, leaf: int) -> int:
    """The nulls of a leaf column over the row groups whose statistics count them (0 where none do)."""
    total = 0
    for g in range(footer.num_row_groups):
        stats = footer.row_group(g).column(leaf).statistics
        if stats is not None and stats.has_null_count:
            total += stats.null_count
    return total
