"""Object-store calls that end: each within a bound, then a typed StorageTimeoutError.

Client libraries bound their requests only in part: botocore's read timeout does not cover a PUT whose
``Expect: 100-continue`` is never answered (one hung ``convert`` for 900 s and more), and s3fs retries each
request on top of botocore's retries (a stalled store took 236 s to fail). The bound here is one number for a
whole call, retries included.

``within`` runs a call on a thread of its own and stops waiting at the bound. A client call cannot be
interrupted from outside, so the call is abandoned, not stopped: it serves reads, listings and writes of fresh
names, which change nothing when they end late. Writes whose late landing would matter (a metadata file, a
pointer) are cancelled by their client instead (``FsspecStorage``: fsspec's own ``timeout`` of async
filesystems cancels the request).

``BoundedHandler`` is pyarrow's view of an fsspec filesystem (``pyarrow.fs.FSSpecHandler``) whose every call,
and every read, write and close of the files it opens, runs through ``call`` (bounded, and typed by the
storage): the readers and writers that go through pyarrow's filesystem (checkpoints, manifests, manifest lists)
meet the same bound and the same typed errors as the storage's own calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_deltaberg.core.errors import StorageTimeoutError

T = TypeVar("T")

#: ``call(action, path, fn)``: ``fn()`` bounded, its failures typed as failing to ``action`` (read, write...)
#: the file at ``path`` (a path of the fsspec filesystem).
BoundedCall = Callable[[str, str, Callable[[], Any]], Any]


def within(seconds: float, call: Callable[[], T], what: str) -> T:
    """``call()``, waited for at most ``seconds`` on a thread of its own; then StorageTimeoutError saying ``what``
    did not finish (the call is abandoned, see the module's docstring)."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="deltaberg-storage-call").start()
    if not done.wait(seconds):
        raise StorageTimeoutError(f"cannot {what}: the storage did not answer within {seconds:g} s (the bound of one "
                                  "storage call with its retries: storage option deltaberg_timeout_s, or "
                                  "DELTABERG_STORAGE_TIMEOUT_S)")
    ok, value = outcome[0]
    if ok:
        return value
    raise value


class BoundedFile:
    """A file object of an fsspec filesystem whose reads, writes, flushes and close run through ``call``."""

    def __init__(self, raw: Any, action: str, path: str, call: BoundedCall) -> None:
        self._raw = raw
        self._action = action
        self._path = path
        self._call = call

    def _bounded(self, fn: Callable[[], T]) -> T:
        return self._call(self._action, self._path, fn)

    def read(self, size: int = -1) -> bytes:
        return self._bounded(lambda: self._raw.read(size))

    def readinto(self, buffer: Any) -> int:
        return self._bounded(lambda: self._raw.readinto(buffer))

    def write(self, data: Any) -> int:
        return self._bounded(lambda: self._raw.write(data))

    def flush(self) -> None:
        self._bounded(self._raw.flush)

    def close(self) -> None:
        self._bounded(self._raw.close)

    def __getattr__(self, name: str) -> Any:  # seek, tell, closed, ...: local to the file object
        return getattr(self._raw, name)


class BoundedHandler(pafs.FSSpecHandler):
    """An FSSpecHandler whose calls run through ``call``; ``FileNotFoundError`` passes as it is (pyarrow and the
    callers tell missing files apart). Files are found with ``info``, whose failures surface, not with fsspec's
    ``isfile``, which answers False for any failure (a 500 read as a missing file)."""

    def __init__(self, fs: Any, call: BoundedCall) -> None:
        super().__init__(fs)
        self._call = call

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self._call("look for", paths[0] if paths else "", lambda: super(BoundedHandler, self)
                          .get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self._call("list", selector.base_dir, lambda: super(BoundedHandler, self)
                          .get_file_info_selector(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self._call("write", path, lambda: super(BoundedHandler, self).create_dir(path, recursive))

    def delete_dir(self, path: str) -> None:
        self._call("delete", path, lambda: super(BoundedHandler, self).delete_dir(path))

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._call("delete", path, lambda: super(BoundedHandler, self).delete_dir_contents(path, missing_dir_ok))

    def delete_file(self, path: str) -> None:
        self._call("delete", path, lambda: super(BoundedHandler, self).delete_file(path))

    def move(self, src: str, dest: str) -> None:
        self._call("write", dest, lambda: super(BoundedHandler, self).move(src, dest))

    def copy_file(self, src: str, dest: str) -> None:
        self._call("write", dest, lambda: super(BoundedHandler, self).copy_file(src, dest))

    def _open_for_reading(self, path: str) -> pa.PythonFile:
        def open_file() -> Any:
            if self.fs.info(path).get("type") != "file":
                raise FileNotFoundError(path)
            return self.fs.open(path, mode="rb")

        return pa.PythonFile(BoundedFile(self._call("read", path, open_file), "read", path, self._call), mode="r")

    def open_input_stream(self, path: str) -> pa.PythonFile:
        return self._open_for_reading(path)

    def open_input_file(self, path: str) -> pa.PythonFile:
        return self._open_for_reading(path)

    def open_output_stream(self, path: str, metadata: Any) -> pa.PythonFile:
        raw = self._call("write", path, lambda: self.fs.open(path, mode="wb"))
        return pa.PythonFile(BoundedFile(raw, "write", path, self._call), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.PythonFile:
        raw = self._call("write", path, lambda: self.fs.open(path, mode="ab"))
        return pa.PythonFile(BoundedFile(raw, "write", path, self._call), mode="w")
