"""Delta -> Iceberg conversion: write Iceberg metadata for Delta versions next to the Delta log.

Full: one Iceberg snapshot listing every live file of a Delta version. Incremental: one Iceberg snapshot
per Delta commit after the last converted one, reusing the manifests a commit does not touch.

Order of writes (each a new file, so a crash anywhere leaves the previous Iceberg state readable):
manifests and their entry copies, the conversion state, the manifest list, ``v<N>.metadata.json``
(write-if-absent), ``version-hint.text``, the catalog pointer. Snapshot ids and the table uuid derive
from the Delta table, so running the same conversion again converges.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.delta import DeltaTable, Metadata, Snapshot
from airflow_deltaberg.core.delta.stats import parse_stats
from airflow_deltaberg.core.errors import VersionNotFoundError
from airflow_deltaberg.core.iceberg.catalog import open_catalog, point_catalog
from airflow_deltaberg.core.iceberg.conversion_state import (
    ConversionState,
    ManifestRecord,
    read_entries,
    read_state,
    write_manifest_record,
    write_state,
)
from airflow_deltaberg.core.iceberg.data_files import (
    DeletionVectorsNotConvertibleError,
    data_file_locations,
    entries_for_files,
    refuse_deletion_vectors,
)
from airflow_deltaberg.core.iceberg.manifest import write_manifest_list
from airflow_deltaberg.core.iceberg.partition import identity_spec
from airflow_deltaberg.core.iceberg.publish import (
    METADATA_DIR,
    PublishedMetadata,
    ensure_version_hint,
    latest_metadata,
    publish_metadata,
)
from airflow_deltaberg.core.iceberg.schema import NAME_MAPPING_PROPERTY, ConvertedSchema, convert_schema
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_VERSION, SnapshotSpec, build_metadata, new_snapshot_id
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)

MANIFEST_ROWS = 250_000


@dataclass(frozen=True)
class ConversionResult:
    """What a conversion did (the operator's XCom and the CLI's JSON)."""

    table: str
    mode: str  # "full" | "incremental" | "up-to-date"
    delta_version: int
    snapshot_id: int
    metadata_location: str
    files_added: int
    files_removed: int
    records: int
    seconds: float
    identifier: str | None = None
    snapshots_written: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Tip:
    """The Iceberg state a new snapshot builds on."""

    published: PublishedMetadata | None
    state: ConversionState | None

    @property
    def total_files(self) -> int:
        return int(self._summary().get("total-data-files", 0))

    @property
    def total_records(self) -> int:
        return int(self._summary().get("total-records", 0))

    def _summary(self) -> dict[str, str]:
        if self.published is None or self.published.metadata.current_snapshot_id is None:
            return {}
        snap = self.published.metadata.snapshot_by_id(self.published.metadata.current_snapshot_id)
        return dict(snap.summary.additional_properties) if snap and snap.summary else {}


def _schema_and_spec(metadata: Metadata, table: str, tip: _Tip) -> tuple[ConvertedSchema, PartitionSpec]:
    prev = tip.published.metadata if tip.published else None
    converted = convert_schema(
        metadata.schema, metadata.column_mapping_mode, table=table,
        previous=prev.schema() if prev else None, previous_last_column_id=prev.last_column_id if prev else 0,
        partition_columns=metadata.partition_columns,
    )
    return converted, identity_spec(converted.schema, metadata.partition_columns)


def _commit_snapshot(
    storage: Storage,
    tip: _Tip,
    *,
    delta_metadata: Metadata,
    converted: ConvertedSchema,
    spec: PartitionSpec,
    manifests: Sequence[ManifestRecord],
    delta_version: int,
    timestamp_ms: int,
    operation: Operation,
    summary: dict[str, str],
) -> _Tip:
    """Write the state, manifest list and metadata of one new Iceberg snapshot, then publish it."""
    prev = tip.published.metadata if tip.published else None
    snapshot_id = new_snapshot_id(prev, delta_metadata.id, delta_version)
    sequence_number = (prev.last_sequence_number if prev else 0) + 1
    state = ConversionState(delta_version, delta_metadata.to_action(), tuple(manifests))
    list_key = f"{METADATA_DIR}/snap-{snapshot_id}-1-{uuid.uuid4()}.avro"
    write_state(storage, list_key, state)
    fs, list_path = storage.arrow_path(list_key)
    write_manifest_list(list_path, [m.info for m in manifests], snapshot_id,
                        prev.current_snapshot_id if prev else None, sequence_number, filesystem=fs)
    metadata = build_metadata(
        previous=prev,
        previous_location=tip.published.location if tip.published else None,
        location=storage.root,
        delta_table_id=delta_metadata.id,
        schema=converted.schema,
        last_column_id=converted.last_column_id,
        spec=spec,
        properties={NAME_MAPPING_PROPERTY: converted.name_mapping_json(), "format-version": "2"},
        snapshot=SnapshotSpec(snapshot_id, delta_version, timestamp_ms, operation, storage.uri(list_key), summary),
        now_ms=int(time.time() * 1000),
    )
    published = publish_metadata(storage, (tip.published.version if tip.published else 0) + 1, metadata)
    return _Tip(published, state)


def _totals(summary: dict[str, str], tip: _Tip, added: pa.Table | None, removed_records: int,
            removed_files: int) -> dict[str, str]:
    added_files = added.num_rows if added is not None else 0
    added_records = int(pc.sum(added.column("record_count")).as_py() or 0) if added is not None else 0
    summary.update({
        "added-data-files": str(added_files),
        "added-records": str(added_records),
        "deleted-data-files": str(removed_files),
        "deleted-records": str(removed_records),
        "total-data-files": str(tip.total_files + added_files - removed_files),
        "total-records": str(tip.total_records + added_records - removed_records),
        "total-delete-files": "0",
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
    })
    return summary


def convert_full(storage: Storage, snapshot: Snapshot, tip: _Tip) -> tuple[_Tip, int, int]:
    """One Iceberg snapshot listing every live file of ``snapshot``."""
    refuse_deletion_vectors(snapshot)
    converted, spec = _schema_and_spec(snapshot.metadata, snapshot.table, tip)
    prev = tip.published.metadata if tip.published else None
    snapshot_id = new_snapshot_id(prev, snapshot.metadata.id, snapshot.version)
    sequence_number = (prev.last_sequence_number if prev else 0) + 1
    entries = entries_for_files(snapshot.files, snapshot.metadata, converted, spec, storage, table=snapshot.table,
                                snapshot_id=snapshot_id, sequence_number=sequence_number)
    manifests = [
        write_manifest_record(storage, entries.slice(offset, MANIFEST_ROWS), converted.schema, spec, snapshot_id,
                              sequence_number)
        for offset in range(0, entries.num_rows, MANIFEST_ROWS)
    ]
    removed_files, removed_records = tip.total_files, tip.total_records
    # A full snapshot replaces everything: its totals are its own files.
    base = _Tip(None, None)
    summary = _totals({}, base, entries, 0, 0)
    summary["deleted-data-files"], summary["deleted-records"] = str(removed_files), str(removed_records)
    new_tip = _commit_snapshot(
        storage, tip, delta_metadata=snapshot.metadata, converted=converted, spec=spec, manifests=manifests,
        delta_version=snapshot.version, timestamp_ms=snapshot.timestamp,
        operation=Operation.OVERWRITE if prev else Operation.APPEND, summary=summary,
    )
    return new_tip, entries.num_rows, removed_files


class _FallBackToFull(Exception):
    """Incremental conversion cannot continue; the reason goes to the log."""


def _operation(adds: pa.Table, removes: pa.Table) -> Operation:
    changes = pa.concat_arrays([adds.column("dataChange").combine_chunks(),
                                removes.column("dataChange").combine_chunks()])
    if len(changes) and not pc.any(pc.fill_null(changes, True)).as_py():
        return Operation.REPLACE
    if removes.num_rows == 0:
        return Operation.APPEND
    return Operation.DELETE if adds.num_rows == 0 else Operation.OVERWRITE


def _remove_files(
    storage: Storage, manifests: list[ManifestRecord], locations: pa.Array, schema: Schema, spec: PartitionSpec,
    snapshot_id: int, sequence_number: int,
) -> tuple[list[ManifestRecord], int, int]:
    """Rewrite the manifests holding removed files: those entries become DELETED, the rest EXISTING."""
    kept: list[ManifestRecord] = []
    removed_files = removed_records = 0
    for record in manifests:
        if not record.may_contain(locations):
            kept.append(record)
            continue
        entries = read_entries(storage, record)
        live = pc.not_equal(entries.column("status"), 2)
        entries = entries.filter(live)  # entries deleted by an older snapshot are not carried on
        hit = pc.is_in(entries.column("file_path"), locations)
        if not pc.any(hit).as_py():
            kept.append(record)
            continue
        removed_files += int(pc.sum(hit.cast(pa.int64())).as_py())
        removed_records += int(pc.sum(entries.column("record_count").filter(hit)).as_py() or 0)
        hit_np = np.asarray(hit)
        status = np.where(hit_np, 2, 0).astype(np.int32)
        snap_ids = np.where(hit_np, snapshot_id, np.asarray(entries.column("snapshot_id")))
        rewritten = entries.set_column(entries.schema.get_field_index("status"), "status", pa.array(status))
        rewritten = rewritten.set_column(rewritten.schema.get_field_index("snapshot_id"), "snapshot_id",
                                         pa.array(snap_ids, pa.int64()))
        kept.append(write_manifest_record(storage, rewritten, schema, spec, snapshot_id, sequence_number))
    return kept, removed_files, removed_records


def convert_incremental(table: DeltaTable, tip: _Tip, target_version: int) -> tuple[_Tip, int, int, int]:
    """One Iceberg snapshot per Delta commit after the tip's version; raises _FallBackToFull when the
    commits or the conversion state are not available."""
    storage = table.storage
    if tip.state is None:
        raise _FallBackToFull("no conversion state next to the current Iceberg snapshot")
    start = tip.state.delta_version + 1
    try:
        commit_range = table.commits(start, target_version)
    except VersionNotFoundError as exc:
        raise _FallBackToFull(f"the commits after version {start - 1} are gone ({exc})") from exc
    actions = commit_range.actions
    metadata = Metadata.from_action(tip.state.delta_metadata)
    metadata_by_version = {v: body for v, name, body in actions.other_actions if name == "metaData"}
    files_added = files_removed = written = 0
    for version in range(start, target_version + 1):
        if version in metadata_by_version:
            new_metadata = Metadata.from_action(metadata_by_version[version])
            if new_metadata.partition_columns != metadata.partition_columns or new_metadata.id != metadata.id:
                raise _FallBackToFull(f"version {version} changes the partitioning or replaces the table")
            metadata = new_metadata
        rows = actions.file_actions.filter(pc.equal(actions.file_actions.column("version"), version))
        adds = rows.filter(rows.column("is_add"))
        removes = rows.filter(pc.invert(rows.column("is_add")))
        dv = adds.column("deletionVector").combine_chunks()
        if dv.null_count != len(dv):
            raise DeletionVectorsNotConvertibleError(
                f"commit {version} adds files with deletion vectors, which Iceberg readers would not apply; "
                f"nothing of this commit was converted (table {table.location}, version {version})"
            )
        converted, spec = _schema_and_spec(metadata, table.location, tip)
        prev = tip.published.metadata if tip.published else None
        snapshot_id = new_snapshot_id(prev, metadata.id, version)
        sequence_number = (prev.last_sequence_number if prev else 0) + 1
        manifests = list(tip.state.manifests) if tip.state else []
        removed_files = removed_records = 0
        if removes.num_rows:
            locations = data_file_locations(storage, removes.column("path").combine_chunks())
            manifests, removed_files, removed_records = _remove_files(
                storage, manifests, locations, converted.schema, spec, snapshot_id, sequence_number)
        added = None
        if adds.num_rows:
            files = adds.append_column("stats_parsed", parse_stats(adds.column("stats").combine_chunks(),
                                                                   metadata.schema))
            added = entries_for_files(files, metadata, converted, spec, storage, table=table.location,
                                      snapshot_id=snapshot_id, sequence_number=sequence_number)
            manifests.append(write_manifest_record(storage, added, converted.schema, spec, snapshot_id,
                                                   sequence_number))
        summary = _totals({}, tip, added, removed_records, removed_files)
        tip = _commit_snapshot(
            storage, tip, delta_metadata=metadata, converted=converted, spec=spec, manifests=manifests,
            delta_version=version, timestamp_ms=commit_range.timestamps[version],
            operation=_operation(adds, removes), summary=summary,
        )
        files_added += adds.num_rows
        files_removed += removed_files
        written += 1
    return tip, files_added, files_removed, written


def _current_state(storage: Storage, published: PublishedMetadata | None) -> ConversionState | None:
    if published is None or published.metadata.current_snapshot_id is None:
        return None
    snapshot = published.metadata.snapshot_by_id(published.metadata.current_snapshot_id)
    return read_state(storage, snapshot.manifest_list) if snapshot else None


def convert(
    location: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    catalog_config: Mapping[str, Any] | None = None,
    catalog_name: str = "deltaberg",
    identifier: str | None = None,
    version: int | None = None,
    full: bool = False,
) -> ConversionResult:
    """Convert the Delta table at ``location`` up to ``version`` (latest by default) and register it.

    Incremental when an earlier conversion exists (one Iceberg snapshot per new Delta commit), full when
    asked, on the first run, or when the commits since the last run are gone (logged with the reason).
    """
    started = time.monotonic()
    table = DeltaTable(location, storage_options)
    target = table.latest_version() if version is None else version
    published = latest_metadata(table.storage)
    tip = _Tip(published, _current_state(table.storage, published))
    converted_version = int(published.metadata.properties.get(DELTA_VERSION, -1)) if published else -1
    files_added = files_removed = written = 0
    if published is not None and converted_version == target and not full:
        mode = "up-to-date"
    else:
        mode = "incremental"
        if full or published is None or converted_version > target:
            mode = "full"
        else:
            try:
                tip, files_added, files_removed, written = convert_incremental(table, tip, target)
            except _FallBackToFull as reason:
                log.info("%s: full conversion instead of incremental: %s", table.location, reason)
                mode = "full"
        if mode == "full":
            snapshot = table.snapshot(target)
            tip, files_added, files_removed = convert_full(table.storage, snapshot, tip)
            written = 1
    assert tip.published is not None
    # A crash between a metadata file and its hint leaves the hint behind: bring it up to date.
    ensure_version_hint(table.storage, tip.published.version)
    if identifier is not None:
        point_catalog(open_catalog(catalog_name, catalog_config), identifier, tip.published.location)
    current = tip.published.metadata.current_snapshot_id or 0
    return ConversionResult(
        table=table.location,
        mode=mode,
        delta_version=int(tip.published.metadata.properties.get(DELTA_VERSION, target)),
        snapshot_id=current,
        metadata_location=tip.published.location,
        files_added=files_added,
        files_removed=files_removed,
        records=tip.total_records,
        seconds=round(time.monotonic() - started, 3),
        identifier=identifier,
        snapshots_written=written,
    )
