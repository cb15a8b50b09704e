"""The storage interface on local disk (plain path and file:// URI) and on fsspec's memory filesystem."""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_deltaberg.core.errors import FileAlreadyExistsError, StorageConfigError, StorageError
from airflow_deltaberg.core.storage import FileEntry, FsspecStorage, LocalStorage, Storage, open_storage

KINDS = ["local-path", "local-uri", "memory"]


@pytest.fixture
def memory_root() -> Iterator[str]:
    root = f"memory://deltaberg-test-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    path = fs._strip_protocol(root)
    if fs.exists(path):
        fs.rm(path, recursive=True)
    assert not [p for p in fs.store if p.startswith(path + "/")]


@pytest.fixture(params=KINDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path, memory_root: str) -> Storage:
    if request.param == "local-path":
        return open_storage(str(tmp_path / "table"))
    if request.param == "local-uri":
        return open_storage((tmp_path / "table").as_uri())
    return open_storage(memory_root)


def _local_files(storage: Storage) -> list[str]:
    """Every file below a local storage root, relative and '/'-separated (temp files included)."""
    assert isinstance(storage, LocalStorage)
    root = Path(storage.root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _populate(storage: Storage) -> None:
    for key in (
        "_delta_log/00000000000000000000.json",
        "_delta_log/00000000000000000002.json",
        "_delta_log/00000000000000000001.json",
        "_delta_log/00000000000000000001.checkpoint.parquet",
        "_delta_log/_last_checkpoint",
        "_delta_log/_sidecars/a.parquet",
        "part-0.parquet",
    ):
        storage.write_if_absent(key, key.encode())


# -- open_storage ---------------------------------------------------------------------------------


def test_open_storage_plain_path(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "t") + "/")
    assert isinstance(storage, LocalStorage)
    assert storage.root == str(tmp_path / "t")
    assert storage.uri("_delta_log/x.json") == f"{tmp_path}/t/_delta_log/x.json"
    assert storage.uri("") == str(tmp_path / "t")
    assert repr(storage) == f"LocalStorage({str(tmp_path / 't')!r})"


def test_open_storage_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage = open_storage("rel/table")
    assert isinstance(storage, LocalStorage)
    assert storage.root == str(tmp_path / "rel" / "table")


def test_open_storage_file_uri(tmp_path: Path) -> None:
    storage = open_storage((tmp_path / "t").as_uri())
    assert isinstance(storage, LocalStorage)
    assert storage.root == str(tmp_path / "t")


def test_open_storage_memory(memory_root: str) -> None:
    storage = open_storage(memory_root + "/")
    assert isinstance(storage, FsspecStorage)
    assert storage.root == memory_root
    assert storage.uri("_delta_log/x.json") == f"{memory_root}/_delta_log/x.json"
    assert "memory" in storage.fs.protocol


def test_open_storage_unknown_scheme() -> None:
    with pytest.raises(StorageError) as info:
        open_storage("nosuchfs://bucket/table")
    message = str(info.value)
    assert "nosuchfs://" in message
    assert "install" not in message
    # A misconfigured location cannot be fixed by retrying.
    assert isinstance(info.value, StorageConfigError)
    assert not info.value.retryable


