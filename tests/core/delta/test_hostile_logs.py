"""Hostile or unusual logs (issue 11): where Delta refuses a log we refuse it with a typed error naming the
table, version and file (exit 2 from the CLI, nothing written under _iceberg); where Delta readers accept it we
read exactly what they read.

Covered: two protocol/metaData actions in one version (commit or checkpoint), for snapshots and for commit
ranges; log compactions that disagree with their commits (ignored); a superseded metaData without
schemaString (Databricks Delta Live Tables); add/remove without path, add without size, partial deletion
vectors; checkpoints without an add column or without file actions; schemas nested too deep, invalid
decimals and malformed fields; protocol, metaData, txn, domainMetadata, sidecar and commitInfo fields of the
wrong type.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.table import StaticTable
from support.delta_log import commit_file, edit_commit, read_actions, write_actions

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.log_segment import list_log
from airflow_deltaberg.core.delta.schema import MAX_TYPE_DEPTH
from airflow_deltaberg.core.errors import CorruptLogError, DeltabergError

# -- helpers -----------------------------------------------------------------------------------------------


def action(actions: list[dict[str, Any]], name: str, index: int = 0) -> dict[str, Any]:
    """The body of the ``index``-th ``name`` action."""
    return [a[name] for a in actions if name in a][index]


def rows(ids: list[int], parts: list[str]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array(parts, pa.string())})


def make_table(tmp_path: Path, commits: int = 3) -> Path:
    """A deltalake table partitioned by ``p``: ``commits`` appends of two files each (versions 0..commits-1)."""
    root = tmp_path / "t"
    for i in range(commits):
        write_deltalake(str(root), rows([3 * i, 3 * i + 1, 3 * i + 2], ["a", "b", "a"]), mode="append",
                        partition_by=["p"])
    return root


def peer_paths(root: Path, version: int | None = None) -> list[str]:
    table = deltalake.DeltaTable(str(root), version=version)
    return sorted(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())


def our_paths(root: Path, version: int | None = None) -> list[str]:
    return sorted(DeltaTable(str(root)).snapshot(version).files.column("path").to_pylist())


def peer_rows(root: Path) -> list[dict[str, Any]]:
    table = QueryBuilder().register("t", deltalake.DeltaTable(str(root))).execute("select * from t").read_all()
    return sorted(pa.table(table).to_pylist(), key=repr)


def assert_names(exc: BaseException, root: Path, *, version: int, file: Path, also: tuple[str, ...] = ()) -> None:
    """A DeltabergError whose message and attributes name the table, the version and the file."""
    assert isinstance(exc, DeltabergError), type(exc)
    message = str(exc)
    assert str(root) in message, message
    assert f"version {version}" in message and exc.version == version, message
    assert file.name in message and exc.file is not None and exc.file.endswith(file.name), message
    for text in also:
        assert text in message, message


def iceberg_files(root: Path) -> dict[str, bytes]:
    folder = root / "_iceberg"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_cli_refuses(root: Path, capsys: pytest.CaptureFixture[str], error: str = "CorruptLogError") -> None:
    """`deltaberg inspect` and `deltaberg convert` exit 2 with the typed error; _iceberg is left as it was
    (absent when it was absent)."""
    existed = (root / "_iceberg").exists()
    before = iceberg_files(root) if existed else None
    for command in ("inspect", "convert"):
        assert main([command, str(root)]) == 2
        err = capsys.readouterr().err
        assert f"{error}: " in err and "unexpected" not in err, err
        assert str(root) in err, err
    if existed:
        assert iceberg_files(root) == before
    else:
        assert not (root / "_iceberg").exists()


def converted_rows(root: Path) -> list[dict[str, Any]]:
    hint = (root / "_iceberg" / "metadata" / "version-hint.text").read_text().strip()
    metadata = root / "_iceberg" / "metadata" / f"v{hint}.metadata.json"
    return sorted(StaticTable.from_metadata(str(metadata)).scan().to_arrow().to_pylist(), key=repr)


def convert_first(root: Path, version: int, capsys: pytest.CaptureFixture[str]) -> None:
    """Convert up to ``version``, so that the next conversion is incremental."""
    assert main(["convert", str(root), "--version", str(version)]) == 0
    capsys.readouterr()
    assert (root / "_iceberg").is_dir()


# -- two protocol or metaData actions in one version ---------------------------------------------------------


def _second(kind: str, first: dict[str, Any]) -> dict[str, Any]:
    """Another ``kind`` action that disagrees with ``first``: a column more, or a newer writer version."""
    second = copy.deepcopy(first)
    if kind == "metaData":
        schema = json.loads(second["schemaString"])
        schema["fields"].append({"name": "extra", "type": "string", "nullable": True, "metadata": {}})
        second["schemaString"] = json.dumps(schema)
    else:
        second["minWriterVersion"] = first["minWriterVersion"] + 1
    return second


@pytest.mark.parametrize("kind", ["metaData", "protocol"])
def test_two_protocol_or_metadata_actions_in_one_commit(tmp_path, capsys, kind):
    """The protocol allows one of each per version; with two, the last used to win (and the Iceberg schema
    no longer matched the data). Refused for a snapshot and for a commit range (incremental conversion)."""
    root = make_table(tmp_path)
    convert_first(root, 0, capsys)
    first = action(read_actions(commit_file(root, 0)), kind)
    path = edit_commit(root, 1, lambda actions: actions.extend([{kind: first}, {kind: _second(kind, first)}]))

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=1, file=path, also=(f"{kind} actions",))
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).commits(1)
    assert_names(info.value, root, version=1, file=path, also=(f"{kind} actions",))
    assert our_paths(root, 0) == peer_paths(root, 0)  # the version before still reads
    assert_cli_refuses(root, capsys)  # incremental conversion from version 0 refused, nothing written


@pytest.mark.parametrize("kind", ["metaData", "protocol"])
def test_two_protocol_or_metadata_actions_in_a_parquet_checkpoint(copy_fixture, capsys, kind):
    root = copy_fixture("app-txn-checkpoint")  # checkpoint at version 1, the latest
    path = root / "_delta_log" / "00000000000000000001.checkpoint.parquet"
    checkpoint = pq.read_table(path)
    row = next(i for i, value in enumerate(checkpoint.column(kind).to_pylist()) if value is not None)
    pq.write_table(pa.concat_tables([checkpoint, checkpoint.slice(row, 1)]), path)

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=1, file=path, also=(f"{kind} actions",))
    assert_cli_refuses(root, capsys)


def test_two_metadata_actions_in_a_json_checkpoint(copy_fixture, capsys):
    root = copy_fixture("v2-checkpoints-json-without-sidecars")
    path = sorted((root / "_delta_log").glob("*.checkpoint.*.json"))[-1]
    version = int(path.name.split(".")[0])
    actions = read_actions(path)
    metadata = action(actions, "metaData")
    write_actions(path, [*actions, {"metaData": _second("metaData", metadata)}])

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=version, file=path, also=("metaData actions",))
    assert_cli_refuses(root, capsys)


def test_one_protocol_and_one_metadata_per_commit_in_a_range_still_read(tmp_path):
    """Several versions that each change the metadata once: the commit range holds every one of them."""
    root = make_table(tmp_path)
    write_deltalake(str(root), rows([9], ["c"]).append_column("note", pa.array(["x"])), mode="append",
                    schema_mode="merge")
    commit_range = DeltaTable(str(root)).commits(0)
    metadata = [v for v, name, _ in commit_range.actions.other_actions if name == "metaData"]
    assert metadata == [0, 3]
    assert DeltaTable(str(root)).snapshot().schema.names == ["id", "p", "note"]


# -- log compactions -------------------------------------------------------------------------------------------


def test_a_compaction_that_disagrees_with_its_commits_is_ignored(tmp_path):
    """A compaction of commits 1..3 that holds only commit 1's actions used to replace the commits and drop
    the files of commits 2 and 3. Compactions never change the state now: the commits they cover are read."""
    root = make_table(tmp_path, commits=5)
    expected = {v: our_paths(root, v) for v in range(5)}
    compaction = root / "_delta_log" / f"{1:020d}.{3:020d}.compacted.json"
    compaction.write_bytes(commit_file(root, 1).read_bytes())
    assert [(c.start, c.end) for c in list_log(DeltaTable(str(root)).storage).compactions] == [(1, 3)]

    for version in range(5):
        assert our_paths(root, version) == expected[version] == peer_paths(root, version), f"v{version}"
    assert len(expected[4]) == 10


# -- a superseded metaData without schemaString (Delta Live Tables) ----------------------------------------------


def _dlt_table(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """Version 0's metaData has no schemaString (as Delta Live Tables writes it); version 1 replaces it with a
    complete one. Returns the root and the complete metaData."""
    root = make_table(tmp_path)
    metadata = action(read_actions(commit_file(root, 0)), "metaData")
    edit_commit(root, 0, lambda actions: action(actions, "metaData").pop("schemaString"))
    edit_commit(root, 1, lambda actions: actions.append({"metaData": metadata}))
    return root, metadata


@pytest.mark.parametrize(("field", "value"), [("configuration", "x"), ("configuration", -(10**30)), ("format", ""),
                                             ("format", 2**63), ("partitionColumns", {})])
def test_superseded_metadata_whose_containers_are_of_another_kind_is_refused(tmp_path, capsys, field, value):
    """A metaData that a later one replaces may lack fields (Delta Live Tables), but one whose format or configuration
    is not an object, or partitionColumns not a list, is a line neither Delta on Spark nor delta-kernel reads (fuzz
    seeds 1 and 11)."""
    root, _ = _dlt_table(tmp_path)
    path = edit_commit(root, 0, lambda actions: action(actions, "metaData").update({field: value}))
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=0, file=path, also=(field,))
    assert_cli_refuses(root, capsys)


@pytest.mark.parametrize(("field", "value"), [("schemaString", [1, "x"]), ("configuration", {"a": 1}),
                                             ("partitionColumns", [None])])
def test_superseded_metadata_with_values_delta_on_spark_reads_as_text_is_read(tmp_path, field, value):
    """Delta on Spark reads these lines (a value where a string belongs as its JSON text; fuzz seed 1 cases 4051,
    7339, 1058, 591 read the same through it as through our conversion)."""
    root, _ = _dlt_table(tmp_path)
    edit_commit(root, 0, lambda actions: action(actions, "metaData").update({field: value}))
    assert DeltaTable(str(root)).snapshot().schema.names == ["id", "p"]


def test_superseded_metadata_without_schema_string_is_read(tmp_path, capsys):
    """Delta on Spark (Databricks) reads such a table; deltalake 1.6.6 refuses it (its kernel parses every
    metaData), so the oracle is deltalake on the same table before its log was changed."""
    before = make_table(tmp_path / "before")
    root, metadata = _dlt_table(tmp_path)
    snap = DeltaTable(str(root)).snapshot()
    assert snap.metadata.schema_string == metadata["schemaString"]
    assert snap.schema.names == ["id", "p"]
    assert snap.num_records == 9
    for version in (1, 2):
        assert len(our_paths(root, version)) == len(peer_paths(before, version)) == 2 * (version + 1)
    assert [(v, n) for v, n, _ in DeltaTable(str(root)).commits(0).actions.other_actions if n == "metaData"] == [
        (0, "metaData"), (1, "metaData")]

    assert main(["inspect", str(root)]) == 0
    assert main(["convert", str(root), "--version", "1"]) == 0
    assert main(["convert", str(root)]) == 0  # incremental from version 1
    capsys.readouterr()
    assert converted_rows(root) == peer_rows(before)
    assert len(converted_rows(root)) == 9


def test_reading_the_version_of_an_incomplete_metadata_is_refused(tmp_path, capsys):
    root, _ = _dlt_table(tmp_path)
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot(0)
    assert_names(info.value, root, version=0, file=commit_file(root, 0), also=("schemaString",))
    for command in ("inspect", "convert"):
        assert main([command, str(root), "--version", "0"]) == 2
        err = capsys.readouterr().err
        assert "CorruptLogError: " in err and "schemaString" in err, err
    assert not (root / "_iceberg").exists()


def test_metadata_changes_of_a_commit_range(tmp_path):
    """A commit range gives each commit's metaData parsed, and a typed error for one that cannot be read
    (here a Delta Live Tables style metaData without schemaString in commit 2, superseded in commit 3): the
    incremental conversion must not build a snapshot of version 2 from it."""
    root = make_table(tmp_path)
    metadata = action(read_actions(commit_file(root, 0)), "metaData")
    incomplete = {k: v for k, v in metadata.items() if k != "schemaString"}
    edit_commit(root, 2, lambda actions: actions.append({"metaData": incomplete}))
    write_actions(commit_file(root, 3), [{"commitInfo": {"timestamp": 1}}, {"metaData": metadata}])
    table = DeltaTable(str(root))

    assert table.snapshot().schema.names == ["id", "p"]
    assert list(table.commits(0, 1).metadata_changes()) == [0]
    assert table.commits(3).metadata_changes()[3].schema_string == metadata["schemaString"]
    with pytest.raises(CorruptLogError) as info:
        table.commits(1).metadata_changes()
    assert_names(info.value, root, version=2, file=commit_file(root, 2), also=("schemaString",))


def test_superseded_metadata_that_is_garbage_does_not_break_the_partition_hint(tmp_path):
    """An earlier metaData is used only as a hint for the partition columns; if its schema cannot be read, the
    reader infers them instead of failing (a field of the wrong type is refused: the test above)."""
    root = make_table(tmp_path)
    expected = peer_paths(root)
    metadata = action(read_actions(commit_file(root, 0)), "metaData")
    edit_commit(root, 0, lambda actions: action(actions, "metaData").update(schemaString="[" * 5000))
    edit_commit(root, 1, lambda actions: actions.append({"metaData": metadata}))
    assert our_paths(root) == expected  # deltalake 1.6.6 refuses the table: it parses every metaData
    files = DeltaTable(str(root)).snapshot().files
    assert sorted(pv[0][1] for pv in files.column("partitionValues").to_pylist()) == ["a", "a", "a", "b", "b", "b"]


# -- add and remove actions without their required fields ------------------------------------------------------


def _drop_path(actions: list[dict[str, Any]]) -> None:
    del action(actions, "add")["path"]


def _null_path(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["path"] = None


def _remove_without_path(actions: list[dict[str, Any]]) -> None:
    actions.append({"remove": {"deletionTimestamp": 1, "dataChange": True}})


def _drop_size(actions: list[dict[str, Any]]) -> None:
    del action(actions, "add")["size"]


def _null_partition_values(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["partitionValues"] = None


def _partial_deletion_vector(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["deletionVector"] = {"storageType": "u", "sizeInBytes": 1, "cardinality": 1}


def _nested_tag(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["tags"] = {"a": {"b": 1}}


def _nested_partition_value(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["partitionValues"] = {"p": {"x": 1}}


def _number_partition_value(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["partitionValues"] = {"p": 5}


def _partition_values_not_an_object(actions: list[dict[str, Any]]) -> None:
    action(actions, "add")["partitionValues"] = "p=a"


FILE_ACTION_DEFECTS = {
    "add-without-path": (_drop_path, "path"),
    "add-with-null-path": (_null_path, "path"),
    "remove-without-path": (_remove_without_path, "path"),
    "add-without-size": (_drop_size, "size"),
    "add-with-null-partitionValues": (_null_partition_values, "partitionValues"),
    "partial-deletion-vector": (_partial_deletion_vector, "pathOrInlineDv"),
    "tag-value-an-object": (_nested_tag, "line"),
    "partition-value-an-object": (_nested_partition_value, "line"),
    "partition-value-a-number": (_number_partition_value, "line"),
    "partitionValues-not-an-object": (_partition_values_not_an_object, "line"),
}


def _line_of(path: Path, kind: str, index: int = 0) -> int:
    """1-based line number of the ``index``-th ``kind`` action of a commit."""
    lines = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if kind in json.loads(line)]
    return lines[index]


@pytest.mark.parametrize("defect", list(FILE_ACTION_DEFECTS), ids=list(FILE_ACTION_DEFECTS))
def test_file_action_defects_in_a_snapshot(tmp_path, capsys, defect):
    change, named = FILE_ACTION_DEFECTS[defect]
    root = make_table(tmp_path)
    path = edit_commit(root, 1, change)
    kind = "remove" if defect.startswith("remove") else "add"

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=1, file=path, also=(named, f"line {_line_of(path, kind)}"))
    assert our_paths(root, 0) == peer_paths(root, 0)
    assert_cli_refuses(root, capsys)


@pytest.mark.parametrize("defect", list(FILE_ACTION_DEFECTS), ids=list(FILE_ACTION_DEFECTS))
def test_file_action_defects_in_a_commit_range(tmp_path, capsys, defect):
    """A commit range is read without knowing the partition columns (no metaData in it): the same errors."""
    change, named = FILE_ACTION_DEFECTS[defect]
    root = make_table(tmp_path)
    convert_first(root, 1, capsys)
    path = edit_commit(root, 2, change)
    kind = "remove" if defect.startswith("remove") else "add"

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).commits(2)
    assert_names(info.value, root, version=2, file=path, also=(named, f"line {_line_of(path, kind)}"))
    assert_cli_refuses(root, capsys)


def test_add_without_path_in_a_parquet_checkpoint(copy_fixture, capsys):
    root = copy_fixture("app-txn-checkpoint")
    path = root / "_delta_log" / "00000000000000000001.checkpoint.parquet"
    checkpoint = pq.read_table(path)
    add = checkpoint.column("add").combine_chunks()
    paths = add.field("path").to_pylist()
    row = next(i for i, p in enumerate(paths) if p is not None)
    paths[row] = None
    fields = [pa.array(paths, pa.string()) if f.name == "path" else add.field(f.name) for f in add.type]
    add = pa.StructArray.from_arrays(fields, fields=list(add.type), mask=add.is_null())
    pq.write_table(checkpoint.set_column(checkpoint.schema.get_field_index("add"), "add", add), path)

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=1, file=path, also=("path",))
    assert_cli_refuses(root, capsys)


def test_file_actions_written_with_blanks(tmp_path):
    """'{ "add": ...}' is an add too (it used to be taken for an unknown action and dropped)."""
    root = make_table(tmp_path)
    expected = peer_paths(root)
    path = commit_file(root, 1)
    path.write_text("".join(line.replace('{"add":', '{ "add" :', 1) + "\n" for line in path.read_text().splitlines()))
    assert path.read_text().count('{ "add" :') == 2
    assert our_paths(root) == expected == peer_paths(root)
    assert our_paths(root, 1) == peer_paths(root, 1)
    assert len(DeltaTable(str(root)).commits(1, 1).actions.file_actions) == 2


# -- checkpoints without add actions -----------------------------------------------------------------------------


def test_checkpoint_of_an_empty_table_then_appends(tmp_path, capsys):
    """A checkpoint with no file actions (an empty table) followed by commits: used to raise IndexError."""
    root = tmp_path / "t"
    deltalake.DeltaTable.create(str(root), schema=pa.schema([("id", pa.int64()), ("p", pa.string())]),
                                partition_by=["p"])
    deltalake.DeltaTable(str(root)).create_checkpoint()
    write_deltalake(str(root), rows([1, 2], ["a", "b"]), mode="append")
    write_deltalake(str(root), rows([3], ["a"]), mode="overwrite", predicate="p = 'a'")
    assert (root / "_delta_log" / f"{0:020d}.checkpoint.parquet").is_file()

    for version in range(3):
        assert our_paths(root, version) == peer_paths(root, version), f"v{version}"
    assert main(["convert", str(root)]) == 0
    capsys.readouterr()
    assert converted_rows(root) == peer_rows(root)


def test_parquet_checkpoint_without_an_add_column(copy_fixture):
    """The protocol: "Any missing column should be treated as null". A checkpoint part without the add
    column lists no live file, as deltalake reads it (used to raise IndexError when commits followed)."""
    root = copy_fixture("parsed-stats")  # checkpoint at 3 (4 live files), commits 4 and 5 add one file each
    path = root / "_delta_log" / "00000000000000000003.checkpoint.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["add"]), path)

    ours = our_paths(root)
    assert ours == peer_paths(root)
    assert len(ours) == 2


# -- schemas ---------------------------------------------------------------------------------------------------


def _with_column(type_json: str) -> Callable[[list[dict[str, Any]]], None]:
    """Add a column of type ``type_json`` (raw JSON text) to the schema of the commit's metaData."""

    def change(actions: list[dict[str, Any]]) -> None:
        metadata = action(actions, "metaData")
        schema = metadata["schemaString"]
        assert schema.endswith("]}")
        column = '{"name":"extra","type":' + type_json + ',"nullable":true,"metadata":{}}'
        metadata["schemaString"] = schema[:-2] + "," + column + "]}"

    return change


