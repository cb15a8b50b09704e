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


class CatalogError(DeltabergError):
    """The catalog cannot be opened or updated (configuration, connectivity, missing namespace...)."""


def open_catalog(name: str = "deltaberg", config: Mapping[str, Any] | None = None) -> Catalog:
    """A pyiceberg catalog from properties (``type`` sql/rest/glue/hive, ``uri``, ``warehouse``, ...)."""
    properties = dict(config or {})
    properties.setdefault("type", "sql")
    try:
        return load_catalog(name, **properties)
    except Exception as exc:  # noqa: BLE001 - pyiceberg and drivers raise many types; never echo the config
        raise CatalogError(f"catalog {name!r} (type {properties['type']}) cannot be opened: "
                           f"{type(exc).__name__}") from exc


def point_catalog(catalog: Catalog, identifier: str | tuple[str, ...], metadata_location: str) -> None:
    """Register the table on first conversion, later move its pointer to ``metadata_location``.

    The move is a compare-and-set on the location read just before: if another converter moved the
    pointer meanwhile, nothing changes and ConcurrentConversionError is raised.
    """
    try:
        _point(catalog, identifier, metadata_location)
    except (DeltabergError, ConcurrentConversionError):
        raise
    except Exception as exc:  # noqa: BLE001 - the catalog's own errors, wrapped with what was attempted
        raise CatalogError(f"catalog {catalog.name!r}: registering {identifier} at {metadata_location} failed: "
                           f"{type(exc).__name__}: {exc}") from exc


def _point(catalog: Catalog, identifier: str | tuple[str, ...], metadata_location: str) -> None:
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
