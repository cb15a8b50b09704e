"""commit_with_conflict_check against a real concurrent writer: deltalake commits between our read and our
commit. No conflict: our commit lands at the next free version. Conflict: CommitConflictError naming the
table, the winning version and the file, and the table exactly as the other writer left it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as PeerTable
from deltalake import QueryBuilder, write_deltalake
from support.tables import commit_lines, log_bytes

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.commit import ENGINE_INFO, commit_with_conflict_check, write_commit
from airflow_deltaberg.core.errors import CommitConflictError


def read_ids(path: Path) -> list[int]:
    data = QueryBuilder().register("t", PeerTable(str(path))).execute("select id from t").read_all()
    return sorted(pa.table(data).column("id").to_pylist())


def own_add(path: Path, ids: list[int]) -> dict[str, Any]:
    """Write a parquet file of ``ids`` (plus the other columns null) into the table; its add action."""
    name = f"part-own-{uuid.uuid4()}.parquet"
    data = pa.table({"id": pa.array(ids, pa.int64()), "name": pa.nulls(len(ids), pa.string())})
    pq.write_table(data, path / name)
    stats = {"numRecords": len(ids), "minValues": {"id": min(ids)}, "maxValues": {"id": max(ids)},
             "nullCount": {"id": 0, "name": len(ids)}}
    return {"add": {"path": name, "partitionValues": {}, "size": (path / name).stat().st_size,
                    "modificationTime": int(time.time() * 1000), "dataChange": True, "stats": json.dumps(stats)}}


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    return path


def peer_append(path: Path, ids: list[int]) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "name": [str(i) for i in ids]}),
                    mode="append")


def test_blind_append_is_retried_at_the_next_version(table: Path) -> None:
    ours = DeltaTable(str(table))
    read_version = ours.snapshot().version
    add = own_add(table, [100, 101])
    peer_append(table, [10])  # the other writer takes version 1
    version = commit_with_conflict_check(ours, [add], read_version=read_version, operation="WRITE")
    assert version == 2
    assert read_ids(table) == [1, 2, 3, 10, 100, 101]
    info = commit_lines(table, 2)[0]["commitInfo"]
    assert info["engineInfo"] == ENGINE_INFO and info["readVersion"] == 0 and info["isBlindAppend"] is True
    assert "airflow-deltaberg" not in json.dumps(commit_lines(table, 1))  # version 1 is deltalake's


def test_metadata_change_conflicts_with_a_concurrent_append(table: Path) -> None:
    ours = DeltaTable(str(table))
    snap = ours.snapshot()
    metadata = snap.metadata.to_action()
    metadata["configuration"] = {**metadata["configuration"], "delta.appendOnly": "true"}
    peer_append(table, [10])
    left_by_peer = log_bytes(table)
    with pytest.raises(CommitConflictError) as info:
        commit_with_conflict_check(ours, [{"metaData": metadata}], read_version=snap.version, operation="SET")
    err = info.value
    (peer_file,) = [a["add"]["path"] for a in commit_lines(table, 1) if "add" in a]
    assert (err.table, err.version, err.file) == (str(table), 1, peer_file)
    assert "version 1" in str(err) and peer_file in str(err) and str(table) in str(err)
    assert log_bytes(table) == left_by_peer  # exactly as deltalake left it
    assert read_ids(table) == [1, 2, 3, 10]


def test_removing_a_file_the_other_writer_removed_conflicts(table: Path) -> None:
    ours = DeltaTable(str(table))
    snap = ours.snapshot()
    (path,) = snap.files.column("path").to_pylist()
    remove = {"remove": {"path": path, "deletionTimestamp": int(time.time() * 1000), "dataChange": True}}
    PeerTable(str(table)).delete("id = 2")  # rewrites (removes) the same file
    left_by_peer = log_bytes(table)
    with pytest.raises(CommitConflictError) as info:
        commit_with_conflict_check(ours, [remove], read_version=snap.version, operation="DELETE")
    assert info.value.version == 1 and info.value.file == path
    assert "removed a file this commit removes too" in str(info.value)
    assert log_bytes(table) == left_by_peer
    assert read_ids(table) == [1, 3]


def test_a_whole_table_rewrite_conflicts_with_any_data_change(table: Path) -> None:
    """What the enable rewrite commits: remove every file (dataChange=false) and new files, with metadata."""
    ours = DeltaTable(str(table))
    snap = ours.snapshot()
    actions = [{"remove": {"path": p, "dataChange": False}} for p in snap.files.column("path").to_pylist()]
    actions.append({"metaData": snap.metadata.to_action()})
    peer_append(table, [10])
    with pytest.raises(CommitConflictError) as info:
        commit_with_conflict_check(ours, actions, read_version=snap.version, operation="REWRITE")
    assert "added data that this commit did not read" in str(info.value)
    assert DeltaTable(str(table)).latest_version() == 1


def test_no_retry_left(table: Path) -> None:
    ours = DeltaTable(str(table))
    add = own_add(table, [100])
    peer_append(table, [10])
    left_by_peer = log_bytes(table)
    with pytest.raises(CommitConflictError, match="gave up after 1 attempts"):
        commit_with_conflict_check(ours, [add], read_version=0, operation="WRITE", max_attempts=1)
    assert log_bytes(table) == left_by_peer


def test_retry_after_several_winners(table: Path) -> None:
    ours = DeltaTable(str(table))
    add = own_add(table, [100])
    for i in range(3):
        peer_append(table, [10 + i])
    assert commit_with_conflict_check(ours, [add], read_version=0, operation="WRITE") == 4
    assert read_ids(table) == [1, 2, 3, 10, 11, 12, 100]


# -- in-commit timestamps ------------------------------------------------------------------------------------


def enable_ict(path: Path) -> int:
    table = DeltaTable(str(path))
    snap = table.snapshot()
    md = snap.metadata.to_action()
    md["configuration"] = {**md["configuration"], "delta.enableInCommitTimestamps": "true"}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7,
                "writerFeatures": ["appendOnly", "invariants", "inCommitTimestamp"]}
    return commit_with_conflict_check(table, [{"protocol": protocol}, {"metaData": md}],
                                      read_version=snap.version, operation="SET TBLPROPERTIES")


def test_in_commit_timestamps_when_enabled(table: Path) -> None:
    previous_mtime = (table / "_delta_log" / f"{0:020d}.json").stat().st_mtime_ns // 1_000_000
    assert enable_ict(table) == 1
    lines = commit_lines(table, 1)
    ict = lines[0]["commitInfo"]["inCommitTimestamp"]
    assert ict > previous_mtime
    (md,) = [a["metaData"] for a in lines if "metaData" in a]
    assert md["configuration"]["delta.inCommitTimestampEnablementVersion"] == "1"
    assert md["configuration"]["delta.inCommitTimestampEnablementTimestamp"] == str(ict)

    ours = DeltaTable(str(table))
    add = own_add(table, [100])
    # A concurrent writer (ours, through the plain writer) takes version 2 with a timestamp in the future.
    future = int(time.time() * 1000) + 60_000
    write_commit(ours, [own_add(table, [50])], read_version=1, operation="WRITE", in_commit_timestamp_after=future)
    assert commit_with_conflict_check(ours, [add], read_version=1, operation="WRITE") == 3
    winner = commit_lines(table, 2)[0]["commitInfo"]["inCommitTimestamp"]
    mine = commit_lines(table, 3)[0]["commitInfo"]["inCommitTimestamp"]
    assert winner == future + 1 and mine == winner + 1  # strictly after the previous commit's
    assert DeltaTable(str(table)).commit_timestamps()[3] == mine
    assert DeltaTable(str(table)).snapshot().timestamp == mine


def test_no_in_commit_timestamp_when_off(table: Path, deltalake_table: Callable[..., Path]) -> None:
    version = commit_with_conflict_check(DeltaTable(str(table)), [own_add(table, [7])], read_version=0,
                                         operation="WRITE")
    assert "inCommitTimestamp" not in commit_lines(table, version)[0]["commitInfo"]
