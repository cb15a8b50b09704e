"""One small interface over local disk and fsspec object stores.

A Storage is rooted at a table location; keys are '/'-separated paths relative to that root
(e.g. ``_delta_log/00000000000000000000.json``). Writes of table state go through ``write_if_absent``
(the atomic primitive for Delta commits) or ``replace`` (atomic overwrite of a pointer file).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from airflow_deltaberg.core.errors import FileAlreadyExistsError, StorageConfigError, StorageError


@dataclass(frozen=True)
class FileEntry:
    """A file found by a listing: its key relative to the storage root, size and modification time."""

    key: str
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


class Storage(ABC):
    """Keyed access to the files below one root location."""

    def __init__(self, root: str):
        self.root = root.rstrip("/") or "/"

    def uri(self, key: str) -> str:
        """The full location of a key, for messages and for engines that need absolute paths."""
        return f"{self.root}/{key}" if key else self.root

    @abstractmethod
    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        """Files directly inside ``directory`` whose name sorts after ``start_after``, sorted by name.

        A missing directory lists as empty.
        """

    @abstractmethod
    def read(self, key: str) -> bytes:
        """The whole content of a key; FileNotFoundError when absent."""

    @abstractmethod
    def write_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key`` with ``data`` atomically; FileAlreadyExistsError when it exists already."""

    @abstractmethod
    def replace(self, key: str, data: bytes) -> None:
        """Create or overwrite ``key`` so that readers see either the old or the new content."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether a file exists at ``key``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove a file; absent files are ignored."""

    @abstractmethod
    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the root path inside it, for columnar readers."""

    def arrow_path(self, key: str) -> tuple[pafs.FileSystem, str]:
        fs, base = self.arrow_filesystem()
        return fs, f"{base.rstrip('/')}/{key}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"


def _key_name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


class LocalStorage(Storage):
    """Storage on a local or mounted POSIX filesystem."""

    def __init__(self, root: str):
        path = root[len("file://") :] if root.startswith("file://") else root
        super().__init__(os.path.abspath(path))

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        prefix = f"{directory.strip('/')}/" if directory.strip("/") else ""
        entries = []
        try:
            with os.scandir(self._path(directory.strip("/"))) as it:
                for item in it:
                    if start_after is not None and item.name <= start_after:
                        continue
                    if not item.is_file():
                        continue
                    st = item.stat()
                    entries.append(FileEntry(prefix + item.name, st.st_size, st.st_mtime_ns // 1_000_000))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {self._path(directory)}: {exc}") from exc
        entries.sort(key=lambda e: e.key)
        return entries

    def read(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (NotADirectoryError, IsADirectoryError) as exc:
            # A file where a directory is expected (or the reverse) means the key does not exist.
            raise FileNotFoundError(self._path(key)) from exc

    def _write_temp(self, key: str, data: bytes) -> str:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{_key_name(key)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def write_if_absent(self, key: str, data: bytes) -> None:
        # Write fully under a temporary name, then hard-link: the link is atomic and fails if the
        # target exists, so readers never see a partial file and only one writer can win.
        tmp = self._write_temp(key, data)
        try:
            os.link(tmp, self._path(key))
        except FileExistsError as exc:
            raise FileAlreadyExistsError(f"{self.uri(key)} already exists") from exc
        finally:
            os.unlink(tmp)

    def replace(self, key: str, data: bytes) -> None:
        tmp = self._write_temp(key, data)
        try:
            os.replace(tmp, self._path(key))
        except OSError:
            os.unlink(tmp)
            raise

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return pafs.LocalFileSystem(), self.root


def _mtime_ms(info: Mapping[str, Any]) -> int:
    for field in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(field)
        if value is None:
            continue
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=dt.timezone.utc)
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(value * 1000)
        if isinstance(value, str):
            try:
                parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.timezone.utc)
            return int(parsed.timestamp() * 1000)
    return 0


class FsspecStorage(Storage):
    """Storage over any fsspec filesystem (memory, s3, gcs, abfs, ...)."""

    # In-process guard for stores without a conditional put of their own (memory://).
    _local_lock = threading.Lock()

    def __init__(self, root: str, fs: Any, root_path: str):
        super().__init__(root)
        self.fs = fs
        self.root_path = root_path.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root_path}/{key}" if key else self.root_path

    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        directory = directory.strip("/")
        prefix = f"{directory}/" if directory else ""
        path = self._path(directory)
        try:
            try:
                infos = self.fs.ls(path, detail=True, refresh=True)
            except TypeError:  # a filesystem whose ls takes no refresh argument
                infos = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {self.uri(directory)}: {exc}") from exc
        # Listing a file gives that file itself on most stores; like a local listing, that is no directory.
        listed = self.fs._strip_protocol(path).rstrip("/")
        entries = []
        for info in infos:
            if info.get("type") != "file" or info["name"].rstrip("/") == listed:
                continue
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if start_after is not None and name <= start_after:
                continue
            entries.append(FileEntry(prefix + name, int(info.get("size") or 0), _mtime_ms(info)))
        entries.sort(key=lambda e: e.key)
        return entries

    def read(self, key: str) -> bytes:
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot read {self.uri(key)}: {exc}") from exc

    def write_if_absent(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if self.fs.protocol in ("memory",) or "memory" in self.fs.protocol:
            with self._local_lock:
                if self.fs.exists(path):
                    raise FileAlreadyExistsError(f"{self.uri(key)} already exists")
                self.fs.pipe_file(path, data)
            return
        # Object stores with conditional writes (S3 If-None-Match, GCS ifGenerationMatch=0, Azure
        # If-None-Match) expose them through the exclusive-create mode.
        try:
            with self.fs.open(path, "xb") as f:
                f.write(data)
        except FileExistsError as exc:
            raise FileAlreadyExistsError(f"{self.uri(key)} already exists") from exc
        except (NotImplementedError, ValueError) as exc:
            raise StorageError(
                f"{self.uri(key)}: the store has no conditional put, so concurrent Delta commits "
                "cannot be made safe here"
            ) from exc

    def replace(self, key: str, data: bytes) -> None:
        # A single PUT is atomic on object stores: readers see the old or the new object.
        self.fs.pipe_file(self._path(key), data)

    def exists(self, key: str) -> bool:
        return bool(self.fs.isfile(self._path(key)))

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs)), self.root_path


def open_storage(location: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
    """Open a Storage rooted at ``location`` (plain path, file://, memory://, s3://, gs://, abfss://...)."""
    scheme = urlsplit(location).scheme
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        return LocalStorage(location)
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a dependency
        raise StorageConfigError(f"{location}: fsspec is needed for {scheme}:// locations") from exc
    try:
        fs, root_path = fsspec.core.url_to_fs(location, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "abfs": "abfs", "abfss": "abfs"}
        hint = f" (install airflow-deltaberg[{extra[scheme]}])" if scheme in extra else ""
        raise StorageConfigError(f"{location}: no filesystem for {scheme}://{hint}: {exc}") from exc
    return FsspecStorage(location, fs, root_path)
