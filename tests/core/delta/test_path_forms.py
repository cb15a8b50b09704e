"""Data paths that name no data file (issue 11, classes C1 and A8 of the fuzz catalogue).

- C1: an empty path, or one that resolves to the table root or to a folder (`.`, `a/..`, `x/`): converted, it
  became an Iceberg entry naming the table folder. Refused (CorruptLogError) by snapshot loads and commit ranges.
- A8: a `?query` or `#fragment` in a path. Delta on Spark drops the query (Hadoop's Path(parent, child) keeps
  scheme, authority, path and fragment of the resolved URI) and opens the URI's path only; deltalake strips
  both; our Iceberg entry kept them (an unreadable table). A writer percent-encodes a '?' or '#' of a file name
  (`%3F`, `%23`), so a raw one is refused rather than guessed at (core/delta/paths.py says why).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.table import StaticTable
from support.delta_log import append_commit, commit_file

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError, PathOutsideTableError
from airflow_deltaberg.core.iceberg.convert import convert


def make_table(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    return root


def data_file(root: Path) -> Path:
    return next(root.glob("part-*.parquet"))


def add_action(path: str, size: int) -> dict[str, Any]:
    return {"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": True,
                    "stats": json.dumps({"numRecords": 3})}}


def commit_raw(root: Path, actions: list[dict[str, Any]]) -> Path:
    """The next commit, ``actions`` only (no commitInfo); returns its file."""
    return commit_file(root, append_commit(root, actions, operation=None))


def assert_refused(root: Path, commit: Path, path: str, words: str,
                   capsys: pytest.CaptureFixture[str]) -> CorruptLogError:
    version = int(commit.name.split(".")[0])
    errors = []
    for load in (lambda: DeltaTable(str(root)).snapshot(), lambda: DeltaTable(str(root)).commits(version)):
        with pytest.raises(CorruptLogError) as info:
            load()
        error = info.value
        assert (error.table, error.version) == (str(root), version)
        assert error.file is not None and error.file.endswith(commit.name)
        assert repr(path) in str(error) and words in str(error), str(error)
        errors.append(error)
    assert main(["convert", str(root)]) == 2
    err = capsys.readouterr().err
    assert "CorruptLogError: " in err and words in err, err
    assert not (root / "_iceberg").exists()
    return errors[0]


# -- C1: paths that name the table root or a folder -------------------------------------------------------------


@pytest.mark.parametrize("path", ["", ".", "./", "a/..", "a/b/../..", "%2E", "part=1/", "./part=1/."])
def test_a_path_naming_the_table_root_or_a_folder_is_refused(
    tmp_path: Path, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    commit = commit_raw(root, [add_action(path, 100)])
    error = assert_refused(root, commit, path, "not a data file", capsys)
    assert not isinstance(error, PathOutsideTableError)  # it stays inside the table


def test_an_absolute_path_naming_a_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_table(tmp_path)
    path = root.as_uri() + "/"
    commit = commit_raw(root, [add_action(path, 100)])
    assert_refused(root, commit, path, "not a data file", capsys)


def test_a_remove_of_an_empty_path_is_refused_too(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    commit_raw(root, [{"remove": {"path": "", "deletionTimestamp": 1, "dataChange": True}}])
    with pytest.raises(CorruptLogError, match="remove action's path '' .*not a data file"):
        DeltaTable(str(root)).snapshot()


def test_names_that_only_look_like_dot_segments_stay_allowed(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    source = data_file(root)
    names = ["..part.parquet", "part..parquet", "part.parquet.", ".part.parquet"]
    for name in names:
        shutil.copyfile(source, root / name)
    commit_raw(root, [add_action(name, source.stat().st_size) for name in names])
    assert DeltaTable(str(root)).snapshot().num_files == 5


# -- A8: query and fragment ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["?x=1", "#frag", "?", "#"])
def test_a_query_or_fragment_in_a_relative_path_is_refused(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    source = data_file(root)
    path = source.name + suffix
    commit = commit_raw(root, [{"remove": {"path": source.name, "deletionTimestamp": 1, "dataChange": True}},
                               add_action(path, source.stat().st_size)])
    # deltalake strips the suffix and reads the file: the rows do not depend on it, but which file a reader opens
    # and which remove matches the add would; we refuse instead of guessing.
    assert assert_refused(root, commit, path, "query or fragment", capsys)


def test_a_query_in_an_absolute_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_table(tmp_path)
    source = data_file(root)
    path = source.as_uri() + "?versionId=3"
    commit = commit_raw(root, [add_action(path, source.stat().st_size)])
    assert_refused(root, commit, path, "query or fragment", capsys)


def test_a_percent_encoded_question_mark_names_a_file_with_one(tmp_path: Path) -> None:
    """The allowed spelling: `%3F` and `%23` are a '?' and a '#' of the file name."""
    root = make_table(tmp_path)
    source = data_file(root)
    shutil.copyfile(source, root / "odd?name#1.parquet")
    commit_raw(root, [{"remove": {"path": source.name, "deletionTimestamp": 1, "dataChange": True}},
                      add_action("odd%3Fname%231.parquet", source.stat().st_size)])
    peer = QueryBuilder().register("t", deltalake.DeltaTable(str(root))).execute("select id from t").read_all()
    assert sorted(pa.table(peer).column("id").to_pylist()) == [1, 2, 3]

    result = convert(str(root))
    scanned = StaticTable.from_metadata(result.metadata_location).scan().to_arrow()
    assert sorted(scanned.column("id").to_pylist()) == [1, 2, 3]
