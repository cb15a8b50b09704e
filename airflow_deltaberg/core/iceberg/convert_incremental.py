"""Incremental conversion: one Iceberg snapshot per Delta commit after the converted version, reusing the
manifests a commit does not touch (entries of removed files are rewritten as DELETED in new manifests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.log_segment import ListedLog, commit_key
from airflow_deltaberg.core.delta.log.replay import (
    refuse_changed_column_id,
    refuse_missing_partition_values,
    refuse_reader_only_features,
    refuse_unsupported_metadata,
)
from airflow_deltaberg.core.delta.models import Protocol
from airflow_deltaberg.core.delta.paths import files_outside_table
from airflow_deltaberg.core.errors import ConversionStateError, CorruptLogError, StatsParseError, VersionNotFoundError
from airflow_deltaberg.core.iceberg.conversion_state import (
    ManifestRecord,
    ManifestTable,
    data_path_column,
    read_entries,
    with_first_row_ids,
    write_manifest_record,
)
from airflow_deltaberg.core.iceberg.convert_commit import commit_snapshot, discarded_unless_published, snapshot_summary
from airflow_deltaberg.core.iceberg.convert_plan import IcebergBase, plan_snapshot, schema_and_spec
from airflow_deltaberg.core.iceberg.data_files import data_file_locations
from airflow_deltaberg.core.iceberg.deletes.deletion_vector_files import deletion_vector_key
from airflow_deltaberg.core.iceberg.deletes.position_deletes import delete_file_key
from airflow_deltaberg.core.iceberg.manifests.file_manifests import (
    SnapshotPlan,
    file_entries,
    two_at_a_time,
    write_entry_manifests,
)
from airflow_deltaberg.core.iceberg.manifests.manifest_merge import MergeSettings, merge_manifests
from airflow_deltaberg.core.iceberg.misread import millis_warnings
from airflow_deltaberg.core.iceberg.verify_stats import verify_commit_stats
from airflow_deltaberg.core.storage import Storage


@dataclass(frozen=True)
class Progress:
    """The Iceberg base after some incremental snapshots, and what they did. ``fall_back``: why the incremental
    conversion stopped short of the target version, and a full conversion must go on from ``base`` (which holds
    the snapshots published before it stopped)."""

    base: IcebergBase
    files_added: int = 0
    files_removed: int = 0
    snapshots_written: int = 0
    files_outside_table: int = 0  # data and DV files they added that lie outside the table root
    fall_back: str | None = None
    warnings: tuple[str, ...] = ()  # about the files added (core.iceberg.misread)


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
    storage: Storage, manifests: ManifestTable, locations: pa.Array, plan: SnapshotPlan, content: int,
) -> dict[int, ManifestRecord]:
    """Rewrite the manifests of ``content`` holding entries about data files at ``locations`` (the data files
    themselves, or the position deletes referencing them): those entries become DELETED, the rest EXISTING.
    Returns the rewritten manifests by position."""
    column = data_path_column(content)

    def without(record: ManifestRecord) -> ManifestRecord | None:
        entries = read_entries(storage, record)
        if plan.format_version >= 3 and content == 0:
            # Rewritten entries keep the row ids they inherited from this manifest.
            entries = with_first_row_ids(entries, record.info.first_row_id)
        entries = entries.filter(pc.not_equal(entries.column("status"), 2))  # deleted earlier: not carried on
        hit = pc.is_in(entries.column(column), locations)
        if not pc.any(hit).as_py():
            return None
        hit_np = np.asarray(hit)
        status = np.where(hit_np, 2, 0).astype(np.int32)
        snap_ids = np.where(hit_np, plan.snapshot_id, np.asarray(entries.column("snapshot_id")))
        rewritten = entries.set_column(entries.schema.get_field_index("status"), "status", pa.array(status))
        rewritten = rewritten.set_column(rewritten.schema.get_field_index("snapshot_id"), "snapshot_id",
                                         pa.array(snap_ids, pa.int64()))
        return write_manifest_record(storage, rewritten, plan.converted.schema, plan.spec, plan.snapshot_id,
                                     plan.sequence_number, content="deletes" if content else "data",
                                     format_version=plan.format_version, attempt=plan.attempt)

    # Only the manifests whose path range holds a location are read. A removal spread over a partition touches a
    # few manifests: they are rewritten two at a time.
    positions = manifests.candidates(content, locations)
    rewritten = two_at_a_time(without, manifests.records(positions))
    return {p: record for p, record in zip(positions, rewritten, strict=True) if record is not None}


def _convert_commit(storage: Storage, base: IcebergBase, plan: SnapshotPlan, adds: pa.Table,
                    removes: pa.Table) -> tuple[IcebergBase, int, int]:
    """One Iceberg snapshot for one Delta commit's add and remove actions, its small manifests merged as the table
    properties say (``manifest_merge``).

    A path both removed and added in the commit is the same data file with a new deletion vector (or none):
    its data entry stays, and only its position deletes change.
    """
    assert base.state is not None  # convert_incremental starts from a state, and every snapshot it writes has one
    manifests = base.state.manifests
    add_locations = data_file_locations(storage, adds.column("path").combine_chunks())
    removed_locations = data_file_locations(storage, removes.column("path").combine_chunks())
    changes = pa.concat_arrays([adds.column("dataChange").combine_chunks(),
                                removes.column("dataChange").combine_chunks()])
    readded = _live_files_added_again(storage, manifests, plan, adds, add_locations, removed_locations)
    if readded is not None:
        # Their entries (and position deletes) stay as they are: the rows did not change.
        adds, add_locations = adds.filter(pc.invert(readded)), add_locations.filter(pc.invert(readded))
    rewritten: dict[int, ManifestRecord] = {}
    if removes.num_rows:
        gone = removed_locations.filter(pc.invert(pc.is_in(removed_locations, add_locations)))
        if len(gone):
            rewritten.update(_remove_entries(storage, manifests, gone, plan, content=0))
        rewritten.update(_remove_entries(storage, manifests, removed_locations, plan, content=1))
    added: list[ManifestRecord] = []
    if adds.num_rows:
        entries = file_entries(storage, plan, adds)  # in partition and path order, not the commit's
        new_data = entries.data.filter(pc.invert(pc.is_in(entries.data.column("file_path"), removed_locations)))
        if new_data.num_rows:
            added += write_entry_manifests(storage, plan, new_data)
        if entries.deletes is not None:
            added += write_entry_manifests(storage, plan, entries.deletes, content="deletes")
    manifests = manifests.with_changes(rewritten, added).without_spent(plan.snapshot_id)
    assert base.published is not None  # as base.state
    settings = MergeSettings.of({**base.published.metadata.properties, **plan.table_properties}, table=plan.table)
    manifests = merge_manifests(storage, manifests, plan, settings)
    summary = snapshot_summary(manifests, plan.snapshot_id)
    new_base = commit_snapshot(storage, base, plan, manifests, _operation(changes, summary), summary)
    return new_base, int(summary["added-data-files"]), int(summary["deleted-data-files"])


def _live_files_added_again(storage: Storage, manifests: ManifestTable, plan: SnapshotPlan,
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
    data_positions = manifests.candidates(0, looked_up)
    delete_positions = manifests.candidates(1, added)
    for record in manifests.records(sorted(data_positions + delete_positions)):
        wanted = added if record.info.content == 1 else looked_up
        entries = read_entries(storage, record, data_files=False)
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


def convert_incremental(table: DeltaTable, base: IcebergBase, target_version: int, *,
                        verify_stats: bool = False, strict: bool = False,
                        table_properties: Mapping[str, str] | None = None,
                        listed: ListedLog | None = None) -> Progress:
    """One Iceberg snapshot per Delta commit after the base's version, in the table's format version; a progress
    with ``fall_back`` when the commits or the conversion state are not available. ``verify_stats``: the added
    files' stats are checked against their footers before the first snapshot is written. ``strict``: added files
    Iceberg readers misread are refused then too (``core.iceberg.misread``), else they are warned about. ``listed``:
    this run's listing of the log, used when it covers the commits."""
    if base.state is None or base.published is None:
        return Progress(base, fall_back="no conversion state next to the current Iceberg snapshot")
    format_version = base.published.metadata.format_version  # another one is reached by a full conversion
    start = base.state.delta_version + 1
    try:
        commit_range = table.commits(start, target_version, listed=listed)
    except VersionNotFoundError as exc:
        return Progress(base, fall_back=f"the commits after version {start - 1} are gone ({exc})")
    actions = commit_range.actions
    metadata = base.state.delta_metadata
    verified = None
    if verify_stats:
        verified = verify_commit_stats(table.storage, table.location, actions, metadata, start, target_version,
                                       lambda m: schema_and_spec(m, table.location, base,
                                                                 format_version)[0].name_mapping)
    try:
        metadata_by_version = commit_range.metadata_changes()
    except CorruptLogError as exc:
        # A version in between whose metaData a later commit replaces cannot be read (nor converted on its own);
        # the target version still can be, in full.
        return Progress(base, fall_back=f"a version after {start - 1} cannot be read on its own ({exc})")
    added = actions.file_actions.filter(actions.file_actions.column("is_add"))
    schemas = [metadata.schema, *(m.schema for m in metadata_by_version.values())]
    warnings = millis_warnings(table.storage, added, schemas, table=table.location, version=target_version,
                               strict=strict, verified=verified)
    protocols = {version: Protocol.from_action(body) for version, name, body in actions.other_actions
                 if name == "protocol"}  # parsed and checked by table.commits already
    files_added = files_removed = written = outside = 0
    protocol = base.state.delta_protocol  # the protocol in force
    metadata_version = None  # the version of the range that set the metaData in force, if one did
    for version in range(start, target_version + 1):
        protocol = protocols.get(version, protocol)
        if version in metadata_by_version:
            new_metadata = metadata_by_version[version]
            reason = None
            if new_metadata.partition_columns != metadata.partition_columns or new_metadata.id != metadata.id:
                reason = f"version {version} changes the partitioning or replaces the table"
            elif new_metadata.column_mapping_mode != metadata.column_mapping_mode:
                reason = f"version {version} changes the column mapping mode, and with it the ids of the columns"
            if reason is not None:
                # The snapshots of the commits before it are published: the full conversion goes on from them.
                return Progress(base, files_added, files_removed, written, outside, fall_back=reason)
            refuse_changed_column_id(metadata, new_metadata, table=table.location, version=version,
                                     file=commit_range.files.get(version))
            metadata, metadata_version = new_metadata, version
        if version in protocols or version in metadata_by_version:
            refuse_reader_only_features(protocol, table=table.location, version=version,
                                        file=commit_range.files.get(version))
            refuse_unsupported_metadata(protocol, metadata, table=table.location, version=version,
                                        file=commit_range.files.get(version))
        rows = actions.file_actions.filter(pc.equal(actions.file_actions.column("version"), version))
        adds = rows.filter(rows.column("is_add"))
        removes = rows.filter(pc.invert(rows.column("is_add")))
        refuse_missing_partition_values(adds, metadata, table.location, commit_range.files.__getitem__)
        outside += files_outside_table(adds, table.location).count
        timestamp = table.commit_timestamp(commit_range, version, protocol, metadata, metadata_version)
        plan = plan_snapshot(table, base, metadata, protocol, version, timestamp, format_version, table_properties)
        try:
            with discarded_unless_published(table.storage, base, plan):
                base, added, removed = _convert_commit(table.storage, base, plan, adds, removes)
        except StatsParseError as exc:  # raised by with_parsed_stats, which names the add
            raise CorruptLogError(exc.describe(), table=table.location, version=version,
                                  file=table.storage.uri(commit_key(version))) from exc
        except ConversionStateError as exc:
            # The state is derived from the Delta log: the full conversion writes it again, with new manifests.
            return Progress(base, files_added, files_removed, written, outside,
                            fall_back=f"version {version} needs the entries of a damaged manifest: {exc}")
        files_added += added
        files_removed += removed
        written += 1
    return Progress(base, files_added, files_removed, written, outside, warnings=tuple(warnings))
