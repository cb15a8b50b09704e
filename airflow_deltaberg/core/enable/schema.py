"""The target schema of IcebergWriterCompatV1: column mapping ids, `col-<id>` physical names, nested ids,
byte/short widened to integer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_deltaberg.core.delta.schema import (
    COLUMN_MAPPING_ID,
    COLUMN_MAPPING_PHYSICAL_NAME,
    NESTED_IDS_KEYS,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    nested_slots,
)

#: Where nested ids are written: the key Delta on Spark reads and writes, keyed by the field's physical name.
NESTED_IDS_KEY = NESTED_IDS_KEYS[0]
WIDENED = {"byte": "integer", "short": "integer"}

Path = tuple[str, ...]


@dataclass
class SchemaChanges:
    """What turning a schema into its IcebergWriterCompatV1 form changed (logical column paths)."""

    ids_assigned: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)  # an existing physical name that is not col-<id>
    widened: list[str] = field(default_factory=list)  # byte/short -> integer
    nested_ids_assigned: list[str] = field(default_factory=list)
    nested_ids_rekeyed: list[str] = field(default_factory=list)  # kept, stored under a new key


class _Ids:
    """Hands out ids: kept ones when free, fresh ones counting up from ``start``."""

    def __init__(self, start: int):
        self.next = start
        self.used: set[int] = set()

    def keep(self, value: int | None) -> bool:
        if value is None or value in self.used or value <= 0:
            return False
        self.used.add(value)
        return True

    def fresh(self) -> int:
        while self.next in self.used:
            self.next += 1
        self.used.add(self.next)
        return self.next


def writer_compat_schema(schema: StructType, *, keep_ids: bool, max_column_id: int = 0, col_id_names: bool = True,
                         widen: bool = True) -> tuple[StructType, int, SchemaChanges]:
    """The schema in IcebergWriterCompatV1 form, the new ``delta.columnMapping.maxColumnId``, and what changed.

    ``col_id_names`` False keeps the physical names a column-mapped schema has (IcebergCompatV2 asks for none in
    particular; new columns still get ``col-<id>``); ``widen`` False keeps byte/short.

    ``keep_ids``: keep the column and nested ids the schema has (a column-mapped table: its data files and any
    Iceberg schema already use them); fresh ids start above every id in use and ``max_column_id``. Without
    ``keep_ids`` (no column mapping) ids are 1, 2, ... in schema order. Column ids are decided first and
    nested ids after them, as Delta on Spark does, so the two never collide.
    """
    fields = list(schema.walk())

    def _physical(f: StructField, cid: int) -> str:
        kept = f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME)
        if not col_id_names and keep_ids and kept and cid == f.column_mapping_id:
            return str(kept)
        return f"col-{cid}"

    if keep_ids:
        existing = [f.column_mapping_id or 0 for _, f in fields] + [v for _, f in fields for v in f.nested_ids.values()]
        ids = _Ids(max([max_column_id, *existing]) + 1)
    else:
        ids = _Ids(1)
    changes = SchemaChanges()

    column_ids: dict[Path, int] = {}
    for path, f in fields:  # kept ids first: a fresh id must not take one that a later column keeps
        if keep_ids and ids.keep(f.column_mapping_id):
            column_ids[path] = f.column_mapping_id  # type: ignore[assignment]
    for path, _ in fields:
        if path not in column_ids:
            column_ids[path] = ids.fresh()
            changes.ids_assigned.append(".".join(path))

    nested: dict[Path, dict[str, int]] = {}
    for path, f in fields:
        slots = [key for key, _ in nested_slots(f.type)]
        if not slots:
            continue
        physical = _physical(f, column_ids[path])
        out: dict[str, int] = {}
        for key in slots:
            old = f.nested_id(key) if keep_ids else None
            if ids.keep(old):
                out[f"{physical}{key}"] = old  # type: ignore[assignment]
                if f.physical_name != physical or NESTED_IDS_KEY not in f.metadata:
                    changes.nested_ids_rekeyed.append(".".join(path) + key)
            else:
                out[f"{physical}{key}"] = ids.fresh()
                changes.nested_ids_assigned.append(".".join(path) + key)
        nested[path] = out

    def convert_field(f: StructField, path: Path) -> StructField:
        cid = column_ids[path]
        physical = _physical(f, cid)
        if keep_ids and f.metadata.get(COLUMN_MAPPING_PHYSICAL_NAME) not in (None, physical):
            changes.renamed.append(".".join(path))
        metadata: dict[str, Any] = {k: v for k, v in f.metadata.items() if k not in NESTED_IDS_KEYS}
        metadata[COLUMN_MAPPING_ID] = cid
        metadata[COLUMN_MAPPING_PHYSICAL_NAME] = physical
        if path in nested:
            metadata[NESTED_IDS_KEY] = nested[path]
        return StructField(f.name, convert_type(f.type, path), f.nullable, metadata)

    def convert_type(t: DataType, path: Path) -> DataType:
        if isinstance(t, StructType):
            return StructType(tuple(convert_field(c, (*path, c.name)) for c in t.fields))
        if isinstance(t, ArrayType):
            return ArrayType(convert_type(t.element_type, (*path, "element")), t.contains_null)
        if isinstance(t, MapType):
            return MapType(convert_type(t.key_type, (*path, "key")), convert_type(t.value_type, (*path, "value")),
                           t.value_contains_null)
        if widen and isinstance(t, PrimitiveType) and t.name in WIDENED:
            changes.widened.append(".".join(path))
            return PrimitiveType(WIDENED[t.name])
        return t

    result = convert_type(schema, ())
    assert isinstance(result, StructType)
    return result, max([max_column_id if keep_ids else 0, *ids.used]), changes
