"""An in-memory fsspec filesystem (``flakymem://``) whose listings fail a chosen number of times with a connection
error, then work: the storage errors an operator must retry."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

PROTOCOL = "flakymem"


class FlakyMemoryFileSystem(MemoryFileSystem):
    """An in-memory store whose listings fail ``failures`` times with a connection error, then work."""

    protocol = (PROTOCOL, "memory")
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    failures = 0

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        if FlakyMemoryFileSystem.failures > 0:
            FlakyMemoryFileSystem.failures -= 1
            raise ConnectionResetError("simulated network failure")
        return super().ls(path, detail=detail, **kwargs)


@contextmanager
def flaky_store() -> Iterator[type[FlakyMemoryFileSystem]]:
    """``with flaky_store() as flaky``: ``flakymem://`` registered with an empty store and no failures (set
    ``flaky.failures``), emptied again at the end."""
    fsspec.register_implementation(PROTOCOL, FlakyMemoryFileSystem, clobber=True)
    FlakyMemoryFileSystem.store.clear()
    FlakyMemoryFileSystem.pseudo_dirs[:] = [""]
    FlakyMemoryFileSystem.failures = 0
    try:
        yield FlakyMemoryFileSystem
    finally:
        FlakyMemoryFileSystem.failures = 0
        FlakyMemoryFileSystem.store.clear()
