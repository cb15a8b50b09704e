"""An incremental run lists `_delta_log` once and takes from that listing what later steps need (the commits to
convert, the versions the log can still rebuild): a local folder is read whole however little of it is listed, so
each extra listing grows with the table's life (issue 26 §2, per-run CPU)."""

from __future__ import annotations

import os
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import assert_same_rows, kernel_arrow

from airflow_deltaberg.core.delta.log.log_segment import LOG_DIR, ListedLog, list_log, listed_log_segment
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


def _converted(path: Path, listings: list[str | None]) -> int:
    listings.clear()
    result = convert(str(path))
    assert result.mode == "incremental"
    assert_same_rows(StaticTable.from_metadata(result.metadata_location).scan().to_arrow(), kernel_arrow(path, None),
                     f"v{result.delta_version}")
    return len(listings)


def test_an_incremental_run_lists_the_log_once(tmp_path: Path, log_listings: list[str | None]) -> None:
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
    convert(str(path))
    for value in range(3, 5):
        _append(path, value)
        assert _converted(path, log_listings) == 1  # was 3: the segment, the commits, the history's versions


def test_after_a_checkpoint_the_history_reads_the_older_log_from_the_same_listing(
        tmp_path: Path, log_listings: list[str]) -> None:
    """The listing from `_last_checkpoint` gives the segment and the commits; the retained snapshots older than the
    checkpoint need the log before it, taken from the same read of the folder (was a second listing)."""
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
        convert(str(path))  # snapshots of versions 0-2, before the checkpoint
    deltalake.DeltaTable(str(path)).create_checkpoint()
    _append(path, 3)
    assert _converted(path, log_listings) == 1  # was 3, then 2


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
