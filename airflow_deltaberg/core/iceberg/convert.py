"""Delta -> Iceberg conversion: write Iceberg metadata for Delta versions next to the Delta log.

Full (``convert_full``): one Iceberg snapshot listing every live file of a Delta version. Incremental
(``convert_incremental``): one Iceberg snapshot per Delta commit after the last converted one, reusing the manifests
a commit does not touch. This module decides which a run is and runs its steps.

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

from pyiceberg.catalog import Catalog

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.log_segment import ListedLog, LogSegment, probed_log
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
from airflow_deltaberg.core.iceberg.conversion_state import ConversionState, read_state
from airflow_deltaberg.core.iceberg.convert_full import convert_full
from airflow_deltaberg.core.iceberg.convert_incremental import convert_incremental
from airflow_deltaberg.core.iceberg.convert_plan import IcebergBase, schema_and_spec
from airflow_deltaberg.core.iceberg.expire import Expiry, delete_expired_files
from airflow_deltaberg.core.iceberg.history import expire_history
from airflow_deltaberg.core.iceberg.manifests.file_manifests import ManifestEngine
from airflow_deltaberg.core.iceberg.manifests.manifest import FORMAT_VERSIONS
from airflow_deltaberg.core.iceberg.misread import collation_warnings, millis_warnings
from airflow_deltaberg.core.iceberg.publish import (
    METADATA_DIR,
    PublishedMetadata,
    dropped_metadata_files,
    ensure_version_hint,
)
from airflow_deltaberg.core.iceberg.table_identity import History, adopted_history, history_for
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


@dataclass(frozen=True)
class _Formats:
    """The Iceberg format version a run writes, and whether that upgrades the converted table."""

    wanted: int
    published: int | None

    @property
    def upgrade(self) -> bool:
        return self.published is not None and self.wanted > self.published

    @classmethod
    def of(cls, published: PublishedMetadata | None, asked: int | None, table: str) -> _Formats:
        """Raises ValueError for an unknown format version, DeltabergError for a downgrade."""
        published_format = published.metadata.format_version if published else None
        wanted = asked or published_format or 2
        if wanted not in FORMAT_VERSIONS:
            raise ValueError(f"Iceberg format version must be one of {FORMAT_VERSIONS}, got {asked!r}")
        if published_format is not None and wanted < published_format:
            raise DeltabergError(f"{table}: the Iceberg table has format version {published_format}, which "
                                 f"cannot go back to {wanted}")
        return cls(wanted, published_format)


@dataclass(frozen=True)
class _CatalogTarget:
    """The catalog entry a run points at its metadata (none without an identifier)."""

    table: str
    identifier: str | None
    name: str
    config: Mapping[str, Any] | None
    #: Opened before anything is written when its pointer moves onto any table (the SQL catalog's "updates" mode),
    #: so that each write can be checked against it first.
    opened: Catalog | None

    @classmethod
    def of(cls, table: str, identifier: str | None, name: str, config: Mapping[str, Any] | None,
           format_version: int) -> _CatalogTarget:
        opened = None
        if identifier is not None:
            check_format_version(name, config, format_version)  # before anything is written
            if configured_commit_mode(config) == "updates":
                opened = open_catalog(name, config)
        return cls(table, identifier, name, config, opened)

    def check(self, table_uuid: str, delta_table_id: str | None) -> None:
        """Before a write: can the catalog be pointed to metadata of ``table_uuid``?"""
        if self.opened is not None and self.identifier is not None:
            check_catalog_target(self.opened, self.identifier, table_uuid, table=self.table,
                                 delta_table_id=delta_table_id)

    def point(self, metadata_location: str) -> None:
        if self.identifier is not None:
            point_catalog(self.opened or open_catalog(self.name, self.config), self.identifier, metadata_location)


@dataclass
class _Run:
    """What a run has done so far, and the Iceberg state its next step builds on."""

    base: IcebergBase
    mode: str
    fall_back: str | None
    warnings: list[str]
    files_added: int = 0
    files_removed: int = 0
    written: int = 0
    outside: int = 0
    new_history: str | None = None  # the warning that the run started a new Iceberg history


@dataclass(frozen=True)
class _Options:
    """The options of ``convert`` that its steps read."""

    manifest_engine: ManifestEngine | None
    retain_snapshots: int | None
    max_snapshot_age_ms: int | None
    verify_stats: bool
    strict: bool
    table_properties: Mapping[str, str] | None


def _opened_table(location: str, storage_options: Mapping[str, Any] | None, identifier: str | None,
                  table_properties: Mapping[str, str] | None) -> DeltaTable:
    """The Delta table, once the checks that need no log passed (before anything is written)."""
    table = DeltaTable(location, storage_options)
    if identifier is not None:
        check_identifier(identifier, table.location)
    check_table_properties(table_properties or {}, table=table.location)
    table.storage.check_folder(METADATA_DIR)  # a file in the way
    return table


def _mode(history: History, fall_back: str | None, target: int, formats: _Formats, full: bool,
          table: str) -> tuple[str, str | None]:
    """``up-to-date``, ``incremental`` or ``full``, and why a full conversion where an incremental one could have
    been (``fall_back`` when given)."""
    published = history.published
    converted_version = int(published.metadata.properties.get(DELTA_VERSION, -1)) if published else -1
    if published is not None and converted_version == target and not full and not formats.upgrade and fall_back is None:
        return "up-to-date", None
    if not (full or published is None or converted_version > target or formats.upgrade or fall_back is not None):
        return "incremental", None
    # Said in the result, as every full conversion an incremental one could have been.
    if fall_back is None and not full and formats.upgrade:
        fall_back = (f"the Iceberg table is upgraded from format version {formats.published} to "
                     f"{formats.wanted}, which takes a full conversion")
    elif fall_back is None and not full and published is not None and converted_version > target:
        fall_back = (f"Delta version {target} is older than the converted {converted_version}: its files are "
                     "converted in full")
    if fall_back is not None:
        log.info("%s: full conversion: %s", table, fall_back)
    return "full", fall_back


def _convert_commits(run: _Run, table: DeltaTable, target: int, options: _Options, listed: ListedLog | None) -> None:
    """One snapshot per Delta commit up to ``target``; the run turns full when they cannot all be converted."""
    progress = convert_incremental(table, run.base, target, verify_stats=options.verify_stats, strict=options.strict,
                                   table_properties=options.table_properties, listed=listed)
    if progress.fall_back is None:
        run.base, run.files_added, run.files_removed = progress.base, progress.files_added, progress.files_removed
        run.warnings += progress.warnings
        run.written, run.outside = progress.snapshots_written, progress.files_outside_table
    else:
        log.info("%s: full conversion instead of incremental: %s", table.location, progress.fall_back)
        run.fall_back = progress.fall_back
        run.mode = "full"
        # What it published stays: the full conversion builds on it.
        run.base, run.written = progress.base, progress.snapshots_written


def _convert_version(run: _Run, table: DeltaTable, segment: LogSegment | None, target: int, history: History,
                     catalog: _CatalogTarget, format_version: int, options: _Options) -> None:
    """One snapshot listing every live file of Delta version ``target``."""
    segment = segment or table.log_segment(target)
    if table.stats_text_bytes(segment) >= stats_template.WORTH_LOG_BYTES:
        stats_template.warm_up()  # while the log loads
    with large_buffer_pool():
        snapshot = table.snapshot(segment=segment)
        # Another Delta table (or history) than the base's starts a new Iceberg history.
        run.base, run.new_history, history_start = history_for(run.base, snapshot.metadata.id, history)
        if run.new_history is not None or run.base.published is None:
            catalog.check(table_uuid_for(snapshot.metadata.id), snapshot.metadata.id)
        if run.new_history is not None:
            run.warnings.append(run.new_history)
        run.outside = files_outside_table(snapshot.state.adds, table.location).count
        verified = None
        if options.verify_stats:
            converted, _ = schema_and_spec(snapshot.metadata, table.location, run.base, format_version)
            verified = verify_snapshot_stats(table.storage, snapshot, converted.name_mapping)
        run.warnings += millis_warnings(table.storage, snapshot.state.adds, [snapshot.schema],
                                        table=table.location, version=snapshot.version, strict=options.strict,
                                        verified=verified)
        run.base, run.files_added, run.files_removed = convert_full(
            table, snapshot, run.base, manifest_engine=options.manifest_engine, format_version=format_version,
            table_properties={**(options.table_properties or {}), **history_start})
    run.written += 1


def _expire_and_point(run: _Run, table: DeltaTable, history: History, catalog: _CatalogTarget, options: _Options,
                      listed: ListedLog | None) -> Expiry:
    """Expire snapshots, then move the version hint and the catalog to the run's metadata, then delete what no
    pointer names any more: expired files, dropped metadata files, killed attempts' files."""
    assert run.base.published is not None
    expiry = expire_history(table, run.base.published, configuration=run.base.state.delta_metadata.configuration
                            if run.base.state else {}, retain_snapshots=options.retain_snapshots,
                            max_snapshot_age_ms=options.max_snapshot_age_ms, now_ms=int(time.time() * 1000),
                            version=run.base.next_version,  # above a metadata file this run ignored
                            listed=listed)
    run.base = IcebergBase(expiry.published or run.base.published, run.base.state)
    # A crash between a metadata file and its hint leaves the hint behind: bring it up to date.
    ensure_version_hint(table.storage, run.base.published.version)
    catalog.point(run.base.published.location)
    # Files of expired snapshots go only once no pointer names a metadata file that uses them; so do the
    # metadata files that fell out of the metadata log.
    delete_expired_files(table.storage, expiry)
    # Metadata files of an earlier history are not this history's to drop (the attempt cleanup deletes them once
    # the new history is old enough, ``earlier_histories``); nor is a file this run ignored deleted.
    same_history = history.published is not None and run.new_history is None
    for key in dropped_metadata_files(table.storage, history.published, run.base.published) if same_history else ():
        if key not in history.ignored:
            table.storage.delete(key)
    remove_abandoned_attempts(table.storage, run.base.published, run.base.state, int(time.time() * 1000))
    return expiry


