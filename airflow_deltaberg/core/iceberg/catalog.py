"""Registering converted tables in an Iceberg catalog through pyiceberg (SQLite SQL catalog by default).

The first conversion registers the table (``register_table``) on the ``v<N>.metadata.json`` the conversion
published. Later conversions move the catalog to the new metadata in one of two ways:

- ``pointer`` (pyiceberg's SqlCatalog, the embedded default): a compare-and-set UPDATE of the catalog row onto
  our own metadata file. Whatever the catalog held is replaced by exactly what the conversion wrote.
- ``updates`` (every other catalog: REST, Glue, Hive, DynamoDB, ...; or any catalog whose properties say
  ``deltaberg.commit-mode: updates``): the difference between the catalog's current metadata and ours, sent
  through pyiceberg's ``Catalog.commit_table``. The catalog (the REST server; pyiceberg itself for Glue, Hive
  and SQL, through ``MetastoreCatalog._update_and_stage_table``) writes its own metadata file, with the same
  schema, partition spec and snapshot ids as ours, naming our manifest lists. Requirements: the table uuid,
  ``main`` at the snapshot the catalog had when the difference was computed, and the current schema, default
  spec and last assigned column and partition ids, so a concurrent change fails the commit as a whole
  (ConcurrentConversionError) and leaves the catalog as the other writer left it. Updates: new schemas and
  partition specs (ids as ours), the current ones, the snapshots the catalog lacks, ``main``, removal of the
  converter's snapshots that expiry dropped, and the table properties (set or removed to equal ours). Our
  metadata file is read with the catalog's own FileIO properties (object store credentials go there too).
  The converted table says ``write.metadata.delete-after-commit.enabled``, so the catalog's metadata files
  that fall out of its metadata log are deleted after each commit (by a REST server itself, by this module
  for the catalogs pyiceberg commits), as the converter deletes its own.
  Snapshots the conversion did not write (no ``delta-version`` in their summary) are never removed; a ``main``
  that points at one is refused: someone else writes to the table through the catalog.

A conversion that restarted its history (column mapping switched on: schemas and specs start afresh, see
``table_metadata.build_metadata``) cannot be committed as a difference, since the catalog's ids would mean
other columns: the updates path refuses it with CatalogError (register under a new identifier, or drop the
catalog entry and convert again). Dropping and registering here would leave readers without a table in between,
and a concurrent writer's commit could be lost, so it is not done automatically.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyiceberg
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AssertCurrentSchemaId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemovePropertiesUpdate,
    RemoveSnapshotsUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSpecUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.utils.properties import property_as_bool

from airflow_deltaberg.core.errors import (
    CatalogError,
    CatalogIdentifierError,
    ConcurrentConversionError,
    DeltabergError,
)
from airflow_deltaberg.core.iceberg.publish import metadata_file_version
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TABLE_ID, DELTA_VERSION
from airflow_deltaberg.core.iceberg.table_properties import DELETE_AFTER_COMMIT
from airflow_deltaberg.core.redact import location_text

log = logging.getLogger(__name__)

#: Catalog property choosing how a registered table moves: ``pointer`` (SQL catalog only) or ``updates``.
COMMIT_MODE_PROPERTY = "deltaberg.commit-mode"
CommitMode = Literal["pointer", "updates"]
#: Properties Iceberg derives from the metadata itself: never sent as property updates.
_RESERVED_PROPERTIES = frozenset({
    "format-version", "uuid", "snapshot-count", "current-snapshot-id", "current-snapshot-summary",
    "current-snapshot-timestamp-ms", "current-schema", "default-partition-spec", "default-sort-order",
})


def open_catalog(name: str = "deltaberg", config: Mapping[str, Any] | None = None) -> Catalog:
    """A pyiceberg catalog from properties (``type`` sql/rest/glue/hive, ``uri``, ``warehouse``, ...)."""
    properties = dict(config or {})
    properties.setdefault("type", "sql")
    try:
        return load_catalog(name, **properties)
    except Exception as exc:  # noqa: BLE001 - pyiceberg and drivers raise many types; never echo the config
        raise CatalogError(f"catalog {name!r} (type {properties['type']}) cannot be opened: "
                           f"{type(exc).__name__}") from exc


def commit_mode(catalog: Catalog) -> CommitMode:
    """How ``point_catalog`` moves a registered table: ``pointer`` for the SQL catalog unless its properties ask for
    ``updates``; ``updates`` for every other catalog."""
    asked = catalog.properties.get(COMMIT_MODE_PROPERTY)
    if asked not in (None, "pointer", "updates"):
        raise CatalogError(f"catalog {catalog.name!r}: {COMMIT_MODE_PROPERTY} must be 'pointer' or 'updates', "
                           f"not {asked!r}")
    if asked == "pointer" and not _is_sql(catalog):
        raise CatalogError(f"catalog {catalog.name!r} ({type(catalog).__name__}): {COMMIT_MODE_PROPERTY}=pointer is "
                           "only possible for the SQL catalog")
    return _commit_mode(_is_sql(catalog), asked)


def _is_sql(catalog: Catalog) -> bool:
    # pyiceberg's SQL catalog (and SQLAlchemy, ~0.3 s of imports) is loaded only once a catalog of that type is
    # opened: a catalog object can be a SqlCatalog only if that module is loaded.
    sql = sys.modules.get("pyiceberg.catalog.sql")
    return sql is not None and isinstance(catalog, sql.SqlCatalog)


def _commit_mode(is_sql: bool, asked: str | None) -> CommitMode:
    """The mode asked for, else ``pointer`` for the SQL catalog and ``updates`` for every other."""
    if asked is not None:
        return asked  # type: ignore[return-value]
    return "pointer" if is_sql else "updates"


# C0 and C1 controls, DEL: no catalog stores them faithfully, and they would reach logs and reports raw.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_identifier(identifier: str | tuple[str, ...], table: str) -> tuple[str, ...]:
    """The parts of ``identifier`` (``namespace.table``, nested namespaces allowed), or CatalogIdentifierError
    naming ``table`` when it has fewer than two parts, an empty part (``db..t``, ``.t``, ``db.``) or a control
    character. Decided before anything is written: a refused identifier leaves no metadata file behind."""
    parts = Catalog.identifier_to_tuple(identifier)
    problem = None
    if len(parts) < 2:
        problem = "needs a namespace and a table name (namespace.table)"
    elif not all(isinstance(p, str) and p for p in parts):
        problem = "has an empty part"
    elif any(_CONTROL.search(p) for p in parts):
        problem = "holds a control character"
    if problem is not None:
        raise CatalogIdentifierError(f"catalog identifier {identifier!r} of table {location_text(table)} "
                                     f"{problem}; nothing was written")
    return parts


def configured_commit_mode(config: Mapping[str, Any] | None) -> CommitMode:
    """The ``commit_mode`` of the catalog ``config`` configures, decided from the configuration alone."""
    config = config or {}
    return _commit_mode(str(config.get("type", "sql")).lower() == "sql", config.get(COMMIT_MODE_PROPERTY))


def check_format_version(name: str, config: Mapping[str, Any] | None, format_version: int) -> None:
    """Raise CatalogError when the catalog configured by ``config`` cannot take tables of ``format_version``:
    committing metadata updates to any catalog but a REST one has pyiceberg write the new metadata file, and
    pyiceberg 0.12 writes no v3. Decided from the configuration alone (nothing is opened)."""
    config = config or {}
    kind = str(config.get("type", "sql")).lower()
    mode = configured_commit_mode(config)
    if format_version >= 3 and mode == "updates" and kind != "rest":
        raise CatalogError(
            f"catalog {name!r} (type {kind}) cannot take Iceberg format version {format_version} tables: its commits "
            f"have pyiceberg write the table metadata, and pyiceberg {pyiceberg.__version__} writes no v3 metadata; "
            "use the SQL catalog (pointer moves) or a REST catalog, or format version 2"
        )


def check_catalog_target(catalog: Catalog, identifier: str | tuple[str, ...], table_uuid: str, *, table: str,
                         delta_table_id: str | None) -> None:
    """Raise CatalogError, before a conversion writes anything, when ``point_catalog`` could not move
    ``identifier`` to metadata of Iceberg table ``table_uuid`` (Delta table ``delta_table_id`` at ``table``): a
    catalog that commits updates holds it as another table (a Delta table written again at the same path starts a
    new Iceberg history, ``table_identity``), and cannot re-point an identifier to another table uuid. The SQL
    catalog's pointer moves onto any table, and an identifier the catalog does not hold is registered."""
    if commit_mode(catalog) == "pointer":
        return
    ident = Catalog.identifier_to_tuple(identifier)
    try:
        if not catalog.table_exists(ident):
            return
        current = catalog.load_table(ident).metadata
    except Exception as exc:  # noqa: BLE001 - the catalog's own errors, wrapped with what was attempted
        raise CatalogError(f"catalog {catalog.name!r}: looking up {'.'.join(ident)} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    if str(current.table_uuid) == table_uuid:
        return
    name = ".".join(ident)
    held = current.properties.get(DELTA_TABLE_ID)
    held_text = f"Delta table {held}" if held else "not converted from a Delta table by deltaberg"
    raise CatalogError(
        f"catalog {catalog.name!r} holds {name} as Iceberg table {current.table_uuid} ({held_text}); the conversion "
        f"of {location_text(table)} publishes Iceberg table {table_uuid} (Delta table {delta_table_id or 'unknown'}: "
        f"a new Iceberg history), and a {type(catalog).__name__} commit cannot re-point an identifier to another "
        f"table; nothing was written. To serve the new history under {name}, drop {name} from the catalog (its "
        "metadata files stay) and convert again; or convert with another identifier"
    )


def point_catalog(catalog: Catalog, identifier: str | tuple[str, ...], metadata_location: str) -> None:
    """Register the table on first conversion, later move it to the metadata at ``metadata_location``.

    Either way (see the module docstring) the move is conditional on the catalog state read just before: if
    another writer changed the table meanwhile, nothing changes and ConcurrentConversionError is raised.
    """
    try:
        _point(catalog, identifier, metadata_location)
    except (DeltabergError, ConcurrentConversionError):
        raise
    except CommitStateUnknownException as exc:
        raise CatalogError(f"catalog {catalog.name!r}: the commit of {identifier} to {metadata_location} may or "
                           f"may not have happened ({exc}); run the conversion again") from exc
    except Exception as exc:  # noqa: BLE001 - the catalog's own errors, wrapped with what was attempted
        raise CatalogError(f"catalog {catalog.name!r}: registering {identifier} at {metadata_location} failed: "
                           f"{type(exc).__name__}: {exc}") from exc


def _point(catalog: Catalog, identifier: str | tuple[str, ...], metadata_location: str) -> None:
    ident = Catalog.identifier_to_tuple(identifier)
    namespace = ident[:-1]
    mode = commit_mode(catalog)
    if namespace:
        catalog.create_namespace_if_not_exists(namespace)
    if not catalog.table_exists(ident):
        catalog.register_table(ident, metadata_location)
        return
    if mode == "updates":
        _commit_updates(catalog, ident, metadata_location)
        return
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    assert isinstance(catalog, SqlCatalog)
    current = catalog.load_table(ident).metadata_location
    if current == metadata_location:
        return  # a re-run after a crash that happened after the catalog moved
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


def _read_metadata(catalog: Catalog, location: str) -> TableMetadata:
    io = load_file_io(dict(catalog.properties), location)
    return FromInputFile.table_metadata(io.new_input(location))


def _commit_updates(catalog: Catalog, ident: tuple[str, ...], metadata_location: str) -> None:
    name = ".".join(ident)
    table = catalog.load_table(ident)
    if table.metadata_location == metadata_location:
        return  # registered on this very file (a re-run)
    ours = _read_metadata(catalog, metadata_location)
    requirements, updates = metadata_changes(table.metadata, ours, table=name)
    if not updates:
        return  # the catalog already holds what the conversion published
    try:
        response = catalog.commit_table(table, requirements, updates)
    except CommitFailedException as exc:
        raise ConcurrentConversionError(
            f"the catalog entry of {name} changed during the conversion ({exc}); nothing was committed, the "
            "catalog keeps the other writer's state; run the conversion again"
        ) from exc
    _check_committed(response.metadata, ours, name)
    _delete_dropped_catalog_files(table, response.metadata)


def _delete_dropped_catalog_files(table: Table, committed: TableMetadata) -> None:
    """The catalog's own metadata files that its commit dropped from the metadata log, when the table says
    ``write.metadata.delete-after-commit.enabled`` (as pyiceberg's and Iceberg's own commits do; a REST server
    has deleted them already). The converter's ``v<N>.metadata.json`` files are left to the converter."""
    if not property_as_bool(committed.properties, DELETE_AFTER_COMMIT, False):
        return
    dropped = {e.metadata_file for e in table.metadata.metadata_log} - {e.metadata_file for e in committed.metadata_log}
    for location in sorted(dropped):
        if metadata_file_version(location.rsplit("/", 1)[-1]) is not None:
            continue
        try:
            table.io.delete(location)
        except FileNotFoundError:
            pass
        except OSError as exc:  # the commit stands; the file is only left behind
            log.warning("could not delete %s, dropped from the metadata log of %s: %s", location,
                        ".".join(table.name()), exc)


def metadata_changes(current: TableMetadata, ours: TableMetadata, *, table: str
                     ) -> tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
    """Requirements and updates that turn the catalog's ``current`` metadata into ``ours`` (see module docstring).

    Raises CatalogError when the catalog cannot follow: another table's uuid, a restarted history, schemas or
    specs that differ under the same id, or a ``main`` the conversion did not write.
    """
    _check_same_table(current, ours, table)
    _check_history(current, ours, table)
    main = current.refs.get(MAIN_BRANCH)
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=current.table_uuid),
        AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=main.snapshot_id if main else None),
        AssertCurrentSchemaId(current_schema_id=current.current_schema_id),
        AssertLastAssignedFieldId(last_assigned_field_id=current.last_column_id),
        AssertDefaultSpecId(default_spec_id=current.default_spec_id),
        AssertLastAssignedPartitionId(last_assigned_partition_id=current.last_partition_id),
    )
    updates: list[TableUpdate] = []
    known_schemas = {s.schema_id for s in current.schemas}
    # Ascending ids: a REST server assigns the next id itself (highest + 1), which then equals ours.
    updates += [AddSchemaUpdate(schema=s) for s in sorted(ours.schemas, key=lambda s: s.schema_id)
                if s.schema_id not in known_schemas]
    if ours.current_schema_id != current.current_schema_id:
        updates.append(SetCurrentSchemaUpdate(schema_id=ours.current_schema_id))
    known_specs = {s.spec_id for s in current.partition_specs}
    updates += [AddPartitionSpecUpdate(spec=s) for s in sorted(ours.partition_specs, key=lambda s: s.spec_id)
                if s.spec_id not in known_specs]
    if ours.default_spec_id != current.default_spec_id:
        updates.append(SetDefaultSpecUpdate(spec_id=ours.default_spec_id))
    known_snapshots = {s.snapshot_id for s in current.snapshots}
    updates += [AddSnapshotUpdate(snapshot=s) for s in sorted(ours.snapshots, key=lambda s: s.sequence_number or 0)
                if s.snapshot_id not in known_snapshots]
    our_main = ours.refs.get(MAIN_BRANCH)
    if our_main is not None and (main is None or main.snapshot_id != our_main.snapshot_id):
        updates.append(SetSnapshotRefUpdate(ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH,
                                            snapshot_id=our_main.snapshot_id))
    expired = _expired_snapshots(current, ours)
    if expired:
        updates.append(RemoveSnapshotsUpdate(snapshot_ids=expired))
    updates += _property_updates(current.properties, ours.properties)
    return requirements, tuple(updates)


