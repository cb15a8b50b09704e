"""Delta -> Iceberg conversion: write Iceberg metadata for Delta versions next to the Delta log.

Full: one Iceberg snapshot listing every live file of a Delta version. Incremental: one Iceberg snapshot
per Delta commit after the last converted one, reusing the manifests a commit does not touch.

Order of writes (each a new file, so a crash anywhere leaves the previous Iceberg state readable):
manifests and their entry copies, the conversion state, the manifest list, ``v<N>.metadata.json``
(write-if-absent), ``version-hint.text``, the catalog pointer. Snapshot ids and the table uuid derive
from the Delta table, so running the same conversion again converges. An attempt that fails before its metadata
file is written deletes the files it wrote (their names hold the attempt's id); a killed process leaves them,
unreferenced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.delta import DeltaTable, Metadata, Snapshot
from airflow_deltaberg.core.delta.log_segment import commit_key
from airflow_deltaberg.core.delta.paths import files_outside_table
from airflow_deltaberg.core.errors import CorruptLogError, DeltabergError, StatsParseError, VersionNotFoundError
from airflow_deltaberg.core.iceberg.catalog import check_format_version, open_catalog, point_catalog
from airflow_deltaberg.core.iceberg.conversion_state import (
    ConversionState,
    ManifestRecord,
    attempt_keys,
    data_path_column,
    read_entries,
    read_state,
    with_first_row_ids,
    write_manifest_record,
    write_state,
)
from airflow_deltaberg.core.iceberg.data_files import data_file_locations
from airflow_deltaberg.core.iceberg.deletion_vector_files import deletion_vector_key
from airflow_deltaberg.core.iceberg.expire import Expiry, delete_expired_files, expire_snapshots
from airflow_deltaberg.core.iceberg.file_manifests import (
    ManifestEngine,
    SnapshotPlan,
    file_entries,
    in_process,
    two_at_a_time,
    write_entry_manifests,
    write_snapshot_manifests,
)
from airflow_deltaberg.core.iceberg.manifest import FORMAT_VERSIONS, assign_first_row_ids, write_manifest_list
from airflow_deltaberg.core.iceberg.partition import identity_spec
from airflow_deltaberg.core.iceberg.position_deletes import delete_file_key
from airflow_deltaberg.core.iceberg.publish import (
    ICEBERG_DIR,
    METADATA_DIR,
    PublishedMetadata,
    dropped_metadata_files,
    ensure_version_hint,
    latest_metadata,
    metadata_key,
    publish_metadata,
)
from airflow_deltaberg.core.iceberg.schema import (
    NAME_MAPPING_PROPERTY,
    ConvertedSchema,
    convert_schema,
)
from airflow_deltaberg.core.iceberg.table_metadata import (
    DELETE_AFTER_COMMIT,
    DELTA_COLUMN_MAPPING_MODE,
    DELTA_VERSION,
    PREVIOUS_VERSIONS_MAX,
    RowLineage,
    SnapshotSpec,
    build_metadata,
    new_snapshot_id,
    next_row_id,
    with_table_ids,
)
from airflow_deltaberg.core.iceberg.verify_stats import verify_commit_stats, verify_snapshot_stats
from airflow_deltaberg.core.memory_pool import large_buffer_pool
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1

#: Metadata files of earlier versions kept (and named in the metadata log); older ones are deleted once every
#: pointer has moved on, by this converter for its own files and by the catalogs for theirs.
METADATA_VERSIONS_KEPT = 100


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
    snapshots_expired: int = 0
    files_outside_table: int = 0  # data and DV files of the snapshots written that lie outside the table root

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
    return converted, identity_spec(converted.schema, metadata.partition_columns,
                                    previous=prev.partition_specs if prev else ())


def plan_snapshot(table: DeltaTable, tip: _Tip, metadata: Metadata, delta_version: int, timestamp_ms: int,
                  storage_options: Mapping[str, Any] | None = None, format_version: int = 2) -> SnapshotPlan:
    """The plan of the Iceberg snapshot for ``delta_version`` on top of ``tip``."""
    converted, spec = _schema_and_spec(metadata, table.location, tip)
    prev = tip.published.metadata if tip.published else None
    schema, spec = with_table_ids(converted.schema, spec, prev, _resets_history(tip, metadata))
    converted = replace(converted, schema=schema)
    return SnapshotPlan(
        table=table.location,
        storage_options=dict(storage_options) if storage_options else None,
        delta_version=delta_version,
        timestamp_ms=timestamp_ms,
        metadata=metadata,
        converted=converted,
        spec=spec,
        snapshot_id=new_snapshot_id(prev, metadata.id, delta_version),
        sequence_number=(prev.last_sequence_number if prev else 0) + 1,
        format_version=format_version,
    )


def _commit_snapshot(storage: Storage, tip: _Tip, plan: SnapshotPlan, manifests: Sequence[ManifestRecord],
                     operation: Operation, summary: dict[str, str]) -> _Tip:
    """Write the state, manifest list and metadata of one new Iceberg snapshot, then publish it."""
    too_big = sorted(name for name, value in summary.items() if int(value) > LONG_MAX)
    if too_big:
        # Each file's numRecords fits a long, their sum does not: some numRecords is wrong (Iceberg keeps the totals
        # in longs). The attempt's manifests are taken back by _discarded_unless_published.
        raise CorruptLogError(f"the live files' numRecords add up to more than a long holds ({', '.join(too_big)}); "
                              "the numRecords of some data file is wrong", table=plan.table,
                              version=plan.delta_version)
    prev = tip.published.metadata if tip.published else None
    lineage = None
    if plan.format_version >= 3:
        # Row lineage: the data manifests new in this snapshot take row ids from the table's next-row-id on.
        first_row_id = next_row_id(prev)
        infos, next_id = assign_first_row_ids([m.info for m in manifests], first_row_id)
        manifests = [replace(m, info=info) for m, info in zip(manifests, infos, strict=True)]
        lineage = RowLineage(first_row_id, next_id)
    state = ConversionState(plan.delta_version, plan.metadata, tuple(manifests))
    list_key = f"{METADATA_DIR}/snap-{plan.snapshot_id}-1-{plan.attempt}.avro"
    write_state(storage, list_key, state)
    fs, list_path = storage.arrow_path(list_key)
    write_manifest_list(list_path, [m.info for m in manifests], plan.snapshot_id,
                        prev.current_snapshot_id if prev else None, plan.sequence_number, filesystem=fs,
                        format_version=plan.format_version, first_row_id=lineage.first_row_id if lineage else None)
    mode = plan.metadata.column_mapping_mode
    metadata_properties = {NAME_MAPPING_PROPERTY: plan.converted.name_mapping_json(),
                           DELTA_COLUMN_MAPPING_MODE: mode, PREVIOUS_VERSIONS_MAX: str(METADATA_VERSIONS_KEPT),
                           DELETE_AFTER_COMMIT: "true", **plan.converted.properties}
    reset = _resets_history(tip, plan.metadata)
    if reset:
        log.info("%s: column mapping mode %s -> %s at Delta version %s: the Iceberg schemas, partition specs and "
                 "snapshots start afresh (column ids change)", plan.table, _converted_mapping_mode(tip), mode,
                 plan.delta_version)
    metadata = build_metadata(
        previous=prev,
        previous_location=tip.published.location if tip.published else None,
        location=storage.uri(ICEBERG_DIR),
        delta_table_id=plan.metadata.id,
        schema=plan.converted.schema,
        last_column_id=plan.converted.last_column_id,
        spec=plan.spec,
        properties=metadata_properties,
        snapshot=SnapshotSpec(plan.snapshot_id, plan.delta_version, plan.timestamp_ms, operation,
                              storage.uri(list_key), summary),
        now_ms=int(time.time() * 1000),
        reset_history=reset,
        format_version=plan.format_version,
        lineage=lineage,
    )
    published = publish_metadata(storage, (tip.published.version if tip.published else 0) + 1, metadata)
    return _Tip(published, state)


def _converted_mapping_mode(tip: _Tip) -> str | None:
    """The Delta column mapping mode of the converted version the tip holds."""
    if tip.published is None:
        return None
    mode = tip.published.metadata.properties.get(DELTA_COLUMN_MAPPING_MODE)
    if mode is None and tip.state is not None:
        mode = tip.state.delta_metadata.column_mapping_mode
    return mode


def _resets_history(tip: _Tip, metadata: Metadata) -> bool:
    previous_mode = _converted_mapping_mode(tip)
    return previous_mode is not None and previous_mode != metadata.column_mapping_mode


def _summary(manifests: Sequence[ManifestRecord], snapshot_id: int) -> dict[str, str]:
    """Snapshot summary counts from the manifest list rows (Iceberg spec, "Snapshot Summary")."""
    def total(content: int, what: str) -> int:
        return sum(getattr(m.info, f"added_{what}_count") + getattr(m.info, f"existing_{what}_count")
                   for m in manifests if m.info.content == content)

    def changed(content: int, kind: str, what: str) -> int:
        return sum(getattr(m.info, f"{kind}_{what}_count") for m in manifests
                   if m.info.content == content and m.info.added_snapshot_id == snapshot_id)

    return {
        "added-data-files": str(changed(0, "added", "files")),
        "added-records": str(changed(0, "added", "rows")),
        "deleted-data-files": str(changed(0, "deleted", "files")),
        "deleted-records": str(changed(0, "deleted", "rows")),
        "added-delete-files": str(changed(1, "added", "files")),
        "added-position-deletes": str(changed(1, "added", "rows")),
        "removed-delete-files": str(changed(1, "deleted", "files")),
        "removed-position-deletes": str(changed(1, "deleted", "rows")),
        "total-data-files": str(total(0, "files")),
        "total-records": str(total(0, "rows")),
        "total-delete-files": str(total(1, "files")),
        "total-position-deletes": str(total(1, "rows")),
        "total-equality-deletes": "0",
    }


def convert_full(table: DeltaTable, snapshot: Snapshot, tip: _Tip, *,
                 storage_options: Mapping[str, Any] | None = None,
                 manifest_writer: ManifestEngine | None = None, format_version: int = 2) -> tuple[_Tip, int, int]:
    """One Iceberg snapshot listing every live file of ``snapshot``."""
    storage = table.storage
    plan = plan_snapshot(table, tip, snapshot.metadata, snapshot.version, snapshot.timestamp, storage_options,
                         format_version)
    with _discarded_unless_published(storage, tip, plan):
        manifests = write_snapshot_manifests(storage, plan, snapshot, manifest_writer or in_process)
        summary = _summary(manifests, plan.snapshot_id)
        # A full snapshot replaces everything: what it deletes are the previous snapshot's totals.
        removed_files = tip.total_files
        summary["deleted-data-files"], summary["deleted-records"] = str(removed_files), str(tip.total_records)
        prev = tip.published.metadata if tip.published else None
        new_tip = _commit_snapshot(storage, tip, plan, manifests, Operation.OVERWRITE if prev else Operation.APPEND,
                                   summary)
    return new_tip, int(summary["added-data-files"]), removed_files


@contextmanager
def _discarded_unless_published(storage: Storage, tip: _Tip, plan: SnapshotPlan) -> Iterator[None]:
    """Run one attempt at the snapshot of ``plan`` on top of ``tip``: when it fails before its metadata file is
    published, the files it wrote (manifests, entry copies, manifest list, state) are deleted, so that a refused
    or failed conversion leaves nothing behind. Once the metadata file names them they stay, whatever fails next."""
    try:
        yield
    except BaseException:
        version = (tip.published.version if tip.published else 0) + 1
        if not _published_by(storage, version, plan.attempt):
            try:
                for key in attempt_keys(storage, plan.attempt):
                    storage.delete(key)
            except Exception as cleanup:  # noqa: BLE001 - the attempt's own error is the one to report
                log.warning("%s: could not delete the files of a failed conversion attempt %s: %s", plan.table,
                            plan.attempt, cleanup)
        raise


def _published_by(storage: Storage, version: int, attempt: str) -> bool:
    """Whether metadata file ``version`` exists and is this attempt's (it names the attempt's manifest list)."""
    try:
        return attempt.encode() in storage.read(metadata_key(version))
    except FileNotFoundError:
        return False


class _FallBackToFull(Exception):
    """Incremental conversion cannot continue; the reason goes to the log. ``progress`` is what the incremental run
    published before it stopped (the full conversion builds on its tip), when it published anything."""

    def __init__(self, reason: str, progress: _Progress | None = None):
        super().__init__(reason)
        self.progress = progress


@dataclass(frozen=True)
class _Progress:
    """The Iceberg tip after some incremental snapshots, and what they did."""

    tip: _Tip
    files_added: int = 0
    files_removed: int = 0
    snapshots_written: int = 0
    files_outside_table: int = 0  # data and DV files they added that lie outside the table root


def _operation(changes: pa.Array, summary: dict[str, str]) -> Operation:
    """Iceberg's operation for a commit: replace when nothing changes data (dataChange=false everywhere),
    append when files are only added, delete when rows are only removed, overwrite otherwise."""
    if len(changes) and not pc.any(pc.fill_null(changes, True)).as_py():
        return Operation.REPLACE
    added = int(summary["added-data-files"])
    removed = int(summary["deleted-data-files"]) + int(summary["added-delete-files"])
    if not removed:
        return Operation.APPEND
    return Operation.DELETE if not added else Operation.OVERWRITE


def _remove_entries(
    storage: Storage, manifests: list[ManifestRecord], locations: pa.Array, plan: SnapshotPlan, content: int,
) -> list[ManifestRecord]:
    """Rewrite the manifests of ``content`` holding entries about data files at ``locations`` (the data files
    themselves, or the position deletes referencing them): those entries become DELETED, the rest EXISTING."""
    column = data_path_column(content)

    def without(record: ManifestRecord) -> ManifestRecord:
        if record.info.content != content or not record.may_contain(locations):
            return record
        entries = read_entries(storage, record)
        if plan.format_version >= 3 and content == 0:
            # Rewritten entries keep the row ids they inherited from this manifest.
            entries = with_first_row_ids(entries, record.info.first_row_id)
        entries = entries.filter(pc.not_equal(entries.column("status"), 2))  # deleted earlier: not carried on
        hit = pc.is_in(entries.column(column), locations)
        if not pc.any(hit).as_py():
            return record
        hit_np = np.asarray(hit)
        status = np.where(hit_np, 2, 0).astype(np.int32)
        snap_ids = np.where(hit_np, plan.snapshot_id, np.asarray(entries.column("snapshot_id")))
        rewritten = entries.set_column(entries.schema.get_field_index("status"), "status", pa.array(status))
        rewritten = rewritten.set_column(rewritten.schema.get_field_index("snapshot_id"), "snapshot_id",
                                         pa.array(snap_ids, pa.int64()))
        return write_manifest_record(storage, rewritten, plan.converted.schema, plan.spec, plan.snapshot_id,
                                     plan.sequence_number, content="deletes" if content else "data",
                                     format_version=plan.format_version, attempt=plan.attempt)

    # A removal spread over a partition touches a few manifests: they are rewritten two at a time.
    return two_at_a_time(without, manifests)


def _convert_commit(storage: Storage, tip: _Tip, plan: SnapshotPlan, adds: pa.Table,
                    removes: pa.Table) -> tuple[_Tip, int, int]:
    """One Iceberg snapshot for one Delta commit's add and remove actions.

    A path both removed and added in the commit is the same data file with a new deletion vector (or none):
    its data entry stays, and only its position deletes change.
    """
    if tip.state is None:
        raise _FallBackToFull("no conversion state next to the current Iceberg snapshot")
    manifests = list(tip.state.manifests)
    add_locations = data_file_locations(storage, adds.column("path").combine_chunks())
    removed_locations = data_file_locations(storage, removes.column("path").combine_chunks())
    changes = pa.concat_arrays([adds.column("dataChange").combine_chunks(),
                                removes.column("dataChange").combine_chunks()])
    readded = _live_files_added_again(storage, manifests, plan, adds, add_locations, removed_locations)
    if readded is not None:
        # Their entries (and position deletes) stay as they are: the rows did not change.
        adds, add_locations = adds.filter(pc.invert(readded)), add_locations.filter(pc.invert(readded))
    if removes.num_rows:
        gone = removed_locations.filter(pc.invert(pc.is_in(removed_locations, add_locations)))
        if len(gone):
            manifests = _remove_entries(storage, manifests, gone, plan, content=0)
        manifests = _remove_entries(storage, manifests, removed_locations, plan, content=1)
    if adds.num_rows:
        entries = file_entries(storage, plan, adds)  # in partition and path order, not the commit's
        new_data = entries.data.filter(pc.invert(pc.is_in(entries.data.column("file_path"), removed_locations)))
        if new_data.num_rows:
            manifests += write_entry_manifests(storage, plan, new_data)
        if entries.deletes is not None:
            manifests += write_entry_manifests(storage, plan, entries.deletes, content="deletes")
    summary = _summary(manifests, plan.snapshot_id)
    new_tip = _commit_snapshot(storage, tip, plan, manifests, _operation(changes, summary), summary)
    return new_tip, int(summary["added-data-files"]), int(summary["deleted-data-files"])


def _live_files_added_again(storage: Storage, manifests: Sequence[ManifestRecord], plan: SnapshotPlan,
                            adds: pa.Table, add_locations: pa.Array, removed_locations: pa.Array) -> pa.Array | None:
    """Which adds name a data file that is live already (and not removed by the same commit), or None for none.

    Reconciliation lets a commit add a live file again without removing it: the newest add of a (path, deletion
    vector) replaces the older one. Delta writes such adds with dataChange=false (statistics recomputed, row ids
    backfilled when row tracking is enabled on an existing table). Those, and adds with a deletion vector (Delta
    gives a live file a deletion vector with a remove of its add in the same commit: one without it may name a live
    file), are looked up in the data manifests whose path range holds them; every add is looked up in the delete
    manifests (they list only files with a deletion vector: few). Appends of new files cost no data manifest read.
    The deletion vector must be the live one: another one without a remove of the live file would leave the file
    live twice, which Iceberg cannot express (CorruptLogError)."""
    not_removed = pc.invert(pc.is_in(add_locations, removed_locations))
    if not pc.any(not_removed).as_py():
        return None
    may_be_live = pc.or_(pc.invert(pc.fill_null(adds.column("dataChange").combine_chunks(), False)),
                         adds.column("deletionVector").combine_chunks().is_valid())
    looked_up = add_locations.filter(pc.and_(not_removed, may_be_live))
    added = add_locations.filter(not_removed)
    live_data: list[pa.Array] = []
    live_deletes: list[pa.Table] = []
    for record in manifests:
        wanted = added if record.info.content == 1 else looked_up
        if not len(wanted) or not record.may_contain(wanted):
            continue
        entries = read_entries(storage, record)
        entries = entries.filter(pc.and_(pc.not_equal(entries.column("status"), 2),
                                         pc.is_in(entries.column(data_path_column(record.info.content)), wanted)))
        if record.info.content == 0:
            live_data.append(entries.column("file_path").combine_chunks())
        else:
            live_deletes.append(entries.select(["referenced_data_file", "file_path"]))
    deletes = pa.concat_tables(live_deletes) if live_deletes else None
    live = pa.concat_arrays(live_data) if live_data else pa.array([], pa.string())
    if deletes is not None:  # a live position delete names a live data file
        live = pa.concat_arrays([live, deletes.column("referenced_data_file").combine_chunks()])
    readded = pc.and_(not_removed, pc.is_in(add_locations, live))
    if not pc.any(readded).as_py():
        return None
    key_of = deletion_vector_key if plan.format_version >= 3 else delete_file_key
    rows = np.flatnonzero(np.asarray(readded))
    for row, location, dv in zip(rows.tolist(), add_locations.take(pa.array(rows)).to_pylist(),
                                 adds.column("deletionVector").take(pa.array(rows)).to_pylist(), strict=True):
        current = [] if deletes is None else \
            deletes.filter(pc.equal(deletes.column("referenced_data_file"), location)).column("file_path").to_pylist()
        expected = [] if not dv or not dv.get("cardinality") else [storage.uri(key_of(location, dv))]
        if sorted(current) != expected:
            raise CorruptLogError(
                f"the data file {adds.column('path')[row].as_py()} is added again with another deletion vector than "
                "its live one, which no remove takes away: it would be live twice", table=plan.table,
                version=plan.delta_version)
    return readded


def convert_incremental(table: DeltaTable, tip: _Tip, target_version: int,
                        storage_options: Mapping[str, Any] | None = None, *,
                        verify_stats: bool = False) -> _Progress:
    """One Iceberg snapshot per Delta commit after the tip's version, in the table's format version; raises
    _FallBackToFull when the commits or the conversion state are not available. ``verify_stats``: the added
    files' stats are checked against their footers before the first snapshot is written."""
    if tip.state is None or tip.published is None:
        raise _FallBackToFull("no conversion state next to the current Iceberg snapshot")
    format_version = tip.published.metadata.format_version  # another one is reached by a full conversion
    start = tip.state.delta_version + 1
    try:
        commit_range = table.commits(start, target_version)
    except VersionNotFoundError as exc:
        raise _FallBackToFull(f"the commits after version {start - 1} are gone ({exc})") from exc
    actions = commit_range.actions
    metadata = tip.state.delta_metadata
    if verify_stats:
        verify_commit_stats(table.storage, table.location, actions, metadata, start, target_version)
    try:
        metadata_by_version = commit_range.metadata_changes()
    except CorruptLogError as exc:
        # A version in between whose metaData a later commit replaces cannot be read (nor converted on its own);
        # the target version still can be, in full.
        raise _FallBackToFull(f"a version after {start - 1} cannot be read on its own ({exc})") from exc
    files_added = files_removed = written = outside = 0
    for version in range(start, target_version + 1):
        if version in metadata_by_version:
            new_metadata = metadata_by_version[version]
            reason = None
            if new_metadata.partition_columns != metadata.partition_columns or new_metadata.id != metadata.id:
                reason = f"version {version} changes the partitioning or replaces the table"
            elif new_metadata.column_mapping_mode != metadata.column_mapping_mode:
                reason = f"version {version} changes the column mapping mode, and with it the ids of the columns"
            if reason is not None:
                # The snapshots of the commits before it are published: the full conversion goes on from them.
                raise _FallBackToFull(reason, _Progress(tip, files_added, files_removed, written, outside)
                                      if written else None)
            metadata = new_metadata
        rows = actions.file_actions.filter(pc.equal(actions.file_actions.column("version"), version))
        adds = rows.filter(rows.column("is_add"))
        removes = rows.filter(pc.invert(rows.column("is_add")))
        outside += files_outside_table(adds, table.location).count
        plan = plan_snapshot(table, tip, metadata, version, commit_range.timestamps[version], storage_options,
                             format_version)
        try:
            with _discarded_unless_published(table.storage, tip, plan):
                tip, added, removed = _convert_commit(table.storage, tip, plan, adds, removes)
        except StatsParseError as exc:  # raised by with_parsed_stats, which names the add
            raise CorruptLogError(exc.describe(), table=table.location, version=version,
                                  file=table.storage.uri(commit_key(version))) from exc
        files_added += added
        files_removed += removed
        written += 1
    return _Progress(tip, files_added, files_removed, written, outside)


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
    manifest_writer: ManifestEngine | None = None,
    retain_snapshots: int | None = None,
    max_snapshot_age_ms: int | None = None,
    format_version: int | None = None,
    verify_stats: bool = False,
) -> ConversionResult:
    """Convert the Delta table at ``location`` up to ``version`` (latest by default) and register it.

    Incremental when an earlier conversion exists (one Iceberg snapshot per new Delta commit), full when
    asked, on the first run, or when the commits since the last run are gone (logged with the reason).
    ``manifest_writer`` is the engine that writes the groups of a full conversion's manifests (``write_group`` on
    each): in this process by default, by Spark executors with ``airflow_deltaberg.spark.manifest_engine``.

    Snapshot expiry runs when ``retain_snapshots`` or ``max_snapshot_age_ms`` is given: snapshots older than
    the age (any age when not given) beyond the newest ``retain_snapshots`` (at least 1) are dropped from the
    metadata, and the Iceberg metadata files only they used are deleted after the pointers moved.

    ``format_version`` is the Iceberg table format: 2 (deletion vectors become position delete files) or 3
    (deletion vectors in Puffin files, row lineage); by default the converted table's, 2 for a new one. Asking
    3 of a v2 table upgrades it with a full conversion; a v3 table cannot go back to 2.

    ``verify_stats`` checks every file converted (every live file of a full conversion, every added file of an
    incremental one) against its parquet footer before anything is written: the Delta stats must cover the file's
    data, ``add.size`` must be its size, and its column types must be ones Delta writes for the schema's types. It
    refuses with StatsMismatchError (naming the table, version and data file) otherwise: Iceberg readers would skip
    rows of that file, or fail to read it. Off by default: it reads the footer of every such file.
    """
    started = time.monotonic()
    table = DeltaTable(location, storage_options)
    table.storage.check_folder(METADATA_DIR)  # a file in the way: refused before anything is written
    target = table.latest_version() if version is None else version
    published = latest_metadata(table.storage)
    published_format = published.metadata.format_version if published else None
    wanted_format = format_version or published_format or 2
    if wanted_format not in FORMAT_VERSIONS:
        raise ValueError(f"Iceberg format version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
    if published_format is not None and wanted_format < published_format:
        raise DeltabergError(f"{table.location}: the Iceberg table has format version {published_format}, which "
                             f"cannot go back to {wanted_format}")
    upgrade = published_format is not None and wanted_format > published_format
    if identifier is not None:
        check_format_version(catalog_name, catalog_config, wanted_format)  # before anything is written
    tip = _Tip(published, _current_state(table.storage, published))
    converted_version = int(published.metadata.properties.get(DELTA_VERSION, -1)) if published else -1
    files_added = files_removed = written = outside = 0
    if published is not None and converted_version == target and not full and not upgrade:
        mode = "up-to-date"
    else:
        mode = "incremental"
        if full or published is None or converted_version > target or upgrade:
            mode = "full"
            if upgrade:
                log.info("%s: full conversion to upgrade the Iceberg table from format version %s to %s",
                         table.location, published_format, wanted_format)
        else:
            try:
                progress = convert_incremental(table, tip, target, storage_options, verify_stats=verify_stats)
                tip, files_added, files_removed = progress.tip, progress.files_added, progress.files_removed
                written, outside = progress.snapshots_written, progress.files_outside_table
            except _FallBackToFull as reason:
                log.info("%s: full conversion instead of incremental: %s", table.location, reason)
                mode = "full"
                if reason.progress is not None:
                    tip, written = reason.progress.tip, reason.progress.snapshots_written
        if mode == "full":
            with large_buffer_pool():
                snapshot = table.snapshot(target)
                outside = files_outside_table(snapshot.state.adds, table.location).count
                if verify_stats:
                    verify_snapshot_stats(table.storage, snapshot)
                tip, files_added, files_removed = convert_full(table, snapshot, tip,
                                                               storage_options=storage_options,
                                                               manifest_writer=manifest_writer,
                                                               format_version=wanted_format)
            written += 1
    assert tip.published is not None
    expiry = Expiry(0, None)
    if retain_snapshots is not None or max_snapshot_age_ms is not None:
        older_than = None if max_snapshot_age_ms is None else int(time.time() * 1000) - max_snapshot_age_ms
        expiry = expire_snapshots(table.storage, tip.published, older_than_ms=older_than,
                                  retain_last=retain_snapshots or 1)
        tip = _Tip(expiry.published or tip.published, tip.state)
    # A crash between a metadata file and its hint leaves the hint behind: bring it up to date.
    ensure_version_hint(table.storage, tip.published.version)
    if identifier is not None:
        point_catalog(open_catalog(catalog_name, catalog_config), identifier, tip.published.location)
    # Files of expired snapshots go only once no pointer names a metadata file that uses them; so do the
    # metadata files that fell out of the metadata log.
    delete_expired_files(table.storage, expiry)
    for key in dropped_metadata_files(table.storage, published, tip.published):
        table.storage.delete(key)
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
        snapshots_expired=expiry.snapshots_expired,
        files_outside_table=outside,
    )
