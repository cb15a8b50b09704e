"""list_from on real object store APIs on loopback: S3 (moto's server, reached by s3fs with an endpoint URL and
dummy keys) and GCS's JSON API (gcp-storage-emulator, reached by gcsfs).

The native listings (S3 ListObjectsV2 with StartAfter, GCS objects.list with startOffset) must return exactly
what the generic listing (``fs.ls`` of the whole directory, then a filter) returns, and on S3 list a short tail
of a long `_delta_log` in one request. Requests are counted where they arrive: on S3 a WSGI wrapper around the
server's application records each one, on GCS the emulator's own request log.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.servers import free_port

from airflow_deltaberg.core import storage as storage_module
from airflow_deltaberg.core.delta.log.commit import encode_actions, write_commit
from airflow_deltaberg.core.delta.log.log_segment import LOG_DIR
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.errors import CommitConflictError, NotADeltaTableError
from airflow_deltaberg.core.storage import FileEntry, FsspecStorage, Storage, open_storage
from airflow_deltaberg.core.watch import latest_version_after, poll_new_commits

#: Commits 0..HISTORY-1 before the checkpoint; with it, `_last_checkpoint` and the tail, more than two pages
#: of 1000 keys, so the generic listing needs three requests where the tail needs one. (Each page of 1000 keys
#: costs moto about 0.4 s: a longer log makes the test slower, not stronger.)
HISTORY = 2050
CHECKPOINT = HISTORY - 1
TAIL = 3  # commits after the checkpoint, written through our commit writer over HTTP
SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]

    @property
    def is_list(self) -> bool:
        return self.method == "GET" and self.query.get("list-type") == ["2"]


class CapturedRequests:
    """``requests`` in arrival order, and ``capture()``: the ones that arrive inside a ``with`` block."""

    requests: list[Request]

    @contextmanager
    def capture(self) -> Iterator[list[Request]]:
        seen: list[Request] = []
        start = len(self.requests)
        yield seen
        seen.extend(self.requests[start:])


class RequestLog(CapturedRequests):
    """WSGI middleware: every request the S3 server receives, in arrival order."""

    def __init__(self, app: Callable[..., Any]):
        self.app = app
        self.requests: list[Request] = []

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        self.requests.append(Request(environ["REQUEST_METHOD"], unquote(environ.get("PATH_INFO", "")), query))
        return self.app(environ, start_response)


@dataclass
class S3:
    endpoint: str
    log: RequestLog
    options: dict[str, Any] = field(default_factory=dict)

    def storage(self, location: str) -> Storage:
        return open_storage(location, self.options)

    def new_bucket(self) -> str:
        name = f"deltaberg-{uuid.uuid4().hex[:12]}"
        fs = self.storage(f"s3://{name}").fs  # type: ignore[attr-defined]
        fs.call_s3("create_bucket", Bucket=name)
        return name

    @property
    def deltalake_options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    # moto[server], s3fs, gcsfs and gcp-storage-emulator are in the test extra: a missing one is an error.
    from moto import server as moto_server
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.ERROR)  # one log line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        # Count what reaches the server, whoever sends it (s3fs for us, object_store for deltalake). The
        # werkzeug server that ThreadedMotoServer keeps in `_server` calls its `app` for every request.
        log = RequestLog(server._server.app)
        server._server.app = log
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        options = {
            "key": "testing",
            "secret": "testing",
            "endpoint_url": endpoint,
            "client_kwargs": {"region_name": "us-east-1"},
        }
        yield S3(endpoint, log, options)
    finally:
        server.stop()
        werkzeug.setLevel(level)


def open_generic(s3: S3, location: str) -> Storage:
    """A storage without a native lister, as for a filesystem that has none: the reference behaviour."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(storage_module, "_native_lister", lambda fs: None)
        return s3.storage(location)


@pytest.fixture
def generic() -> Callable[[S3, str], Storage]:
    return open_generic


def _lists(requests: list[Request]) -> list[Request]:
    return [r for r in requests if r.is_list]


def _parquet(ids: range) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), sink)
    return sink.getvalue().to_pybytes()


def _add(path: str, size: int, rows: int) -> dict[str, Any]:
    stats = json.dumps({"numRecords": rows})
    return {"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1_700_000_000_000,
                    "dataChange": True, "stats": stats}}


