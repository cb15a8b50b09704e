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
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.delta import DeltaTable, Snapshot
from airflow_deltaberg.core.delta.log.replay import refuse_reader_only_features, refuse_unsupported_metadata
from airflow_deltaberg.core.delta.paths import files_outside_table
from airflow_deltaberg.core.delta.stats import stats_template
from airflow_deltaberg.core.errors import ConversionStateError, DeltabergError
from airflow_deltaberg.core.iceberg.attempt_cleanup import remove_abandoned_attempts
from airflow_deltaberg.core.iceberg.catalog import (
    check_catalog_target,
    check_format_version,
    check_identifier,
    configured_commit_mode,
    open_catalog,
    point_catalog,
)
from airflow_deltaberg.core.iceberg.conversion_state import ConversionState, ManifestTable, read_state
from airflow_deltaberg.core.iceberg.convert_commit import commit_snapshot, discarded_unless_published, snapshot_summary
from airflow_deltaberg.core.iceberg.convert_incremental import convert_incremental
from airflow_deltaberg.core.iceberg.convert_plan import Tip, plan_snapshot, schema_and_spec
from airflow_deltaberg.core.iceberg.expire import delete_expired_files
from airflow_deltaberg.core.iceberg.history import expire_history
from airflow_deltaberg.core.iceberg.manifests.file_manifests import ManifestEngine, in_process, write_snapshot_manifests
from airflow_deltaberg.core.iceberg.manifests.manifest import FORMAT_VERSIONS
from airflow_deltaberg.core.iceberg.misread import collation_warnings, millis_warnings
from airflow_deltaberg.core.iceberg.publish import (
    METADATA_DIR,
    PublishedMetadata,
    dropped_metadata_files,
    ensure_version_hint,
)
from airflow_deltaberg.core.iceberg.table_identity import adopted_history, history_for
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TABLE_ID, DELTA_VERSION, table_uuid_for
from airflow_deltaberg.core.iceberg.table_properties import check_table_properties
from airflow_deltaberg.core.iceberg.verify_stats import verify_snapshot_stats
from airflow_deltaberg.core.memory_pool import large_buffer_pool
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)


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
    fall_back: str | None = None  # why the run was a full conversion where an incremental one was possible
    warnings: tuple[str, ...] = ()  # what a reader of the Iceberg table should know (one sentence each)

    def to_dict(self) -> dict[str, Any]:
        # A list, not a tuple: Airflow's XCom serializes a tuple as a {"__classname__": ...} wrapper.
        return {**asdict(self), "warnings": list(self.warnings)}


def convert_full(table: DeltaTable, snapshot: Snapshot, tip: Tip, *,
                 manifest_engine: ManifestEngine | None = None, format_version: int = 2,
                 table_properties: Mapping[str, str] | None = None) -> tuple[Tip, int, int]:
    """One Iceberg snapshot listing every live file of ``snapshot``."""
    storage = table.storage
    version, file = snapshot.defined_in or (snapshot.version, None)
    # A rule of the protocol alone names the protocol's file, which may be older than the metaData's.
    protocol_version, protocol_file = snapshot.protocol_defined_in or (version, file)
    refuse_reader_only_features(snapshot.protocol, table=table.location, version=protocol_version, file=protocol_file)
    refuse_unsupported_metadata(snapshot.protocol, snapshot.metadata, table=table.location, version=version,
                                file=file)
    plan = plan_snapshot(table, tip, snapshot.metadata, snapshot.protocol, snapshot.version, snapshot.timestamp,
                         format_version, table_properties)
    with discarded_unless_published(storage, tip, plan):
        manifests = ManifestTable.from_records(write_snapshot_manifests(storage, plan, snapshot,
                                                                        manifest_engine or in_process))
        summary = snapshot_summary(manifests, plan.snapshot_id)
        # A full snapshot replaces everything: what it deletes are the previous snapshot's totals.
        removed_files = tip.total_files
        summary["deleted-data-files"], summary["deleted-records"] = str(removed_files), str(tip.total_records)
        prev = tip.published.metadata if tip.published else None
        new_tip = commit_snapshot(storage, tip, plan, manifests, Operation.OVERWRITE if prev else Operation.APPEND,
                                   summary)
    return new_tip, int(summary["added-data-files"]), removed_files


def _current_state(storage: Storage, published: PublishedMetadata | None) -> tuple[ConversionState | None, str | None]:
    """The current snapshot's conversion state, and why it cannot be read when it cannot (then the run is a full
    conversion, which writes a new one)."""
    if published is None or published.metadata.current_snapshot_id is None:
        return None, None
    snapshot = published.metadata.snapshot_by_id(published.metadata.current_snapshot_id)
    try:
        return (read_state(storage, snapshot.manifest_list) if snapshot else None), None
    except ConversionStateError as exc:
        return None, str(exc)


