"""Tables written by deltalake (delta-rs) in tmp_path: our snapshots equal deltalake's at every version,
time travel by timestamp picks the same version, and commit ranges hold the adds/removes of the commits."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.log_segment import list_log
from airflow_deltaberg.core.errors import VersionNotFoundError

#: Commit file mtimes are set to BASE_MS + version * STEP_MS so that timestamps are distinct and known.
BASE_MS = 1_700_000_000_000
STEP_MS = 10_000


def _rows(ids: list[int], parts: list[str], note: str | None = None) -> pa.Table:
    columns = {"id": pa.array(ids, pa.int64()), "part": pa.array(parts, pa.string())}
    if note is not None:
        columns["note"] = pa.array([note] * len(ids), pa.string())
    return pa.table(columns)


@dataclass
class History:
    path: Path
    operations: dict[int, str]  # version -> what was done
    checkpoints: list[int]
    compactions: list[tuple[int, int]]

    @property
    def latest(self) -> int:
        return max(self.operations)


def _version(path: Path) -> int:
    return deltalake.DeltaTable(str(path)).version()


def _build_partitioned(path: Path) -> History:
    """Appends, deletes (whole-file and rewriting), checkpoints, optimize, vacuum, overwrite, schema
    evolution and a log compaction, on a table partitioned by values that need escaping in paths."""
    ops: dict[int, str] = {}
    checkpoints: list[int] = []
    # Partition values with ' ', '/', '%', ':' and '=': their directories and log paths are escaped.
    write_deltalake(
        str(path), _rows([1, 2, 3, 10, 11], ["a b", "x/y", "p%q", "a b", "a b"]), partition_by=["part"],
        name="history", description="written by deltalake",
    )
    ops[_version(path)] = "create"
    write_deltalake(str(path), _rows([4, 5], ["a b", "c:d=e"]), mode="append")
    ops[_version(path)] = "append"
    deltalake.DeltaTable(str(path)).delete("id = 2")  # the only row of its file: a remove alone
    ops[_version(path)] = "delete whole file"
    deltalake.DeltaTable(str(path)).delete("id = 10")  # rewrites a file: remove + add
    ops[_version(path)] = "delete with rewrite"
    deltalake.DeltaTable(str(path)).create_checkpoint()
    checkpoints.append(_version(path))
    write_deltalake(str(path), _rows([6, 7], ["a b", "p%q"]), mode="append")
    ops[_version(path)] = "append after checkpoint"
    deltalake.DeltaTable(str(path)).optimize.compact()
    ops[_version(path)] = "optimize"
    before = _version(path)
    deltalake.DeltaTable(str(path)).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    for v in range(before + 1, _version(path) + 1):  # VACUUM START / END: commits without file actions
        ops[v] = "vacuum"
    write_deltalake(str(path), _rows([20, 21], ["z", "a b"]), mode="overwrite")
    ops[_version(path)] = "overwrite"
    deltalake.DeltaTable(str(path)).create_checkpoint()
    checkpoints.append(_version(path))
    write_deltalake(str(path), _rows([30], ["z"], "new column"), mode="append", schema_mode="merge")
    ops[_version(path)] = "append with a new column"
    write_deltalake(str(path), _rows([31], ["q"], "later"), mode="append")
    ops[_version(path)] = "append"
    # deltalake writes a reconciled log compaction for a range that crosses a checkpoint-free stretch.
    first = checkpoints[-1] + 1
    deltalake.DeltaTable(str(path)).compact_logs(first, _version(path))
    compactions = [(first, _version(path))]
    write_deltalake(str(path), _rows([32], ["q"], "after"), mode="append")
    ops[_version(path)] = "append after the compaction"
    return History(path, ops, checkpoints, compactions)


def _build_unpartitioned(path: Path) -> History:
    """Many small appends with a checkpoint every few commits, plus deletes and an overwrite."""
    ops: dict[int, str] = {}
    checkpoints: list[int] = []
    for i in range(12):
        write_deltalake(str(path), pa.table({"id": pa.array([i, i + 100], pa.int64())}), mode="append")
        ops[_version(path)] = f"append {i}"
        if i % 4 == 3:
            deltalake.DeltaTable(str(path)).create_checkpoint()
            checkpoints.append(_version(path))
        if i == 5:
            deltalake.DeltaTable(str(path)).delete("id = 105")
            ops[_version(path)] = "delete with rewrite"
    write_deltalake(str(path), pa.table({"id": pa.array([1000], pa.int64())}), mode="overwrite")
    ops[_version(path)] = "overwrite"
    deltalake.DeltaTable(str(path)).delete()
    ops[_version(path)] = "delete everything"
    return History(path, ops, checkpoints, [])


def _set_commit_times(path: Path) -> None:
    for entry in (path / "_delta_log").iterdir():
        if entry.name.endswith(".json") and entry.name[:20].isdigit() and len(entry.name) == 25:
            ms = BASE_MS + int(entry.name[:20]) * STEP_MS
            os.utime(entry, ns=(ms * 1_000_000, ms * 1_000_000))


@pytest.fixture(scope="module", params=["partitioned", "unpartitioned"])
def history(request, tmp_path_factory) -> History:
    path = tmp_path_factory.mktemp(request.param) / "table"
    built = _build_partitioned(path) if request.param == "partitioned" else _build_unpartitioned(path)
    _set_commit_times(path)
    return built


def _ours(snapshot) -> Counter:
    return Counter(snapshot.files.column("path").to_pylist())


def _theirs(path: Path, version: int) -> Counter:
    adds = pa.table(deltalake.DeltaTable(str(path), version=version).get_add_actions(flatten=True))
    return Counter(adds.column("path").to_pylist())


def test_history_was_written_as_planned(history):
    names = {p.name for p in (history.path / "_delta_log").iterdir()}
    for v in history.checkpoints:
        assert f"{v:020d}.checkpoint.parquet" in names
    for start, end in history.compactions:
        assert f"{start:020d}.{end:020d}.compacted.json" in names
    assert sorted(history.operations) == list(range(history.latest + 1))
    assert DeltaTable(str(history.path)).latest_version() == history.latest


def test_same_files_as_deltalake_at_every_version(history):
    table = DeltaTable(str(history.path))
    for v in range(history.latest + 1):
        snap = table.snapshot(v)
        assert snap.version == v
        assert _ours(snap) == _theirs(history.path, v), f"v{v} ({history.operations[v]})"


def test_same_metadata_and_schema_as_deltalake_at_every_version(history):
    table = DeltaTable(str(history.path))
    for v in range(history.latest + 1):
        snap = table.snapshot(v)
        d = deltalake.DeltaTable(str(history.path), version=v)
        m = d.metadata()
        assert (snap.metadata.id, snap.metadata.name, snap.metadata.description) == (m.id, m.name, m.description)
        assert list(snap.metadata.partition_columns) == list(m.partition_columns)
        assert snap.metadata.configuration == dict(m.configuration)
        assert snap.schema.to_json() == json.loads(d.schema().to_json()), f"v{v}"
        p = d.protocol()
        assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (
            p.min_reader_version, p.min_writer_version
        )
        assert snap.num_records == sum(
            pa.table(d.get_add_actions(flatten=True)).column("num_records").to_pylist()
        ), f"v{v}"


@pytest.mark.parametrize("history", ["partitioned"], indirect=True)
def test_schema_evolution_is_seen(history):
    table = DeltaTable(str(history.path))
    evolved = next(v for v, op in history.operations.items() if "new column" in op)
    assert "note" not in table.snapshot(evolved - 1).schema.names
    assert "note" in table.snapshot(evolved).schema.names


@pytest.mark.parametrize("history", ["partitioned"], indirect=True)
def test_partition_paths_are_escaped_as_in_the_log(history):
    snap = DeltaTable(str(history.path)).snapshot(0)
    assert snap.partition_columns == ("part",)
    paths = snap.files.column("path").to_pylist()
    # Directory names are Hive-escaped (part=a%20b) and the log path URI-encodes them again (part=a%2520b).
    assert any(p.startswith("part=a%2520b/") for p in paths)
    assert any(p.startswith("part=x%252Fy/") for p in paths)
    values = {pv[0][1] if pv else None for pv in snap.files.column("partitionValues").to_pylist()}
    assert {"a b", "x/y", "p%q"} <= values


def test_checkpoints_are_used(history):
    table = DeltaTable(str(history.path))
    for v in range(history.latest + 1):
        segment = table.snapshot(v).segment
        expected = max((c for c in history.checkpoints if c <= v), default=None)
        assert (segment.checkpoint.version if segment.checkpoint else None) == expected, f"v{v}"


def test_compaction_is_listed_and_the_commits_are_read(history):
    """deltalake's log compaction is listed but not read: the snapshot replays the commits it covers (and
    equals deltalake's at every version, test_same_files_as_deltalake_at_every_version)."""
    table = DeltaTable(str(history.path))
    assert [(c.start, c.end) for c in list_log(table.storage).compactions] == history.compactions
    for v in range(history.latest + 1):
        segment = table.snapshot(v).segment
        assert [c for c, _ in segment.commits] == list(range(segment.start_version, v + 1)), f"v{v}"