def _remove(path: str) -> dict[str, Any]:
    return {"remove": {"path": path, "deletionTimestamp": 1_700_000_000_000, "dataChange": True}}


@pytest.fixture(scope="module")
def local_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Versions 0..CHECKPOINT on local disk, and deltalake's checkpoint of the last one.

    Version 1 adds ``data/base.parquet`` (ids 0..9, a real file); versions 2.. add and remove files that never
    existed (a log whose old files were vacuumed), so only the base file is live at the checkpoint.
    """
    root = tmp_path_factory.mktemp("history")
    (root / "_delta_log").mkdir()
    (root / "data").mkdir()
    base = _parquet(range(10))
    (root / "data/base.parquet").write_bytes(base)
    for version in range(HISTORY):
        info = {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}}
        if version == 0:
            actions = [
                {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                              "schemaString": json.dumps(SCHEMA), "partitionColumns": [], "configuration": {},
                              "createdTime": 1_700_000_000_000}},
            ]
        elif version == 1:
            actions = [_add("data/base.parquet", len(base), 10)]
        else:
            actions = [_remove(f"data/churn-{version - 1}.parquet")] if version > 2 else []
            if version < CHECKPOINT:
                actions.append(_add(f"data/churn-{version}.parquet", 100, 1))
        (root / f"_delta_log/{version:020d}.json").write_bytes(encode_actions([info, *actions]))
    deltalake.DeltaTable(str(root)).create_checkpoint()
    assert (root / f"_delta_log/{CHECKPOINT:020d}.checkpoint.parquet").is_file()
    return root


def _upload_long_log(s3: S3, local: Path, location: str) -> Storage:
    """The local history on S3, then TAIL commits written by our commit writer on S3, each adding a real file.

    The commit files 0..CHECKPOINT go straight into moto's in-process backend: as PUTs through s3fs they would
    take ~12 ms each on moto (25 s). They are only ever listed here, and listing is what goes over HTTP.
    The checkpoint, `_last_checkpoint`, the data files and the tail are written through our storage.
    """
    storage = s3.storage(location)
    assert isinstance(storage, FsspecStorage)
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    bucket, prefix = location.removeprefix("s3://").split("/", 1)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for version in range(HISTORY):
        key = f"{LOG_DIR}/{version:020d}.json"
        backend.put_object(bucket, f"{prefix}/{key}", (local / key).read_bytes())
    for key in (f"{LOG_DIR}/{CHECKPOINT:020d}.checkpoint.parquet", f"{LOG_DIR}/_last_checkpoint",
                "data/base.parquet"):
        storage.write_if_absent(key, (local / key).read_bytes())
    table = DeltaTable(location, storage=storage)
    for n in range(TAIL):
        version = HISTORY + n
        data = _parquet(range(100 * version, 100 * version + 5))
        storage.write_if_absent(f"data/tail-{version}.parquet", data)
        written = write_commit(table, [_add(f"data/tail-{version}.parquet", len(data), 5)],
                               read_version=version - 1, operation="WRITE")
        assert written == version
    return storage


@pytest.fixture(scope="module")
def long_log(s3: S3, local_history: Path) -> str:
    location = f"s3://{s3.new_bucket()}/events"
    _upload_long_log(s3, local_history, location)
    return location


def _log_names(first: int, last: int) -> list[str]:
    return [f"{v:020d}.json" for v in range(first, last + 1)]


@dataclass(frozen=True)
class GenericListing:
    entries: list[FileEntry]
    requests: list[Request]


@pytest.fixture(scope="module")
def generic_log(s3: S3, long_log: str) -> GenericListing:
    """The generic listing of the long log, made once: it lists every key whatever ``start_after`` is, and
    its result for a bound is the entries named after it (checked against the generic path itself on the
    small table below), so the tests of bounds compare with this one listing instead of paging again."""
    with s3.log.capture() as requests:
        entries = open_generic(s3, long_log).list_from(LOG_DIR)
    return GenericListing(entries, requests)


def _after(entries: list[FileEntry], start_after: str | None) -> list[FileEntry]:
    return [e for e in entries if start_after is None or e.name > start_after]


# -- the long log --------------------------------------------------------------------------------------------


def test_tail_of_a_long_log_is_one_request(s3: S3, long_log: str, generic_log: GenericListing) -> None:
    start_after = f"{CHECKPOINT:020d}"
    with s3.log.capture() as requests:
        entries = s3.storage(long_log).list_from(LOG_DIR, start_after)
    assert [e.name for e in entries] == [
        f"{CHECKPOINT:020d}.checkpoint.parquet",
        *_log_names(CHECKPOINT, HISTORY + TAIL - 1),
        "_last_checkpoint",
    ]
    assert len(requests) == 1
    (listing,) = requests
    assert listing.is_list
    assert listing.query["prefix"] == ["events/_delta_log/"]
    assert listing.query["delimiter"] == ["/"]
    assert listing.query["start-after"] == [f"events/_delta_log/{start_after}"]
    assert entries == _after(generic_log.entries, start_after)  # keys, sizes, modification times and order
    assert all(e.size > 0 and e.mtime_ms > 1_500_000_000_000 for e in entries)
    # The generic path pages through every key of the log: ceil(2055 / 1000) listings, none with a bound.
    assert len(generic_log.requests) == 3
    assert all(r.is_list and "start-after" not in r.query for r in generic_log.requests)


@pytest.mark.parametrize(("start_after", "pages"), [(None, 3), (f"{999:020d}.json", 2)])
def test_long_log_pages_match_the_generic_listing(
    s3: S3, long_log: str, generic_log: GenericListing, start_after: str | None, pages: int
) -> None:
    with s3.log.capture() as requests:
        entries = s3.storage(long_log).list_from(LOG_DIR, start_after)
    assert entries == _after(generic_log.entries, start_after)
    assert len(requests) == pages
    assert all(r.is_list for r in requests)
    total = HISTORY + 2 + TAIL  # commits, the checkpoint, _last_checkpoint, the tail
    if start_after is None:
        assert len(entries) == total
        assert [e.name for e in entries[:CHECKPOINT]] == _log_names(0, CHECKPOINT - 1)
    else:
        assert entries[0].name == f"{1000:020d}.json"
        assert len(entries) == total - 1000


def test_snapshot_of_the_long_log_lists_once(s3: S3, long_log: str) -> None:
    table = DeltaTable(long_log, s3.options)
    with s3.log.capture() as requests:
        snapshot = table.snapshot()
    latest = HISTORY + TAIL - 1
    assert snapshot.version == latest
    live = sorted(snapshot.files.column("path").to_pylist())
    tail_files = [f"data/tail-{v}.parquet" for v in range(HISTORY, HISTORY + TAIL)]
    assert live == ["data/base.parquet", *tail_files]
    assert snapshot.num_records == 10 + 5 * TAIL
    # `_last_checkpoint`, one listing from the checkpoint on, the checkpoint and the tail commits: no full listing.
    lists = _lists(requests)
    assert len(lists) == 1
    assert lists[0].query["start-after"] == [f"events/_delta_log/{CHECKPOINT:020d}"]
    read = sorted(r.path.rsplit("/", 1)[-1] for r in requests if r.method == "GET" and not r.is_list)
    assert f"{CHECKPOINT:020d}.json" not in read and f"{CHECKPOINT - 1:020d}.json" not in read

    # deltalake (its own S3 client) reads the same table: same version, files and rows.
    theirs = deltalake.DeltaTable(long_log, storage_options=s3.deltalake_options)
    assert theirs.version() == latest
    assert sorted(theirs.file_uris()) == [f"{long_log}/{p}" for p in live]
    fs, base = table.storage.arrow_filesystem()
    ours = pa.concat_tables(pq.read_table(f"{base}/{p}", filesystem=fs) for p in live)
    expected = sorted([*range(10), *(i for v in range(HISTORY, HISTORY + TAIL) for i in range(100 * v, 100 * v + 5))])
    assert sorted(ours.column("id").to_pylist()) == expected
    assert sorted(theirs.to_pyarrow_table().column("id").to_pylist()) == expected


def test_watch_poll_on_s3_costs_one_read_and_one_listing(s3: S3, local_history: Path) -> None:
    location = f"s3://{s3.new_bucket()}/watched"
    storage = _upload_long_log(s3, local_history, location)
    latest = HISTORY + TAIL - 1
    for start in (0, CHECKPOINT, latest):
        with s3.log.capture() as requests:
            found = poll_new_commits(storage, start_version=start)
        assert (found.from_version, found.to_version, found.count) == (start + 1, latest, latest - start)
        # s3fs reads a file with a HEAD (for its size) and a GET: a fixed cost, whatever the log's length.
        reads, lists = [r for r in requests if not r.is_list], _lists(requests)
        assert {(r.method, r.path.split("/", 2)[-1]) for r in reads} <= {
            ("HEAD", "watched/_delta_log/_last_checkpoint"), ("GET", "watched/_delta_log/_last_checkpoint")
        }
        assert len(reads) <= 2
        assert len(lists) == 1
        assert lists[0].query["start-after"] == [f"watched/_delta_log/{max(start, CHECKPOINT):020d}"]

    # A new commit by another writer (its own storage instance) is seen by the next poll, still one listing.
    other = DeltaTable(location, s3.options)
    data = _parquet(range(7))
    other.storage.write_if_absent("data/late.parquet", data)
    write_commit(other, [_add("data/late.parquet", len(data), 7)], read_version=latest, operation="WRITE")
    with pytest.raises(CommitConflictError):  # S3's conditional put (If-None-Match) through s3fs
        write_commit(DeltaTable(location, s3.options), [], read_version=latest, operation="WRITE")
    with s3.log.capture() as requests:
        found = latest_version_after(storage, latest)
    assert (found.from_version, found.to_version, found.count) == (latest + 1, latest + 1, 1)
    assert len(_lists(requests)) == 1
    assert DeltaTable(location, s3.options).snapshot().num_records == 10 + 5 * TAIL + 7


def test_watch_poll_of_a_missing_table_on_s3(s3: S3, long_log: str) -> None:
    bucket = long_log.removeprefix("s3://").split("/", 1)[0]
    with pytest.raises(NotADeltaTableError) as info:
        poll_new_commits(s3.storage(f"s3://{bucket}/no-such-table"), start_version=3)
    assert "no-such-table" in str(info.value)


# -- what the callers rely on: directories, markers, bounds, missing places ----------------------------------


SMALL_KEYS = [
    "_delta_log/00000000000000000000.json",
    "_delta_log/00000000000000000001.checkpoint.parquet",
    "_delta_log/00000000000000000001.json",
    "_delta_log/00000000000000000002.json",
    "_delta_log/_last_checkpoint",
    "_delta_log/_staged_commits/00000000000000000003.3a0d65cd-4b2f-4d2b-a1c8-01c9e7d3a1b1.json",
    "_delta_log/_sidecars/a.parquet",
    "_delta_log/00000000000000000002/odd-directory.json",  # a "directory" that sorts among the commits
    "names/a.json",
    "names/z.json",
    "names/\u00e9t\u00e9.json",  # sorts after 'z' by code point and by UTF-8 bytes alike
    "names/\u65e5\u672c.json",
    "names/\U0001f600.json",  # outside the BMP: 4 UTF-8 bytes
    "part-0.parquet",
]


@pytest.fixture(scope="module")
def small_table(s3: S3) -> str:
    location = f"s3://{s3.new_bucket()}/t"
    storage = s3.storage(location)
    for n, key in enumerate(SMALL_KEYS):
        storage.write_if_absent(key, key.encode() * (n + 1))
    # Directory markers, as the S3 console's "create folder" makes them: zero-byte objects named "<dir>/".
    fs = storage.fs  # type: ignore[attr-defined]
    bucket = location.removeprefix("s3://").split("/")[0]
    for marker in ("t/_delta_log/", "t/names/"):
        fs.call_s3("put_object", Bucket=bucket, Key=marker, Body=b"")
    return location


#: (directory, start_after, the names listed): what the callers rely on, for every store.
CASES = [
    ("_delta_log", None, ["00000000000000000000.json", "00000000000000000001.checkpoint.parquet",
                          "00000000000000000001.json", "00000000000000000002.json", "_last_checkpoint"]),
    ("/_delta_log/", "00000000000000000001", ["00000000000000000001.checkpoint.parquet",
                                              "00000000000000000001.json", "00000000000000000002.json",
                                              "_last_checkpoint"]),
    ("_delta_log", "00000000000000000001.json", ["00000000000000000002.json", "_last_checkpoint"]),
    ("_delta_log", "00000000000000000002", ["00000000000000000002.json", "_last_checkpoint"]),
    ("_delta_log", "", ["00000000000000000000.json", "00000000000000000001.checkpoint.parquet",
                        "00000000000000000001.json", "00000000000000000002.json", "_last_checkpoint"]),
    ("_delta_log", "_last_checkpoint", []),
    ("_delta_log", "~", []),
    ("_delta_log/_staged_commits", None, ["00000000000000000003.3a0d65cd-4b2f-4d2b-a1c8-01c9e7d3a1b1.json"]),
    ("_delta_log/_sidecars", "a.parquet", []),
    ("names", None, ["a.json", "z.json", "\u00e9t\u00e9.json", "\u65e5\u672c.json", "\U0001f600.json"]),
    ("names", "z.json", ["\u00e9t\u00e9.json", "\u65e5\u672c.json", "\U0001f600.json"]),
    ("names", "\u65e5\u672c.json", ["\U0001f600.json"]),
    ("", None, ["part-0.parquet"]),
    ("", "part-0.parquet", []),
    ("part-0.parquet", None, []),  # a file is no directory
    ("nope", None, []),
    ("nope/deeper", "x", []),
]


@pytest.mark.parametrize(("directory", "start_after", "names"), CASES)
def test_listing_semantics_match_the_generic_listing(
    s3: S3,
    small_table: str,
    generic: Callable[[S3, str], Storage],
    directory: str,
    start_after: str | None,
    names: list[str],
) -> None:
    with s3.log.capture() as requests:
        entries = s3.storage(small_table).list_from(directory, start_after)
    assert [e.name for e in entries] == names
    assert len(requests) == 1
    assert entries == generic(s3, small_table).list_from(directory, start_after)
    sizes = {key: len(key.encode()) * (n + 1) for n, key in enumerate(SMALL_KEYS)}
    assert all(isinstance(e, FileEntry) and e.size == sizes[e.key] for e in entries)
    prefix = directory.strip("/")
    assert all(e.key == (f"{prefix}/{e.name}" if prefix else e.name) for e in entries)


def test_missing_bucket_lists_as_empty(s3: S3, generic: Callable[[S3, str], Storage]) -> None:
    location = f"s3://deltaberg-missing-{uuid.uuid4().hex[:12]}/t"
    with s3.log.capture() as requests:
        assert s3.storage(location).list_from(LOG_DIR, "0") == []
    assert len(requests) == 1
    assert generic(s3, location).list_from(LOG_DIR, "0") == []


def test_bucket_root_lists_its_top_level_files(s3: S3, generic: Callable[[S3, str], Storage]) -> None:
    bucket = s3.new_bucket()
    storage = s3.storage(f"s3://{bucket}")
    for key in ("b.json", "a.json", "sub/c.json"):
        storage.write_if_absent(key, b"{}")
    assert [e.key for e in storage.list_from("")] == ["a.json", "b.json"]
    assert [e.key for e in storage.list_from("", "a.json")] == ["b.json"]
    assert [e.key for e in storage.list_from("sub")] == ["sub/c.json"]
    for directory, start_after in (("", None), ("", "a.json"), ("sub", None)):
        assert storage.list_from(directory, start_after) == generic(s3, f"s3://{bucket}").list_from(
            directory, start_after
        )


def test_directory_bucket_lists_without_start_after() -> None:
    """S3 Express directory buckets (names ending in --x-s3) reject StartAfter. Neither moto nor botocore's path
    to them (a CreateSession first) can be had on loopback, so the requests are recorded by a stand-in client."""
    import s3fs

    calls: list[dict[str, Any]] = []

    class Recorder(s3fs.S3FileSystem):
        def call_s3(self, method: str, **kwargs: Any) -> dict[str, Any]:
            calls.append({"method": method, **kwargs})
            names = ["00000000000000000002.json", "00000000000000000000.json", "00000000000000000001.json"]
            contents = [{"Key": f"t/_delta_log/{n}", "Size": 2, "LastModified": "2026-01-01T00:00:00Z"} for n in names]
            return {"Contents": contents, "IsTruncated": False}

    for bucket, bounded in (("tables--use1-az4--x-s3", False), ("tables", True)):
        calls.clear()
        storage = FsspecStorage(f"s3://{bucket}/t", Recorder(skip_instance_cache=True, anon=True), f"{bucket}/t")
        entries = storage.list_from(LOG_DIR, f"{0:020d}.json")
        assert [e.name for e in entries] == _log_names(1, 2)  # bounded and sorted here, whatever the store did
        (call,) = calls
        assert call["method"] == "list_objects_v2"
        assert (call["Bucket"], call["Prefix"], call["Delimiter"]) == (bucket, "t/_delta_log/", "/")
        assert call.get("StartAfter") == (f"t/_delta_log/{0:020d}.json" if bounded else None)


# -- GCS: the JSON API's objects.list with startOffset -------------------------------------------------------


class EmulatorLog(logging.Handler, CapturedRequests):
    """The requests the GCS emulator answered, from its own request log (one line per request)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.requests: list[Request] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()  # '"GET /storage/v1/b/<bucket>/o?prefix=... HTTP/1.1" 200 -'
        if line.startswith('"'):
            method, target, _ = line[1:].split('"', 1)[0].split(" ", 2)
            path, _, query = target.partition("?")
            self.requests.append(Request(method, unquote(path), parse_qs(query, keep_blank_values=True)))


