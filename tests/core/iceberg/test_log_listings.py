"""An incremental run reads `_delta_log` once and takes from that what later steps need (the commits to convert, the
versions the log can still rebuild): a local folder is read whole however little of it is listed, so each listing
grows with the table's life (issue 26 §2, per-run CPU). On local disk a run that goes on from a converted version
lists nothing: it looks up the commits from there by name (``probed_log``), and lists the log only when one of them
is gone."""

from __future__ import annotations

import os
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import assert_same_rows, kernel_arrow

from airflow_deltaberg.core.delta.log.log_segment import (
    LAST_CHECKPOINT,
    LOG_DIR,
    ListedLog,
    list_log,
    listed_log_segment,
    probed_log,
)
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.storage import LocalStorage


def _append(path: Path, value: int) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array([value], pa.int64())}), mode="append")


@pytest.fixture
def log_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of the `_delta_log` folder (``os.listdir``: a local folder is read whole)."""
    calls: list[str] = []
    original = os.listdir

    def counting(folder: str = ".") -> list[str]:
        if os.path.basename(os.fspath(folder).rstrip("/")) == LOG_DIR:
            calls.append(os.fspath(folder))
        return original(folder)

    monkeypatch.setattr(os, "listdir", counting)
    return calls


def _converted(path: Path, listings: list[str | None], mode: str = "incremental") -> int:
    listings.clear()
    result = convert(str(path))
    assert result.mode == mode
    assert_same_rows(StaticTable.from_metadata(result.metadata_location).scan().to_arrow(), kernel_arrow(path, None),
                     f"v{result.delta_version}")
    return len(listings)


def test_an_incremental_run_lists_no_local_log(tmp_path: Path, log_listings: list[str | None]) -> None:
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
    convert(str(path))
    for value in range(3, 5):
        _append(path, value)
        assert _converted(path, log_listings) == 0  # was 3 (the segment, the commits, the history's versions), then 1
    _append(path, 5)
    _append(path, 6)
    assert _converted(path, log_listings) == 0  # two commits


def test_after_a_checkpoint_the_history_reads_the_older_log_by_name(tmp_path: Path, log_listings: list[str]) -> None:
    """The retained snapshots older than the checkpoint need the log before it: looked up by name too (was a
    second listing, then a listing from the same read of the folder)."""
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
        convert(str(path))  # snapshots of versions 0-2, before the checkpoint
    deltalake.DeltaTable(str(path)).create_checkpoint()
    _append(path, 3)
    assert _converted(path, log_listings) == 0  # was 3, then 2, then 1


def test_a_retained_snapshot_whose_commit_is_gone_lists_the_log(tmp_path: Path, log_listings: list[str]) -> None:
    """Log cleanup took the commits of the oldest retained snapshots: the lookup by name misses one, the log is
    listed from there, and those snapshots expire as before (their Delta version left the log)."""
    path = tmp_path / "t"
    for value in range(4):
        _append(path, value)
        convert(str(path))
    deltalake.DeltaTable(str(path)).create_checkpoint()  # version 3
    for version in (0, 1):
        (path / LOG_DIR / f"{version:020d}.json").unlink()
    _append(path, 4)
    listed = log_listings
    listed.clear()
    result = convert(str(path))
    assert result.mode == "incremental" and result.snapshots_expired == 2
    assert len(listed) == 1
    versions = sorted(int(s.summary["delta-version"])
                      for s in StaticTable.from_metadata(result.metadata_location).metadata.snapshots)
    assert versions == [2, 3, 4]


def test_the_converted_commit_gone_lists_the_log(tmp_path: Path, log_listings: list[str]) -> None:
    """Log cleanup took the converted version's commit (its checkpoint stays): the history cannot be checked, and
    the run lists the log and converts in full, as before."""
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
    convert(str(path))  # version 2
    _append(path, 3)
    deltalake.DeltaTable(str(path)).create_checkpoint()  # version 3
    for version in range(3):  # Delta's log cleanup keeps the checkpoint's commit
        (path / LOG_DIR / f"{version:020d}.json").unlink()
    _append(path, 4)
    assert _converted(path, log_listings, mode="full") >= 1


def test_probed_commits_equal_a_listing_from_there(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for value in range(5):
        _append(path, value)
    storage = LocalStorage(str(path))
    listed = probed_log(storage, str(path), 3)
    assert listed is not None and listed.listing.latest_version == 4 and listed.start == 3
    for start in (3, 1, 4, 0):
        assert listed.since(start).commits == list_log(storage, start).commits
    assert listed.start == 0


def test_a_probe_that_misses_the_latest_version_lists_instead(tmp_path: Path) -> None:
    """`_last_checkpoint` naming a version beyond the last commit found (a gap, or a commit that only a listing
    finds), a missing start commit, or a store that lists from a start key: no probe, the log is listed."""
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
    storage = LocalStorage(str(path))
    assert probed_log(storage, str(path), 3) is None  # no commit 3
    (path / LAST_CHECKPOINT).write_text('{"version": 5, "size": 1}')
    assert probed_log(storage, str(path), 1) is None
    (path / LAST_CHECKPOINT).write_text('{"version": 2, "size": 1}')
    assert probed_log(storage, str(path), 1) is not None
    storage.lists_whole_folders = False
    assert probed_log(storage, str(path), 1) is None


def test_a_listed_log_extended_to_an_earlier_start_equals_a_listing_from_there(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for value in range(4):
        _append(path, value)
    deltalake.DeltaTable(str(path)).create_checkpoint()
    _append(path, 4)
    storage = LocalStorage(str(path))
    _, listed = listed_log_segment(storage, str(path))
    assert listed.start == 3  # from the checkpoint
    for start in (2, 0, 1, 4):
        assert listed.since(start) == list_log(storage, start)
    assert listed.start == 0


def test_without_a_lister_an_earlier_start_is_not_answered(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for value in range(4):
        _append(path, value)
    deltalake.DeltaTable(str(path)).create_checkpoint()
    storage = LocalStorage(str(path))
    listed = ListedLog(list_log(storage, 3), 3)
    assert listed.since(2) is None
    assert listed.since(3) == list_log(storage, 3)
