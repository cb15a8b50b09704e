"""Which files of `_delta_log` make up a given version: the newest usable checkpoint plus the commits after it.

Log compaction files (`<x>.<y>.compacted.json`) are listed but never part of a segment: the commits they
cover are always there (a segment needs every commit after its checkpoint), and reading those instead means
a compaction that disagrees with its commits cannot change the state."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_deltaberg.core.errors import (
    CorruptLogError,
    MissingCheckpointPartError,
    NotADeltaTableError,
    VersionNotFoundError,
)
from airflow_deltaberg.core.storage import FileEntry, Storage

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")
_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")


def commit_key(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: one file (classic, UUID-named) or every part of a multi-part one."""

    version: int
    kind: str  # "classic" | "multipart" | "uuid"
    files: tuple[FileEntry, ...]

    @property
    def is_json(self) -> bool:
        return self.files[0].key.endswith(".json")


@dataclass(frozen=True)
class Compaction:
    start: int
    end: int
    file: FileEntry


@dataclass
class LogListing:
    """The parsed names of a `_delta_log` listing."""

    commits: dict[int, FileEntry] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    incomplete_checkpoints: dict[int, list[FileEntry]] = field(default_factory=dict)
    compactions: list[Compaction] = field(default_factory=list)
    has_any_file: bool = False

    @classmethod
    def parse(cls, entries: list[FileEntry]) -> LogListing:
        listing = cls()
        parts: dict[tuple[int, int], dict[int, FileEntry]] = {}
        for entry in entries:
            name = entry.name
            listing.has_any_file = True
            if m := _COMMIT.match(name):
                listing.commits[int(m.group(1))] = entry
            elif m := _CLASSIC_CHECKPOINT.match(name):
                listing.checkpoints.append(Checkpoint(int(m.group(1)), "classic", (entry,)))
            elif m := _UUID_CHECKPOINT.match(name):
                listing.checkpoints.append(Checkpoint(int(m.group(1)), "uuid", (entry,)))
            elif m := _MULTIPART_CHECKPOINT.match(name):
                version, part, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
                parts.setdefault((version, total), {})[part] = entry
            elif m := _COMPACTION.match(name):
                listing.compactions.append(Compaction(int(m.group(1)), int(m.group(2)), entry))
        for (version, total), found in parts.items():
            if len(found) == total and all(p in found for p in range(1, total + 1)):
                files = tuple(found[p] for p in range(1, total + 1))
                listing.checkpoints.append(Checkpoint(version, "multipart", files))
            else:
                # Readers must ignore multi-part checkpoints with missing parts (protocol).
                listing.incomplete_checkpoints[version] = sorted(found.values(), key=lambda e: e.key)
        # Prefer, for one version, UUID-named over classic over multi-part: fewest files to read.
        order = {"uuid": 0, "classic": 1, "multipart": 2}
        listing.checkpoints.sort(key=lambda c: (c.version, -order[c.kind]))
        return listing

    @property
    def latest_version(self) -> int | None:
        versions = list(self.commits) + [c.version for c in self.checkpoints]
        return max(versions) if versions else None

    def since(self, start: int) -> LogListing:
        """What a listing from ``start`` on (``list_log(storage, start)``) gives, taken from this one: every name
        there begins with its 20-digit version."""
        return LogListing(
            commits={v: e for v, e in self.commits.items() if v >= start},
            checkpoints=[c for c in self.checkpoints if c.version >= start],
            incomplete_checkpoints={v: f for v, f in self.incomplete_checkpoints.items() if v >= start},
            compactions=[c for c in self.compactions if c.start >= start],
            has_any_file=self.has_any_file,
        )