@dataclass
class GCS:
    log: EmulatorLog
    fs: Any

    def storage(self, location: str, *, native: bool = True) -> Storage:
        # Built on gcsfs.core's filesystem: gcsfs.GCSFileSystem is by default its experimental HNS subclass,
        # which asks a gRPC control API the emulator lacks for each bucket's type and waits a minute for it.
        with pytest.MonkeyPatch.context() as m:
            if not native:
                m.setattr(storage_module, "_native_lister", lambda fs: None)
            return FsspecStorage(location, self.fs, location.removeprefix("gs://"))


@pytest.fixture(scope="module")
def gcs() -> Iterator[GCS]:
    import gcsfs.core as gcsfs_core
    from gcp_storage_emulator import server as emulator

    port = free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket="deltaberg")
    server.start()
    logger = logging.getLogger("gcp_storage_emulator.server")
    log = EmulatorLog()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(log)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        fs = gcsfs_core.GCSFileSystem(endpoint_url=f"http://127.0.0.1:{port}", token="anon", project="test",
                                      skip_instance_cache=True)
        yield GCS(log, fs)
    finally:
        logger.removeHandler(log)
        logger.setLevel(level)
        logger.propagate = propagate
        server.stop()


@pytest.fixture(scope="module")
def gcs_small_table(gcs: GCS) -> str:
    location = "gs://deltaberg/t"
    storage = gcs.storage(location)
    for n, key in enumerate(SMALL_KEYS):
        storage.write_if_absent(key, key.encode() * (n + 1))
    # Directory markers (zero-byte objects named "<dir>/"), which gcsfs's own paths cannot name: its upload call.
    from fsspec.asyn import sync
    from gcsfs.core import simple_upload

    for marker in ("t/_delta_log/", "t/names/"):
        sync(gcs.fs.loop, simple_upload, gcs.fs, "deltaberg", marker, b"")
    assert "t/names/" in {item["name"] for item in gcs.fs.call("GET", "b/{}/o", "deltaberg", json_out=True)["items"]}
    return location