def _nested_arrays(depth: int) -> str:
    return '{"type":"array","elementType":' * depth + '"long"' + ',"containsNull":true}' * depth


NESTED = {
    "array": _nested_arrays,
    "struct": lambda depth: ('{"type":"struct","fields":[{"name":"a","type":' * depth + '"long"'
                             + ',"nullable":true,"metadata":{}}]}' * depth),
    "map": lambda depth: ('{"type":"map","keyType":"string","valueType":' * depth + '"long"'
                          + ',"valueContainsNull":true}' * depth),
}


def _with_field(field: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(actions: list[dict[str, Any]]) -> None:
        metadata = action(actions, "metaData")
        schema = json.loads(metadata["schemaString"])
        schema["fields"].append(field)
        metadata["schemaString"] = json.dumps(schema)

    return change


SCHEMA_DEFECTS = {
    "nested-5000-deep": _with_column(_nested_arrays(5000)),
    "arrays-one-level-too-deep": _with_column(NESTED["array"](MAX_TYPE_DEPTH)),
    "structs-one-level-too-deep": _with_column(NESTED["struct"](MAX_TYPE_DEPTH)),
    "maps-one-level-too-deep": _with_column(NESTED["map"](MAX_TYPE_DEPTH)),
    "decimal(99,200)": _with_column('"decimal(99,200)"'),
    "decimal(39,0)": _with_column('"decimal(39,0)"'),
    "decimal(0,0)": _with_column('"decimal(0,0)"'),
    "decimal(5,6)": _with_column('"decimal(5,6)"'),
    "decimal(5,-1)": _with_column('"decimal(5,-1)"'),
    "field-not-an-object": _with_field("extra"),
    "field-name-not-a-string": _with_field({"name": 5, "type": "long", "nullable": True, "metadata": {}}),
    "field-nullable-not-a-boolean": _with_field({"name": "x", "type": "long", "nullable": "no", "metadata": {}}),
    "physical-name-not-a-string": _with_field({"name": "x", "type": "long", "nullable": True,
                                               "metadata": {"delta.columnMapping.physicalName": 5}}),
    "fields-not-a-list": lambda actions: action(actions, "metaData").update(
        schemaString='{"type":"struct","fields":5}'),
    "array-containsNull-not-a-boolean": _with_column('{"type":"array","elementType":"long","containsNull":"yes"}'),
    # Delta on Spark and delta-kernel refuse each of these (fuzz seed 1, read by both).
    "field-without-nullable": _with_field({"name": "x", "type": "long", "metadata": {}}),
    "array-without-containsNull": _with_column('{"type":"array","elementType":"long"}'),
    "map-without-valueContainsNull": _with_column('{"type":"map","keyType":"string","valueType":"long"}'),
    "names-differing-in-case": _with_field({"name": "ID", "type": "long", "nullable": True, "metadata": {}}),
    "nested-names-differing-in-case": _with_column(
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}},'
        '{"name":"A","type":"long","nullable":true,"metadata":{}}]}'),
}