@dataclass
class ListedLog:
    """One listing of the log, from version ``start`` on (0: the whole log): a run lists the log once and takes
    what later steps need from it. ``lister`` (``Storage.lister``) lists it from an earlier start when a step
    needs one (e.g. the history check when retained snapshots predate the checkpoint), without reading a local
    folder again; the listing grows to that start.

    ``storage`` is set when the commits were looked up by name (``probed_log``): the listing holds commits only,
    every one from ``start`` to the latest. An earlier start is looked up the same way, and listed when one of
    its commits is not there (the listing then holds every file, as a listing from the start does)."""

    listing: LogListing
    start: int
    lister: Callable[[str | None], list[FileEntry]] | None = field(default=None, compare=False)
    storage: Storage | None = field(default=None, compare=False)

    def since(self, start: int) -> LogListing | None:
        """The listing from ``start`` on; None when this one began after it and it has no lister."""
        if start < self.start and self.storage is not None:
            below = _commits_named(self.storage, start, self.start)
            if len(below) == self.start - start:
                self.listing = LogListing({**below, **self.listing.commits}, has_any_file=True)
                self.start = start
            else:  # a commit is gone: what else is there (checkpoints) tells what the log still rebuilds
                self.storage = None
        if start < self.start and self.lister is not None:
            self.listing, self.start = _parse_from(self.lister, start), start
        return self.listing.since(start) if self.start <= start else None


def _commits_named(storage: Storage, start: int, stop: int | None) -> dict[int, FileEntry]:
    """The commits ``start``, ``start + 1``, ... (before ``stop``) up to the first one missing."""
    versions = itertools.count(start) if stop is None else range(start, stop)
    found = storage.files_named(LOG_DIR, (f"{v:020d}.json" for v in versions))
    return {start + i: entry for i, entry in enumerate(found)}


def probed_log(storage: Storage, table: str, start: int) -> ListedLog | None:
    """The commits from ``start`` to the latest looked up by name, for a store that reads a folder whole to list it
    (``Storage.lists_whole_folders``): a run that knows from where it reads the log (the converted version) then
    costs the same at commit 10,000 as at commit 100. The latest version is the commit before the first one
    missing: Delta commits every version in turn (a gap is a corrupt log). None (list the log instead) for other
    stores, when ``start``'s commit is not there, or when ``_last_checkpoint`` names a later version than that
    (commits that only a listing finds)."""
    if not storage.lists_whole_folders:
        return None
    commits = _commits_named(storage, start, None)
    if not commits:
        return None
    hint = read_last_checkpoint(storage, table)
    if hint is not None and hint > start + len(commits) - 1:
        return None
    return ListedLog(LogListing(commits, has_any_file=True), start, storage.lister(LOG_DIR), storage)


@dataclass(frozen=True)
class LogSegment:
    """The files to replay for ``version``: a checkpoint (or none) and the commits after it."""

    table: str
    version: int
    checkpoint: Checkpoint | None
    commits: tuple[tuple[int, FileEntry], ...]
    version_commit: FileEntry | None  # the commit file of ``version`` itself, for its timestamp

    @property
    def start_version(self) -> int:
        return self.checkpoint.version + 1 if self.checkpoint else 0


