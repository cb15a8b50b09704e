"""The bound of one object-store call: where it is set, and a call that blocks ends with StorageTimeoutError
within it, through Storage's own calls and through pyarrow's filesystem (a store that never answers, in memory;
tests/core/test_fault_trials.py has the same over HTTP with s3fs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_deltaberg.core.errors import StorageConfigError, StorageTimeoutError
from airflow_deltaberg.core.storage import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, open_storage

PROTOCOL = "stallmem"


class StallingFileSystem(MemoryFileSystem):
    """An in-memory store whose reads and listings block until ``release`` is set (a stalled store)."""

    protocol = (PROTOCOL,)
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    release = threading.Event()

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> Any:
        self.release.wait(30)
        return super().cat_file(path, *args, **kwargs)

    def info(self, path: str, **kwargs: Any) -> Any:
        self.release.wait(30)
        return super().info(path, **kwargs)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        self.release.wait(30)
        return super().ls(path, detail=detail, **kwargs)


@pytest.fixture
def stalled() -> Iterator[type[StallingFileSystem]]:
    fsspec.register_implementation(PROTOCOL, StallingFileSystem, clobber=True)
    StallingFileSystem.store.clear()
    StallingFileSystem.release.clear()
    try:
        yield StallingFileSystem
    finally:
        StallingFileSystem.release.set()  # the abandoned calls end
        StallingFileSystem.store.clear()


def test_the_bound_is_a_storage_option_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert open_storage("memory://bound/t").timeout_s == DEFAULT_TIMEOUT_S <= 120
    monkeypatch.setenv(TIMEOUT_ENV, "9")
    assert open_storage("memory://bound/t").timeout_s == 9
    # The option wins, and is not handed to the filesystem (s3fs would refuse an unknown keyword).
    assert open_storage("s3://bucket/t", {"anon": True, "deltaberg_timeout_s": "7.5"}).timeout_s == 7.5
    for bad in ("abc", "0", "-1", "nan"):
        with pytest.raises(StorageConfigError, match="positive number of seconds"):
            open_storage("memory://bound/t", {"deltaberg_timeout_s": bad})


@pytest.mark.parametrize("call", ["read", "exists", "list", "pyarrow read"])
def test_a_stalled_call_ends_typed_within_the_bound(stalled: type[StallingFileSystem], call: str) -> None:
    storage = open_storage(f"{PROTOCOL}://lake/t", {"deltaberg_timeout_s": 0.5})
    started = time.monotonic()
    with pytest.raises(StorageTimeoutError) as info:
        if call == "read":
            storage.read("_delta_log/00000000000000000000.json")
        elif call == "exists":
            storage.exists("_iceberg/metadata/version-hint.text")
        elif call == "list":
            storage.list_from("_delta_log")
        else:
            fs, path = storage.arrow_path("_delta_log/00000000000000000001.checkpoint.parquet")
            pq.ParquetFile(path, filesystem=fs)
    assert time.monotonic() - started < 5
    assert info.value.retryable
    assert f"{PROTOCOL}://lake/t/_" in str(info.value) and "0.5 s" in str(info.value), str(info.value)
