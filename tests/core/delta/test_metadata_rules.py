"""metaData and protocol actions that the protocol makes invalid (issue 11, classes C3, D08, D12 of the fuzz
catalogue, and the unambiguous ones of its `unverified-success` review notes): refused with CorruptLogError naming
the table, version and file, by snapshot loads and commit ranges alike, before a conversion writes anything.

- C3: a partition column listed twice (deltalake: "Duplicate partition column"); the conversion wrote a spec
  that pyiceberg refuses.
- D12: a partition column of a nested type (array, map, struct): Delta partitions by primitive values only;
  the conversion raised KeyError.
- D08: two columns with one physical name, or one column mapping id, under column mapping: the stats parser
  raised ArrowInvalid, and files could not be read by name or id unambiguously.
- protocol: readerFeatures with a reader version below 3, writerFeatures with a writer version below 7, reader
  version 3 without readerFeatures (and writer version 7 without writerFeatures), versions below 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.delta_log import commit_file, read_actions, write_actions

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError, UnsupportedFeatureError

CM_TABLE = "cdf-column-mapping-name-mode"  # name mode, columns id, name, value (ids 1-3), five commits
CM_ID_TABLE = "cdf-column-mapping-id-mode"  # the same in id mode


def edit_action(root: Path, version: int, name: str, change: Callable[[dict[str, Any]], None]) -> Path:
    path = commit_file(root, version)
    actions = read_actions(path)
    change(next(a[name] for a in actions if name in a))
    return write_actions(path, actions)


def edit_schema(root: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """Apply ``change`` to the schema of every metaData action; returns the last commit changed (in force)."""
    def on_metadata(body: dict[str, Any]) -> None:
        schema = json.loads(body["schemaString"])
        change(schema)
        body["schemaString"] = json.dumps(schema)

    commits = sorted(p for p in (root / "_delta_log").glob("*.json") if '"metaData"' in p.read_text())
    for commit in commits:
        edit_action(root, int(commit.name[:20]), "metaData", on_metadata)
    return commits[-1]


def make_table(tmp_path: Path, partition_by: list[str] | None = None) -> Path:
    root = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "p": pa.array(["a", "b"]), "q": pa.array(["x", "y"])})
    write_deltalake(str(root), data, partition_by=partition_by)
    write_deltalake(str(root), data, mode="append", partition_by=partition_by)
    return root


def assert_refused(root: Path, commit: Path, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused by a snapshot load, by the commit range holding the commit, and by the CLI (nothing written)."""
    version = int(commit.name.split(".")[0])
    loads: list[Callable[[], object]] = [lambda: DeltaTable(str(root)).snapshot(version)]
    if version:
        loads.append(lambda: DeltaTable(str(root)).commits(version).metadata_changes())
    for load in loads:
        with pytest.raises(CorruptLogError) as info:
            load()
        error = info.value
        assert (error.table, error.version) == (str(root), version)
        assert error.file is not None and error.file.endswith(commit.name)
        assert words in str(error), str(error)
    for command in ("inspect", "convert"):
        assert main([command, str(root)]) == 2
        err = capsys.readouterr().err
        assert "CorruptLogError: " in err and words in err, err
    assert not (root / "_iceberg").exists()


