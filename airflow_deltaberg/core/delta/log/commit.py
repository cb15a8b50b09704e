"""Writing a Delta commit: version N+1 through write-if-absent, with commitInfo naming this project.

``write_commit`` writes exactly one version and fails when another writer got there first.
``commit_with_conflict_check`` is the optimistic-concurrency loop: on losing the race it reads the winning
commits through the log engine, checks them against what this commit read and changes (as Delta's conflict
checker does), and either retries at the next free version or raises CommitConflictError.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_deltaberg.core.delta.log.conflicts import find_conflict, reads_whole_table
from airflow_deltaberg.core.delta.log.log_segment import commit_key, list_log
from airflow_deltaberg.core.delta.models import ICT_ENABLED, ICT_TIMESTAMP, ICT_VERSION
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.errors import CommitConflictError, CorruptLogError, FileAlreadyExistsError
from airflow_deltaberg.version import __version__

ENGINE_INFO = f"airflow-deltaberg/{__version__}"

log = logging.getLogger(__name__)


def commit_info(operation: str, parameters: Mapping[str, Any] | None, read_version: int | None,
                timestamp_ms: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "timestamp": timestamp_ms,
        "operation": operation,
        "operationParameters": {k: v if isinstance(v, str) else json.dumps(v) for k, v in (parameters or {}).items()},
        "engineInfo": ENGINE_INFO,
    }
    if read_version is not None:
        info["readVersion"] = read_version
    return info


def encode_actions(actions: Sequence[Mapping[str, Any]]) -> bytes:
    """NDJSON, one action per line, as the protocol requires."""
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()


def write_commit(
    table: DeltaTable,
    actions: Sequence[Mapping[str, Any]],
    *,
    read_version: int | None,
    operation: str,
    parameters: Mapping[str, Any] | None = None,
    in_commit_timestamp_after: int | None = None,
) -> int:
    """Commit ``actions`` as version ``read_version + 1`` (0 when None); returns the version written.

    ``in_commit_timestamp_after``: the previous commit's in-commit timestamp when the table has them
    enabled; the new one is made strictly larger, as the protocol requires.
    """
    version = 0 if read_version is None else read_version + 1
    now = int(time.time() * 1000)
    info = commit_info(operation, parameters, read_version, now)
    if in_commit_timestamp_after is not None:
        info["inCommitTimestamp"] = max(now, in_commit_timestamp_after + 1)
    return _write_if_absent(table, version, info, actions,
                            "another writer committed this version first; re-read the table and try again")


def _write_if_absent(table: DeltaTable, version: int, info: Mapping[str, Any],
                     actions: Sequence[Mapping[str, Any]], taken: str) -> int:
    """Write commitInfo and ``actions`` as ``version`` unless it exists: then CommitConflictError(``taken``)."""
    # commitInfo first: in-commit timestamps require it, and readers look for it there.
    payload = encode_actions([{"commitInfo": info}, *actions])
    try:
        table.storage.write_if_absent(commit_key(version), payload)
    except FileAlreadyExistsError as exc:
        raise CommitConflictError(taken, table=table.location, version=version,
                                  file=table.storage.uri(commit_key(version))) from exc
    return version


def _metadata_of(actions: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for action in actions:
        if "metaData" in action:
            return action["metaData"]
    return None


def _commit_time(table: DeltaTable, version: int) -> int:
    """The commit timestamp of ``version``: its in-commit timestamp, else its file's modification time."""
    entry = list_log(table.storage, version).commits.get(version)
    if entry is None:
        return 0
    first = table.storage.read(entry.key).split(b"\n", 1)[0]
    try:
        info = json.loads(first).get("commitInfo") or {}
    except ValueError as exc:
        raise CorruptLogError("the first line of the commit is not JSON", table=table.location, version=version,
                              file=table.storage.uri(entry.key)) from exc
    if "inCommitTimestamp" in info:
        return int(info["inCommitTimestamp"])
    return entry.mtime_ms


