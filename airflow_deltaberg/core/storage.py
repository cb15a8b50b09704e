"""One small interface over local disk and fsspec object stores.

A Storage is rooted at a table location; keys are '/'-separated paths relative to that root
(e.g. ``_delta_log/00000000000000000000.json``). Writes of table state go through ``write_if_absent``
(the atomic primitive for Delta commits) or ``replace`` (atomic overwrite of a pointer file).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import functools
import math
import os
import re
import socket
import stat
import sys
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from airflow_deltaberg.core.errors import (
    DeltabergError,
    FileAlreadyExistsError,
    LinkOutsideTableError,
    StorageConfigError,
    StorageError,
    StorageTimeoutError,
    StorageWriteRefusedError,
)
from airflow_deltaberg.core.redact import Redactor, location_secrets, location_text, redactor_for
from airflow_deltaberg.core.storage_calls import BoundedHandler, within


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

    #: The storage options ``open_storage`` was given: a file of the table that lies elsewhere (an absolute path
    #: of a shallow clone) is opened with the same ones (``open_other``).
    storage_options: Mapping[str, Any] = MappingProxyType({})
    #: Whether a listing reads a folder whole however little of it is wanted (local disk, ~0.3 us a name): a caller
    #: that knows the names it wants looks them up (``files_named``) instead. Object stores list from a start key.
    lists_whole_folders = False

    def __init__(self, root: str):
        self.root = root.rstrip("/") or "/"

    def open_other(self, location: str) -> Storage:
        """A Storage rooted at another ``location``, opened with this one's storage options."""
        return open_storage(location, self.storage_options)

    def uri(self, key: str) -> str:
        """The full location of a key, for messages and for engines that need absolute paths."""
        return f"{self.root}/{key}" if key else self.root

    @abstractmethod
    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        """Files directly inside ``directory`` whose name sorts after ``start_after``, sorted by name.

        A missing directory lists as empty.
        """

    def lister(self, directory: str) -> Callable[[str | None], list[FileEntry]]:
        """``list_from`` of ``directory`` for any ``start_after``, for steps of one run that list it from different
        starts: a store that reads a folder whole (local disk) reads it once, at the first call, and every call
        answers from that read."""
        return functools.partial(self.list_from, directory)

    def files_named(self, directory: str, names: Iterable[str]) -> list[FileEntry]:
        """The files ``names`` of ``directory``, in their order, up to the first name that is no file there (for a
        store that ``lists_whole_folders``)."""
        raise NotImplementedError(f"{type(self).__name__} looks up no names one by one")

    def list_folders(self, directory: str) -> list[str]:
        """The names of the folders directly inside ``directory`` (on object stores: the common prefixes),
        sorted. A missing directory lists as empty."""
        raise NotImplementedError(f"{type(self).__name__} cannot list folders")

    @abstractmethod
    def read(self, key: str) -> bytes:
        """The whole content of a key; FileNotFoundError when absent."""

    @abstractmethod
    def write_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key`` with ``data`` atomically; FileAlreadyExistsError when it exists already with other bytes.

        An object that exists with exactly ``data`` is this write's own: a write that landed but whose response was
        lost, which the client (or the caller) sent again. It counts as written."""

    @abstractmethod
    def replace(self, key: str, data: bytes) -> None:
        """Create or overwrite ``key`` so that readers see either the old or the new content."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether a file exists at ``key``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove a file; absent files are ignored."""

    def delete_many(self, keys: Iterable[str]) -> None:
        """``delete`` of each key, in order."""
        for key in keys:
            self.delete(key)

    @abstractmethod
    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the root path inside it, for columnar readers."""

    def arrow_path(self, key: str) -> tuple[pafs.FileSystem, str]:
        fs, base = self.arrow_filesystem()
        return fs, f"{base.rstrip('/')}/{key}"

    @contextlib.contextmanager
    def typed_errors(self, action: str, key: str) -> Iterator[None]:
        """Failures while ``action`` ("read", "write", ...) ``key`` as typed StorageErrors naming the file, for
        callers that go through ``arrow_filesystem`` themselves. FileNotFoundError passes unless writing."""
        yield

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether ``key`` exists with exactly ``data`` (see write_if_absent)."""
        try:
            return self.read(key) == data
        except FileNotFoundError:
            return False

    def check_folder(self, key: str) -> None:
        """Raise StorageConfigError when a file sits where the folder ``key`` (or one above it) must be, so that
        nothing can be written below it. Object stores have no folders: nothing to check there."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"


def _key_name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


#: errno values of a write refused until someone acts (space, quota, a read-only filesystem, permissions): the next
#: attempt meets them again, so they are not retryable.
_REFUSED_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


def _refused_write(exc: BaseException) -> bool:
    return isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno in _REFUSED_WRITE_ERRNOS)


def _local_error(exc: OSError, doing: str, *, writing: bool = False) -> StorageError:
    """A typed error for a failed local file operation (``doing``: what failed, naming the file).

    Reads are retryable like any unreadable storage (a permission or a link can be fixed while a sensor waits); a
    write refused for space, a read-only filesystem or permissions is not (StorageWriteRefusedError); a file where
    a folder must be is a configuration error (see check_folder).
    """
    if isinstance(exc, (FileExistsError, NotADirectoryError)) and exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return StorageConfigError(f"{doing}: a file is where a folder must be ({exc.strerror or exc})")
    if writing and _refused_write(exc):
        return StorageWriteRefusedError(f"{doing}: {exc.strerror or exc}")
    return StorageError(f"{doing}: {exc.strerror or exc}")


#: The bound of one storage call in seconds (an object store's with its client's retries): reads, writes and
#: listings (on object stores pyarrow's included) end within it or with a StorageTimeoutError. Set by the storage
#: option TIMEOUT_OPTION, else by the environment variable TIMEOUT_ENV.
DEFAULT_TIMEOUT_S = 120.0
TIMEOUT_OPTION = "deltaberg_timeout_s"
TIMEOUT_ENV = "DELTABERG_STORAGE_TIMEOUT_S"


class LocalStorage(Storage):
    """Storage on a local or mounted POSIX filesystem.

    Its own calls (reads, listings, lookups, writes, deletes) end within ``timeout_s`` (``core.storage_calls``):
    a stalled NFS or FUSE mount blocks a system call for good. Each runs on a thread of its own, ~0.1 ms a call.
    What pyarrow reads and writes through ``arrow_filesystem`` (checkpoints, data file footers, manifests) is not
    bounded: docs/STORAGE_FAULTS.md says why."""

    def __init__(self, root: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        path = root[len("file://") :] if root.startswith("file://") else root
        super().__init__(os.path.abspath(path))
        #: The bound of one call (see core.storage_calls).
        self.timeout_s = timeout_s
        try:
            self._bounded("look for", "", lambda: os.stat(self.root))
        except (FileNotFoundError, NotADirectoryError):
            pass  # no table there (yet): the callers say what that means
        except OSError as exc:  # a symbolic link loop, a folder this process may not enter, ...
            raise _local_error(exc, f"{self.root}: the table location cannot be used") from exc

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/")) if key else self.root

    def _bounded(self, action: str, key: str, call: Callable[[], Any]) -> Any:
        """``call()`` within the bound (abandoned after it: a write may still land, like a stalled object-store
        write that is waited for)."""
        return within(self.timeout_s, call, f"{action} {self._path(key)}")

    def check_folder(self, key: str) -> None:
        """Also LinkOutsideTableError when a folder of the chain resolves (through links) outside the table root:
        files written below it would land there."""
        self._bounded("look for", key, lambda: self._check_folder(key))

    def _check_folder(self, key: str) -> None:
        root = os.path.realpath(self.root)
        path = self.root
        for part in key.strip("/").split("/"):
            path = os.path.join(path, part)
            if not os.path.lexists(path):
                return
            target = os.path.realpath(path)
            if os.path.commonpath([root, target]) != root:
                raise LinkOutsideTableError(f"{path} resolves to {target}, outside the table root {root} (table "
                                            f"{self.root}): nothing is written through it; replace the link by a "
                                            "folder")
            if not os.path.isdir(path):
                raise StorageConfigError(f"{path} is not a folder, so nothing can be written below it (table "
                                         f"{self.root}); move it away")

    @contextlib.contextmanager
    def typed_errors(self, action: str, key: str) -> Iterator[None]:
        try:
            yield
        except DeltabergError:
            raise
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and action != "write":
                raise
            raise _local_error(exc, f"cannot {action} {self._path(key)}", writing=action == "write") from exc

    lists_whole_folders = True

    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        return self.lister(directory)(start_after)

    def files_named(self, directory: str, names: Iterable[str]) -> list[FileEntry]:
        return self._bounded("look for", directory, lambda: self._files_named(directory.strip("/"), names))

    def _files_named(self, directory: str, names: Iterable[str]) -> list[FileEntry]:
        folder, prefix = self._path(directory), f"{directory}/" if directory else ""
        found = []
        for name in names:
            try:
                st = os.stat(os.path.join(folder, name))
            except (FileNotFoundError, NotADirectoryError):
                break
            except OSError as exc:
                raise _local_error(exc, f"cannot look for {folder}/{name}") from exc
            if not stat.S_ISREG(st.st_mode):
                break
            found.append(FileEntry(prefix + name, st.st_size, st.st_mtime_ns // 1_000_000))
        return found

    def lister(self, directory: str) -> Callable[[str | None], list[FileEntry]]:
        directory = directory.strip("/")
        prefix = f"{directory}/" if directory else ""
        folder = self._path(directory)
        read: list[list[str] | None] = []
        # A name's entry as first statted: steps listing from different starts share the files they both list.
        statted: dict[str, FileEntry | None] = {}

        def names() -> list[str] | None:
            if not read:
                try:
                    read.append(os.listdir(folder))
                except (FileNotFoundError, NotADirectoryError):
                    read.append(None)
                except OSError as exc:
                    raise _local_error(exc, f"cannot list {folder}") from exc
            return read[0]

        def list_from(start_after: str | None) -> list[FileEntry]:
            return self._bounded("list", directory, lambda: unbounded(start_after))

        def unbounded(start_after: str | None) -> list[FileEntry]:
            # Names first, filtered in one pass: a folder is read whole however little of it is wanted, and a
            # Python object per entry made a listing of a 10,000-commit log cost ~4x the read itself.
            listed = names()
            if listed is None:
                return []
            wanted = listed if start_after is None else [name for name in listed if name > start_after]
            entries = []
            for name in wanted:
                if name not in statted:
                    statted[name] = entry_of(name)
                if (entry := statted[name]) is not None:
                    entries.append(entry)
            entries.sort(key=lambda e: e.key)
            return entries

        def entry_of(name: str) -> FileEntry | None:
            try:
                st = os.stat(os.path.join(folder, name))
            except (FileNotFoundError, NotADirectoryError):
                return None  # a link to nothing (not a file), or a file gone since the names were read
            except OSError as exc:
                raise _local_error(exc, f"cannot list {folder}") from exc
            if not stat.S_ISREG(st.st_mode):
                return None
            return FileEntry(prefix + name, st.st_size, st.st_mtime_ns // 1_000_000)

        return list_from

    def list_folders(self, directory: str) -> list[str]:
        return self._bounded("list", directory, lambda: self._list_folders(directory))

    def _list_folders(self, directory: str) -> list[str]:
        try:
            with os.scandir(self._path(directory.strip("/"))) as it:
                # A link to a folder is not followed: a fleet's listing stays below its prefix.
                names = [item.name for item in it if item.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise _local_error(exc, f"cannot list {self._path(directory)}") from exc
        return sorted(names)

    def read(self, key: str) -> bytes:
        return self._bounded("read", key, lambda: self._read(key))

    def _read(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (NotADirectoryError, IsADirectoryError) as exc:
            # A file where a directory is expected (or the reverse) means the key does not exist.
            raise FileNotFoundError(self._path(key)) from exc
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _local_error(exc, f"cannot read {self._path(key)}") from exc

    def _write_temp(self, key: str, data: bytes) -> str:
        path = self._path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as exc:  # a file where a folder must be, no permission, ...
            raise _local_error(exc, f"cannot create the folder of {path}", writing=True) from exc
        tmp = os.path.join(os.path.dirname(path), f".{_key_name(key)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise _local_error(exc, f"cannot write {path}", writing=True) from exc
            raise
        return tmp

    def write_if_absent(self, key: str, data: bytes) -> None:
        self._bounded("write", key, lambda: self._write_if_absent(key, data))

    def _write_if_absent(self, key: str, data: bytes) -> None:
        # Write fully under a temporary name, then hard-link: the link is atomic and fails if the
        # target exists, so readers never see a partial file and only one writer can win.
        tmp = self._write_temp(key, data)
        try:
            os.link(tmp, self._path(key))
        except FileExistsError as exc:
            try:
                held = self._read(key) == data
            except FileNotFoundError:
                held = False
            if not held:
                raise FileAlreadyExistsError(f"{self.uri(key)} already exists with other content") from exc
        except OSError as exc:
            raise _local_error(exc, f"cannot write {self._path(key)}", writing=True) from exc
        finally:
            os.unlink(tmp)

    def replace(self, key: str, data: bytes) -> None:
        self._bounded("write", key, lambda: self._replace(key, data))

    def _replace(self, key: str, data: bytes) -> None:
        tmp = self._write_temp(key, data)
        try:
            os.replace(tmp, self._path(key))
        except OSError as exc:
            os.unlink(tmp)
            raise _local_error(exc, f"cannot write {self._path(key)}", writing=True) from exc

    def exists(self, key: str) -> bool:
        return self._bounded("look for", key, lambda: os.path.isfile(self._path(key)))

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Iterable[str]) -> None:
        # One bounded call for them all: a thread per file cost more than the unlink (an expiry deletes ~40).
        keys = list(keys)
        if keys:
            self._bounded("delete", keys[0], lambda: self._unlink_all(keys))

    def _unlink_all(self, keys: list[str]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise _local_error(exc, f"cannot delete {self._path(key)}") from exc

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


def _is_a(exc: BaseException, module: str, *names: str) -> bool:
    """Whether ``exc`` is an instance of one of the classes ``names`` of a ``module`` package (by the names in its
    class hierarchy: the client packages are optional and never imported here)."""
    return any(c.__name__ in names and c.__module__.startswith(module) for c in type(exc).__mro__)


_UNKNOWN_OPTION = re.compile(r"unexpected keyword argument '([^']+)'")


def _unreachable(exc: BaseException) -> bool:
    return (
        _is_a(exc, "botocore", "EndpointConnectionError", "ConnectTimeoutError", "ProxyConnectionError")
        or _is_a(exc, "aiohttp", "ClientConnectionError", "ServerTimeoutError")
        or _is_a(exc, "requests", "ConnectionError", "Timeout")
        or _is_a(exc, "fsspec", "FSTimeoutError")
        or _is_a(exc, "azure.core", "ServiceRequestError", "ServiceResponseError")
        or isinstance(exc, (ConnectionError, TimeoutError))
    )


def _no_credentials(exc: BaseException) -> bool:
    return (
        _is_a(exc, "botocore", "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")
        or _is_a(exc, "google.auth", "DefaultCredentialsError", "RefreshError")
        or _is_a(exc, "azure.core", "ClientAuthenticationError")
    )


def storage_error(exc: BaseException, doing: str, *, location: str, endpoint: str | None,
                  redact: Callable[[str], str], writing: bool = False) -> StorageError | None:
    """The typed error for an exception a storage client raised while ``doing`` (e.g. "read s3://b/t/x"), or None
    when it is not a storage failure (a programming error, to surface as it is). Messages are redacted. A write
    refused for permissions or space is not retryable (StorageWriteRefusedError); server errors (S3 500, 503 after
    the client's retries) and unreachable endpoints are."""
    reason = redact(f"{type(exc).__name__}: {exc}")
    option = _UNKNOWN_OPTION.search(str(exc)) if isinstance(exc, TypeError) else None
    if option is not None:
        # The option's name only: its value may be a secret.
        return StorageConfigError(f"{location_text(location)}: unknown storage option {option.group(1)!r} for "
                                  f"{urlsplit(location).scheme}://")
    if isinstance(exc, TypeError):
        return None
    if _no_credentials(exc):
        return StorageConfigError(f"no credentials to {doing} were found or accepted ({reason}); give them as "
                                  "storage options, or in the store's usual environment")
    if _unreachable(exc):
        where = redact(endpoint) if endpoint else f"of {urlsplit(location).scheme}://"
        return StorageError(f"cannot reach the storage endpoint {where} to {doing} ({reason})")
    if writing and _refused_write(exc):
        return StorageWriteRefusedError(f"the storage refused to {doing} ({reason})")
    if isinstance(exc, PermissionError):
        return StorageError(f"permission denied to {doing} ({reason})")
    if _is_a(exc, "botocore", "ParamValidationError"):
        return StorageConfigError(f"cannot {doing}: {reason}")
    if (isinstance(exc, OSError) or _is_a(exc, "botocore", "BotoCoreError") or _is_a(exc, "gcsfs", "HttpError")
            or _is_a(exc, "azure.core", "AzureError") or _is_a(exc, "aiohttp", "ClientError")):
        return StorageError(f"cannot {doing}: {reason}")
    return None


def _shown_cause(exc: BaseException, redact: Callable[[str], str]) -> BaseException | None:
    """``exc`` as the cause of a typed error, or None when it (or an exception it chains) holds a secret."""
    seen: BaseException | None = exc
    while seen is not None:
        if redact(str(seen)) != str(seen):
            return None
        seen = seen.__cause__ or seen.__context__
    return exc


# How much longer a cancellable write is waited for than its client's own cancellation at the bound.
_CANCEL_GRACE_S = 5.0
_CANCELLABLE_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az"})


class FsspecStorage(Storage):
    """Storage over any fsspec filesystem (memory, s3, gcs, abfs, ...)."""

    # In-process guard for stores without a conditional put of their own (memory://).
    _local_lock = threading.Lock()

    def __init__(self, root: str, fs: Any, root_path: str, *, endpoint: str | None = None,
                 redactor: Redactor | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        super().__init__(root)
        self.fs = fs
        self.root_path = root_path.rstrip("/")
        # Object stores that can start a listing after a key list only the tail of `_delta_log`.
        self._lister = _native_lister(fs)
        self.endpoint = endpoint
        self.redact: Callable[[str], str] = redactor or Redactor()
        #: The bound of one call with its retries (see core.storage_calls).
        self.timeout_s = timeout_s
        # s3fs, gcsfs and adlfs (async fsspec filesystems whose sync calls all go through fsspec's ``sync``) take a
        # ``timeout`` on each call and cancel the request at it: writes use it, so that a write given up on cannot
        # land later. Other filesystems may not take the keyword.
        self._cancellable = (_is_instance_of(fs, "fsspec.asyn", "AsyncFileSystem")
                             and not getattr(fs, "asynchronous", False)
                             and bool(set(_protocols(fs)) & _CANCELLABLE_PROTOCOLS))

    @contextlib.contextmanager
    def typed_errors(self, action: str, key: str) -> Iterator[None]:
        """Client failures as typed StorageErrors naming the file, without secrets."""
        try:
            yield
        except DeltabergError:
            raise
        except Exception as exc:
            if isinstance(exc, FileNotFoundError) and action != "write":
                raise
            if _is_a(exc, "fsspec", "FSTimeoutError"):
                raise StorageTimeoutError(f"cannot {action} {self.uri(key)}: the storage did not answer within "
                                          f"{self.timeout_s:g} s (the bound of one storage call with its retries: "
                                          f"storage option {TIMEOUT_OPTION}, or {TIMEOUT_ENV})") from None
            error = storage_error(exc, f"{action} {self.uri(key)}", location=self.root, endpoint=self.endpoint,
                                  redact=self.redact, writing=action == "write")
            if error is None:
                raise
            raise error from _shown_cause(exc, self.redact)

    def _path(self, key: str) -> str:
        return f"{self.root_path}/{key}" if key else self.root_path

    def _bounded(self, action: str, key: str, call: Callable[[], Any]) -> Any:
        """``call()`` within the bound, its failures typed as failing to ``action`` ``key``."""
        with self.typed_errors(action, key):
            return within(self.timeout_s, call, f"{action} {self.uri(key)}")

    def _cancelled_at_bound(self) -> dict[str, float]:
        """The keyword that makes an async filesystem's call cancel its request at the bound (none otherwise)."""
        return {"timeout": self.timeout_s} if self._cancellable else {}

    def _arrow_call(self, action: str, path: str, call: Callable[[], Any]) -> Any:
        prefix = f"{self.root_path}/"
        key = path[len(prefix):] if path.startswith(prefix) else path
        return self._bounded(action, key, call)

    def list_from(self, directory: str, start_after: str | None = None) -> list[FileEntry]:
        directory = directory.strip("/")
        prefix = f"{directory}/" if directory else ""
        path = self._path(directory)
        lister = self._lister if self._lister is not None else self._list_generic
        try:
            listed = self._bounded("list", directory, lambda: lister(self.fs, path, start_after))
        except (FileNotFoundError, NotADirectoryError):
            return []
        entries = [FileEntry(prefix + name, size, mtime_ms) for name, size, mtime_ms in listed]
        entries.sort(key=lambda e: e.key)
        return entries

    def list_folders(self, directory: str) -> list[str]:
        directory = directory.strip("/")
        path = self._path(directory)

        def listing() -> list[str]:
            try:
                infos = self.fs.ls(path, detail=True, refresh=True)
            except TypeError:  # a filesystem whose ls takes no refresh argument
                infos = self.fs.ls(path, detail=True)
            listed_path = self.fs._strip_protocol(path).rstrip("/")
            return sorted(info["name"].rstrip("/").rsplit("/", 1)[-1] for info in infos
                          if info.get("type") == "directory" and info["name"].rstrip("/") != listed_path)

        try:
            return self._bounded("list", directory, listing)
        except (FileNotFoundError, NotADirectoryError):
            return []

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
        return self._bounded("read", key, lambda: self.fs.cat_file(self._path(key)))

    def write_if_absent(self, key: str, data: bytes) -> None:
        # The watchdog waits a little longer than the client's own cancellation, which is the one that ends it.
        with self.typed_errors("write", key):
            within(self.timeout_s + _CANCEL_GRACE_S, lambda: self._write_if_absent(key, data),
                   f"write {self.uri(key)}")

    def _write_if_absent(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if self.fs.protocol in ("memory",) or "memory" in self.fs.protocol:
            with self._local_lock:
                if self.fs.exists(path):
                    if self._holds(key, data):
                        return
                    raise FileAlreadyExistsError(f"{self.uri(key)} already exists with other content")
                self.fs.pipe_file(path, data)
            return
        # Object stores with conditional writes (S3 If-None-Match, GCS ifGenerationMatch=0, Azure
        # If-None-Match) expose them through the exclusive-create mode; s3fs's one PUT of it can be cancelled.
        try:
            if "s3" in _protocols(self.fs) and self._cancellable:
                self.fs.pipe_file(path, data, mode="create", timeout=self.timeout_s)
            else:
                with self.fs.open(path, "xb") as f:
                    f.write(data)
        except FileExistsError as exc:
            # A retry of a write that landed (its response lost) finds its own bytes there: written.
            if not self._holds(key, data):
                raise FileAlreadyExistsError(f"{self.uri(key)} already exists with other content") from exc
        except (NotImplementedError, ValueError) as exc:
            raise StorageError(
                f"{self.uri(key)}: the store has no conditional put, so concurrent Delta commits "
                "cannot be made safe here"
            ) from exc

    def replace(self, key: str, data: bytes) -> None:
        # A single PUT is atomic on object stores: readers see the old or the new object.
        with self.typed_errors("write", key):
            within(self.timeout_s + _CANCEL_GRACE_S,
                   lambda: self.fs.pipe_file(self._path(key), data, **self._cancelled_at_bound()),
                   f"write {self.uri(key)}")

    def exists(self, key: str) -> bool:
        # info, not isfile: fsspec's isfile answers False for any failure (a store error read as a missing file).
        try:
            info = self._bounded("look for", key, lambda: self.fs.info(self._path(key)))
        except FileNotFoundError:
            return False
        return info.get("type") == "file"

    def delete(self, key: str) -> None:
        try:
            with self.typed_errors("delete", key):
                within(self.timeout_s + _CANCEL_GRACE_S,
                       lambda: self.fs.rm_file(self._path(key), **self._cancelled_at_bound()),
                       f"delete {self.uri(key)}")
        except FileNotFoundError:
            pass

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return pafs.PyFileSystem(BoundedHandler(self.fs, self._arrow_call)), self.root_path


def call_timeout_s(options: Mapping[str, Any]) -> float:
    """The bound of one storage call that ``options`` (or the environment) set, DEFAULT_TIMEOUT_S otherwise."""
    raw = options.get(TIMEOUT_OPTION, os.environ.get(TIMEOUT_ENV))
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise StorageConfigError(f"the storage call bound ({TIMEOUT_OPTION} or {TIMEOUT_ENV}) must be a positive "
                                 f"number of seconds, not {raw!r}")
    return value


#: s3 client settings a user's ``config_kwargs`` override: a short connect timeout, and few retries, so that a
#: store that cannot be reached fails within seconds (botocore's default retries took 9-14 s on a closed port).
S3_CONFIG_DEFAULTS: dict[str, Any] = {"connect_timeout": 5, "retries": {"mode": "standard", "max_attempts": 2}}
#: How long to wait for an explicit gcs endpoint to accept a connection (see _check_reachable).
ENDPOINT_CONNECT_TIMEOUT = 5.0
_S3_SCHEMES = ("s3", "s3a", "s3n")
_GCS_SCHEMES = ("gs", "gcs")
_AZURE_BLOB_ENDPOINT = re.compile(r"(?:^|;)\s*BlobEndpoint=([^;]+)", re.IGNORECASE)
# Values of gcsfs's token that name a way to find credentials, not a token.
_GCS_TOKEN_METHODS = ("google_default", "cache", "cloud", "anon", "browser", "token")


def _client_options(scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options given to the fsspec filesystem: the user's, over this project's defaults."""
    out = dict(options)
    if scheme in _S3_SCHEMES:
        out["config_kwargs"] = {**S3_CONFIG_DEFAULTS, **dict(out.get("config_kwargs") or {})}
    elif scheme in _GCS_SCHEMES:
        token = out.get("token")
        if (out.get("endpoint_url") and isinstance(token, str) and token not in _GCS_TOKEN_METHODS
                and not os.path.exists(token)):
            # gcsfs checks a raw access token at Google's public tokeninfo URL (the token in its query string)
            # before it uses it: never right for a token of another endpoint (an emulator, a private one).
            from google.oauth2.credentials import Credentials

            out["token"] = Credentials(token)
    return out


def _explicit_endpoint(scheme: str, options: Mapping[str, Any]) -> str | None:
    """The endpoint the options point the client at, when they name one (else the store's public one)."""
    endpoint = options.get("endpoint_url")
    if scheme in ("abfs", "abfss", "az", "adl"):
        host = options.get("account_host")
        found = _AZURE_BLOB_ENDPOINT.search(str(options.get("connection_string") or ""))
        endpoint = found.group(1) if found else (f"https://{host}" if isinstance(host, str) and host else None)
    return endpoint if isinstance(endpoint, str) and endpoint else None


def _check_reachable(endpoint: str, location: str) -> None:
    """Raise StorageError when an explicit gcs or Azure endpoint refuses connections: their clients retry each
    request with a backoff that storage options cannot shorten (gcsfs ~30 s, azure-core's 10 retries ~80 s)."""
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=ENDPOINT_CONNECT_TIMEOUT).close()
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot reach the storage endpoint {location_text(endpoint)} of "
                           f"{location_text(location)}: {getattr(exc, 'strerror', None) or exc}") from None


def open_storage(location: str, storage_options: Mapping[str, Any] | None = None) -> Storage:
    """Open a Storage rooted at ``location`` (plain path, file://, memory://, s3://, gs://, abfss://...).

    Credentials belong in ``storage_options``: a location URL with credentials is refused (they would show in
    messages and be written into the Iceberg metadata). Errors of the storage clients become StorageErrors whose
    messages hold no value of a secret option (see core.redact).
    """
    scheme = urlsplit(location).scheme
    options = dict(storage_options or {})
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        local = LocalStorage(location, call_timeout_s(options))
        local.storage_options = MappingProxyType(options)
        return local
    if location_secrets(location):
        raise StorageConfigError(f"{location_text(location)}: credentials in the location URL are not supported; "
                                 "give them as storage options")
    redactor = redactor_for(location, options)
    endpoint = _explicit_endpoint(scheme, options)
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a dependency
        raise StorageConfigError(f"{location}: fsspec is needed for {scheme}:// locations") from exc
    extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "abfs": "abfs", "abfss": "abfs"}
    hint = f" (install airflow-deltaberg[{extra[scheme]}])" if scheme in extra else ""
    try:
        known = fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError) as exc:
        raise StorageConfigError(redactor(f"{location}: no filesystem for {scheme}://{hint}: {exc}")) from None
    if endpoint and scheme not in _S3_SCHEMES:  # botocore's timeouts and retries are set (S3_CONFIG_DEFAULTS)
        _check_reachable(endpoint, location)
    timeout_s = call_timeout_s(options)
    client_options = {k: v for k, v in options.items() if k != TIMEOUT_OPTION}
    try:
        fs, root_path = fsspec.core.url_to_fs(location, **_client_options(scheme, client_options))
    except ImportError as exc:
        raise StorageConfigError(redactor(f"{location}: no filesystem for {scheme}://{hint}: {exc}")) from None
    except Exception as exc:
        error = storage_error(exc, f"open {location}", location=location, endpoint=endpoint, redact=redactor)
        if error is None:
            if not isinstance(exc, ValueError):
                raise
            error = StorageConfigError(redactor(f"{location}: the {known.__name__} storage options do not work: "
                                                f"{type(exc).__name__}: {exc}"))
        raise error from _shown_cause(exc, redactor)
    storage = FsspecStorage(location, fs, root_path, endpoint=endpoint, redactor=redactor, timeout_s=timeout_s)
    storage.storage_options = MappingProxyType(options)
    return storage
