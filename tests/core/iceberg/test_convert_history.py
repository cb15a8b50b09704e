"""The Iceberg history a conversion writes: snapshot timestamps that never go backwards (Iceberg Java refuses a
snapshot log out of time order) whatever Delta's commit timestamps do, and incremental runs that cross a change
needing a full conversion (column mapping enabled) after publishing some snapshots of their own.

Iceberg Java's side of both is checked in tests/spark/test_iceberg_read_parity.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.delta_log import commit_file, edit_commit
from support.oracle import delta_rows, rows_of
from support.tables import iceberg_files

from airflow_deltaberg.cli import main as cli_main
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg import history
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_TIMESTAMP, DELTA_VERSION

DAY_MS = 86_400_000



@pytest.fixture(autouse=True)
def _years_of_log_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tables' commit times lie years back: Delta's default log retention (30 days) would expire their
    snapshots (tests/core/iceberg/test_history.py), which these tests read."""
    monkeypatch.setattr(history, "DEFAULT_LOG_RETENTION_MS", 100 * 365 * DAY_MS)

def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"p{i % 2}" for i in ids]})


def set_mtime(path: Path, version: int, ms: int) -> None:
    os.utime(commit_file(path, version), ns=(ms * 1_000_000, ms * 1_000_000))


def metadata_of(location: str) -> dict[str, Any]:
    return json.loads(Path(location).read_text())


def assert_time_ordered(metadata: dict[str, Any]) -> None:
    """What Iceberg Java checks when it loads a metadata file (TableMetadata's constructor), without its minute of
    tolerance: the snapshot log and the metadata log in time order, and last-updated-ms not before either."""
    snapshot_times = [e["timestamp-ms"] for e in metadata["snapshot-log"]]
    metadata_times = [e["timestamp-ms"] for e in metadata.get("metadata-log", [])]
    assert snapshot_times == sorted(snapshot_times), metadata["snapshot-log"]
    assert metadata_times == sorted(metadata_times), metadata["metadata-log"]
    assert all(metadata["last-updated-ms"] >= t for t in snapshot_times + metadata_times)
    by_id = {s["snapshot-id"]: s["timestamp-ms"] for s in metadata["snapshots"]}
    assert [by_id[e["snapshot-id"]] for e in metadata["snapshot-log"]] == snapshot_times


