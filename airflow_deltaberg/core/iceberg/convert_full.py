"""Full conversion: one Iceberg snapshot listing every live file of a Delta version, its manifests written by a
manifest engine (in this process, or by Spark executors); it replaces whatever the previous snapshot listed."""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.delta import DeltaTable, Snapshot
from airflow_deltaberg.core.delta.log.replay import refuse_reader_only_features, refuse_unsupported_metadata
from airflow_deltaberg.core.iceberg.conversion_state import ManifestTable
from airflow_deltaberg.core.iceberg.convert_commit import commit_snapshot, discarded_unless_published, snapshot_summary
from airflow_deltaberg.core.iceberg.convert_plan import IcebergBase, plan_snapshot
from airflow_deltaberg.core.iceberg.manifests.file_manifests import ManifestEngine, in_process, write_snapshot_manifests


def convert_full(table: DeltaTable, snapshot: Snapshot, base: IcebergBase, *,
                 manifest_engine: ManifestEngine | None = None, format_version: int = 2,
                 table_properties: Mapping[str, str] | None = None) -> tuple[IcebergBase, int, int]:
    """One Iceberg snapshot listing every live file of ``snapshot``: the new base, files added, files removed."""
    storage = table.storage
    version, file = snapshot.defined_in or (snapshot.version, None)
    # A rule of the protocol alone names the protocol's file, which may be older than the metaData's.
    protocol_version, protocol_file = snapshot.protocol_defined_in or (version, file)
    refuse_reader_only_features(snapshot.protocol, table=table.location, version=protocol_version, file=protocol_file)
    refuse_unsupported_metadata(snapshot.protocol, snapshot.metadata, table=table.location, version=version,
                                file=file)
    plan = plan_snapshot(table, base, snapshot.metadata, snapshot.protocol, snapshot.version, snapshot.timestamp,
                         format_version, table_properties)
    with discarded_unless_published(storage, base, plan):
        manifests = ManifestTable.from_records(write_snapshot_manifests(storage, plan, snapshot,
                                                                        manifest_engine or in_process))
        summary = snapshot_summary(manifests, plan.snapshot_id)
        # A full snapshot replaces everything: what it deletes are the previous snapshot's totals.
        removed_files = base.total_files
        summary["deleted-data-files"], summary["deleted-records"] = str(removed_files), str(base.total_records)
        prev = base.published.metadata if base.published else None
        new_base = commit_snapshot(storage, base, plan, manifests, Operation.OVERWRITE if prev else Operation.APPEND,
                                   summary)
    return new_base, int(summary["added-data-files"]), removed_files
