"""The columns of a converted table for the OpenLineage schema facet, as plain tuples (name, type, nested
columns): from the Iceberg metadata file a conversion wrote (one small read), or from the Delta log at a version
(a log replay: only when lineage is collected)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from airflow_deltaberg.core.delta.schema import ArrayType, MapType, StructType
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.storage import open_storage


class Column(NamedTuple):
    name: str
    type: str
    fields: tuple[Column, ...] = ()


def _iceberg_column(field: Mapping[str, Any]) -> Column:
    kind = field["type"]
    if isinstance(kind, str):
        return Column(field["name"], kind)
    nested = tuple(_iceberg_column(f) for f in kind.get("fields", ())) if kind.get("type") == "struct" else ()
    return Column(field["name"], str(kind.get("type")), nested)


def iceberg_columns(metadata_location: str, storage_options: Mapping[str, Any] | None) -> tuple[Column, ...]:
    """The current schema's columns of the Iceberg metadata file at ``metadata_location``."""
    folder, _, name = metadata_location.rpartition("/")
    document = json.loads(open_storage(folder, storage_options).read(name))
    current = document.get("current-schema-id")
    schema = next((s for s in document.get("schemas", ()) if s.get("schema-id") == current), None)
    if schema is None:  # v1 metadata without a schema list
        schema = document.get("schema", {})
    return tuple(_iceberg_column(f) for f in schema.get("fields", ()))


def _delta_column(name: str, kind: Any) -> Column:
    if isinstance(kind, StructType):
        return Column(name, "struct", tuple(_delta_column(f.name, f.type) for f in kind.fields))
    if isinstance(kind, ArrayType):
        return Column(name, "array")
    if isinstance(kind, MapType):
        return Column(name, "map")
    return Column(name, str(kind))


def delta_columns(table_uri: str, version: int | None,
                  storage_options: Mapping[str, Any] | None) -> tuple[Column, ...]:
    """The columns of the Delta table at ``version`` (the latest when None)."""
    schema = DeltaTable(table_uri, storage_options).snapshot(version).schema
    return tuple(_delta_column(f.name, f.type) for f in schema.fields)
