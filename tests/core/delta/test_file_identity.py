"""Which file an add or remove action names (issue 11, classes A2, A5, A9 of the fuzz catalogue).

- A2: a commit holding two file actions of the same type for one path breaks the protocol ("a valid version is
  restricted to contain at most one file action of the same type ... for any path"): snapshot loads and commit
  ranges refuse it, so an incremental conversion no longer lists the file twice.
- A5: one data file live twice (the same path with different deletion vectors) cannot be expressed in Iceberg,
  whose position deletes apply per path, and no Delta writer leaves it: refused as a corrupt log (a remove is
  missing), instead of merging the two copies.
- A9: the same file spelled two ways (`%2D` and `-`): Delta on Spark and deltalake reconcile the paths as
  logged (a remove of one spelling does not remove the add of the other: checked here against deltalake), so we
  do too; when that leaves one data file live under two spellings, it is refused as in A5.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.table import StaticTable
from support.delta_log import commit_file, edit_commit, read_actions

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import convert

DV_TABLE = "table-with-dv-small"  # version 0 adds one file of 10 rows; version 1 gives it a DV (8 rows left)


def kernel_values(root: Path, column: str) -> list[Any]:
    table = QueryBuilder().register("t", deltalake.DeltaTable(str(root))).execute(f"select {column} from t")
    return sorted(pa.table(table.read_all()).column(column).to_pylist())


def iceberg_values(metadata_location: str, column: str) -> list[Any]:
    return sorted(StaticTable.from_metadata(metadata_location).scan().to_arrow().column(column).to_pylist())


def iceberg_files(root: Path) -> dict[str, bytes]:
    folder = root / "_iceberg"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def make_table(tmp_path: Path) -> Path:
    """Two appends of one file each (versions 0 and 1)."""
    root = tmp_path / "t"
    for start in (0, 10):
        write_deltalake(str(root), pa.table({"id": pa.array(range(start, start + 3), pa.int64())}), mode="append")
    return root


def duplicate_add(actions: list[dict[str, Any]]) -> None:
    index = next(i for i, a in enumerate(actions) if "add" in a)
    actions.insert(index + 1, json.loads(json.dumps(actions[index])))


def add_path(actions: list[dict[str, Any]]) -> str:
    return next(a["add"]["path"] for a in actions if "add" in a)


# -- A2: two file actions of one type for one path in one commit -------------------------------------------------


def test_a_commit_adding_a_file_twice_is_refused(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 1)))
    commit = edit_commit(root, 1, duplicate_add)

    for load in (lambda: DeltaTable(str(root)).snapshot(), lambda: DeltaTable(str(root)).commits(1)):
        with pytest.raises(CorruptLogError) as info:
            load()
        error = info.value
        assert (error.table, error.version) == (str(root), 1)
        assert error.file is not None and error.file.endswith(commit.name)
        assert path in str(error) and "two add actions" in str(error), str(error)
    # The earlier version is still readable.
    assert DeltaTable(str(root)).snapshot(0).num_files == 1


def test_a_commit_removing_a_file_twice_is_refused(tmp_path: Path) -> None:
    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 0)))
    remove = {"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True}}
    (commit_file(root, 2)).write_text(json.dumps(remove) + "\n" + json.dumps(remove) + "\n")

    with pytest.raises(CorruptLogError, match="two remove actions") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 2 and path in str(info.value)


def test_an_add_and_a_remove_of_one_logical_file_in_one_commit_are_refused(tmp_path: Path) -> None:
    """The same (path, deletion vector) added and removed by one commit (protocol, Delta Log Entries: "a single log
    entry MUST NOT include more than one action that reconciles with each other"): the actions of a commit have no
    order, and Delta's readers disagree on it (Delta on Spark keeps the add, deltalake the remove; found by the fuzz
    suite, seed 112701 case 2842). Refused, naming the commit."""
    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 1)))
    commit = edit_commit(root, 1, lambda actions: actions.append(
        {"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True}}))
    for load in (lambda: DeltaTable(str(root)).snapshot(), lambda: DeltaTable(str(root)).commits(1)):
        with pytest.raises(CorruptLogError, match="both adds and removes the file") as info:
            load()
        assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(commit.name)
        assert path in str(info.value)
    with pytest.raises(CorruptLogError, match="both adds and removes"):
        convert(str(root))
    assert not (root / "_iceberg").exists()


def test_an_add_and_a_remove_of_one_path_with_other_deletion_vectors_stay_allowed(tmp_path: Path) -> None:
    """A new deletion vector is a remove of the file with its old one (here none) and an add with the new one."""
    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 1)))
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f", "offset": 1, "sizeInBytes": 36,
          "cardinality": 1}

    def new_deletion_vector(actions: list[dict[str, Any]]) -> None:
        add = next(a for a in actions if "add" in a)
        add["add"]["deletionVector"] = dv
        actions.append({"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True}})

    edit_commit(root, 1, new_deletion_vector)
    assert DeltaTable(str(root)).commits(1).actions.file_actions.num_rows == 2


def test_incremental_conversion_over_a_commit_adding_a_file_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    first = convert(str(root), version=0)
    assert iceberg_values(first.metadata_location, "id") == [0, 1, 2]
    edit_commit(root, 1, duplicate_add)
    before = iceberg_files(root)

    assert main(["convert", str(root)]) == 2
    err = capsys.readouterr().err
    assert "CorruptLogError: " in err and "two add actions" in err and str(root) in err, err
    assert iceberg_files(root) == before


# -- A5: one data file live twice ---------------------------------------------------------------------------------


def drop_removes(actions: list[dict[str, Any]]) -> None:
    actions[:] = [a for a in actions if "remove" not in a]


def test_a_data_file_live_with_two_deletion_vectors_is_refused(
    copy_fixture: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_fixture(DV_TABLE)
    path = add_path(read_actions(commit_file(root, 0)))
    commit = edit_commit(root, 1, drop_removes)
    # deltalake returns both copies: the 10 rows without a DV and the 8 rows with it.
    assert len(kernel_values(root, "value")) == 18

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    error = info.value
    assert (error.table, error.version) == (str(root), 1)
    assert error.file is not None and error.file.endswith(commit.name)
    assert path in str(error) and "live twice" in str(error), str(error)

    assert main(["convert", str(root)]) == 2
    err = capsys.readouterr().err
    assert "CorruptLogError: " in err and "live twice" in err, err
    assert not (root / "_iceberg").exists()
    # The version before the second copy still loads.
    assert DeltaTable(str(root)).snapshot(0).num_files == 1


def test_a_checkpoint_holding_a_file_live_twice_is_refused(copy_fixture: Callable[[str], Path]) -> None:
    """The same rule after a checkpoint: its adds are checked as they come (no commit to blame)."""
    root = copy_fixture(DV_TABLE)
    edit_commit(root, 1, drop_removes)
    with pytest.raises(CorruptLogError):
        DeltaTable(str(root)).snapshot()
    # A JSON "checkpoint" is enough here: write the two adds as the V2 JSON checkpoint of version 1.
    adds = [a for v in (0, 1) for a in read_actions(commit_file(root, v)) if "add" in a or "protocol" in a
            or "metaData" in a]
    name = "00000000000000000001.checkpoint.4c4a1e3b-8d6e-4f0e-9a55-3a4b2c1d0e9f.json"
    checkpoint = root / "_delta_log" / name
    checkpoint.write_text("".join(json.dumps(a) + "\n" for a in [
        {"checkpointMetadata": {"version": 1}}, *adds]))
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 1, "size": len(adds) + 1}))
    with pytest.raises(CorruptLogError, match="live twice") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(name)


def test_one_file_live_once_with_a_deletion_vector_still_loads(copy_fixture: Callable[[str], Path]) -> None:
    root = copy_fixture(DV_TABLE)
    snapshot = DeltaTable(str(root)).snapshot()
    assert snapshot.num_files == 1 and snapshot.files.column("deletionVector").null_count == 0


# -- A9: one file spelled two ways --------------------------------------------------------------------------------


def respell(path: str) -> str:
    return path.replace("-", "%2D", 1)  # an unreserved character percent-encoded: the same URI (RFC 3986)


def test_a_file_live_under_two_spellings_is_refused(copy_fixture: Callable[[str], Path]) -> None:
    """deltalake (like Delta on Spark for relative paths) compares the logged strings: commit 1's remove of
    `part-...` misses commit 0's add of `part%2D...`, and it reads the one data file twice (10 rows without the
    deletion vector, 8 with it). Iceberg cannot hold one file twice: refused, naming both spellings."""
    root = copy_fixture(DV_TABLE)
    path = add_path(read_actions(commit_file(root, 0)))

    def percent_encoded(actions: list[dict[str, Any]]) -> None:
        body = next(a["add"] for a in actions if "add" in a)
        body["path"] = respell(body["path"])

    edit_commit(root, 0, percent_encoded)
    assert len(kernel_values(root, "value")) == 18

    with pytest.raises(CorruptLogError, match="live twice") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 1 and path in str(info.value) and respell(path) in str(info.value)
    assert main(["convert", str(root)]) == 2
    assert not (root / "_iceberg").exists()


@pytest.mark.parametrize("spelling", ["percent", "dot_slash", "absolute"])
def test_two_adds_of_one_file_spelled_two_ways_are_refused(tmp_path: Path, spelling: str) -> None:
    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 0)))
    other = {"percent": respell(path), "dot_slash": f"./{path}", "absolute": (root / path).as_uri()}[spelling]

    def add_again(actions: list[dict[str, Any]]) -> None:
        copy = json.loads(json.dumps(next(a for a in actions if "add" in a)))
        copy["add"]["path"] = other
        actions.append(copy)

    edit_commit(root, 1, add_again)
    with pytest.raises(CorruptLogError, match="live twice") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 1 and other in str(info.value)


def test_a_remove_spelled_otherwise_leaves_the_add_live_as_delta_readers_do(tmp_path: Path) -> None:
    """The reconciliation key is the path as logged (Delta on Spark, deltalake): a remove of `part%2D...` does not
    remove the add of `part-...`; the file stays live, once, and the conversion returns deltalake's rows."""
    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 0)))
    commit_file(root, 2).write_text(json.dumps({"remove": {"path": respell(path), "deletionTimestamp": 1,
                                                        "dataChange": True}}) + "\n")
    expected = kernel_values(root, "id")
    assert expected == [0, 1, 2, 10, 11, 12]

    snapshot = DeltaTable(str(root)).snapshot()
    assert snapshot.num_files == 2 and snapshot.tombstones.column("path").to_pylist() == [respell(path)]
    assert iceberg_values(convert(str(root)).metadata_location, "id") == expected