@pytest.mark.parametrize(
    ("location", "package", "extra"),
    [
        ("s3://bucket/table", "s3fs", "s3"),
        ("s3a://bucket/table", "s3fs", "s3"),
        ("gs://bucket/table", "gcsfs", "gcs"),
        ("gcs://bucket/table", "gcsfs", "gcs"),
        ("abfss://container@account.dfs.core.windows.net/table", "adlfs", "abfs"),
        ("abfs://container/table", "adlfs", "abfs"),
    ],
)
def test_open_storage_names_the_extra_when_package_missing(location: str, package: str, extra: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The test extra installs every one of these packages: make this one missing (an import of a None entry of
    # sys.modules raises ImportError), and forget the filesystem class fsspec may have registered from it.
    monkeypatch.setitem(sys.modules, package, None)
    scheme = location.split("://", 1)[0]
    monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, scheme, raising=False)
    with pytest.raises(StorageError) as info:
        open_storage(location)
    message = str(info.value)
    assert f"airflow-deltaberg[{extra}]" in message
    assert location in message


# -- list_from ------------------------------------------------------------------------------------


def test_list_from_sorted_direct_children_only(storage: Storage) -> None:
    _populate(storage)
    entries = storage.list_from("_delta_log")
    assert [e.key for e in entries] == [
        "_delta_log/00000000000000000000.json",
        "_delta_log/00000000000000000001.checkpoint.parquet",
        "_delta_log/00000000000000000001.json",
        "_delta_log/00000000000000000002.json",
        "_delta_log/_last_checkpoint",
    ]
    assert all(isinstance(e, FileEntry) for e in entries)
    assert entries[0].name == "00000000000000000000.json"
    assert entries[0].size == len(b"_delta_log/00000000000000000000.json")
    assert all(e.mtime_ms > 1_500_000_000_000 for e in entries)


def test_list_from_slashes_are_ignored(storage: Storage) -> None:
    _populate(storage)
    assert storage.list_from("/_delta_log/") == storage.list_from("_delta_log")


def test_list_from_root(storage: Storage) -> None:
    _populate(storage)
    assert [e.key for e in storage.list_from("")] == ["part-0.parquet"]


def test_list_from_nested_directory(storage: Storage) -> None:
    _populate(storage)
    assert [e.key for e in storage.list_from("_delta_log/_sidecars")] == ["_delta_log/_sidecars/a.parquet"]


def test_list_from_start_after(storage: Storage) -> None:
    _populate(storage)
    keys = [e.key for e in storage.list_from("_delta_log", start_after="00000000000000000001.json")]
    assert keys == ["_delta_log/00000000000000000002.json", "_delta_log/_last_checkpoint"]
    # A start_after that is no file name still bounds the listing; the bound itself is exclusive.
    keys = [e.key for e in storage.list_from("_delta_log", start_after="00000000000000000001")]
    assert keys[0] == "_delta_log/00000000000000000001.checkpoint.parquet"
    assert storage.list_from("_delta_log", start_after="_last_checkpoint") == []
    assert storage.list_from("_delta_log", start_after="") == storage.list_from("_delta_log")


def test_list_from_missing_directory(storage: Storage) -> None:
    assert storage.list_from("_delta_log") == []
    assert storage.list_from("") == []
    _populate(storage)
    assert storage.list_from("nope") == []
    assert storage.list_from("nope/deeper", start_after="x") == []


def test_list_from_a_file_is_empty(storage: Storage) -> None:
    _populate(storage)
    assert storage.list_from("part-0.parquet") == []


# -- read / exists / delete -----------------------------------------------------------------------


def test_read_exists_delete(storage: Storage) -> None:
    assert not storage.exists("a/b.json")
    with pytest.raises(FileNotFoundError):
        storage.read("a/b.json")
    storage.write_if_absent("a/b.json", b"\x00hello\n")
    assert storage.exists("a/b.json")
    assert not storage.exists("a")  # a directory is no file
    assert storage.read("a/b.json") == b"\x00hello\n"
    storage.delete("a/b.json")
    assert not storage.exists("a/b.json")
    with pytest.raises(FileNotFoundError):
        storage.read("a/b.json")
    storage.delete("a/b.json")  # absent: ignored
    storage.delete("never/there.json")


def test_delete_many(storage: Storage) -> None:
    for key in ("m/a.avro", "m/b.avro", "m/c.avro"):
        storage.write_if_absent(key, b"x")
    storage.delete_many(["m/a.avro", "m/gone.avro", "m/c.avro"])  # an absent one is ignored, the rest still go
    assert [e.key for e in storage.list_from("m")] == ["m/b.avro"]
    storage.delete_many([])
    assert storage.read("m/b.avro") == b"x"


def test_empty_content(storage: Storage) -> None:
    storage.write_if_absent("empty", b"")
    assert storage.exists("empty")
    assert storage.read("empty") == b""
    assert [e.size for e in storage.list_from("")] == [0]


# -- write_if_absent ------------------------------------------------------------------------------


def test_write_if_absent_creates_parents(storage: Storage) -> None:
    storage.write_if_absent("_delta_log/00000000000000000000.json", b"first")
    assert storage.read("_delta_log/00000000000000000000.json") == b"first"


def test_write_if_absent_second_write_fails_and_keeps_first(storage: Storage) -> None:
    key = "_delta_log/00000000000000000000.json"
    storage.write_if_absent(key, b"first")
    with pytest.raises(FileAlreadyExistsError) as info:
        storage.write_if_absent(key, b"second")
    assert storage.uri(key) in str(info.value)
    assert not info.value.retryable
    assert isinstance(info.value, StorageError)
    assert storage.read(key) == b"first"
    assert [e.key for e in storage.list_from("_delta_log")] == [key]


def test_write_if_absent_of_the_same_bytes_is_written(storage: Storage) -> None:
    """A write that landed but whose response was lost is sent again: its own bytes there count as written."""
    key = "_iceberg/metadata/v1.metadata.json"
    storage.write_if_absent(key, b"ours")
    storage.write_if_absent(key, b"ours")
    with pytest.raises(FileAlreadyExistsError, match="other content"):
        storage.write_if_absent(key, b"ours, and more")
    assert storage.read(key) == b"ours"


@pytest.mark.parametrize("kind", KINDS)
def test_write_if_absent_concurrent_writers_one_wins(kind: str, tmp_path: Path, memory_root: str) -> None:
    location = {
        "local-path": str(tmp_path / "table"),
        "local-uri": (tmp_path / "table").as_uri(),
        "memory": memory_root,
    }[kind]
    writers = 8
    key = "_delta_log/00000000000000000001.json"
    for _round in range(5):
        barrier = threading.Barrier(writers)
        outcomes: dict[int, str] = {}

        def write(n: int, location: str = location, barrier: threading.Barrier = barrier,
                  outcomes: dict[int, str] = outcomes) -> None:
            storage = open_storage(location)  # one instance per writer, as separate workers would have
            barrier.wait()
            try:
                storage.write_if_absent(key, f"writer {n}".encode() * 1000)
                outcomes[n] = "won"
            except FileAlreadyExistsError:
                outcomes[n] = "lost"
            except Exception as exc:  # pragma: no cover - reported by the assertion below
                outcomes[n] = repr(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        winners = [n for n, outcome in outcomes.items() if outcome == "won"]
        assert len(winners) == 1, outcomes
        assert sorted(outcomes.values()).count("lost") == writers - 1, outcomes
        storage = open_storage(location)
        assert storage.read(key) == f"writer {winners[0]}".encode() * 1000
        assert [e.key for e in storage.list_from("_delta_log")] == [key]
        if isinstance(storage, LocalStorage):
            assert _local_files(storage) == [key]
        storage.delete(key)


def test_write_if_absent_leaves_no_temp_files_on_local_disk(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "table"))
    storage.write_if_absent("_delta_log/00000000000000000000.json", b"a")
    with pytest.raises(FileAlreadyExistsError):
        storage.write_if_absent("_delta_log/00000000000000000000.json", b"b")
    storage.write_if_absent("top", b"c")
    assert _local_files(storage) == ["_delta_log/00000000000000000000.json", "top"]


# -- replace --------------------------------------------------------------------------------------


def test_replace_creates_and_overwrites(storage: Storage) -> None:
    storage.replace("_delta_log/_last_checkpoint", b'{"version": 1}')
    assert storage.read("_delta_log/_last_checkpoint") == b'{"version": 1}'
    storage.replace("_delta_log/_last_checkpoint", b'{"version": 10, "size": 3}')
    assert storage.read("_delta_log/_last_checkpoint") == b'{"version": 10, "size": 3}'
    storage.replace("_delta_log/_last_checkpoint", b"")
    assert storage.read("_delta_log/_last_checkpoint") == b""
    assert [e.key for e in storage.list_from("_delta_log")] == ["_delta_log/_last_checkpoint"]
    # A replaced key is there for write_if_absent too.
    with pytest.raises(FileAlreadyExistsError):
        storage.write_if_absent("_delta_log/_last_checkpoint", b"x")


def test_replace_leaves_no_temp_files_on_local_disk(tmp_path: Path) -> None:
    storage = open_storage((tmp_path / "table").as_uri())
    for n in range(3):
        storage.replace("_delta_log/_last_checkpoint", str(n).encode())
    storage.replace("root-pointer", b"x")
    assert _local_files(storage) == ["_delta_log/_last_checkpoint", "root-pointer"]


def test_replace_is_atomic_for_concurrent_readers(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "table"))
    old, new = b"o" * 200_000, b"n" * 300_000
    storage.replace("pointer", old)
    stop = threading.Event()
    seen: set[bytes] = set()

    def reader() -> None:
        while not stop.is_set():
            seen.add(storage.read("pointer"))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for n in range(30):
            storage.replace("pointer", new if n % 2 == 0 else old)
    finally:
        stop.set()
        t.join()
    assert seen <= {old, new}
    assert _local_files(storage) == ["pointer"]