def _map_columns(actions: list[dict[str, Any]], without: str, null: bool = False) -> None:
    """Column mapping mode name on (reader 2, writer 5), every column given an id and a physical name but the last
    column lacking ``without`` (or, with ``null``, holding null for it)."""
    action(actions, "protocol").update(minReaderVersion=2, minWriterVersion=5)
    metadata = action(actions, "metaData")
    schema = json.loads(metadata["schemaString"])
    for column_id, field in enumerate(schema["fields"], 1):
        field["metadata"] = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": field["name"]}
    if null:
        schema["fields"][-1]["metadata"][without] = None
    else:
        del schema["fields"][-1]["metadata"][without]
    metadata["schemaString"] = json.dumps(schema)
    metadata["configuration"].update({"delta.columnMapping.mode": "name",
                                      "delta.columnMapping.maxColumnId": str(len(schema["fields"]))})


@pytest.mark.parametrize("defect", list(SCHEMA_DEFECTS), ids=list(SCHEMA_DEFECTS))
def test_schema_defects(tmp_path, capsys, defect):
    root = make_table(tmp_path)
    path = edit_commit(root, 0, SCHEMA_DEFECTS[defect])
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot().schema  # noqa: B018
    assert_names(info.value, root, version=0, file=path, also=("metaData",))
    assert_cli_refuses(root, capsys)


