"""Snapshot expiry: by count and by age; only Iceberg metadata files of expired snapshots are deleted."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable

from airflow_deltaberg.core.iceberg import convert_commit
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.expire import users_to_check


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": [f"p{i % 2}" for i in range(n)]})


def _history(path: Path) -> list[int]:
    """Convert after each of: create, 3 appends, a delete; returns the Delta versions converted."""
    write_deltalake(str(path), _rows(0, 4), partition_by=["p"])
    versions = [convert(str(path)).delta_version]
    for start in (10, 20, 30):
        write_deltalake(str(path), _rows(start, 4), mode="append", partition_by=["p"])
        versions.append(convert(str(path)).delta_version)
    deltalake.DeltaTable(str(path)).delete("id < 12")
    versions.append(convert(str(path)).delta_version)
    return versions


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def _data_files(path: Path) -> set[Path]:
    return {p for p in _files(path) if "_iceberg" not in p.parts and "_delta_log" not in p.parts}


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_expiry_by_count_keeps_the_newest_snapshots_and_deletes_only_their_unused_metadata(tmp_path: Path) -> None:
    path = tmp_path / "expired"
    versions = _history(path)
    data_before = _data_files(path)
    metadata_dir = path / "_iceberg" / "metadata"
    before = _files(metadata_dir)
    table_before = StaticTable.from_metadata(convert(str(path)).metadata_location)
    assert len(table_before.metadata.snapshots) == len(versions) == 5

    result = convert(str(path), retain_snapshots=2)

    assert result.mode == "up-to-date" and result.snapshots_expired == 3
    table = StaticTable.from_metadata(result.metadata_location)
    kept = [int(s.summary["delta-version"]) for s in table.metadata.snapshots]
    assert kept == versions[-2:]
    assert {e.snapshot_id for e in table.metadata.snapshot_log} == {s.snapshot_id for s in table.metadata.snapshots}
    assert table.metadata.metadata_log[-1].metadata_file == table_before.metadata_location
    # Both retained snapshots still read their rows; Delta's data files are all still there.
    expected = _ids(deltalake.DeltaTable(str(path)).to_pyarrow_table())
    assert _ids(table.scan().to_arrow()) == expected
    older = table.metadata.snapshots[0]
    older_rows = deltalake.DeltaTable(str(path), version=versions[-2]).to_pyarrow_table()
    assert _ids(table.scan(snapshot_id=older.snapshot_id).to_arrow()) == _ids(older_rows)
    assert _data_files(path) == data_before
    deleted = before - _files(metadata_dir)
    assert deleted, "expired snapshots left files that only they used"
    assert all(p.parent == metadata_dir for p in deleted)
    assert not any(p.name.endswith(".metadata.json") for p in deleted)

    # Expiring again finds nothing; a new commit converts on top of the expired history.
    assert convert(str(path), retain_snapshots=2).snapshots_expired == 0
    write_deltalake(str(path), _rows(40, 2), mode="append", partition_by=["p"])
    after = convert(str(path), retain_snapshots=2)
    assert after.mode == "incremental" and after.snapshots_expired == 1
    final = StaticTable.from_metadata(after.metadata_location)
    assert _ids(final.scan().to_arrow()) == _ids(deltalake.DeltaTable(str(path)).to_pyarrow_table())


def test_expiry_by_age_keeps_recent_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "recent"
    versions = _history(path)
    # Snapshots carry the Delta commit time, just now: none is a day old.
    result = convert(str(path), max_snapshot_age_ms=24 * 3600 * 1000)
    assert result.snapshots_expired == 0
    assert len(StaticTable.from_metadata(result.metadata_location).metadata.snapshots) == len(versions)
    # Age 0 expires everything but the current snapshot.
    result = convert(str(path), max_snapshot_age_ms=0)
    assert result.snapshots_expired == len(versions) - 1
    table = StaticTable.from_metadata(result.metadata_location)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [result.snapshot_id]
    assert _ids(table.scan().to_arrow()) == _ids(deltalake.DeltaTable(str(path)).to_pyarrow_table())


def test_metadata_files_beyond_the_kept_versions_are_deleted(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each conversion keeps write.metadata.previous-versions-max earlier metadata files (named in the metadata
    log) and deletes older ones of its own; every snapshot still reads what Delta reads at its version."""
    monkeypatch.setitem(convert_commit.METADATA_FILE_DEFAULTS, "write.metadata.previous-versions-max", "2")
    path = tmp_path / "kept"
    versions = _history(path)
    write_deltalake(str(path), _rows(50, 2), mode="append", partition_by=["p"])
    result = convert(str(path))
    versions.append(result.delta_version)

    metadata_dir = path / "_iceberg" / "metadata"
    table = StaticTable.from_metadata(result.metadata_location)
    assert table.metadata.properties["write.metadata.previous-versions-max"] == "2"
    assert table.metadata.properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert sorted(p.name for p in metadata_dir.glob("v*.metadata.json")) == [
        "v4.metadata.json", "v5.metadata.json", "v6.metadata.json"]
    assert [Path(e.metadata_file.removeprefix("file:")).name for e in table.metadata.metadata_log] == [
        "v4.metadata.json", "v5.metadata.json"]
    assert (metadata_dir / "version-hint.text").read_text().strip() == "6"
    assert [int(s.summary["delta-version"]) for s in table.metadata.snapshots] == versions
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["delta-version"])
        expected = _ids(deltalake.DeltaTable(str(path), version=version).to_pyarrow_table())
        assert _ids(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == expected

    # The next run converges from the hint; nothing it still names is gone.
    write_deltalake(str(path), _rows(60, 2), mode="append", partition_by=["p"])
    after = convert(str(path))
    assert after.mode == "incremental"
    assert sorted(p.name for p in metadata_dir.glob("v*.metadata.json")) == [
        "v5.metadata.json", "v6.metadata.json", "v7.metadata.json"]
    assert _ids(StaticTable.from_metadata(after.metadata_location).scan().to_arrow()) == _ids(
        deltalake.DeltaTable(str(path)).to_pyarrow_table())


def test_expiry_reads_the_states_of_the_nearest_retained_snapshots_only(tmp_path: Path) -> None:
    """A manifest a snapshot drops never comes back, so the nearest retained snapshot on each side decides which
    files of the expired ones stay; with delete files (named by content, used again later) every retained one."""
    path = tmp_path / "neighbours"
    for start in range(0, 50, 10):
        write_deltalake(str(path), _rows(start, 2), mode="append", partition_by=["p"])
        convert(str(path))
    metadata = StaticTable.from_metadata(convert(str(path)).metadata_location).metadata
    ids = [s.snapshot_id for s in sorted(metadata.snapshots, key=lambda s: s.sequence_number)]
    assert users_to_check(metadata, set(ids[:2])) == [ids[2]]
    assert users_to_check(metadata, {ids[2]}) == sorted([ids[1], ids[3]])
    result = convert(str(path), retain_snapshots=3)
    table = StaticTable.from_metadata(result.metadata_location)
    for snapshot in table.metadata.snapshots:
        version = int(snapshot.summary["delta-version"])
        expected = _ids(deltalake.DeltaTable(str(path), version=version).to_pyarrow_table())
        assert _ids(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == expected
