"""Writing a Delta commit: version N+1 through write-if-absent, with commitInfo naming this project."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_deltaberg.core.delta.log_segment import commit_key
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.errors import CommitConflictError, FileAlreadyExistsError
from airflow_deltaberg.version import __version__

ENGINE_INFO = f"airflow-deltaberg/{__version__}"


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
    payload = encode_actions([{"commitInfo": info}, *actions])
    try:
        table.storage.write_if_absent(commit_key(version), payload)
    except FileAlreadyExistsError as exc:
        raise CommitConflictError(
            "another writer committed this version first; re-read the table and try again",
            table=table.location, version=version, file=table.storage.uri(commit_key(version)),
        ) from exc
    return version
