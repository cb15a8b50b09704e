"""Whether Iceberg readers resolve a data file's columns to the columns Delta readers read in it.

Delta readers find a file's columns by name (the physical name under column mapping; in id mode some by field id),
Iceberg readers by Parquet field id, and by the table's name mapping only in a file without any field id. A file
whose field ids disagree with the converted schema (ids another writer gave, a column mapping id changed where the
log no longer shows it, ids in a table without column mapping) reads as other columns, or nulls, through Iceberg.
Lists, maps and their parts are matched by structure (``element``, ``key``, ``value``), as Iceberg does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyiceberg.table.name_mapping import MappedField, NameMapping

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.iceberg.schema import CHANGE_TYPE_FIELD_ID

#: Field ids from Integer.MAX_VALUE - 200 up are reserved (spec: Reserved Field IDs); the name mapping gives the first
#: to the change data feed's ``_change_type``, a file column readers project away.
RESERVED_IDS_START = CHANGE_TYPE_FIELD_ID


def field_id_conflicts(file_schema: pa.Schema, mapping: NameMapping) -> list[str]:
    """What an Iceberg reader of the converted table (``mapping``: its name mapping, the converted schema's ids by
    the names the files use) resolves differently from the names in ``file_schema`` (a data file's schema with
    its field ids); empty when the file has no field id (the name mapping applies) or they all agree."""
    if not any(_carries_id(f) for f in file_schema):
        return []
    ids = {path: field_id for path, field_id in _mapped_ids(mapping, ()) if field_id < RESERVED_IDS_START}
    owners = {field_id: ".".join(path) for path, field_id in ids.items()}
    return [problem for f in file_schema for problem in _conflicts(f, (f.name,), ids, owners)]


def _mapped_ids(fields: Iterable[MappedField], parent: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], int]]:
    for mapped in fields:
        for name in mapped.names:
            path = (*parent, name)
            if mapped.field_id is not None:
                yield path, mapped.field_id
            yield from _mapped_ids(mapped.fields, path)


def _field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _parts(f: pa.Field, path: tuple[str, ...]) -> list[tuple[pa.Field, tuple[str, ...]]]:
    t = f.type
    if pa.types.is_struct(t):
        return [(t.field(i), (*path, t.field(i).name)) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [(t.key_field, (*path, "key")), (t.item_field, (*path, "value"))]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [(t.value_field, (*path, "element"))]
    return []


def _carries_id(f: pa.Field) -> bool:
    return _field_id(f) is not None or any(_carries_id(part) for part, _ in _parts(f, ()))


def _conflicts(f: pa.Field, path: tuple[str, ...], ids: dict[tuple[str, ...], int],
               owners: dict[int, str]) -> Iterator[str]:
    expected, actual, where = ids.get(path), _field_id(f), ".".join(path)
    if expected is None:
        if actual is not None and actual in owners:
            yield f"file column {where} has field id {actual}, the id of column {owners[actual]}"
        return  # a column the table does not have: Iceberg readers skip it as Delta readers do
    if actual is None:
        yield f"column {where} has no field id where the file's other columns have one (Iceberg readers skip it)"
    elif actual != expected:
        owner = f" (column {owners[actual]})" if actual in owners else ""
        yield f"column {where} has field id {actual}{owner}, the converted schema gives it {expected}"
    else:  # the parts of a column read as another one, or skipped, say nothing more
        for part, part_path in _parts(f, path):
            yield from _conflicts(part, part_path, ids, owners)
