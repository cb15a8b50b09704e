"""A stalled local filesystem (a hung NFS or FUSE mount) ends a run typed within the storage bound (issue 26 §4
loose end). Simulated without FUSE: FIFOs whose open blocks until a writer comes, where the converter reads (the
version hint, ``_last_checkpoint``) or looks (a folder on the way to ``_iceberg``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import delta_rows, rows_of

from airflow_deltaberg.core.errors import StorageTimeoutError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.storage import TIMEOUT_ENV, TIMEOUT_OPTION, LocalStorage, open_storage

BOUND_S = 1.0
#: How long past the bound a call may end: the thread hand-over, and the test's own scheduling on a busy machine.
SLACK_S = 10.0


@pytest.fixture
def fifos() -> Iterator[Callable[[Path], Path]]:
    """``fifo(path)`` makes a FIFO there; at the end each is opened for writing once, so that an abandoned call
    blocked in its open returns (it then reads an empty file)."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        made.append(path)
        return path

    yield make
    for path in made:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader left


def ended_within(call: Callable[[], object], seconds: float) -> tuple[BaseException | None, float]:
    """Run ``call`` on a thread; its exception and how long it took, or fail when it has not ended in
    ``seconds`` (a hang: the thread is left blocked until the fixture releases it)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"the call did not end within {seconds:g} s (a stalled local filesystem hangs it)"
    return outcome[0], time.monotonic() - started


def table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    write_deltalake(str(path), pa.table({"id": pa.array([4], pa.int64())}), mode="append")
    return path


@pytest.mark.parametrize("stalled", ["_iceberg/metadata/version-hint.text", "_delta_log/_last_checkpoint"])
def test_a_stalled_read_ends_typed_within_the_bound(tmp_path: Path, fifos: Callable[[Path], Path],
                                                     monkeypatch: pytest.MonkeyPatch, stalled: str) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, str(BOUND_S))
    path = table(tmp_path)
    fifos(path / stalled)
    error, took = ended_within(lambda: convert(str(path)), BOUND_S + SLACK_S)
    assert isinstance(error, StorageTimeoutError), error
    assert error.retryable and str(path / stalled) in str(error)
    assert took < BOUND_S + SLACK_S
    assert not (path / "_iceberg" / "metadata" / "v1.metadata.json").exists()


def test_the_storage_option_sets_the_local_bound(tmp_path: Path, fifos: Callable[[Path], Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    fifos(tmp_path / "stalled")
    storage = open_storage(str(tmp_path), {TIMEOUT_OPTION: BOUND_S})
    error, took = ended_within(lambda: storage.read("stalled"), BOUND_S + SLACK_S)
    assert isinstance(error, StorageTimeoutError) and "stalled" in str(error)
    # Files that answer are read as before.
    (tmp_path / "file").write_bytes(b"x")
    assert storage.read("file") == b"x" and storage.exists("file") and not storage.exists("stalled")


def test_a_metadata_write_given_up_on_that_lands_later_names_files_that_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write abandoned at the bound may still land (a blocked system call cannot be stopped): the attempt then
    keeps its files, so that a metadata file landing late names manifests that exist (the attempt cleanup removes
    them later if it never lands)."""
    monkeypatch.setenv(TIMEOUT_ENV, str(BOUND_S))
    path = table(tmp_path)
    convert(str(path), version=0)
    landed = threading.Event()
    write = LocalStorage._write_if_absent

    def slow_metadata(self: LocalStorage, key: str, data: bytes) -> None:
        if key.endswith(".metadata.json"):
            time.sleep(BOUND_S * 3)
            write(self, key, data)
            landed.set()
            return
        write(self, key, data)

    monkeypatch.setattr(LocalStorage, "_write_if_absent", slow_metadata)
    with pytest.raises(StorageTimeoutError):
        convert(str(path))
    assert landed.wait(BOUND_S * 3 + SLACK_S)
    monkeypatch.setattr(LocalStorage, "_write_if_absent", write)
    late = path / "_iceberg" / "metadata" / "v2.metadata.json"
    assert late.exists()
    assert rows_of(StaticTable.from_metadata(str(late)).scan().to_arrow()) == delta_rows(path)
    again = convert(str(path))
    assert (again.mode, again.delta_version) == ("up-to-date", 1)