# -- time travel by timestamp ---------------------------------------------------------------------


def _deltalake_version_at(path: Path | deltalake.DeltaTable, timestamp_ms: int) -> int:
    d = path if isinstance(path, deltalake.DeltaTable) else deltalake.DeltaTable(str(path))
    d.load_as_version(dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=dt.timezone.utc))
    return d.version()


def test_time_travel_by_timestamp_matches_deltalake(history):
    table = DeltaTable(str(history.path))
    assert table.commit_timestamps() == {v: BASE_MS + v * STEP_MS for v in range(history.latest + 1)}
    theirs = deltalake.DeltaTable(str(history.path))
    for v in range(history.latest + 1):
        # At the commit's own timestamp, and the last millisecond before the next commit.
        exact = table.snapshot(timestamp_ms=BASE_MS + v * STEP_MS)
        assert exact.version == v == _deltalake_version_at(theirs, BASE_MS + v * STEP_MS)
        assert exact.timestamp == BASE_MS + v * STEP_MS
        assert _ours(exact) == _theirs(history.path, v)
        last = BASE_MS + v * STEP_MS + STEP_MS - 1
        assert table.version_at(last) == v == _deltalake_version_at(theirs, last), f"ts {last}"
    far = BASE_MS + (history.latest + 100) * STEP_MS
    assert table.snapshot(timestamp_ms=far).version == history.latest == _deltalake_version_at(history.path, far)