def append_metadata(root: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """Commit a copy of the table's metaData (changed by ``change``) as the next version."""
    first = [json.loads(line) for line in commit_file(root, 0).read_text().splitlines() if line.strip()]
    body = json.loads(json.dumps(next(a["metaData"] for a in first if "metaData" in a)))
    change(body)
    version = max(int(p.name[:20]) for p in (root / "_delta_log").glob("*.json")) + 1
    path = commit_file(root, version)
    path.write_text(json.dumps({"metaData": body}) + "\n")
    return path


# -- C3, D12: partition columns -----------------------------------------------------------------------------------


def test_a_partition_column_listed_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_table(tmp_path, ["p"])
    commit = append_metadata(root, lambda body: body.update(partitionColumns=["p", "p"]))
    assert_refused(root, commit, "partition column 'p' is listed twice", capsys)


@pytest.mark.parametrize("nested", [
    {"type": "array", "elementType": "string", "containsNull": True},
    {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True},
    {"type": "struct", "fields": [{"name": "x", "type": "string", "nullable": True, "metadata": {}}]},
])
def test_a_partition_column_of_a_nested_type_is_refused(
    tmp_path: Path, nested: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path, ["p"])

    def nested_p(body: dict[str, Any]) -> None:
        schema = json.loads(body["schemaString"])
        next(f for f in schema["fields"] if f["name"] == "p")["type"] = nested
        body["schemaString"] = json.dumps(schema)

    commit = append_metadata(root, nested_p)
    assert_refused(root, commit, f"partition column 'p' has the type {nested['type']}", capsys)


def test_primitive_partition_columns_stay_allowed(tmp_path: Path) -> None:
    root = make_table(tmp_path, ["p", "q"])
    assert DeltaTable(str(root)).snapshot().partition_columns == ("p", "q")


# -- D08: column mapping ------------------------------------------------------------------------------------------


def test_two_columns_with_one_physical_name_are_refused(
    copy_fixture: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_fixture(CM_TABLE)

    def same_physical_name(schema: dict[str, Any]) -> None:
        first, second = schema["fields"][:2]
        second["metadata"]["delta.columnMapping.physicalName"] = first["metadata"]["delta.columnMapping.physicalName"]

    commit = edit_schema(root, same_physical_name)
    assert_refused(root, commit, "columns 'id' and 'name' have the same physical name", capsys)


def test_two_columns_with_one_column_mapping_id_are_refused(
    copy_fixture: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_fixture(CM_ID_TABLE)

    def same_id(schema: dict[str, Any]) -> None:
        schema["fields"][2]["metadata"]["delta.columnMapping.id"] = 1

    commit = edit_schema(root, same_id)
    assert_refused(root, commit, "columns 'id' and 'value' have the same column mapping id 1", capsys)


def test_a_nested_field_reusing_a_top_level_id_is_refused(
    copy_fixture: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_fixture(CM_ID_TABLE)

    def nested_field(schema: dict[str, Any]) -> None:
        schema["fields"].append({"name": "s", "type": {"type": "struct", "fields": [
            {"name": "x", "type": "long", "nullable": True,
             "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-x"}}]},
            "nullable": True, "metadata": {"delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-s"}})

    commit = edit_schema(root, nested_field)
    assert_refused(root, commit, "columns 'name' and 's.x' have the same column mapping id 2", capsys)


def test_duplicate_ids_in_name_mode_are_refused_too(
    copy_fixture: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Name mode reads data files by physical name, but deltalake's kernel refuses the schema all the same
    ("Duplicate column mapping ID"), and the conversion would give two Iceberg fields one id."""
    root = copy_fixture(CM_TABLE)
    commit = edit_schema(root, lambda schema: schema["fields"][2]["metadata"].update({"delta.columnMapping.id": 1}))
    assert_refused(root, commit, "columns 'id' and 'value' have the same column mapping id 1", capsys)


def test_one_physical_name_in_two_structs_stays_allowed(copy_fixture: Callable[[str], Path]) -> None:
    """Unique among the fields of one struct is what readers need (a table that turned column mapping on keeps
    the names of its columns as physical names, nested ones included)."""
    root = copy_fixture(CM_TABLE)

    def two_structs(schema: dict[str, Any]) -> None:
        for i, name in enumerate(("s", "t")):
            schema["fields"].append({"name": name, "type": {"type": "struct", "fields": [
                {"name": "x", "type": "long", "nullable": True,
                 "metadata": {"delta.columnMapping.id": 10 + i, "delta.columnMapping.physicalName": "x"}}]},
                "nullable": True, "metadata": {"delta.columnMapping.id": 4 + i,
                                                "delta.columnMapping.physicalName": name}})

    edit_schema(root, two_structs)
    assert DeltaTable(str(root)).snapshot().schema.names == ["id", "name", "value", "s", "t"]


def test_duplicate_ids_without_column_mapping_are_ignored(tmp_path: Path) -> None:
    """Mode none: the ids and physical names are not used (Delta reads by display name)."""
    root = make_table(tmp_path)

    def stale_ids(schema: dict[str, Any]) -> None:
        for field in schema["fields"]:
            field["metadata"] = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "same"}

    edit_schema(root, stale_ids)
    assert DeltaTable(str(root)).snapshot().num_files == 2


# -- protocol -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "words"), [
    ({"minReaderVersion": 1, "minWriterVersion": 2, "readerFeatures": []}, "readerFeatures"),
    ({"minReaderVersion": 2, "minWriterVersion": 5, "readerFeatures": ["columnMapping"]}, "readerFeatures"),
    ({"minReaderVersion": 1, "minWriterVersion": 4, "writerFeatures": ["appendOnly"]}, "writerFeatures"),
    ({"minReaderVersion": 3, "minWriterVersion": 7, "writerFeatures": []}, "reader version 3 needs readerFeatures"),
    ({"minReaderVersion": 1, "minWriterVersion": 7}, "writer version 7 needs writerFeatures"),
    ({"minReaderVersion": 0, "minWriterVersion": 2}, "minReaderVersion 0"),
    ({"minReaderVersion": -1, "minWriterVersion": 2}, "minReaderVersion -1"),
    ({"minReaderVersion": 1, "minWriterVersion": 0}, "minWriterVersion 0"),
])
def test_an_invalid_protocol_is_refused(
    tmp_path: Path, fields: dict[str, Any], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_table(tmp_path)
    commit = commit_file(root, 2)
    commit.write_text(json.dumps({"protocol": fields}) + "\n")
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 2 and info.value.file is not None and info.value.file.endswith(commit.name)
    assert words in str(info.value), str(info.value)
    with pytest.raises(CorruptLogError, match=words):
        DeltaTable(str(root)).commits(2)
    assert main(["convert", str(root)]) == 2
    assert "CorruptLogError: " in capsys.readouterr().err
    assert DeltaTable(str(root)).snapshot(1).num_files == 2


@pytest.mark.parametrize("fields", [
    {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly"]},
    {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [], "writerFeatures": []},
    {"minReaderVersion": 2, "minWriterVersion": 5},
])
def test_valid_protocols_stay_allowed(tmp_path: Path, fields: dict[str, Any]) -> None:
    root = make_table(tmp_path)
    commit_file(root, 2).write_text(json.dumps({"protocol": fields}) + "\n")
    assert DeltaTable(str(root)).snapshot().protocol.min_writer_version == fields["minWriterVersion"]


def test_an_unknown_reader_feature_is_named_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A feature name holding a newline is shown escaped: the CLI prints one line per error."""
    root = make_table(tmp_path)
    commit_file(root, 2).write_text(json.dumps({"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping\nx"],
        "writerFeatures": ["columnMapping\nx"]}}) + "\n")
    with pytest.raises(UnsupportedFeatureError, match=r"'columnMapping\\nx'") as info:
        DeltaTable(str(root)).snapshot()
    assert "\n" not in str(info.value)
    assert main(["inspect", str(root)]) == 2
    err = capsys.readouterr().err
    assert "UnsupportedFeatureError: " in err and len(err.strip().splitlines()) == 1, err


def test_a_column_mapping_id_written_as_a_string_of_digits_is_read() -> None:
    """deltalake has been seen writing `"delta.columnMapping.id": "1"`: the same id (other strings are refused)."""
    from airflow_deltaberg.core.delta.schema import parse_schema
    from airflow_deltaberg.core.errors import SchemaError

    def schema(cid: object) -> str:
        return json.dumps({"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {
            "delta.columnMapping.id": cid, "delta.columnMapping.physicalName": "col-a"}}]})

    assert parse_schema(schema("7")).field("a").column_mapping_id == 7
    for bad in ("x", "-1", "1.5", True):
        with pytest.raises(SchemaError):
            parse_schema(schema(bad))
