"""Hostile or unusual logs (issue 11): where Delta refuses a log we refuse it with a typed error naming the
table, version and file (exit 2 from the CLI, nothing written under _iceberg); where Delta readers accept it we
read exactly what they read.

Covered: log compactions that disagree with their commits (ignored); schemas nested too deep, invalid
decimals and malformed fields.
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

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log_segment import list_log
from airflow_deltaberg.core.delta.schema import MAX_TYPE_DEPTH
from airflow_deltaberg.core.errors import CorruptLogError, DeltabergError

# -- helpers -----------------------------------------------------------------------------------------------


def log_file(root: Path, version: int) -> Path:
    return root / "_delta_log" / f"{version:020d}.json"


def read_actions(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_actions(path: Path, actions: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))


def edit_commit(root: Path, version: int, change: Callable[[list[dict[str, Any]]], None]) -> Path:
    """Apply ``change`` to the actions of a commit (in place) and write them back."""
    path = log_file(root, version)
    actions = read_actions(path)
    change(actions)
    write_actions(path, actions)
    return path


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


# -- log compactions -------------------------------------------------------------------------------------------


def test_a_compaction_that_disagrees_with_its_commits_is_ignored(tmp_path):
    """A compaction of commits 1..3 that holds only commit 1's actions used to replace the commits and drop
    the files of commits 2 and 3. Compactions never change the state now: the commits they cover are read."""
    root = make_table(tmp_path, commits=5)
    expected = {v: our_paths(root, v) for v in range(5)}
    compaction = root / "_delta_log" / f"{1:020d}.{3:020d}.compacted.json"
    compaction.write_bytes(log_file(root, 1).read_bytes())
    assert [(c.start, c.end) for c in list_log(DeltaTable(str(root)).storage).compactions] == [(1, 3)]

    for version in range(5):
        assert our_paths(root, version) == expected[version] == peer_paths(root, version), f"v{version}"
    assert len(expected[4]) == 10


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
}


@pytest.mark.parametrize("defect", list(SCHEMA_DEFECTS), ids=list(SCHEMA_DEFECTS))
def test_schema_defects(tmp_path, capsys, defect):
    root = make_table(tmp_path)
    path = edit_commit(root, 0, SCHEMA_DEFECTS[defect])
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot().schema  # noqa: B018
    assert_names(info.value, root, version=0, file=path, also=("metaData",))
    assert_cli_refuses(root, capsys)


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