@pytest.mark.parametrize(("key", "rule", "null"), [
    ("delta.columnMapping.physicalName", "column-mapping.physical-name", False),
    ("delta.columnMapping.physicalName", "column-mapping.physical-name", True),
    ("delta.columnMapping.id", "column-mapping.field-id", False),
])
def test_column_mapping_with_an_unmapped_column(tmp_path, capsys, key, rule, null):
    """A column without its id or physical name (or with null) under column mapping: Delta on Spark and
    delta-kernel refuse the table, convert refuses it, validate reports it under its rule."""
    root = make_table(tmp_path)
    path = edit_commit(root, 0, lambda actions: _map_columns(actions, without=key, null=null))
    assert main(["validate", str(root), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert rule in {v["rule_id"] for v in report["violations"]}, report["violations"]
    assert main(["convert", str(root)]) == 2
    err = capsys.readouterr().err
    assert "CorruptLogError: " in err and key in err and str(path) in err, err
    assert not (root / "_iceberg").exists()


@pytest.mark.parametrize("kind", list(NESTED))
def test_schema_at_the_nesting_limit_is_read_and_converted(tmp_path, capsys, kind):
    """A column nested MAX_TYPE_DEPTH - 1 levels deep below the table's struct (absent from the data files,
    so null) is read, converted, and read back by pyiceberg."""
    root = make_table(tmp_path)
    expected = sorted((r["id"], r["p"], None) for r in peer_rows(root))
    edit_commit(root, 0, _with_column(NESTED[kind](MAX_TYPE_DEPTH - 1)))
    snap = DeltaTable(str(root)).snapshot()
    assert snap.schema.names == ["id", "p", "extra"]
    assert main(["convert", str(root)]) == 0
    capsys.readouterr()
    assert sorted((r["id"], r["p"], r["extra"]) for r in converted_rows(root)) == expected


@pytest.mark.parametrize("decimal", ["decimal(38,38)", "decimal(1,0)", "decimal(38,0)", "decimal(10,2)"])
def test_valid_decimals_are_read(tmp_path, decimal):
    root = make_table(tmp_path)
    edit_commit(root, 0, _with_column(f'"{decimal}"'))
    assert str(DeltaTable(str(root)).snapshot().schema.field("extra").type) == decimal


# -- protocol, metaData, txn, domainMetadata, sidecar and commitInfo fields of the wrong type --------------------


def _set(kind: str, **fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(actions: list[dict[str, Any]]) -> None:
        action(actions, kind).update(fields)

    return change


def _append(kind: str, body: dict[str, Any]) -> Callable[[list[dict[str, Any]]], None]:
    return lambda actions: actions.append({kind: body})


ACTION_DEFECTS = {
    "minReaderVersion-a-string": (0, _set("protocol", minReaderVersion="1")),
    "minReaderVersion-a-float": (0, _set("protocol", minReaderVersion=1.5)),
    "minWriterVersion-a-boolean": (0, _set("protocol", minWriterVersion=True)),
    "readerFeatures-a-string": (0, _set("protocol", minReaderVersion=3, minWriterVersion=7,
                                        readerFeatures="columnMapping", writerFeatures=["columnMapping"])),
    "writerFeatures-holding-a-number": (0, _set("protocol", minReaderVersion=3, minWriterVersion=7,
                                                readerFeatures=[], writerFeatures=[5])),
    "partitionColumns-a-string": (0, _set("metaData", partitionColumns="p")),
    "partitionColumns-an-object": (0, _set("metaData", partitionColumns={"p": 1})),
    "partitionColumns-holding-a-number": (0, _set("metaData", partitionColumns=[1])),
    "configuration-a-list": (0, _set("metaData", configuration=["x"])),
    "configuration-value-an-object": (0, _set("metaData", configuration={"delta.appendOnly": {"x": 1}})),
    "format-a-string": (0, _set("metaData", format="parquet")),
    # Required by the protocol; Delta on Spark (a NullPointerException) and delta-kernel refuse a metaData without.
    "metaData-without-format": (0, lambda actions: action(actions, "metaData").pop("format")),
    "format-without-provider": (0, _set("metaData", format={"options": {}})),
    "metaData-without-configuration": (0, lambda actions: action(actions, "metaData").pop("configuration")),
    "metaData-without-partitionColumns": (0, lambda actions: action(actions, "metaData").pop("partitionColumns")),
    "configuration-null": (0, _set("metaData", configuration=None)),
    "id-a-number": (0, _set("metaData", id=5)),
    "schemaString-an-object": (0, _set("metaData", schemaString={"type": "struct", "fields": []})),
    "txn-version-a-string": (2, _append("txn", {"appId": "x", "version": "5"})),
    "txn-version-a-float": (2, _append("txn", {"appId": "x", "version": 1.5})),
    "txn-appId-a-list": (2, _append("txn", {"appId": ["x"], "version": 1})),
    "txn-without-version": (2, _append("txn", {"appId": "x"})),
    "domainMetadata-domain-a-number": (2, _append("domainMetadata", {"domain": 5, "configuration": "",
                                                                     "removed": False})),
    "domainMetadata-configuration-an-object": (2, _append("domainMetadata", {"domain": "d", "configuration": {},
                                                                             "removed": False})),
    "commitInfo-nested-5000-deep": (2, _append("commitInfo", {"x": "placeholder"})),
}


@pytest.mark.parametrize("defect", list(ACTION_DEFECTS), ids=list(ACTION_DEFECTS))
def test_action_field_defects(tmp_path, capsys, defect):
    version, change = ACTION_DEFECTS[defect]
    root = make_table(tmp_path)
    path = edit_commit(root, version, change)
    if defect == "commitInfo-nested-5000-deep":
        text = path.read_text().replace('{"x": "placeholder"}', '{"x":' + "[" * 5000 + "]" * 5000 + "}")
        path.write_text(text)
    with pytest.raises(CorruptLogError) as info:
        snap = DeltaTable(str(root)).snapshot()
        snap.schema  # noqa: B018
    assert_names(info.value, root, version=version, file=path)
    assert_cli_refuses(root, capsys)


def enable_in_commit_timestamps(root: Path, from_version: str, *, feature: bool = True) -> Path:
    """Version 0 turns in-commit timestamps on from ``from_version`` (the property, and with ``feature`` the
    protocol's writer feature, as Delta on Spark names it); returns version 0's file."""
    def change(actions: list[dict[str, Any]]) -> None:
        action(actions, "metaData")["configuration"].update(
            {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": from_version})
        if feature:
            action(actions, "protocol").update(minWriterVersion=7,
                                               writerFeatures=["appendOnly", "invariants", "inCommitTimestamp"])
    return edit_commit(root, 0, change)


def test_in_commit_timestamp_that_is_not_a_number(tmp_path, capsys):
    root = make_table(tmp_path)
    enable_in_commit_timestamps(root, "2")
    path = edit_commit(root, 2, lambda actions: action(actions, "commitInfo").update(inCommitTimestamp="soon"))
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=2, file=path, also=("inCommitTimestamp",))
    # An incremental conversion reads the commit's timestamp by the same rule.
    table = DeltaTable(str(root))
    before = table.snapshot(1)
    with pytest.raises(CorruptLogError) as info:
        table.commit_timestamp(table.commits(2), 2, before.protocol, before.metadata)
    assert_names(info.value, root, version=2, file=path, also=("inCommitTimestamp",))
    assert_cli_refuses(root, capsys)


def test_in_commit_timestamps_without_the_protocol_feature_are_off(tmp_path):
    """The property alone does not turn in-commit timestamps on (the protocol must support the writer feature):
    commits without one load, with their file times, as delta-kernel reads them."""
    root = make_table(tmp_path)
    enable_in_commit_timestamps(root, "1", feature=False)
    commit = root / "_delta_log" / f"{2:020d}.json"
    os.utime(commit, ns=(4_000_000_000_123_000_000, 4_000_000_000_123_000_000))
    table = DeltaTable(str(root))
    assert table.snapshot().timestamp == 4_000_000_000_123
    assert table.commit_timestamps()[2] == 4_000_000_000_123
    assert our_paths(root) == peer_paths(root)


@pytest.mark.parametrize("value", ["two", "-1", "1.5", ""])
def test_in_commit_timestamp_enablement_version_that_is_not_a_version(tmp_path, capsys, value):
    root = make_table(tmp_path)
    path = enable_in_commit_timestamps(root, value)
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=0, file=path, also=("delta.inCommitTimestampEnablementVersion",))
    assert_cli_refuses(root, capsys)


def test_sidecar_without_path(copy_fixture, capsys):
    root = copy_fixture("v2-checkpoints-json-with-sidecars")
    path = sorted((root / "_delta_log").glob("*.checkpoint.*.json"))[-1]
    version = int(path.name.split(".")[0])
    actions = read_actions(path)
    sidecar = next(a for a in actions if "sidecar" in a)
    del sidecar["sidecar"]["path"]
    write_actions(path, actions)
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert_names(info.value, root, version=version, file=path, also=("sidecar", "path"))
    assert_cli_refuses(root, capsys)
