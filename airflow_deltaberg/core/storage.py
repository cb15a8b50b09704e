"""One small interface over local disk and fsspec object stores.

A Storage is rooted at a table location; keys are '/'-separated paths relative to that root
(e.g. ``_delta_log/00000000000000000000.json``). Writes of table state go through ``write_if_absent``
(the atomic primitive for Delta commits) or ``replace`` (atomic overwrite of a pointer file).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
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


#: One listed file: its name inside the listed directory, size and modification time (ms).
_Listed = tuple[str, int, int]
#: A native listing: (filesystem, path of the directory, start_after) -> the files directly inside, after it.
_Lister = Callable[[Any, str, str | None], list[_Listed]]


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = getattr(fs, "protocol", ())
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _is_instance_of(fs: Any, module: str, cls: str) -> bool:
    # The filesystem's own package is imported already when fs is one of its classes; never import it here.
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(fs, getattr(loaded, cls))


def _after(name: str, start_after: str | None) -> bool:
    # Also applied to native listings: a store that ignores the bound (some S3-compatible servers and
    # emulators do) then still gives the same result, only slower.
    return start_after is None or name > start_after


def _list_s3(fs: Any, path: str, start_after: str | None) -> list[_Listed]:
    """ListObjectsV2 with Prefix, Delimiter and StartAfter, through s3fs's own client.

    ``call_s3`` applies the filesystem's credentials, endpoint, region, requester-pays and other request
    settings and retries, and maps errors as ``ls`` does (a missing bucket is FileNotFoundError). S3 orders
    keys by their UTF-8 bytes, which is the code point order Python compares names in, so ``StartAfter`` of
    ``prefix + start_after`` returns exactly the names > ``start_after``; a short tail is one request
    however long the log is. The delimiter keeps sub-directories out (each comes back as one CommonPrefix).
    """
    bucket, key, _ = fs.split_path(path)
    prefix = f"{key.strip('/')}/" if key.strip("/") else ""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
    # S3 Express directory buckets (names end in "--x-s3") take no StartAfter and list in no particular order:
    # there the whole directory is listed and filtered, as the generic path does.
    if start_after and not bucket.endswith("--x-s3"):
        kwargs["StartAfter"] = prefix + start_after
    listed: list[_Listed] = []
    while True:
        page = fs.call_s3("list_objects_v2", **kwargs)
        for item in page.get("Contents", []):
            name = item["Key"][len(prefix) :]
            # An empty name is the directory marker object ("prefix/") that some tools create: no file.
            if name and "/" not in name and _after(name, start_after):
                listed.append((name, int(item.get("Size") or 0), _mtime_ms(item)))
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return listed
        kwargs["ContinuationToken"] = token


def _list_gcs(fs: Any, path: str, start_after: str | None) -> list[_Listed]:
    """The JSON API's objects.list with prefix, delimiter and startOffset, through gcsfs's own session.

    ``call`` applies the filesystem's credentials, endpoint and requester-pays project, and maps errors as ``ls``
    does. GCS orders names lexicographically by their UTF-8 bytes, as S3 does; ``startOffset`` is inclusive,
    so the name equal to ``start_after`` is dropped here. Objects are turned
    into file infos by gcsfs itself (``_process_object``), so the modification time is the one ``ls`` gives.
    """
    bucket, key, _ = fs.split_path(path)
    prefix = f"{key.strip('/')}/" if key.strip("/") else ""
    params: dict[str, Any] = {"delimiter": "/", "prefix": prefix or None}
    if start_after:
        params["startOffset"] = prefix + start_after
    listed: list[_Listed] = []
    while True:
        page = fs.call("GET", "b/{}/o", bucket, json_out=True, **params)
        for item in page.get("items", []):
            name = item["name"][len(prefix) :]
            if name and "/" not in name and _after(name, start_after):
                info = fs._process_object(bucket, item)
                listed.append((name, int(info.get("size") or 0), _mtime_ms(info)))
        token = page.get("nextPageToken")
        if not token:
            return listed
        params["pageToken"] = token


def _native_lister(fs: Any) -> _Lister | None:
    """The start-after listing of the store behind ``fs``, or None where only the generic listing works.

    Version-aware filesystems list object versions (a different API and result) and asynchronous instances
    cannot be called from this synchronous code, so both keep the generic path, as do memory:// and every
    other filesystem. Azure (adlfs) has no native lister because its List Blobs call has no start-after key:
    only a prefix and an opaque continuation marker from a previous page.
    """
    if getattr(fs, "asynchronous", False) or getattr(fs, "version_aware", False):
        return None
    protocols = _protocols(fs)
    if "s3" in protocols and _is_instance_of(fs, "s3fs.core", "S3FileSystem"):
        return _list_s3
    # gcsfs.GCSFileSystem may name a subclass (the experimental HNS one); gcsfs.core's class is the base of both.
    if "gs" in protocols and _is_instance_of(fs, "gcsfs.core", "GCSFileSystem"):
        return _list_gcs
    return None


class FsspecStorage(Storage):
    """Storage over any fsspec filesystem (memory, s3, gcs, abfs, ...)."""

    # In-process guard for stores without a conditional put of their own (memory://).
    _local_lock = threading.Lock()

    def __init__(self, root: str, fs: Any, root_path: str):
        super().__init__(root)
        self.fs = fs
        self.root_path = root_path.rstrip("/")
        # Object stores that can start a listing after a key list only the tail of `_delta_log`.
        self._lister = _native_lister(fs)

    def _path(self, key: str) -> str:
        return f"{self.root_path}/{key}" if key else self.root_path

    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        directory = directory.strip("/")
        prefix = f"{directory}/" if directory else ""
        path = self._path(directory)
        lister = self._lister if self._lister is not None else self._list_generic
        try:
            listed = lister(self.fs, path, start_after)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {self.uri(directory)}: {exc}") from exc
        entries = [FileEntry(prefix + name, size, mtime_ms) for name, size, mtime_ms in listed]
        entries.sort(key=lambda e: e.key)
        return entries

    @staticmethod
    def _list_generic(fs: Any, path: str, start_after: str | None) -> list[_Listed]:
        """Any filesystem: list the whole directory, then filter (the cost grows with the directory)."""
        try:
            infos = fs.ls(path, detail=True, refresh=True)
        except TypeError:  # a filesystem whose ls takes no refresh argument
            infos = fs.ls(path, detail=True)
        # Listing a file gives that file itself on most stores; like a local listing, that is no directory.
        listed_path = fs._strip_protocol(path).rstrip("/")
        listed: list[_Listed] = []
        for info in infos:
            if info.get("type") != "file" or info["name"].rstrip("/") == listed_path:
                continue
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if _after(name, start_after):
                listed.append((name, int(info.get("size") or 0), _mtime_ms(info)))
        return listed

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