def _check_same_table(current: TableMetadata, ours: TableMetadata, table: str) -> None:
    if current.table_uuid != ours.table_uuid:
        raise CatalogError(
            f"catalog table {table} is another Iceberg table (uuid {current.table_uuid}, the converted one is "
            f"{ours.table_uuid}): register the converted table under another identifier"
        )


def _check_history(current: TableMetadata, ours: TableMetadata, table: str) -> None:
    """Every schema and spec the catalog has must be in ours, unchanged; its ``main`` must be the converter's."""
    our_schemas = {s.schema_id: s for s in ours.schemas}
    our_specs = {s.spec_id: s for s in ours.partition_specs}
    gone = ([f"schema {s.schema_id}" for s in current.schemas if s.schema_id not in our_schemas]
            + [f"partition spec {s.spec_id}" for s in current.partition_specs if s.spec_id not in our_specs])
    if gone:
        raise CatalogError(
            f"the converted metadata of {table} restarted its history ({', '.join(gone)} of the catalog's table "
            f"are gone, e.g. because column mapping was enabled on the Delta table and column ids changed): the "
            f"catalog cannot follow through a commit; register the converted table under a new identifier, or "
            f"drop {table} from the catalog and convert again"
        )
    changed = ([f"schema {s.schema_id}" for s in current.schemas
                if our_schemas[s.schema_id].as_struct() != s.as_struct()]
               + [f"partition spec {s.spec_id}" for s in current.partition_specs
                  if our_specs[s.spec_id].fields != s.fields])
    ours_by_id = {s.snapshot_id: s for s in ours.snapshots}
    changed += [f"snapshot {s.snapshot_id}" for s in current.snapshots
                if s.snapshot_id in ours_by_id and ours_by_id[s.snapshot_id].manifest_list != s.manifest_list]
    if changed:
        raise CatalogError(
            f"catalog table {table} and the converted metadata differ under the same ids ({', '.join(changed)}): "
            "the catalog was changed by another writer; register the converted table under a new identifier"
        )
    main = current.refs.get(MAIN_BRANCH)
    head = current.snapshot_by_id(main.snapshot_id) if main else None
    if head is not None and head.snapshot_id not in ours_by_id and not _converted(head.summary):
        raise CatalogError(
            f"catalog table {table}: main is at snapshot {head.snapshot_id} ({_operation(head.summary)}), which "
            "no conversion wrote: another writer commits to this table through the catalog, and the next "
            "conversion would drop its changes; register the converted table under another identifier"
        )


