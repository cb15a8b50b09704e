"""An incremental run lists `_delta_log` once and takes from that listing what later steps need (the commits to
convert, the versions the log can still rebuild): a local folder is read whole however little of it is listed, so
each extra listing grows with the table's life (issue 26 §2, per-run CPU)."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import assert_same_rows, kernel_arrow

from airflow_deltaberg.core.delta.log_segment import LOG_DIR
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.storage import LocalStorage


def _append(path: Path, value: int) -> None:
    write_deltalake(str(path), pa.table({"id": pa.array([value], pa.int64())}), mode="append")


@pytest.fixture
def log_listings(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The ``start_after`` of every listing of `_delta_log`."""
    calls: list[str | None] = []
    original = LocalStorage.list_from

    def counting(self: LocalStorage, directory: str, start_after: str | None = None) -> list:
        if directory.strip("/") == LOG_DIR:
            calls.append(start_after)
        return original(self, directory, start_after)

    monkeypatch.setattr(LocalStorage, "list_from", counting)
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


def test_after_a_checkpoint_the_history_lists_the_older_log_once_more(tmp_path: Path,
                                                                      log_listings: list[str | None]) -> None:
    """The listing from `_last_checkpoint` gives the segment and the commits; the retained snapshots older than the
    checkpoint need the log before it."""
    path = tmp_path / "t"
    for value in range(3):
        _append(path, value)
        convert(str(path))  # snapshots of versions 0-2, before the checkpoint
    deltalake.DeltaTable(str(path)).create_checkpoint()
    _append(path, 3)
    assert _converted(path, log_listings) == 2  # was 3
    assert log_listings[0] == f"{2:020d}"  # from the checkpoint
