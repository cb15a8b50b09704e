"""Entry point to a Delta table: snapshots by version or timestamp, and the actions of commit ranges."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from airflow_deltaberg.core.delta.log.actions import ActionBatch, check_one_protocol_and_metadata
from airflow_deltaberg.core.delta.log.checkpoint_actions import holds_struct_stats
from airflow_deltaberg.core.delta.log.commit_actions import read_json_actions
from airflow_deltaberg.core.delta.log.log_segment import (
    ListedLog,
    LogListing,
    LogSegment,
    build_log_segment,
    commit_key,
    list_log,
    listed_log_segment,
)
from airflow_deltaberg.core.delta.log.replay import TableState, refuse_repeated_file_actions, replay
from airflow_deltaberg.core.delta.models import ICT_ENABLED, ICT_FEATURES, ICT_VERSION, Metadata, Protocol, is_int
from airflow_deltaberg.core.delta.paths import refuse_invalid_paths
from airflow_deltaberg.core.delta.snapshot import MAX_READER_VERSION, SUPPORTED_READER_FEATURES, Snapshot
from airflow_deltaberg.core.errors import (
    CorruptLogError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_deltaberg.core.storage import FileEntry, Storage, open_storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitRange:
    """The actions of commits ``start``..``end`` (inclusive), in log order."""

    start: int
    end: int
    actions: ActionBatch
    entries: dict[int, FileEntry]  # version -> its commit file (key, size, modification time)
    table: str = ""
    files: Mapping[int, str] = field(default_factory=dict)  # version -> commit file, for messages

    def commit_infos(self) -> dict[int, dict[str, Any]]:
        return dict(self._commit_infos)

    def commit_info(self, version: int) -> dict[str, Any] | None:
        """The commitInfo of commit ``version``, if it has one."""
        return self._commit_infos.get(version)

    @cached_property
    def _commit_infos(self) -> dict[int, dict[str, Any]]:
        return {v: body for v, name, body in self.actions.other_actions if name == "commitInfo"}

    def metadata_changes(self) -> dict[int, Metadata]:
        """The metaData of each commit of the range that sets one. Raises CorruptLogError (naming the version
        and file) for one that is malformed or incomplete; such a metaData may still be superseded later
        (Delta Live Tables writes one without schemaString at version 0), but that version itself cannot be
        read."""
        out = {}
        for version, name, body in self.actions.other_actions:
            if name == "metaData":
                try:
                    metadata = Metadata.from_action(body)
                    metadata.check()  # the schema parsed here, so that a bad schemaString names its commit
                except ValueError as exc:
                    raise CorruptLogError(f"the metaData action is invalid: {exc}", table=self.table,
                                          version=version, file=self.files.get(version)) from exc
                out[version] = metadata
        return out


class DeltaTable:
    """A Delta table at a location (path or URI) on some storage."""

    def __init__(
        self,
        location: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        storage: Storage | None = None,
    ):
        if storage is not None and storage_options:
            # The storage holds the options it was opened with: two sources could disagree.
            raise TypeError(f"{location}: give storage or storage_options, not both")
        self.storage = storage or open_storage(location, storage_options)
        self.location = self.storage.root

    def __repr__(self) -> str:
        return f"DeltaTable({self.location!r})"

    def latest_version(self) -> int:
        """The newest committed version (lists the log from `_last_checkpoint` on when present)."""
        return self.log_segment().version

    def log_segment(self, version: int | None = None) -> LogSegment:
        """The log files a snapshot at ``version`` (latest when None) reads: one listing of the log."""
        return build_log_segment(self.storage, self.location, version)

    def listed_log_segment(self, version: int | None = None) -> tuple[LogSegment, ListedLog]:
        """``log_segment`` and the listing it came from, for ``commits`` and others to use rather than list again."""
        return listed_log_segment(self.storage, self.location, version)

    def stats_text_bytes(self, segment: LogSegment) -> int:
        """Bytes of the files of ``segment`` whose stats are JSON text: the commits, and the checkpoint unless its
        (first) part carries ``stats_parsed``; a v2 checkpoint's sidecars are not counted. What parsing every file's
        stats costs, found from the listing and a footer."""
        size = sum(entry.size for _, entry in segment.commits)
        checkpoint = segment.checkpoint
        if checkpoint is not None and (checkpoint.is_json or not holds_struct_stats(self.storage, checkpoint.files[0])):
            size += sum(f.size for f in checkpoint.files)
        return size

    def snapshot(self, version: int | None = None, *, timestamp_ms: int | None = None,
                 segment: LogSegment | None = None) -> Snapshot:
        """The table at ``version``, or as of ``timestamp_ms`` (ms since epoch), or the latest; from ``segment``
        when the caller listed the log already (``log_segment``)."""
        if segment is not None:
            if segment.table != self.location:
                raise ValueError(f"the log segment is of {segment.table}, not of {self.location}")
            if timestamp_ms is not None or (version is not None and version != segment.version):
                raise ValueError(f"a snapshot from the log segment of version {segment.version} is of that version")
        else:
            if timestamp_ms is not None:
                if version is not None:
                    raise ValueError("give a version or a timestamp, not both")
                version = self.version_at(timestamp_ms)
            segment = self.log_segment(version)
        state = replay(self.storage, self.location, segment)
        check_readable(state.protocol, self.location, segment.version)
        timestamp = self._commit_timestamp(segment, state)
        return Snapshot(self.location, segment.version, timestamp, segment, state)

    # -- timestamps -------------------------------------------------------------------------------

    def _commit_timestamp(self, segment: LogSegment, state: TableState) -> int:
        if segment.version_commit is None:  # a checkpoint without its commit: the checkpoint's time
            return segment.checkpoint.files[0].mtime_ms if segment.checkpoint else 0
        return self._timestamp(segment.version, segment.version_commit, state.commit_info,
                               self._ict_enablement(state.protocol, state.metadata, state.defined_in, segment.version))

    def commit_timestamp(self, commit_range: CommitRange, version: int, protocol: Protocol, metadata: Metadata,
                         metadata_version: int | None = None) -> int:
        """The timestamp of commit ``version`` of ``commit_range``, by the rule of a snapshot's: its in-commit
        timestamp when ``protocol`` and ``metadata`` (in force at it, set at ``metadata_version`` when that is in the
        range) turn those on from a version at or before it, else its file time."""
        defined_in = None
        if metadata_version is not None and metadata_version in commit_range.files:
            defined_in = (metadata_version, commit_range.files[metadata_version])
        return self._timestamp(version, commit_range.entries[version], commit_range.commit_info(version),
                               self._ict_enablement(protocol, metadata, defined_in, version))

    def _timestamp(self, version: int, commit: FileEntry, commit_info: Mapping[str, Any] | None,
                   ict_from: int | None) -> int:
        if ict_from is not None and version >= ict_from:
            if commit_info is not None and "inCommitTimestamp" in commit_info:
                return self._in_commit_timestamp(version, commit_info)
            return self._read_ict(version, commit)
        return commit.mtime_ms

    def _ict_enablement(self, protocol: Protocol, metadata: Metadata, defined_in: tuple[int, str] | None,
                        version: int) -> int | None:
        """The first version that carries in-commit timestamps, or None when they are off. The property alone
        does not turn them on: the protocol must support the writer feature too; without it readers take file
        times."""
        if not metadata.bool_property(ICT_ENABLED) or protocol.effective_writer_features.isdisjoint(ICT_FEATURES):
            return None
        value = metadata.configuration.get(ICT_VERSION, "0")
        if not value.isascii() or not value.isdigit():
            version, file = defined_in or (version, None)
            raise CorruptLogError(f"the table property {ICT_VERSION} is {value!r}, not a version"[:200],
                                  table=self.location, version=version, file=file)
        return int(value)

    def _read_ict(self, version: int, entry: FileEntry) -> int:
        first = self.storage.read(entry.key).split(b"\n", 1)[0]
        try:
            info = json.loads(first)["commitInfo"]
            if "inCommitTimestamp" not in info:
                raise KeyError("inCommitTimestamp")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise CorruptLogError(
                "in-commit timestamps are enabled but the first action is not a commitInfo with "
                "inCommitTimestamp", table=self.location, version=version, file=self.storage.uri(entry.key),
            ) from exc
        return self._in_commit_timestamp(version, info)

    def _in_commit_timestamp(self, version: int, commit_info: Mapping[str, Any]) -> int:
        value = commit_info["inCommitTimestamp"]
        if not is_int(value):
            raise CorruptLogError(f"the commitInfo's inCommitTimestamp {value!r} is not an integer"[:200],
                                  table=self.location, version=version, file=self.storage.uri(commit_key(version)))
        return value

    def commit_timestamps(self) -> dict[int, int]:
        """The commit timestamp (ms) of every commit still in the log, made monotonic as Delta does."""
        listing = list_log(self.storage)
        if not listing.commits:
            self.latest_version()  # raises the right error for an empty or missing log
        snapshot = self.snapshot()
        state = snapshot.state
        return self._timestamps(listing, self._ict_enablement(state.protocol, state.metadata, state.defined_in,
                                                              snapshot.version))

    def _timestamps(self, listing: LogListing, ict_from: int | None) -> dict[int, int]:
        out: dict[int, int] = {}
        previous = None
        for version in sorted(listing.commits):
            entry = listing.commits[version]
            if ict_from is not None and version >= ict_from:
                ts = self._read_ict(version, entry)
            else:
                ts = entry.mtime_ms
                # File times can go backwards (clock skew, copies): Delta adjusts them to be increasing.
                if previous is not None and ts <= previous:
                    ts = previous + 1
            out[version] = ts
            previous = ts
        return out

    def version_at(self, timestamp_ms: int) -> int:
        """The newest version committed at or before ``timestamp_ms``."""
        timestamps = self.commit_timestamps()
        candidates = [v for v, ts in timestamps.items() if ts <= timestamp_ms]
        if not candidates:
            earliest = min(timestamps.values())
            raise VersionNotFoundError(
                f"no version at or before timestamp {timestamp_ms}: the earliest commit kept is at {earliest}",
                table=self.location,
            )
        return max(candidates)

    # -- commit ranges ----------------------------------------------------------------------------

    def _commit_file(self, version: int) -> str:
        return self.storage.uri(commit_key(version))

    def commits(self, start: int, end: int | None = None, *, listed: ListedLog | None = None) -> CommitRange:
        """The actions of commits ``start``..``end`` (inclusive; ``end`` defaults to the latest); the log is listed
        unless ``listed`` (this run's listing) covers ``start``."""
        listing = (listed.since(start) if listed is not None else None) or list_log(self.storage, start)
        latest = listing.latest_version
        if latest is None and not list_log(self.storage).commits:
            self.latest_version()  # raises NotADeltaTableError (or the error the log calls for)
        if latest is None or start > latest:
            raise VersionNotFoundError(
                f"no commit at or after version {start} (latest is {self.latest_version()})",
                table=self.location, version=start,
            )
        end = latest if end is None else end
        if end > latest:
            raise VersionNotFoundError(f"version {end} does not exist; the latest version is {latest}",
                                       table=self.location, version=end)
        files = []
        for version in range(start, end + 1):
            entry = listing.commits.get(version)
            if entry is None:
                if any(v < version for v in listing.commits):
                    raise CorruptLogError(
                        f"the log has a gap: commit file {version:020d}.json is missing",
                        table=self.location, version=version, file=self.storage.uri(commit_key(version)),
                    )
                raise VersionNotFoundError(
                    f"commit {version} is not in the log any more (log cleanup)",
                    table=self.location, version=version,
                )
            files.append((version, entry))
        batch = read_json_actions(self.storage, self.location, files)
        check_one_protocol_and_metadata(batch.other_actions, self.location,
                                        lambda version: self.storage.uri(commit_key(version)))
        for version, name, body in batch.other_actions:
            if name == "protocol":
                # A commit may raise the protocol to one this engine cannot read: its actions would be misread.
                try:
                    protocol = Protocol.from_action(body)
                except ValueError as exc:
                    raise CorruptLogError(f"the protocol action is invalid: {exc}", table=self.location,
                                          version=version, file=self.storage.uri(commit_key(version))) from exc
                check_readable(protocol, self.location, version)
        # The same rules as a snapshot load: one file action of a type per path and commit, paths naming files.
        refuse_repeated_file_actions(batch.file_actions, self.location, self._commit_file)
        refuse_invalid_paths(batch.file_actions, self.location, self._commit_file)
        return CommitRange(start, end, batch, dict(files), self.location,
                           {version: self.storage.uri(entry.key) for version, entry in files})


def check_readable(protocol: Protocol, table: str, version: int) -> None:
    """Raise UnsupportedFeatureError when ``protocol`` needs a reader version or feature this engine lacks."""
    if protocol.min_reader_version > MAX_READER_VERSION:
        raise UnsupportedFeatureError(
            f"reader version {protocol.min_reader_version} is newer than this project supports "
            f"({MAX_READER_VERSION})", table=table, version=version,
        )
    unsupported = sorted(protocol.effective_reader_features - SUPPORTED_READER_FEATURES)
    if unsupported:
        raise UnsupportedFeatureError(
            f"unsupported reader feature(s) {', '.join(map(_feature_text, unsupported))}; upgrade airflow-deltaberg "
            "or read the table with an engine that implements them", table=table, version=version,
        )


def _feature_text(name: str) -> str:
    """A feature name as shown in a message: escaped when it holds a newline or another unprintable character."""
    return name if name.isprintable() else repr(name)