def _converted(summary: Any) -> bool:
    return summary is not None and DELTA_VERSION in summary.additional_properties


def _operation(summary: Any) -> str:
    return summary.operation.value if summary is not None else "no summary"


def _expired_snapshots(current: TableMetadata, ours: TableMetadata) -> list[int]:
    """The converter's snapshots the catalog has and ours no longer has, unless a ref other than main keeps them."""
    ours_ids = {s.snapshot_id for s in ours.snapshots}
    kept = {ref.snapshot_id for name, ref in current.refs.items() if name != MAIN_BRANCH}
    return [s.snapshot_id for s in current.snapshots
            if s.snapshot_id not in ours_ids and s.snapshot_id not in kept and _converted(s.summary)]


def _property_updates(current: Mapping[str, str], ours: Mapping[str, str]) -> Sequence[TableUpdate]:
    """Properties made equal to ours: the pointer move would replace them all, the commit must end the same."""
    changed = {k: v for k, v in ours.items() if k not in _RESERVED_PROPERTIES and current.get(k) != v}
    removed = sorted(k for k in current if k not in ours and k not in _RESERVED_PROPERTIES)
    out: list[TableUpdate] = []
    if changed:
        out.append(SetPropertiesUpdate(updates=changed))
    if removed:
        out.append(RemovePropertiesUpdate(removals=removed))
    return out


def _check_committed(committed: TableMetadata, ours: TableMetadata, table: str) -> None:
    """The catalog's new metadata must read our snapshot with our schema and spec ids (a REST server assigns ids
    itself; were they to differ, our manifests would name the wrong spec)."""
    mismatches = [
        what for what, theirs, mine in (
            ("current snapshot", committed.current_snapshot_id, ours.current_snapshot_id),
            ("current schema id", committed.current_schema_id, ours.current_schema_id),
            ("default spec id", committed.default_spec_id, ours.default_spec_id),
        ) if theirs != mine
    ]
    if not mismatches and committed.schema().as_struct() != ours.schema().as_struct():
        mismatches.append("current schema")
    if not mismatches and committed.spec().fields != ours.spec().fields:
        mismatches.append("default partition spec")
    if mismatches:
        raise CatalogError(
            f"catalog table {table}: the catalog committed the conversion but its {', '.join(mismatches)} differ "
            "from the converted metadata; register the converted table under a new identifier"
        )