def test_a_checkpoint_spelling_and_a_commit_spelling_are_compared_as_logged(tmp_path: Path) -> None:
    """The checkpoint's add of `part%2D...` is not removed by a commit's remove of `part-...` (as deltalake
    reads it): both agree on the rows."""
    import pyarrow.parquet as pq

    root = make_table(tmp_path)
    path = add_path(read_actions(commit_file(root, 0)))
    deltalake.DeltaTable(str(root)).create_checkpoint()
    checkpoint = root / "_delta_log" / "00000000000000000001.checkpoint.parquet"
    data = pq.read_table(checkpoint)
    add = data.column("add").combine_chunks()
    paths = [respell(p) if p == path else p for p in add.field("path").to_pylist()]
    fields = [pa.array(paths, pa.string()) if f.name == "path" else add.field(i) for i, f in enumerate(add.type)]
    respelled = pa.StructArray.from_arrays(fields, fields=list(add.type), mask=add.is_null())
    pq.write_table(data.set_column(data.schema.get_field_index("add"), data.schema.field("add"), respelled),
                   checkpoint)
    commit_file(root, 2).write_text(json.dumps({"remove": {"path": path, "deletionTimestamp": 1,
                                                        "dataChange": True}}) + "\n")

    assert kernel_values(root, "id") == [0, 1, 2, 10, 11, 12]
    assert DeltaTable(str(root)).snapshot().num_files == 2