def test_replace_failure_cleans_up(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "table"))
    os.makedirs(tmp_path / "table" / "adir" / "inner")
    with pytest.raises(StorageError, match="adir"):  # typed, naming the file (it was a bare OSError)
        storage.replace("adir", b"cannot replace a non-empty directory")
    assert not [p for p in os.listdir(tmp_path / "table") if p.endswith(".tmp")]


# -- arrow ----------------------------------------------------------------------------------------


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_arrow_filesystem_reads_parquet_written_by_storage(storage: Storage) -> None:
    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", None]})
    storage.write_if_absent("data/part-0.parquet", _parquet_bytes(table))

    fs, base = storage.arrow_filesystem()
    assert isinstance(fs, pafs.FileSystem)
    assert pq.read_table(f"{base.rstrip('/')}/data/part-0.parquet", filesystem=fs).equals(table)

    fs, path = storage.arrow_path("data/part-0.parquet")
    assert path == f"{base.rstrip('/')}/data/part-0.parquet"
    assert fs.get_file_info(path).size == storage.list_from("data")[0].size
    assert pq.read_table(path, filesystem=fs).equals(table)
    assert pq.ParquetFile(fs.open_input_file(path)).metadata.num_rows == 3


def test_arrow_filesystem_write_then_storage_reads(storage: Storage) -> None:
    table = pa.table({"x": pa.array([1.5, None], pa.float64())})
    fs, path = storage.arrow_path("data/written-by-arrow.parquet")
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table, path, filesystem=fs)
    assert storage.exists("data/written-by-arrow.parquet")
    assert [e.key for e in storage.list_from("data")] == ["data/written-by-arrow.parquet"]
    assert pq.read_table(pa.BufferReader(storage.read("data/written-by-arrow.parquet"))).equals(table)
