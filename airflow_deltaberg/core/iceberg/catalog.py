"""Registering converted tables in an Iceberg catalog through pyiceberg (SQLite SQL catalog by default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from sqlalchemy import update
from sqlalchemy.orm import Session

from airflow_deltaberg.core.errors import DeltabergError
from airflow_deltaberg.core.iceberg.publish import ConcurrentConversionError


def open_catalog(name: str = "deltaberg", config: Mapping[str, Any] | None = None) -> Catalog:
    """A pyiceberg catalog from properties (``type`` sql/rest/glue/hive, ``uri``, ``warehouse``, ...)."""
    properties = dict(config or {})
    properties.setdefault("type", "sql")
    return load_catalog(name, **properties)


def point_catalog(catalog: Catalog, identifier: str | tuple[str, ...], metadata_location: str) -> None:
    """Register the table on first conversion, later move its pointer to ``metadata_location``.

    The move is a compare-and-set on the location read just before: if another converter moved the
    pointer meanwhile, nothing changes and ConcurrentConversionError is raised.
    """
    ident = Catalog.identifier_to_tuple(identifier)
    namespace = ident[:-1]
    if namespace:
        catalog.create_namespace_if_not_exists(namespace)
    if not catalog.table_exists(ident):
        catalog.register_table(ident, metadata_location)
        return
    current = catalog.load_table(ident).metadata_location
    if current == metadata_location:
        return  # a re-run after a crash that happened after the catalog moved
    if isinstance(catalog, SqlCatalog):
        with Session(catalog.engine) as session:
            result = session.execute(
                update(IcebergTables)
                .where(
                    IcebergTables.catalog_name == catalog.name,
                    IcebergTables.table_namespace == Catalog.namespace_to_string(namespace),
                    IcebergTables.table_name == ident[-1],
                    IcebergTables.metadata_location == current,
                )
                .values(metadata_location=metadata_location, previous_metadata_location=current)
            )
            if result.rowcount != 1:
                raise ConcurrentConversionError(
                    f"the catalog entry of {'.'.join(ident)} moved during the conversion; run it again"
                )
            session.commit()
        return
    raise DeltabergError(
        f"catalog {catalog.name} ({type(catalog).__name__}): moving an existing registration of {'.'.join(ident)} "
        "is only implemented for the SQL catalog; register it under a new identifier or use the SQL catalog"
    )