# -- keys of a checkpoint and of the commits after it ------------------------------------------------------------


def test_a_commit_without_deletion_vectors_removes_a_file_of_a_checkpoint_with_some(
    copy_fixture: Callable[[str], Path],
) -> None:
    """The checkpoint's keys and the commits' keys are built alike: a checkpoint holding a file with a deletion
    vector, then a commit (without any) removing another file of the checkpoint, removes it (it stayed live)."""
    import shutil

    root = copy_fixture(DV_TABLE)
    part = next(root.glob("part-*.parquet"))
    shutil.copyfile(part, root / "other.parquet")
    commit_file(root, 2).write_text(json.dumps({"add": {
        "path": "other.parquet", "partitionValues": {}, "size": part.stat().st_size, "modificationTime": 1,
        "dataChange": True, "stats": json.dumps({"numRecords": 10})}}) + "\n")
    deltalake.DeltaTable(str(root)).create_checkpoint()
    commit_file(root, 3).write_text(json.dumps({"remove": {"path": "other.parquet", "deletionTimestamp": 2,
                                                        "dataChange": True}}) + "\n")
    expected = kernel_values(root, "value")
    assert len(expected) == 8  # the data file with its deletion vector; other.parquet is removed

    assert DeltaTable(str(root)).snapshot().files.column("path").to_pylist() == [part.name]
    assert iceberg_values(convert(str(root)).metadata_location, "value") == expected
