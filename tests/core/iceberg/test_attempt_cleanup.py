"""Files of conversion attempts killed before they published are removed by a later run, once the attempt has
been silent for the threshold; a fresh attempt's files and every file a snapshot uses stay."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.killed_run import killed_attempt
from support.oracle import delta_rows, rows_of

from airflow_deltaberg.core.iceberg import attempt_cleanup
from airflow_deltaberg.core.iceberg.convert import convert


@pytest.fixture(autouse=True)
def _every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cleanup looks once in ten snapshots; here at every run."""
    monkeypatch.setattr(attempt_cleanup, "CLEANUP_EVERY", 1)

def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def test_old_unreferenced_attempt_files_are_removed_and_fresh_ones_kept(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "attempts"
    write_deltalake(str(path), _rows(0, 3))
    convert(str(path))
    write_deltalake(str(path), _rows(10, 3), mode="append")
    old = killed_attempt(path, monkeypatch, lambda: convert(str(path)))
    two_hours_ago = time.time() - 2 * 3600
    for p in old:
        os.utime(p, (two_hours_ago, two_hours_ago))
    write_deltalake(str(path), _rows(20, 3), mode="append")
    fresh = killed_attempt(path, monkeypatch, lambda: convert(str(path)))

    result = convert(str(path))

    assert not any(p.exists() for p in old)
    assert all(p.exists() for p in fresh)
    table = StaticTable.from_metadata(result.metadata_location)
    for snapshot in table.metadata.snapshots:  # every snapshot still reads
        version = int(snapshot.summary["delta-version"])
        assert rows_of(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == delta_rows(path, version)
    # Once the fresh attempt has been silent long enough, it goes too.
    for p in fresh:
        os.utime(p, (two_hours_ago, two_hours_ago))
    convert(str(path))
    assert not any(p.exists() for p in fresh)


def test_the_cleanup_looks_once_in_ten_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt_cleanup, "CLEANUP_EVERY", 10)
    path = tmp_path / "tenth"
    write_deltalake(str(path), _rows(0, 3))
    convert(str(path))
    write_deltalake(str(path), _rows(5, 1), mode="append")
    old = killed_attempt(path, monkeypatch, lambda: convert(str(path)))
    two_hours_ago = time.time() - 2 * 3600
    for p in old:
        os.utime(p, (two_hours_ago, two_hours_ago))
    convert(str(path))  # sequence number 2: the version the killed attempt was at
    for start in range(10, 80, 10):  # sequence numbers 3..9
        write_deltalake(str(path), _rows(start, 1), mode="append")
        convert(str(path))
    assert all(p.exists() for p in old)
    write_deltalake(str(path), _rows(90, 1), mode="append")
    convert(str(path))  # sequence number 10
    assert not any(p.exists() for p in old)


def test_files_of_published_attempts_stay_however_old(tmp_path: Path) -> None:
    path = tmp_path / "published"
    write_deltalake(str(path), _rows(0, 3))
    convert(str(path))
    write_deltalake(str(path), _rows(10, 3), mode="append")
    convert(str(path))
    metadata = path / "_iceberg" / "metadata"
    long_ago = time.time() - 30 * 24 * 3600
    for p in metadata.iterdir():
        os.utime(p, (long_ago, long_ago))
    files = set(metadata.iterdir())
    result = convert(str(path))
    assert result.mode == "up-to-date" and set(metadata.iterdir()) == files


def test_files_of_an_earlier_history_stay(tmp_path: Path) -> None:
    """A Delta table deleted and written again at the same path starts a new Iceberg history; the old history's
    files, however old, are another metadata file's and stay."""
    path = tmp_path / "recreated"
    write_deltalake(str(path), _rows(0, 3))
    convert(str(path))
    write_deltalake(str(path), _rows(10, 3), mode="append")
    convert(str(path))
    metadata = path / "_iceberg" / "metadata"
    long_ago = time.time() - 30 * 24 * 3600
    for p in metadata.iterdir():
        os.utime(p, (long_ago, long_ago))
    old = set(metadata.iterdir())
    for p in path.iterdir():
        if p.name != "_iceberg":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    write_deltalake(str(path), _rows(100, 2))
    result = convert(str(path))
    assert result.delta_version == 0 and old <= set(metadata.iterdir())
    assert rows_of(StaticTable.from_metadata(result.metadata_location).scan().to_arrow()) == delta_rows(path)
