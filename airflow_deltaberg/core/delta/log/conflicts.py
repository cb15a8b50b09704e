"""Conflict detection between a commit and the commits that won the race for its version.

The rules follow Delta's optimistic concurrency (protocol: serializable writes; Delta on Spark's conflict
checker): a concurrent protocol or metadata change always conflicts; two commits removing the same file
conflict; the same application transaction id or metadata domain conflicts; and a commit that read the whole
table (a metadata change, a rewrite, a delete without tracked predicates) conflicts with any concurrent data
change. A blind append conflicts with none of the winners' data changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow.compute as pc

from airflow_deltaberg.core.delta.log.log_segment import commit_key
from airflow_deltaberg.core.delta.table import CommitRange
from airflow_deltaberg.core.errors import CommitConflictError


def reads_whole_table(actions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a commit depends on every file of the version it read: it changes protocol or metadata, or
    removes files (we keep no read predicates, so a remove is assumed to depend on everything read)."""
    return any("metaData" in a or "protocol" in a or "remove" in a for a in actions)


def _own(actions: Sequence[Mapping[str, Any]], name: str, key: str) -> set[str]:
    return {str(a[name][key]) for a in actions if name in a and key in a[name]}


def find_conflict(
    location: str,
    winners: CommitRange,
    actions: Sequence[Mapping[str, Any]],
    *,
    read_version: int,
    whole_table: bool,
) -> CommitConflictError | None:
    """The first conflict between ``actions`` (read at ``read_version``) and the ``winners``, or None."""
    own_removes = _own(actions, "remove", "path")
    own_adds = _own(actions, "add", "path")
    own_apps = _own(actions, "txn", "appId")
    own_domains = _own(actions, "domainMetadata", "domain")

    def error(version: int, what: str, file: str | None = None) -> CommitConflictError:
        where = file if file is not None else f"{location.rstrip('/')}/{commit_key(version)}"
        return CommitConflictError(
            f"concurrent commit {version} {what}, after this commit read version {read_version}; nothing was "
            "written: re-read the table and run the operation again", table=location, version=version, file=where,
        )

    others: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for version, name, body in winners.actions.other_actions:
        others.setdefault(version, []).append((name, body))
    files = winners.actions.file_actions
    for version in range(winners.start, winners.end + 1):
        for name, body in others.get(version, []):
            if name == "protocol":
                return error(version, "changed the protocol")
            if name == "metaData":
                return error(version, "changed the table metadata (schema, partitioning or properties)")
            if name == "txn" and str(body.get("appId")) in own_apps:
                return error(version, f"committed application transaction {body.get('appId')} too")
            if name == "domainMetadata" and str(body.get("domain")) in own_domains:
                return error(version, f"changed metadata domain {body.get('domain')} too")
        mine = files.filter(pc.equal(files.column("version"), version))
        if mine.num_rows == 0:
            continue
        paths = mine.column("path").to_pylist()
        is_add = mine.column("is_add").to_pylist()
        data_change = mine.column("dataChange").to_pylist()
        rows = list(zip(paths, is_add, data_change, strict=True))
        # The file-level conflicts first: they name the file both commits touched.
        for path, added, _ in rows:
            if not added and path in own_removes:
                return error(version, "removed a file this commit removes too", path)
            if added and path in own_adds:
                return error(version, "added a file this commit adds too", path)
        for path, added, changed in rows:
            if whole_table and changed is not False:
                kind = "added" if added else "removed"
                return error(version, f"{kind} data that this commit did not read (it depends on the whole "
                             "table)", path)
    return None