def _with_ict(table: DeltaTable, actions: list[dict[str, Any]], version: int, read_config: Mapping[str, str]
              ) -> tuple[list[dict[str, Any]], int | None]:
    """The actions to write at ``version`` and the in-commit timestamp to put in commitInfo (None: off).

    In-commit timestamps are needed when the table has them enabled after this commit. When this commit turns
    them on for a table with earlier commits, the enablement version and timestamp properties are set too.
    """
    new_metadata = _metadata_of(actions)
    config = (new_metadata.get("configuration") or {}) if new_metadata is not None else read_config
    if str(config.get(ICT_ENABLED, "false")).lower() != "true":
        return actions, None
    now = int(time.time() * 1000)
    if version == 0:
        return actions, now
    previous = _commit_time(table, version - 1)
    # Strictly after the previous commit, whether that one has an in-commit timestamp or only a file time.
    ict = max(now, previous + 1)
    newly_enabled = str(read_config.get(ICT_ENABLED, "false")).lower() != "true"
    if newly_enabled and new_metadata is not None:
        patched = dict(new_metadata)
        patched["configuration"] = {**config, ICT_VERSION: str(version), ICT_TIMESTAMP: str(ict)}
        actions = [{"metaData": patched} if "metaData" in a else a for a in actions]
    return actions, ict


def commit_with_conflict_check(
    table: DeltaTable,
    actions: Sequence[Mapping[str, Any]],
    *,
    read_version: int,
    operation: str,
    parameters: Mapping[str, Any] | None = None,
    max_attempts: int = 3,
    read_whole_table: bool | None = None,
    read_configuration: Mapping[str, str] | None = None,
) -> int:
    """Commit ``actions``, read at ``read_version``, as the next free version; returns the version written.

    Writes ``read_version + 1`` with write-if-absent. When another writer committed first, the winning commits
    are read and checked (see ``conflicts.find_conflict``): a protocol or metadata change, a file this commit
    removes that a winner removed too, the same application transaction or metadata domain, or - when this
    commit read the whole table (``read_whole_table``; by default when it changes protocol or metadata or
    removes files) - any file a winner added or removed. No conflict: the commit is retried at the next
    version (at most ``max_attempts`` writes). A conflict raises CommitConflictError naming the winning
    version and the file at fault; nothing of this commit is written then.

    ``read_configuration``: the table properties at ``read_version`` (for in-commit timestamps), when the caller
    has them; otherwise the snapshot at ``read_version`` is loaded.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    own = [dict(a) for a in actions]
    whole = reads_whole_table(own) if read_whole_table is None else read_whole_table
    if read_configuration is not None:
        read_config: Mapping[str, str] = read_configuration
    else:
        read_config = table.snapshot(read_version).metadata.configuration if read_version >= 0 else {}
    checked = read_version  # the winners up to here were checked already
    version = read_version + 1
    for attempt in range(1, max_attempts + 1):
        to_write, ict = _with_ict(table, own, version, read_config)
        try:
            return _write(table, to_write, version, read_version, operation, parameters, ict)
        except CommitConflictError:
            latest = table.latest_version()
            winners = table.commits(checked + 1, latest)
            conflict = find_conflict(table.location, winners, own, read_version=read_version, whole_table=whole)
            if conflict is not None:
                raise conflict from None
            log.info("%s: version %s was taken by another writer without a conflict (attempt %s of %s); "
                     "retrying at version %s", table.location, version, attempt, max_attempts, latest + 1)
            checked = latest
            version = latest + 1
    raise CommitConflictError(
        f"gave up after {max_attempts} attempts: other writers kept committing first (no conflict found); "
        "run the operation again", table=table.location, version=version,
        file=table.storage.uri(commit_key(version)),
    )


def _write(table: DeltaTable, actions: list[dict[str, Any]], version: int, read_version: int, operation: str,
           parameters: Mapping[str, Any] | None, ict: int | None) -> int:
    now = int(time.time() * 1000)
    info = commit_info(operation, parameters, read_version if read_version >= 0 else None, ict or now)
    info["isBlindAppend"] = all("add" in a and a["add"].get("dataChange", True) for a in actions) and bool(actions)
    if ict is not None:
        info["inCommitTimestamp"] = ict
    return _write_if_absent(table, version, info, actions, "another writer committed this version first")