def read_last_checkpoint(storage: Storage, table: str) -> int | None:
    """The version that `_last_checkpoint` points at, or None when it is missing or malformed."""
    try:
        raw = storage.read(LAST_CHECKPOINT)
    except FileNotFoundError:
        return None
    try:
        value = json.loads(raw)
        version = value["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError(f"version {version!r} is not a non-negative integer")
        return version
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s: ignoring malformed %s (%s); listing the whole log", table, LAST_CHECKPOINT, exc)
        return None


def list_log(storage: Storage, start_version: int | None = None) -> LogListing:
    """List `_delta_log`, from ``start_version`` on when given (no listing of older files)."""
    return _parse_from(functools.partial(storage.list_from, LOG_DIR), start_version)


def _parse_from(lister: Callable[[str | None], list[FileEntry]], start_version: int | None) -> LogListing:
    return LogListing.parse(lister(f"{start_version:020d}" if start_version else None))


def build_log_segment(
    storage: Storage,
    table: str,
    version: int | None = None,
) -> LogSegment:
    """The log segment of ``version`` (latest when None)."""
    return listed_log_segment(storage, table, version)[0]


def listed_log_segment(storage: Storage, table: str, version: int | None = None) -> tuple[LogSegment, ListedLog]:
    """The log segment of ``version`` (latest when None) and the listing it came from."""
    hint = read_last_checkpoint(storage, table)
    lister = storage.lister(LOG_DIR)
    listing: LogListing | None = None
    start = 0
    if hint is not None and (version is None or hint <= version):
        listing, start = _parse_from(lister, hint), hint
        usable = [c for c in listing.checkpoints if version is None or c.version <= version]
        if not usable:
            log.info("%s: the checkpoint of %s (version %d) is not usable; listing the whole log",
                     table, LAST_CHECKPOINT, hint)
            listing, start = None, 0
    if listing is None:
        listing = _parse_from(lister, None)
    return _segment_from_listing(storage, table, listing, version), ListedLog(listing, start, lister)


def _segment_from_listing(storage: Storage, table: str, listing: LogListing, version: int | None) -> LogSegment:
    latest = listing.latest_version
    if latest is None and listing.incomplete_checkpoints:
        v = max(listing.incomplete_checkpoints)
        present = ", ".join(e.name for e in listing.incomplete_checkpoints[v])
        raise MissingCheckpointPartError(
            f"the only state left is the multi-part checkpoint of version {v}, and it lacks parts "
            f"(present: {present})", table=table, version=v, file=storage.uri(LOG_DIR),
        )
    if latest is None:
        if listing.has_any_file or storage.list_from(LOG_DIR):
            raise NotADeltaTableError(
                f"{LOG_DIR} has no commit or checkpoint file", table=table, file=storage.uri(LOG_DIR)
            )
        raise NotADeltaTableError(
            f"not a Delta table: no {LOG_DIR} directory with commits", table=table
        )
    target = latest if version is None else version
    if version is not None and (version < 0 or version > latest):
        raise VersionNotFoundError(
            f"version {version} does not exist; the latest version is {latest}", table=table, version=version
        )
    checkpoint = next((c for c in reversed(listing.checkpoints) if c.version <= target), None)
    start = checkpoint.version + 1 if checkpoint else 0
    commits = []
    for v in range(start, target + 1):
        entry = listing.commits.get(v)
        if entry is None:
            _raise_missing_commit(storage, table, listing, v, target, checkpoint)
        commits.append((v, entry))
    return LogSegment(
        table=table,
        version=target,
        checkpoint=checkpoint,
        commits=tuple(commits),
        version_commit=listing.commits.get(target),
    )


def _raise_missing_commit(
    storage: Storage,
    table: str,
    listing: LogListing,
    missing: int,
    target: int,
    checkpoint: Checkpoint | None,
) -> None:
    earliest = min(listing.commits) if listing.commits else None
    incomplete = [
        v for v in listing.incomplete_checkpoints if v <= target and (checkpoint is None or v > checkpoint.version)
    ]
    if incomplete and (earliest is None or missing < earliest):
        v = max(incomplete)
        present = ", ".join(e.name for e in listing.incomplete_checkpoints[v])
        raise MissingCheckpointPartError(
            f"the multi-part checkpoint of version {v} lacks parts (present: {present}) and the commits "
            f"before it are gone, so version {target} cannot be reconstructed",
            table=table,
            version=target,
            file=storage.uri(LOG_DIR),
        )
    if earliest is None or missing < earliest:
        raise VersionNotFoundError(
            f"version {target} cannot be reconstructed: commit {missing} is gone (log cleanup) and no "
            f"checkpoint at or before {target} covers it; the earliest commit kept is {earliest}",
            table=table,
            version=target,
        )
    raise CorruptLogError(
        f"the log has a gap: commit file {missing:020d}.json is missing between "
        f"{earliest} and {target}",
        table=table,
        version=missing,
        file=storage.uri(commit_key(missing)),
    )