def _log_to_convert(table: DeltaTable, history: History, version: int | None,
                    full: bool) -> tuple[LogSegment | None, ListedLog | None, int]:
    """The log a run reads, listed once, and the version it converts to (``version``, else the latest). A run that
    goes on from a converted version looks up the commits from there by name where a listing reads the whole
    folder (``probed_log``); any other reads the latest version's log segment, the one a full conversion reads."""
    if version is not None:
        return None, None, version
    published = history.published
    if published is not None and history.fall_back is None and not full:
        converted = int(published.metadata.properties[DELTA_VERSION])  # an adopted history records it
        listed = probed_log(table.storage, table.location, converted)
        if listed is not None and (latest := listed.listing.latest_version) is not None:
            return None, listed, latest
    segment, listed = table.listed_log_segment()
    return segment, listed, segment.version


def _result(run: _Run, table: DeltaTable, target: int, expiry: Expiry, identifier: str | None,
            started: float) -> ConversionResult:
    published = run.base.published
    assert published is not None
    warnings = list(run.warnings)
    if run.base.state is not None:
        warnings += collation_warnings(run.base.state.delta_metadata.schema)
    return ConversionResult(
        table=table.location,
        mode=run.mode,
        delta_version=int(published.metadata.properties.get(DELTA_VERSION, target)),
        snapshot_id=published.metadata.current_snapshot_id or 0,
        metadata_location=published.location,
        files_added=run.files_added,
        files_removed=run.files_removed,
        records=run.base.total_records,
        seconds=round(time.monotonic() - started, 3),
        identifier=identifier,
        snapshots_written=run.written,
        snapshots_expired=expiry.snapshots_expired,
        files_outside_table=run.outside,
        fall_back=run.fall_back,
        warnings=tuple(warnings),
    )


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
    options = _Options(manifest_engine, retain_snapshots, max_snapshot_age_ms, verify_stats, strict,
                       table_properties)
    table = _opened_table(location, storage_options, identifier, table_properties)
    history = adopted_history(table.storage, version, table.latest_version)
    published = history.published
    segment, listed, target = _log_to_convert(table, history, version, full)
    formats = _Formats.of(published, format_version, table.location)
    catalog = _CatalogTarget.of(table.location, identifier, catalog_name, catalog_config, formats.wanted)
    state, unreadable = _current_state(table.storage, published)
    if published is not None:  # an incremental run, expiry and an up-to-date run publish onto its table
        catalog.check(str(published.metadata.table_uuid), published.metadata.properties.get(DELTA_TABLE_ID))
    # Ignored metadata files and a history that cannot be checked against the log are said, and convert in full.
    mode, fall_back = _mode(history, None if full else history.fall_back or unreadable, target, formats, full,
                            table.location)
    run = _Run(IcebergBase(published, state, seen_version=history.newest_version), mode, fall_back,
               list(history.warnings))
    if run.mode == "incremental":
        _convert_commits(run, table, target, options, listed)
    if run.mode == "full":
        _convert_version(run, table, segment, target, history, catalog, formats.wanted, options)
    expiry = _expire_and_point(run, table, history, catalog, options, listed)
    return _result(run, table, target, expiry, identifier, started)
