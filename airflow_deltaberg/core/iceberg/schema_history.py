"""The name mapping of a table's whole retained history, and the snapshots it cannot read.

deltalake's data files carry no field ids, so Iceberg readers find a file's columns by the names of
``schema.name-mapping.default``. A snapshot reads its own schema: after an overwrite with another schema (or a
RESTORE past an added column) its columns are not the current schema's, and must still be in the mapping. The
mapping keeps each field id once, with every name it had (Iceberg's name mapping allows several per id); a name
belongs to one id per level, the current schema's first. An id that lost every name (a column whose type changed
incompatibly, which got a new id under the same name) is left out: snapshots whose schema has it cannot be read
by name any more (``conflicting_schemas``), and expire.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import MappedField, NameMapping, parse_mapping_from_json

from airflow_deltaberg.core.iceberg.schema import NAME_MAPPING_PROPERTY, field_ids
from airflow_deltaberg.core.iceberg.table_metadata import TableMetadata


def retained_schemas(metadata: TableMetadata) -> list[Schema]:
    """The current schema and those of the table's snapshots, newest first."""
    by_id = {s.schema_id: s for s in metadata.schemas}
    order = [metadata.current_schema_id, *(s.schema_id for s in reversed(metadata.snapshots))]
    seen: list[int] = []
    for schema_id in order:
        if schema_id is not None and schema_id in by_id and schema_id not in seen:
            seen.append(schema_id)
    return [by_id[i] for i in seen]


def table_name_mapping(metadata: TableMetadata) -> NameMapping | None:
    raw = metadata.properties.get(NAME_MAPPING_PROPERTY)
    return parse_mapping_from_json(raw) if raw else None


def _merged(current: list[MappedField], earlier: list[MappedField], keep: set[int]) -> list[MappedField]:
    """``current`` with the names and fields of ``earlier`` added where no current field holds the name."""
    taken = {name for f in current for name in f.names}
    by_id = {f.field_id: f for f in current}
    out = {f.field_id: (list(f.names), list(f.fields)) for f in current}
    extra: list[MappedField] = []
    for f in earlier:
        names = [n for n in f.names if n not in taken]
        if f.field_id in by_id:
            own, children = out[f.field_id]
            own.extend(n for n in names if n not in own)
            out[f.field_id] = (own, _merged(children, f.fields, keep))
        elif f.field_id is not None and f.field_id in keep and names:
            extra.append(MappedField(field_id=f.field_id, names=names, fields=_merged([], f.fields, keep)))
        else:
            continue
        taken.update(names)
    merged = [MappedField(field_id=f.field_id, names=out[f.field_id][0], fields=out[f.field_id][1]) for f in current]
    return merged + extra


def history_name_mapping(current: NameMapping, previous: TableMetadata | None,
                         new_schema: Schema) -> NameMapping:
    """The name mapping of a new snapshot: the new schema's (``current``) plus every name the previous mapping
    gave a field id of a retained schema (module docstring)."""
    earlier = table_name_mapping(previous) if previous is not None else None
    if earlier is None:
        return current
    keep = set(field_ids(new_schema.as_struct()))
    for schema in retained_schemas(previous):
        keep.update(field_ids(schema.as_struct()))
    return NameMapping(_merged(list(current), list(earlier), keep))


def _mapped_ids(fields: Iterable[MappedField]) -> Iterator[int]:
    for f in fields:
        if f.field_id is not None and f.names:
            yield f.field_id
        yield from _mapped_ids(f.fields)


def conflicting_schemas(metadata: TableMetadata, snapshot_ids: set[int]) -> set[int]:
    """Snapshots of ``snapshot_ids`` whose schema has a field id the table's name mapping does not name: files
    without field ids cannot give that column to Iceberg readers."""
    mapping = table_name_mapping(metadata)
    if mapping is None:
        return set()
    mapped = set(_mapped_ids(mapping))
    unmapped = {s.schema_id for s in metadata.schemas if not set(field_ids(s.as_struct())) <= mapped}
    return {s.snapshot_id for s in metadata.snapshots if s.snapshot_id in snapshot_ids and s.schema_id in unmapped}