@pytest.mark.parametrize(("directory", "start_after", "names"), CASES)
def test_gcs_listing_semantics_match_the_generic_listing(
    gcs: GCS, gcs_small_table: str, directory: str, start_after: str | None, names: list[str]
) -> None:
    with gcs.log.capture() as requests:
        entries = gcs.storage(gcs_small_table).list_from(directory, start_after)
    assert [e.name for e in entries] == names
    assert entries == gcs.storage(gcs_small_table, native=False).list_from(directory, start_after)
    sizes = {key: len(key.encode()) * (n + 1) for n, key in enumerate(SMALL_KEYS)}
    assert all(e.size == sizes[e.key] and e.mtime_ms > 1_500_000_000_000 for e in entries)
    # One objects.list request with the bound. (The emulator ignores startOffset and answers with the whole
    # directory; the bound is applied again on our side, so the result is right on such a server too.)
    (listing,) = requests
    assert (listing.method, listing.path) == ("GET", "/storage/v1/b/deltaberg/o")
    prefix = f"t/{directory.strip('/')}/" if directory.strip("/") else "t/"
    assert listing.query["prefix"] == [prefix]
    assert listing.query["delimiter"] == ["/"]
    assert listing.query.get("startOffset") == ([prefix + start_after] if start_after else None)


def test_gcs_missing_bucket_lists_as_empty(gcs: GCS) -> None:
    location = f"gs://deltaberg-missing-{uuid.uuid4().hex[:12]}/t"
    assert gcs.storage(location).list_from(LOG_DIR, "0") == []
    assert gcs.storage(location, native=False).list_from(LOG_DIR, "0") == []
