"""The columns of a converted table for the OpenLineage schema facet, as plain tuples (name, type, nested
columns): from the current schema of the Iceberg metadata file a conversion wrote (one read; snapshots and logs are
not parsed), or from a Delta schema the operator already holds (no log replay). Types are spelled as the Iceberg
metadata file and the Delta schema spell them; a list or map is named without its element types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pyiceberg import types as iceberg

from airflow_deltaberg.core.delta.schema import ArrayType, MapType, StructType, parse_schema
from airflow_deltaberg.core.errors import IcebergMetadataError
from airflow_deltaberg.core.iceberg.publish import metadata_file_version, metadata_folder_key, read_current_schema
from airflow_deltaberg.core.storage import open_storage


class Column(NamedTuple):
    name: str
    type: str
    fields: tuple[Column, ...] = ()


def _iceberg_column(name: str, kind: iceberg.IcebergType) -> Column:
    if isinstance(kind, iceberg.StructType):
        return Column(name, "struct", tuple(_iceberg_column(f.name, f.field_type) for f in kind.fields))
    if isinstance(kind, iceberg.ListType):
        return Column(name, "list")
    if isinstance(kind, iceberg.MapType):
        return Column(name, "map")
    return Column(name, str(kind))


def iceberg_columns(table_uri: str, metadata_location: str,
                    storage_options: Mapping[str, Any] | None) -> tuple[Column, ...]:
    """The current schema's columns of ``metadata_location``, a metadata file of the table at ``table_uri``."""
    storage = open_storage(table_uri, storage_options)
    key = metadata_folder_key(storage, metadata_location)
    version = metadata_file_version(key.rsplit("/", 1)[-1]) if key else None
    if version is None:
        raise IcebergMetadataError("the location is not an Iceberg metadata file of this table", table=table_uri,
                                   file=metadata_location)
    schema = read_current_schema(storage, version)
    return tuple(_iceberg_column(f.name, f.field_type) for f in schema.fields)


def _delta_column(name: str, kind: Any) -> Column:
    if isinstance(kind, StructType):
        return Column(name, "struct", tuple(_delta_column(f.name, f.type) for f in kind.fields))
    if isinstance(kind, ArrayType):
        return Column(name, "array")
    if isinstance(kind, MapType):
        return Column(name, "map")
    return Column(name, str(kind))


def delta_columns(schema: StructType | str) -> tuple[Column, ...]:
    """The columns of a Delta schema (or of its ``schemaString``)."""
    parsed = parse_schema(schema) if isinstance(schema, str) else schema
    return tuple(_delta_column(f.name, f.type) for f in parsed.fields)