def test_time_travel_before_the_first_commit(history):
    # deltalake clamps a timestamp before the first commit to version 0; we refuse it, as Delta on Spark does.
    table = DeltaTable(str(history.path))
    with pytest.raises(VersionNotFoundError) as info:
        table.snapshot(timestamp_ms=BASE_MS - 1)
    assert str(history.path) in str(info.value)
    assert _deltalake_version_at(history.path, BASE_MS - 1) == 0


def test_time_travel_with_clock_going_backwards(tmp_path):
    path = tmp_path / "skew"
    for i in range(4):
        write_deltalake(str(path), pa.table({"id": [i]}), mode="append")
    # v2 was written "before" v1: Delta makes commit timestamps increasing (v2 becomes v1 + 1 ms).
    times = [BASE_MS, BASE_MS + 10_000, BASE_MS + 5_000, BASE_MS + 20_000]
    for v, ms in enumerate(times):
        os.utime(path / "_delta_log" / f"{v:020d}.json", ns=(ms * 1_000_000, ms * 1_000_000))
    table = DeltaTable(str(path))
    assert table.commit_timestamps() == {0: BASE_MS, 1: BASE_MS + 10_000, 2: BASE_MS + 10_001, 3: BASE_MS + 20_000}
    for ts in (BASE_MS, BASE_MS + 5_000, BASE_MS + 9_999, BASE_MS + 10_000, BASE_MS + 10_001, BASE_MS + 15_000,
               BASE_MS + 20_000):
        assert table.snapshot(timestamp_ms=ts).version == _deltalake_version_at(path, ts), f"ts {ts}"


# -- commit ranges ------------------------------------------------------------------------------


