"""The commits an enable writes (at the plan's level): the metadata-only one (the plan's protocol and metadata)
and the rewrite's (the same with a ``remove`` for every old live file and an ``add`` for every new one, plus base
row ids when the level turns row tracking on), both through the conflict-checked commit writer; and finding the
enable commit made from a read version."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_deltaberg.core.delta.log.commit import commit_with_conflict_check
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.enable.levels import ROW_TRACKING_DOMAIN, enable_level
from airflow_deltaberg.core.enable.plan import EnablePlan
from airflow_deltaberg.core.enable.rewrite.actions import add_action, remove_actions
from airflow_deltaberg.core.enable.rewrite.files import WrittenFile
from airflow_deltaberg.core.enable.rewrite.writer import delete_files
from airflow_deltaberg.core.errors import CommitConflictError, DeltaError, EnableBlockedError

#: The operation in the commitInfo of every enable commit (how ``find_enable_commit`` recognizes one).
OPERATION = "ENABLE ICEBERG WRITER COMPAT"


def commit_metadata_only(table: DeltaTable, plan: EnablePlan, read_configuration: Mapping[str, str] | None = None
                         ) -> int:
    """One commit with the plan's protocol and metadata; no data file is touched. Returns the version."""
    if plan.needs_rewrite:
        raise EnableBlockedError("the data files must be rewritten, a metadata-only commit would leave them "
                                 f"incompatible: {'; '.join(plan.reasons)}", plan)
    return commit_with_conflict_check(
        table, [{"protocol": plan.protocol}, {"metaData": plan.metadata}],
        read_version=plan.read_version, operation=OPERATION,
        parameters={"mode": "metadata_only", "changes": list(plan.changes)},
        read_configuration=read_configuration,
    )


def commit_rewrite(
    table: DeltaTable,
    snapshot: Snapshot,
    plan: EnablePlan,
    written: Sequence[WrittenFile],
    *,
    before_commit: Callable[[Sequence[Mapping[str, Any]]], None] | None = None,
) -> int:
    """Swap the rewritten files of ``snapshot`` in and commit the plan with them; returns the version.

    Refused (DeltaError) when the rows written differ from the live rows the log's stats promise.
    ``before_commit`` is called with the actions just before the commit. When anything fails before the
    commit (the row count, ``before_commit``) or the commit is refused (CommitConflictError), the files written
    are deleted again; the old data files are never deleted (a later VACUUM may).
    """
    paths = [f.path for f in written]
    try:
        _check_row_count(snapshot, written)
        row_tracking = enable_level(plan.level).row_tracking
        adds = [add_action(f) for f in written]
        actions = [
            {"protocol": plan.protocol},
            {"metaData": plan.metadata},
            *remove_actions(snapshot.files, int(time.time() * 1000)),
            *adds,
            *(_assign_row_ids(snapshot, adds) if row_tracking else []),
        ]
        if before_commit is not None:
            before_commit(actions)
    except BaseException:
        delete_files(table.storage, paths)
        raise
    parameters = {"mode": "rewrite", "filesRemoved": snapshot.num_files, "filesAdded": len(written)}
    try:
        # With row tracking the adds carry the commit's version (defaultRowCommitVersion): no retry elsewhere.
        return commit_with_conflict_check(table, actions, read_version=snapshot.version, operation=OPERATION,
                                          parameters=parameters, max_attempts=1 if row_tracking else 3)
    except CommitConflictError:
        # Certainly not committed (write-if-absent refused or a conflict was found): the files are garbage. Any
        # other failure may have left the commit written, so its files stay.
        delete_files(table.storage, paths)
        raise


def _assign_row_ids(snapshot: Snapshot, adds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every new file a base row id (counting up from the table's high-water mark) and this commit's version
    as its default row commit version; returns the ``domainMetadata`` action with the new high-water mark
    (Delta protocol, "Row Tracking")."""
    domain = snapshot.domain_metadata.get(ROW_TRACKING_DOMAIN)
    high = -1
    if domain is not None and not domain.removed:
        high = int(json.loads(domain.configuration or "{}").get("rowIdHighWaterMark", -1))
    for action in adds:
        body = action["add"]
        body["baseRowId"] = high + 1
        body["defaultRowCommitVersion"] = snapshot.version + 1
        high += int(json.loads(body["stats"]).get("numRecords", 0)) if body.get("stats") else 0
    if not adds:
        return []
    return [{"domainMetadata": {"domain": ROW_TRACKING_DOMAIN,
                                "configuration": json.dumps({"rowIdHighWaterMark": high}, separators=(",", ":")),
                                "removed": False}}]


def _check_row_count(snapshot: Snapshot, written: Sequence[WrittenFile]) -> None:
    """Refuse to commit when the rows written differ from the live rows the log's stats promise."""
    expected = snapshot.num_records  # numRecords minus deleted rows; None when a file lacks numRecords
    got = sum(f.num_records for f in written)
    if expected is not None and expected != got:
        raise DeltaError(
            f"the rewrite wrote {got} rows but the table's stats count {expected} live rows; nothing was "
            "committed (check the table with `deltaberg validate --data-checks`)",
            table=snapshot.table, version=snapshot.version,
        )


def find_enable_commit(location: str, read_version: int, storage_options: Mapping[str, Any] | None = None
                       ) -> int | None:
    """The version of the enable commit made from ``read_version`` (its commitInfo names the operation and the
    read version), or None: how a caller learns the outcome of a rewrite whose result it could not read."""
    table = DeltaTable(location, storage_options)
    latest = table.latest_version()
    if latest <= read_version:
        return None
    for version, info in sorted(table.commits(read_version + 1, latest).commit_infos().items()):
        if info.get("operation") == OPERATION and info.get("readVersion") == read_version:
            return version
    return None