def convert(
    location: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    catalog_config: Mapping[str, Any] | None = None,
    catalog_name: str = "deltaberg",
    identifier: str | None = None,
    version: int | None = None,
    full: bool = False,
    manifest_engine: ManifestEngine | None = None,
    retain_snapshots: int | None = None,
    max_snapshot_age_ms: int | None = None,
    format_version: int | None = None,
    verify_stats: bool = False,
    strict: bool = False,
    table_properties: Mapping[str, str] | None = None,
) -> ConversionResult:
    """Convert the Delta table at ``location`` up to ``version`` (latest by default) and register it.

    Incremental when an earlier conversion exists (one Iceberg snapshot per new Delta commit), full when
    asked, on the first run, or when the commits since the last run are gone (logged with the reason).
    ``manifest_engine`` writes the groups of a full conversion's manifests (``write_group`` on each): in this
    process by default, by Spark executors with ``airflow_deltaberg.spark.manifest_engine.SparkManifestEngine``.

    Snapshot expiry runs every time (``history.expire_history``, docs/HISTORY.md): snapshots older than
    ``max_snapshot_age_ms`` (any age when not given) beyond the newest ``retain_snapshots`` (at least 1; without
    either option the table property ``deltaberg.history.max-snapshots``, 100), and every snapshot that no longer
    reads as Delta (files removed by VACUUM, versions out of the log, columns its schema no longer maps), are
    dropped from the metadata, and the Iceberg metadata files only they used are deleted after the pointers moved.
    So are the files of attempts killed before they published (``attempt_cleanup``).

    ``format_version`` is the Iceberg table format: 2 (deletion vectors become position delete files) or 3
    (deletion vectors in Puffin files, row lineage); by default the converted table's, 2 for a new one. Asking
    3 of a v2 table upgrades it with a full conversion; a v3 table cannot go back to 2.

    ``verify_stats`` checks every file converted (every live file of a full conversion, every added file of an
    incremental one) against its parquet footer before anything is written: the Delta stats must cover the file's
    data, ``add.size`` must be its size, and its column types must be ones Delta writes for the schema's types. It
    refuses with StatsMismatchError (naming the table, version and data file) otherwise: Iceberg readers would skip
    rows of that file, or fail to read it. Off by default: it reads the footer of every such file.

    ``warnings`` of the result name what Iceberg readers misread (``core.iceberg.misread``): data files storing
    timestamps as INT64 TIMESTAMP_MILLIS (every converted file judged under ``verify_stats`` or ``strict``, a
    sample of them otherwise) and collated string columns. ``strict`` refuses such data files instead
    (MisreadDataFileError naming the file and its columns), before anything is written.

    ``table_properties`` sets Iceberg table properties the converter follows (``table_properties.SETTABLE``:
    manifest merging, metadata files kept); the table keeps them for later runs. Others are refused
    (TablePropertyError), as are values that are not ones, before anything is written.
    """
    started = time.monotonic()
    table = DeltaTable(location, storage_options)
    if identifier is not None:
        check_identifier(identifier, table.location)  # before anything is written
    check_table_properties(table_properties or {}, table=table.location)
    table.storage.check_folder(METADATA_DIR)  # a file in the way: refused before anything is written
    # The latest version's log segment is the one a full conversion reads: the log is listed once.
    segment, listed = table.listed_log_segment() if version is None else (None, None)
    target = segment.version if segment is not None else version
    history = adopted_history(table.storage, target, table.latest_version)
    published = history.published
    published_format = published.metadata.format_version if published else None
    wanted_format = format_version or published_format or 2
    if wanted_format not in FORMAT_VERSIONS:
        raise ValueError(f"Iceberg format version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
    if published_format is not None and wanted_format < published_format:
        raise DeltabergError(f"{table.location}: the Iceberg table has format version {published_format}, which "
                             f"cannot go back to {wanted_format}")
    upgrade = published_format is not None and wanted_format > published_format
    catalog = None
    if identifier is not None:
        check_format_version(catalog_name, catalog_config, wanted_format)  # before anything is written
        if configured_commit_mode(catalog_config) == "updates":  # the SQL catalog's pointer moves onto any table
            catalog = open_catalog(catalog_name, catalog_config)

    def check_catalog(table_uuid: str, delta_table_id: str | None) -> None:
        """Before a write: can the catalog be pointed to metadata of ``table_uuid``?"""
        if catalog is not None and identifier is not None:
            check_catalog_target(catalog, identifier, table_uuid, table=table.location, delta_table_id=delta_table_id)

    state, unreadable = _current_state(table.storage, published)
    tip = Tip(published, state, seen_version=history.newest_version)
    converted_version = int(published.metadata.properties.get(DELTA_VERSION, -1)) if published else -1
    files_added = files_removed = written = outside = 0
    # Ignored metadata files and a history that cannot be checked against the log are said, and convert in full.
    fall_back = None if full else history.fall_back or unreadable
    warnings = list(history.warnings)
    new_history: str | None = None
    if published is not None:  # an incremental run, expiry and an up-to-date run publish onto its table
        check_catalog(str(published.metadata.table_uuid), published.metadata.properties.get(DELTA_TABLE_ID))
    if published is not None and converted_version == target and not full and not upgrade and fall_back is None:
        mode = "up-to-date"
    else:
        mode = "incremental"
        if full or published is None or converted_version > target or upgrade or fall_back is not None:
            mode = "full"
            # Said in the result, as every full conversion an incremental one could have been.
            if fall_back is None and not full and upgrade:
                fall_back = (f"the Iceberg table is upgraded from format version {published_format} to "
                             f"{wanted_format}, which takes a full conversion")
            elif fall_back is None and not full and published is not None and converted_version > target:
                fall_back = (f"Delta version {target} is older than the converted {converted_version}: its files are "
                             "converted in full")
            if fall_back is not None:
                log.info("%s: full conversion: %s", table.location, fall_back)
        else:
            progress = convert_incremental(table, tip, target, verify_stats=verify_stats,
                                           strict=strict, table_properties=table_properties, listed=listed)
            if progress.fall_back is None:
                tip, files_added, files_removed = progress.tip, progress.files_added, progress.files_removed
                warnings += progress.warnings
                written, outside = progress.snapshots_written, progress.files_outside_table
            else:
                log.info("%s: full conversion instead of incremental: %s", table.location, progress.fall_back)
                fall_back = progress.fall_back
                mode = "full"
                # What it published stays: the full conversion builds on it.
                tip, written = progress.tip, progress.snapshots_written
        if mode == "full":
            segment = segment or table.log_segment(target)
            if table.stats_text_bytes(segment) >= stats_template.WORTH_LOG_BYTES:
                stats_template.warm_up()  # while the log loads
            with large_buffer_pool():
                snapshot = table.snapshot(segment=segment)
                # Another Delta table (or history) than the tip's starts a new Iceberg history.
                tip, new_history, history_start = history_for(tip, snapshot.metadata.id, history)
                if new_history is not None or tip.published is None:
                    check_catalog(table_uuid_for(snapshot.metadata.id), snapshot.metadata.id)
                if new_history is not None:
                    warnings.append(new_history)
                outside = files_outside_table(snapshot.state.adds, table.location).count
                verified = None
                if verify_stats:
                    converted, _ = schema_and_spec(snapshot.metadata, table.location, tip, wanted_format)
                    verified = verify_snapshot_stats(table.storage, snapshot, converted.name_mapping)
                warnings += millis_warnings(table.storage, snapshot.state.adds, [snapshot.schema],
                                            table=table.location, version=snapshot.version, strict=strict,
                                            verified=verified)
                tip, files_added, files_removed = convert_full(table, snapshot, tip,
                                                               manifest_engine=manifest_engine,
                                                               format_version=wanted_format,
                                                               table_properties={**(table_properties or {}),
                                                                                 **history_start})
            written += 1
    assert tip.published is not None
    expiry = expire_history(table, tip.published, configuration=tip.state.delta_metadata.configuration
                            if tip.state else {}, retain_snapshots=retain_snapshots,
                            max_snapshot_age_ms=max_snapshot_age_ms, now_ms=int(time.time() * 1000),
                            version=tip.next_version,  # above a metadata file this run ignored
                            listed=listed)
    tip = Tip(expiry.published or tip.published, tip.state)
    # A crash between a metadata file and its hint leaves the hint behind: bring it up to date.
    ensure_version_hint(table.storage, tip.published.version)
    if identifier is not None:
        point_catalog(catalog or open_catalog(catalog_name, catalog_config), identifier, tip.published.location)
    # Files of expired snapshots go only once no pointer names a metadata file that uses them; so do the
    # metadata files that fell out of the metadata log.
    delete_expired_files(table.storage, expiry)
    # Metadata files of an earlier history are not this history's to drop (the attempt cleanup deletes them once
    # the new history is old enough, ``earlier_histories``); nor is a file this run ignored deleted.
    same_history = published is not None and new_history is None
    for key in dropped_metadata_files(table.storage, published, tip.published) if same_history else ():
        if key not in history.ignored:
            table.storage.delete(key)
    remove_abandoned_attempts(table.storage, tip.published, tip.state, int(time.time() * 1000))
    current = tip.published.metadata.current_snapshot_id or 0
    if tip.state is not None:
        warnings += collation_warnings(tip.state.delta_metadata.schema)
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
        fall_back=fall_back,
        warnings=tuple(warnings),
    )