def _raw_file_actions(path: Path, version: int) -> tuple[set[str], set[str]]:
    adds, removes = set(), set()
    for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            adds.add(action["add"]["path"])
        elif "remove" in action:
            removes.add(action["remove"]["path"])
    return adds, removes


def _range_actions(commit_range, version: int) -> tuple[set[str], set[str]]:
    fa = commit_range.actions.file_actions
    rows = [r for r in fa.select(["version", "is_add", "path"]).to_pylist() if r["version"] == version]
    return {r["path"] for r in rows if r["is_add"]}, {r["path"] for r in rows if not r["is_add"]}


def test_commit_range_holds_the_adds_and_removes_of_each_commit(history):
    table = DeltaTable(str(history.path))
    latest = history.latest
    whole = table.commits(0)
    assert (whole.start, whole.end) == (0, latest)
    assert set(whole.entries) == set(range(latest + 1))
    assert set(whole.actions.file_actions.column("version").to_pylist()) <= set(range(latest + 1))
    operations = {h["version"]: h["operation"] for h in deltalake.DeltaTable(str(history.path)).history()}
    infos = whole.commit_infos()
    for v in range(latest + 1):
        assert _range_actions(whole, v) == _raw_file_actions(history.path, v), f"v{v}"
        assert infos[v]["operation"] == operations[v]
        assert whole.entries[v].mtime_ms == BASE_MS + v * STEP_MS
        if v == 0:
            continue
        # The commit is what turns deltalake's files at v-1 into its files at v.
        adds, removes = _range_actions(whole, v)
        before, after = set(_theirs(history.path, v - 1)), set(_theirs(history.path, v))
        assert (before - removes) | adds == after, f"v{v} ({history.operations[v]})"


def test_commit_sub_ranges(history):
    table = DeltaTable(str(history.path))
    latest = history.latest
    for start, end in [(1, 1), (2, 4), (latest - 2, latest), (latest, None)]:
        commit_range = table.commits(start, end)
        end = latest if end is None else end
        assert (commit_range.start, commit_range.end) == (start, end)
        versions = set(commit_range.actions.file_actions.column("version").to_pylist())
        assert versions <= set(range(start, end + 1))
        assert set(commit_range.entries) == set(range(start, end + 1))
        for v in range(start, end + 1):
            assert _range_actions(commit_range, v) == _raw_file_actions(history.path, v)
    with pytest.raises(VersionNotFoundError):
        table.commits(latest + 1)
    with pytest.raises(VersionNotFoundError):
        table.commits(latest - 1, latest + 5)


# -- log cleanup ----------------------------------------------------------------------------------


def test_versions_removed_by_log_cleanup(tmp_path):
    path = tmp_path / "cleaned"
    config = {"delta.logRetentionDuration": "interval 0 seconds"}
    write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64())}), configuration=config)
    for i in range(1, 4):
        write_deltalake(str(path), pa.table({"id": pa.array([i], pa.int64())}), mode="append")
    d = deltalake.DeltaTable(str(path))
    d.create_checkpoint()
    d.cleanup_metadata()
    write_deltalake(str(path), pa.table({"id": pa.array([4], pa.int64())}), mode="append")
    names = sorted(p.name for p in (path / "_delta_log").iterdir())
    assert "00000000000000000000.json" not in names, names  # the cleanup did run
    kept = sorted(int(n[:20]) for n in names if n.endswith(".json") and len(n) == 25)

    table = DeltaTable(str(path))
    assert table.latest_version() == 4
    gone = []
    for v in range(5):
        try:
            deltalake.DeltaTable(str(path), version=v)
        except Exception:  # deltalake cannot rebuild it either
            gone.append(v)
            with pytest.raises(VersionNotFoundError) as info:
                table.snapshot(v)
            assert f"version {v}" in str(info.value) and str(path) in str(info.value)
            continue
        assert _ours(table.snapshot(v)) == _theirs(path, v), f"v{v}"
    assert gone == [0, 1, 2]
    assert min(kept) >= 3
    assert table.snapshot(3).segment.checkpoint.version == 3
    assert table.snapshot(4).segment.checkpoint.version == 3
