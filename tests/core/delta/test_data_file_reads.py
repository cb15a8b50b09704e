"""Reading the data files a log names (issue 11, F2): every error of validate's data checks and of the converter's
footer reads names the table and the file, and a data file outside the table (an absolute path, as a shallow
clone logs it) is opened with the table's storage options, so that it is read with the same credentials.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from fsspec.implementations.memory import MemoryFileSystem

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.errors import DeltabergError, DeltaError, MissingDataFileError, StorageConfigError
from airflow_deltaberg.core.iceberg.convert import convert

OPTIONS = {"region": "eu-test-1", "profile": "deltaberg-tests"}


class RecordingFileSystem(MemoryFileSystem):
    """An in-memory store that records the storage options of every instance made."""

    protocol = "recordfs"
    cachable = False
    opened_with: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, *args: Any, **storage_options: Any):
        super().__init__(*args, **storage_options)
        RecordingFileSystem.opened_with.append(dict(storage_options))


fsspec.register_implementation("recordfs", RecordingFileSystem, clobber=True)


def table_with_one_file(path: Path) -> dict[str, Any]:
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    return read_add(path)


def read_add(path: Path) -> dict[str, Any]:
    commit = path / "_delta_log" / f"{0:020d}.json"
    (add,) = [json.loads(line)["add"] for line in commit.read_text().splitlines() if '"add"' in line]
    return add


def rewrite_add(path: Path, change: Any) -> None:
    commit = path / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in actions:
        if "add" in action:
            change(action["add"])
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_data_file_of_an_unknown_scheme_names_the_table_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table_with_one_file(path)
    foreign = "nosuchscheme://bucket/part-0.parquet"
    rewrite_add(path, lambda add: add.update(path=foreign))
    with pytest.raises(StorageConfigError) as info:
        validate(str(path), "compat-v2", data_checks=True)
    message = str(info.value)
    assert f"table {path}" in message and foreign in message, message


def test_a_missing_data_file_names_the_table_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    add = table_with_one_file(path)
    (path / add["path"]).unlink()
    with pytest.raises(DeltabergError) as info:
        validate(str(path), "compat-v2", data_checks=True)
    assert f"table {path}" in str(info.value) and add["path"] in str(info.value), str(info.value)
    rewrite_add(path, lambda a: a.update(stats=json.dumps({"numRecords": 0})))  # the converter reads the footer
    with pytest.raises(MissingDataFileError) as missing:
        convert(str(path))
    assert isinstance(missing.value, DeltaError) and missing.value.table == str(path)
    assert missing.value.file is not None and missing.value.file.endswith(add["path"])
    assert not (path / "_iceberg").exists()


def test_a_file_that_is_not_parquet_names_the_table_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    add = table_with_one_file(path)
    (path / add["path"]).write_bytes(b"not a parquet file at all")
    with pytest.raises(DeltaError) as info:
        validate(str(path), "compat-v2", data_checks=True)
    assert info.value.table == str(path) and info.value.file is not None and info.value.file.endswith(add["path"])


@pytest.fixture
def shallow_clone(tmp_path: Path) -> tuple[Path, str]:
    """A local table whose only data file lies in another store (recordfs://), named by an absolute path, and
    whose stats lack numRecords (the converter then reads the footer too)."""
    path = tmp_path / "t"
    add = table_with_one_file(path)
    location = f"recordfs://clone-source/{add['path']}"
    RecordingFileSystem().pipe_file(location, (path / add["path"]).read_bytes())
    (path / add["path"]).unlink()
    stats = json.loads(add["stats"])
    stats.pop("numRecords")
    rewrite_add(path, lambda a: a.update(path=location, stats=json.dumps(stats)))
    RecordingFileSystem.opened_with.clear()
    return path, location


def test_validate_reads_a_file_outside_the_table_with_the_tables_storage_options(
        shallow_clone: tuple[Path, str]) -> None:
    path, _ = shallow_clone
    report = validate(str(path), "compat-v2", data_checks=True, storage_options=OPTIONS)
    assert report.files_sampled == 1
    assert RecordingFileSystem.opened_with and all(o == OPTIONS for o in RecordingFileSystem.opened_with)


@pytest.mark.parametrize("verify_stats", [False, True], ids=["footer-count", "verify-stats"])
def test_convert_reads_a_file_outside_the_table_with_the_tables_storage_options(
        shallow_clone: tuple[Path, str], verify_stats: bool) -> None:
    path, _ = shallow_clone
    result = convert(str(path), storage_options=OPTIONS, verify_stats=verify_stats)
    assert result.records == 3
    assert RecordingFileSystem.opened_with and all(o == OPTIONS for o in RecordingFileSystem.opened_with)