def assert_every_snapshot_reads_delta(path: Path, location: str) -> None:
    table = StaticTable.from_metadata(location)
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary[DELTA_VERSION])
        assert rows_of(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == delta_rows(path, version)


def backwards_table(path: Path) -> list[int]:
    """Four commits whose file times go 2020, 2019, 2021, 2018 (legal: Delta readers make them monotonic);
    returns those times."""
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    for start in (4, 8, 12):
        write_deltalake(str(path), _batch(start, 2), mode="append", partition_by=["label"])
    times = [1_577_836_800_000, 1_546_300_800_000, 1_609_459_200_000, 1_514_764_800_000]  # 2020, 2019, 2021, 2018
    for version, ms in enumerate(times):
        set_mtime(path, version, ms)
    return times


def test_commit_times_going_backwards_give_a_time_ordered_history(tmp_path: Path) -> None:
    """The reproduction of the issue: convert version 0, then the rest, one snapshot per commit."""
    path = tmp_path / "backwards"
    times = backwards_table(path)
    assert cli_main(["convert", str(path), "--version", "0"]) == 0
    result = convert(str(path))
    assert result.mode == "incremental" and result.snapshots_written == 3
    metadata = metadata_of(result.metadata_location)
    assert_time_ordered(metadata)
    # Delta's own times stay in the summary; the snapshot time never goes below the previous one's.
    summaries = [(s["summary"][DELTA_VERSION], int(s["summary"][DELTA_TIMESTAMP]), s["timestamp-ms"])
                 for s in metadata["snapshots"]]
    assert summaries == [("0", times[0], times[0]), ("1", times[1], times[0]), ("2", times[2], times[2]),
                         ("3", times[3], times[2])]
    assert_every_snapshot_reads_delta(path, result.metadata_location)


def test_full_conversion_of_an_older_time_keeps_the_history_ordered(tmp_path: Path) -> None:
    """--full at a version whose commit time is before the converted one's (a new snapshot on the old history)."""
    path = tmp_path / "full"
    times = backwards_table(path)
    convert(str(path), version=2)
    result = convert(str(path), full=True)
    metadata = metadata_of(result.metadata_location)
    assert_time_ordered(metadata)
    assert metadata["snapshots"][-1]["timestamp-ms"] == max(times)
    assert int(metadata["snapshots"][-1]["summary"][DELTA_TIMESTAMP]) == times[3]


def with_in_commit_timestamps(path: Path, times: dict[int, int]) -> None:
    """Rewrite the table's commits as a writer with in-commit timestamps enabled at creation writes them (deltalake
    cannot): commitInfo first with inCommitTimestamp, the inCommitTimestamp writer feature and the property on."""
    for version, ms in times.items():
        actions = [json.loads(line) for line in commit_file(path, version).read_text().splitlines()]
        info = next(a for a in actions if "commitInfo" in a)
        info["commitInfo"]["inCommitTimestamp"] = ms
        rest = [a for a in actions if "commitInfo" not in a]
        for action in rest:
            if "protocol" in action:
                action["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                                      "writerFeatures": ["appendOnly", "invariants", "inCommitTimestamp"]}
            if "metaData" in action:
                action["metaData"]["configuration"]["delta.enableInCommitTimestamps"] = "true"
        commit_file(path, version).write_text("".join(json.dumps(a) + "\n" for a in [info, *rest]))


def test_in_commit_timestamps_going_backwards(tmp_path: Path) -> None:
    """In-commit timestamps are the commit times once enabled; a log where they go backwards still converts to
    an ordered history (the clamp does not depend on where the time came from)."""
    path = tmp_path / "ict"
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    write_deltalake(str(path), _batch(4, 2), mode="append", partition_by=["label"])
    ict = {0: 1_700_000_000_000, 1: 1_600_000_000_000}
    with_in_commit_timestamps(path, ict)
    convert(str(path), version=0)
    result = convert(str(path))
    metadata = metadata_of(result.metadata_location)
    assert_time_ordered(metadata)
    assert [int(s["summary"][DELTA_TIMESTAMP]) for s in metadata["snapshots"]] == [ict[0], ict[1]]
    assert [s["timestamp-ms"] for s in metadata["snapshots"]] == [ict[0], ict[0]]
    assert_every_snapshot_reads_delta(path, result.metadata_location)



@pytest.mark.parametrize("property_on", [False, True])
def test_an_in_commit_timestamp_while_they_are_off_is_not_the_commit_time(tmp_path: Path, property_on: bool) -> None:
    """In-commit timestamps are off without the property, and with it but without the protocol's feature: commits
    take their file times then, in an incremental conversion as in a full one."""
    path = tmp_path / "off"
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    write_deltalake(str(path), _batch(4, 2), mode="append", partition_by=["label"])
    # An inCommitTimestamp and nothing else (a writer may; it means nothing while in-commit timestamps are off).
    edit_commit(path, 1, lambda actions: next(a["commitInfo"] for a in actions if "commitInfo" in a).update(
        inCommitTimestamp=1_600_000_000_000))
    if property_on:  # deltalake refuses to write the property
        edit_commit(path, 0, lambda actions: next(a["metaData"] for a in actions if "metaData" in a)[
            "configuration"].update({"delta.enableInCommitTimestamps": "true"}))
    for version, ms in ((0, 1_700_000_000_000), (1, 1_700_000_100_000)):
        set_mtime(path, version, ms)
    convert(str(path), version=0)
    incremental = convert(str(path))
    assert incremental.mode == "incremental"
    full = convert(str(path), full=True)
    for result in (incremental, full):
        snapshot = metadata_of(result.metadata_location)["snapshots"][-1]
        assert int(snapshot["summary"][DELTA_TIMESTAMP]) == 1_700_000_100_000


def test_an_incremental_conversion_refuses_a_commit_without_its_in_commit_timestamp(tmp_path: Path) -> None:
    """In-commit timestamps on: a commit whose commitInfo lacks one is refused by an incremental conversion as by a
    snapshot load, not given its file time."""
    path = tmp_path / "ict"
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    write_deltalake(str(path), _batch(4, 2), mode="append", partition_by=["label"])
    with_in_commit_timestamps(path, {0: 1_700_000_000_000})
    convert(str(path), version=0)
    before = iceberg_files(path)
    with pytest.raises(CorruptLogError, match="inCommitTimestamp") as info:
        convert(str(path))
    assert info.value.version == 1 and info.value.file == str(commit_file(path, 1))
    assert iceberg_files(path) == before


def enable_name_mapping(path: Path) -> int:
    """A commit that turns on column mapping mode name, as Delta on Spark's upgrade writes it (existing columns keep
    their names as physical names); returns its version."""
    version = deltalake.DeltaTable(str(path)).version() + 1
    first = [json.loads(line) for line in commit_file(path, 0).read_text().splitlines()]
    metadata = next(a["metaData"] for a in first if "metaData" in a)
    schema = json.loads(metadata["schemaString"])
    for column_id, field in enumerate(schema["fields"], 1):
        field["metadata"] = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": field["name"]}
    metadata["schemaString"] = json.dumps(schema)
    metadata["configuration"] = {**metadata.get("configuration", {}), "delta.columnMapping.mode": "name",
                                 "delta.columnMapping.maxColumnId": str(len(schema["fields"]))}
    actions = [{"commitInfo": {"timestamp": 1_800_000_000_000, "operation": "SET TBLPROPERTIES"}},
               {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}, {"metaData": metadata}]
    commit_file(path, version).write_text("".join(json.dumps(a) + "\n" for a in actions))
    return version


@pytest.mark.parametrize("appends_before", [0, 2])
def test_incremental_run_across_a_column_mapping_upgrade(tmp_path: Path, appends_before: int) -> None:
    """Converted at version 0; then appends, column mapping enabled, an append: one run reaches the latest version
    (the appends before the upgrade as incremental snapshots, then a full conversion that restarts the history)."""
    path = tmp_path / "upgraded"
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    convert(str(path))
    for i in range(appends_before):
        write_deltalake(str(path), _batch(10 * (i + 1), 2), mode="append", partition_by=["label"])
    upgrade = enable_name_mapping(path)
    write_deltalake(str(path), _batch(100, 3), mode="append", partition_by=["label"])

    assert cli_main(["convert", str(path)]) == 0
    result = convert(str(path))  # up to date now
    assert result.mode == "up-to-date" and result.delta_version == upgrade + 1
    metadata = metadata_of(result.metadata_location)
    assert_time_ordered(metadata)
    assert metadata["properties"]["delta-column-mapping-mode"] == "name"
    # The history restarts at the upgrade: one snapshot, of the latest version.
    assert [s["summary"][DELTA_VERSION] for s in metadata["snapshots"]] == [str(upgrade + 1)]
    assert rows_of(StaticTable.from_metadata(result.metadata_location).scan().to_arrow()) == \
        delta_rows(path, upgrade + 1)
    # Every metadata file the two runs published is there and the metadata log names each earlier one.
    published = sorted(p.name for p in (path / "_iceberg" / "metadata").glob("v*.metadata.json"))
    assert len(published) == 1 + appends_before + 1
    assert len(metadata["metadata-log"]) == appends_before + 1


def test_fallback_after_incremental_snapshots_reports_them(tmp_path: Path) -> None:
    path = tmp_path / "counted"
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    convert(str(path))
    write_deltalake(str(path), _batch(10, 2), mode="append", partition_by=["label"])
    enable_name_mapping(path)
    result = convert(str(path))
    assert result.mode == "full"
    assert result.snapshots_written == 2  # the append's snapshot, then the full one


def test_a_history_written_out_of_order_is_put_in_order(tmp_path: Path) -> None:
    """Tables converted before snapshot times were kept in order carry a snapshot log that goes backwards (Iceberg
    Java cannot load them): the next conversion writes the log in order."""
    path = tmp_path / "healed"
    backwards_table(path)
    first = convert(str(path), version=1)
    # As the earlier converter wrote it: the snapshot of version 1 at its own, older, commit time.
    metadata = metadata_of(first.metadata_location)
    metadata["snapshot-log"][-1]["timestamp-ms"] = 1_546_300_800_000
    Path(first.metadata_location).write_text(json.dumps(metadata))
    result = convert(str(path))
    assert_time_ordered(metadata_of(result.metadata_location))
    assert_every_snapshot_reads_delta(path, result.metadata_location)


def readd_commit(path: Path, version: int, adds: list[dict[str, Any]], data_change: bool = False) -> None:
    actions = [{"commitInfo": {"timestamp": 1_800_000_000_000, "operation": "COMPUTE STATS"}},
               *({"add": {**add, "dataChange": data_change}} for add in adds)]
    commit_file(path, version).write_text("".join(json.dumps(a) + "\n" for a in actions))


def live_adds(path: Path, versions: range) -> list[dict[str, Any]]:
    return [json.loads(line)["add"] for v in versions for line in commit_file(path, v).read_text().splitlines()
            if line.startswith('{"add"')]


def test_live_files_added_again_keep_their_rows(tmp_path: Path) -> None:
    """An add of a live file without a remove replaces it (reconciliation keeps the newest add of a path and
    deletion vector): Delta writes such commits when it recomputes statistics or backfills row ids. The incremental
    conversion listed every such file a second time (each row twice)."""
    path = tmp_path / "readded"
    write_deltalake(str(path), _batch(0, 4), partition_by=["label"])
    write_deltalake(str(path), _batch(4, 2), mode="append", partition_by=["label"])
    first = convert(str(path))
    readd_commit(path, 2, live_adds(path, range(2)))
    write_deltalake(str(path), _batch(6, 2), mode="append", partition_by=["label"])
    result = convert(str(path))
    assert result.mode == "incremental" and result.snapshots_written == 2
    assert_every_snapshot_reads_delta(path, result.metadata_location)
    metadata = metadata_of(result.metadata_location)
    readd = next(s for s in metadata["snapshots"] if s["summary"][DELTA_VERSION] == "2")
    assert readd["summary"]["operation"] == "replace" and readd["summary"]["total-data-files"] == \
        metadata_of(first.metadata_location)["snapshots"][-1]["summary"]["total-data-files"]


def test_a_deletion_vector_kept_by_a_file_added_again(copy_fixture: Any) -> None:
    """table-with-dv-small: version 1 gives the file a deletion vector; a later add of the same file with the same
    deletion vector keeps the file's rows and its position deletes."""
    path = copy_fixture("table-with-dv-small")
    convert(str(path))
    readd_commit(path, 2, live_adds(path, range(1, 2)))
    result = convert(str(path))
    assert result.mode == "incremental"
    assert_every_snapshot_reads_delta(path, result.metadata_location)


@pytest.mark.parametrize("data_change", [False, True])
def test_a_file_added_again_with_another_deletion_vector_is_refused(copy_fixture: Any, data_change: bool) -> None:
    """The same file added again without its deletion vector and without a remove of the live one: it would be
    live twice (once with, once without the deleted rows), which Iceberg cannot express."""
    path = copy_fixture("table-with-dv-small")
    first = convert(str(path))
    before = sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir())
    readd_commit(path, 2, live_adds(path, range(0, 1)), data_change)  # version 0's add: no deletion vector
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert "version 2" in str(info.value) and "live twice" in str(info.value)
    assert sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir()) == before
    assert convert(str(path), version=1).metadata_location == first.metadata_location


def test_a_deletion_vector_added_without_removing_the_live_file_is_refused(copy_fixture: Any) -> None:
    """table-with-dv-small's version 1 gives its file a deletion vector (remove + add); without the remove the file
    would be live twice, with and without the deleted rows (deltalake reads both): the incremental run refuses."""
    path = copy_fixture("table-with-dv-small")
    first = convert(str(path), version=0)
    before = sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir())
    lines = commit_file(path, 1).read_text().splitlines()
    commit_file(path, 1).write_text("".join(line + "\n" for line in lines if not line.startswith('{"remove"')))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert "version 1" in str(info.value) and "live twice" in str(info.value)
    assert sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir()) == before
    assert convert(str(path), version=0).metadata_location == first.metadata_location
