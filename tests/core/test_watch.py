"""core.watch: the newest version after a known one, with a bounded number of storage calls and keys,
checked on a synthetic 100k-commit log and on tables written by deltalake."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltalakeTable
from deltalake import write_deltalake

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import IcebergStartError, NotADeltaTableError, StorageError, VersionNotFoundError
from airflow_deltaberg.core.iceberg import publish
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.storage import FileEntry, LocalStorage, Storage, open_storage
from airflow_deltaberg.core.watch import (
    iceberg_delta_version,
    iceberg_state,
    latest_version_after,
    poll_new_commits,
    unchanged_since,
)

COMMITS = 100_000


class CountingStorage(LocalStorage):
    """A LocalStorage that counts its calls and the keys its listings return."""

    def __init__(self, root: str | Path):
        super().__init__(str(root))
        self.lists = 0
        self.keys_listed = 0
        self.reads: list[str] = []

    def lister(self, directory: str) -> Callable[[str | None], list[FileEntry]]:
        listing = super().lister(directory)  # list_from goes through it too

        def counted(start_after: str | None) -> list[FileEntry]:
            entries = listing(start_after)
            self.lists += 1
            self.keys_listed += len(entries)
            return entries

        return counted

    def read(self, key: str) -> bytes:
        self.reads.append(key)
        return super().read(key)

    def exists(self, key: str) -> bool:
        self.reads.append(f"exists:{key}")
        return super().exists(key)

    @property
    def calls(self) -> int:
        return self.lists + len(self.reads)


def touch(path: Path, data: bytes = b"") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def long_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A table whose `_delta_log` holds 100k commit files (empty: only names are read), checksums and
    checkpoints at some versions, a staged commit and a delta-rs temporary commit file.

    Written to /dev/shm when there is one: creating 100k files on a busy disk takes half a minute."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        base = Path(tempfile.mkdtemp(prefix="deltaberg-long-log-", dir=shm))
    else:
        base = tmp_path_factory.mktemp("long")
    try:
        yield _write_long_log(base / "table")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _write_long_log(table: Path) -> Path:
    log = table / "_delta_log"
    log.mkdir(parents=True)
    for v in range(COMMITS):
        touch(log / f"{v:020d}.json")
    for v in (50_000, 99_900, 99_990):
        touch(log / f"{v:020d}.checkpoint.parquet")
        touch(log / f"{v:020d}.crc")
    touch(log / f"{99_980:020d}.{99_989:020d}.compacted.json")
    touch(log / f"_commit_{uuid.uuid4()}.json.tmp")
    staged = log / "_staged_commits"
    staged.mkdir()
    touch(staged / f"{COMMITS:020d}.{uuid.uuid4()}.json")
    return table


def test_poll_after_a_recent_version_lists_only_the_tail_of_a_100k_log(long_log: Path) -> None:
    storage = CountingStorage(long_log)
    commits = latest_version_after(storage, COMMITS - 6)
    assert (commits.from_version, commits.to_version, commits.count) == (COMMITS - 5, COMMITS - 1, 5)
    # One listing, one (failed) read of _last_checkpoint; the listing returns the known version's files
    # and the five newer commits, not the 100k older ones.
    assert storage.lists == 1
    assert storage.reads == ["_delta_log/_last_checkpoint"]
    assert storage.keys_listed <= 6 + 2  # the 6 versions plus the delta-rs temp file


def test_poll_when_nothing_is_new_reads_the_same_bounded_listing(long_log: Path) -> None:
    storage = CountingStorage(long_log)
    commits = latest_version_after(storage, COMMITS - 1)
    assert commits.count == 0 and commits.latest_version == COMMITS - 1
    assert storage.calls == 2 and storage.keys_listed <= 2


def test_poll_from_far_behind_starts_at_the_newest_checkpoint(long_log: Path) -> None:
    (long_log / "_delta_log/_last_checkpoint").write_text(json.dumps({"version": 99_990, "size": 1}))
    try:
        for start in (None, 0, 40_000):
            storage = CountingStorage(long_log)
            commits = latest_version_after(storage, start)
            assert commits.to_version == COMMITS - 1
            assert commits.count == COMMITS - (0 if start is None else start + 1)
            assert storage.lists == 1 and storage.reads == ["_delta_log/_last_checkpoint"]
            # From the checkpoint at 99_990: its checkpoint, checksum and commit, 9 commits, the temp file
            # and _last_checkpoint.
            assert storage.keys_listed <= 14
    finally:
        (long_log / "_delta_log/_last_checkpoint").unlink()


def test_the_snapshot_engine_lists_every_key_where_the_poll_lists_a_few(long_log: Path) -> None:
    """The reference: without `_last_checkpoint`, finding the latest version the way a snapshot load does
    lists the whole log."""
    engine = CountingStorage(long_log)
    assert DeltaTable(str(long_log), storage=engine).latest_version() == COMMITS - 1
    poll = CountingStorage(long_log)
    assert latest_version_after(poll, COMMITS - 2).to_version == COMMITS - 1
    assert engine.keys_listed > COMMITS
    assert poll.keys_listed * 10_000 < engine.keys_listed


def test_stale_last_checkpoint_falls_back_to_the_known_version(tmp_path: Path) -> None:
    log = tmp_path / "t/_delta_log"
    log.mkdir(parents=True)
    for v in range(30):
        touch(log / f"{v:020d}.json")
    # Points at a checkpoint that does not exist (a table restored from a copy without it).
    (log / "_last_checkpoint").write_text(json.dumps({"version": 500, "size": 1}))
    storage = CountingStorage(tmp_path / "t")
    assert latest_version_after(storage, 27).to_version == 29
    # From 500: only _last_checkpoint itself (it sorts after the numbered files); from 27: 27..29 and it.
    assert storage.lists == 2 and storage.keys_listed == 1 + 4


def test_checkpoints_and_checksums_sort_before_their_commit(tmp_path: Path) -> None:
    """'<v>.checkpoint.parquet', '<v>.crc', '<a>.<b>.compacted.json' of the known version and of newer ones:
    only published '<v>.json' and checkpoints prove a version."""
    log = tmp_path / "t/_delta_log"
    log.mkdir(parents=True)
    for v in range(8):
        touch(log / f"{v:020d}.json")
        touch(log / f"{v:020d}.crc")
    touch(log / f"{5:020d}.checkpoint.parquet")
    touch(log / f"{5:020d}.checkpoint.{uuid.uuid4()}.json")
    touch(log / f"{3:020d}.{6:020d}.compacted.json")
    storage = CountingStorage(tmp_path / "t")
    commits = latest_version_after(storage, 5)
    assert (commits.from_version, commits.to_version, commits.count) == (6, 7, 2)
    assert {e.name for e in storage.list_from("_delta_log", f"{5:020d}")} >= {f"{5:020d}.json", f"{5:020d}.crc"}


def test_staged_and_coordinated_commits_are_not_new_versions(tmp_path: Path) -> None:
    """A '<v>.<uuid>.json' in _delta_log/_staged_commits (catalog-managed) or _delta_log/_commits (coordinated
    commits) may be a failed attempt: only the published '<v>.json' proves version v."""
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64())}))
    for folder in ("_staged_commits", "_commits"):
        (table / "_delta_log" / folder).mkdir()
        touch(table / "_delta_log" / folder / f"{1:020d}.{uuid.uuid4()}.json", b'{"commitInfo":{}}\n')
    assert latest_version_after(open_storage(str(table)), 0).count == 0
    write_deltalake(str(table), pa.table({"id": pa.array([2], pa.int64())}), mode="append")
    assert latest_version_after(open_storage(str(table)), 0).to_version == 1


def test_versions_match_deltalake_as_the_table_grows(tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    write_deltalake(str(table), data)
    storage = open_storage(str(table))
    assert latest_version_after(storage, None).to_dict() == {
        "table": storage.root, "from_version": 0, "to_version": 0, "new_commits": 1,
        "start_version": None, "start_from": "version",
    }
    for _ in range(3):
        write_deltalake(str(table), data, mode="append")
    latest = DeltalakeTable(str(table)).version()
    assert latest == 3
    for start in range(latest + 1):
        commits = latest_version_after(storage, start)
        assert (commits.to_version, commits.count) == (latest, latest - start)


def test_unchanged_since_is_one_listing_from_the_version(long_log: Path) -> None:
    storage = CountingStorage(long_log)
    assert unchanged_since(storage, COMMITS - 1)
    assert (storage.lists, storage.reads) == (1, []) and storage.keys_listed <= 2
    assert not unchanged_since(storage, COMMITS - 6)
    assert storage.keys_listed <= 2 + 6 + 2


def test_unchanged_since_is_false_after_an_append_and_when_the_version_is_gone(tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1], pa.int64())})
    write_deltalake(str(table), data)
    write_deltalake(str(table), data, mode="append")
    storage = open_storage(str(table))
    assert unchanged_since(storage, 1)
    write_deltalake(str(table), data, mode="append")
    assert not unchanged_since(storage, 1) and unchanged_since(storage, 2)
    shutil.rmtree(table)  # replaced by a shorter table: version 2 is gone, the full poll names the error
    write_deltalake(str(table), data)
    assert not unchanged_since(storage, 2)
    with pytest.raises(VersionNotFoundError):
        latest_version_after(storage, 2)


def test_missing_table_is_a_typed_error_naming_the_log(tmp_path: Path) -> None:
    with pytest.raises(NotADeltaTableError) as info:
        latest_version_after(open_storage(str(tmp_path / "nowhere")), 3, table="s3-like/nowhere")
    assert info.value.table == "s3-like/nowhere"
    assert info.value.file == str(tmp_path / "nowhere/_delta_log")
    assert "deleted" in str(info.value)


def test_a_table_that_disappears_is_a_typed_error(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64())}))
    storage = open_storage(str(table))
    assert latest_version_after(storage, 0).count == 0
    shutil.rmtree(table)
    with pytest.raises(NotADeltaTableError, match="no commit or checkpoint"):
        latest_version_after(storage, 0)
    # Emptied but not removed: the same.
    (table / "_delta_log").mkdir(parents=True)
    touch(table / "_delta_log/_last_checkpoint", b'{"version": 0}')
    with pytest.raises(NotADeltaTableError):
        latest_version_after(storage, 0)


def test_a_start_version_the_table_never_reached_is_a_typed_error(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64())}))
    with pytest.raises(VersionNotFoundError) as info:
        latest_version_after(open_storage(str(table)), 7)
    assert info.value.version == 7
    assert "latest version 0" in str(info.value) and str(table) in str(info.value)


def test_unreadable_log_is_a_storage_error_naming_the_table(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": pa.array([1], pa.int64())}))
    log = table / "_delta_log"
    storage = open_storage(str(table))
    assert latest_version_after(storage, 0).count == 0
    if os.geteuid() != 0:
        log.chmod(0)
    else:
        # root reads any directory: a symlink loop makes the listing fail for everyone (ELOOP).
        shutil.rmtree(log)
        log.symlink_to(log)
    try:
        with pytest.raises(StorageError) as info:
            latest_version_after(storage, 0)
        assert info.value.retryable
        assert str(table) in str(info.value) and "_delta_log" in str(info.value)
    finally:
        if not log.is_symlink():
            log.chmod(0o755)


def test_iceberg_start_follows_the_converted_version(tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    write_deltalake(str(table), data)
    write_deltalake(str(table), data, mode="append")
    storage = open_storage(str(table))
    assert iceberg_delta_version(storage) == (None, None)
    first = poll_new_commits(storage, start_from="iceberg")
    assert (first.start_version, first.from_version, first.to_version) == (None, 0, 1)

    result = convert(str(table))
    version, location = iceberg_delta_version(storage)
    assert version == result.delta_version == 1
    assert location == result.metadata_location
    assert poll_new_commits(storage, start_from="iceberg").count == 0

    write_deltalake(str(table), data, mode="append")
    write_deltalake(str(table), data, mode="append")
    after = poll_new_commits(storage, start_from="iceberg")
    assert (after.start_version, after.from_version, after.to_version, after.count) == (1, 2, 3, 2)
    assert convert(str(table)).delta_version == 3
    assert poll_new_commits(storage, start_from="iceberg").count == 0


def test_iceberg_start_reads_the_hinted_metadata_without_listing_the_metadata_folder(tmp_path: Path) -> None:
    """The metadata folder holds every manifest and manifest list too: a poll reads the version hint and the
    metadata file it names; only a hint left behind by a crash makes it list the folder (newest file wins)."""
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1], pa.int64())})
    write_deltalake(str(table), data)
    for _ in range(3):
        write_deltalake(str(table), data, mode="append")
        convert(str(table))
    write_deltalake(str(table), data, mode="append")
    hinted = int((table / publish.VERSION_HINT).read_text())
    assert len(list((table / publish.metadata_key(hinted)).parent.iterdir())) > 10

    storage = CountingStorage(table)
    commits = poll_new_commits(storage, start_from="iceberg")
    assert (commits.start_version, commits.to_version) == (3, 4)
    assert storage.reads == [
        publish.VERSION_HINT,
        f"exists:{publish.metadata_key(hinted)}",
        f"exists:{publish.metadata_key(hinted + 1)}",
        publish.metadata_key(hinted),
        "_delta_log/_last_checkpoint",
    ]
    assert storage.lists == 1 and storage.keys_listed <= 3  # the Delta log from version 3 only

    # A crash between writing v<N+1>.metadata.json and moving the hint: the newer file wins, found by probing the
    # versions after the hint (publishing is sequential), still without listing the metadata folder.
    converted = convert(str(table))
    (table / publish.VERSION_HINT).write_text(str(hinted))
    storage = CountingStorage(table)
    assert poll_new_commits(storage, start_from="iceberg").start_version == converted.delta_version == 4
    assert storage.lists == 1


def test_iceberg_metadata_newer_than_the_table_is_a_typed_error(tmp_path: Path) -> None:
    """The Iceberg metadata of an earlier table at the same location (deleted and created again)."""
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1], pa.int64())})
    for mode in ("error", "append", "append"):
        write_deltalake(str(table), data, mode=mode)
    convert(str(table))
    shutil.rmtree(table / "_delta_log")
    write_deltalake(str(table), data, mode="overwrite")
    with pytest.raises(VersionNotFoundError, match="delta-version of the Iceberg metadata"):
        poll_new_commits(open_storage(str(table)), start_from="iceberg")


def test_iceberg_metadata_without_delta_version_is_a_typed_error(tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1], pa.int64())})
    write_deltalake(str(table), data)
    result = convert(str(table))
    path = Path(result.metadata_location.removeprefix("file://"))
    metadata = json.loads(path.read_text())
    metadata["properties"].pop("delta-version")
    for snapshot in metadata["snapshots"]:
        snapshot["summary"].pop("delta-version")
    path.write_text(json.dumps(metadata))
    with pytest.raises(IcebergStartError, match="no delta-version") as info:
        poll_new_commits(open_storage(str(table)), start_from="iceberg")
    assert info.value.file == result.metadata_location


def test_negative_start_version_is_refused(tmp_path: Path) -> None:
    storage: Storage = open_storage(str(tmp_path))
    with pytest.raises(ValueError):
        latest_version_after(storage, -1)


def test_iceberg_metadata_that_is_not_json_is_a_typed_error(tmp_path: Path) -> None:
    # pyiceberg's parser raises its own ValidationError, not pydantic's: a watcher catches only typed errors.
    metadata = tmp_path / "_iceberg" / "metadata"
    metadata.mkdir(parents=True)
    (metadata / "v1.metadata.json").write_text("{not json")
    (metadata / "version-hint.text").write_text("1")
    with pytest.raises(IcebergStartError, match="cannot be parsed"):
        iceberg_state(LocalStorage(str(tmp_path)))
