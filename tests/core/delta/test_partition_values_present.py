"""Every live file gives every partition column a value (protocol, Consistency Between Table Metadata and Data
Files); found by the fuzz suite (seed 4 case 7027): a checkpoint add whose partitionValues lacked the partition
column converted with a null partition value, and a filter on the column pruned the file's rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from support.delta_log import edit_commit
from support.tables import iceberg_files

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.json_partition_keys import without_absent_keys
from airflow_deltaberg.core.delta.partition_codec import rows_without_key
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import convert


@pytest.mark.parametrize("seed", range(30))
def test_rows_without_key_as_a_row_by_row_look_says(seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for _ in range(rng.randint(1, 40)):
        if rng.random() < 0.1:
            rows.append(None)
            continue
        keys = rng.sample(["a", "b", "c"], rng.randint(0, 3))
        rows.append([(k, rng.choice([None, "", "1"])) for k in keys])
    maps = pa.array(rows, pa.map_(pa.string(), pa.string()))
    start = rng.randint(0, len(maps) - 1)
    for part in (maps, maps.slice(start, rng.randint(1, len(maps) - start))):
        for key in ("a", "b", "z"):
            expected = [i for i, m in enumerate(part.to_pylist()) if m is None or key not in dict(m)]
            assert rows_without_key(part, key).tolist() == expected, (part, key)


def _partitioned(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    for start in (0, 10):
        write_deltalake(str(root), pa.table({"id": pa.array(range(start, start + 3), pa.int64()),
                                             "part": pa.array([start] * 3, pa.int64())}),
                        mode="append", partition_by=["part"])
    return root


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_checkpoint_add_without_a_partition_value_is_refused(fmt: str, tmp_path: Path) -> None:
    """The fuzz case's shape: a checkpoint whose add has no key for the partition column (deltalake refuses the
    table; converted, the file's partition would be null). Refused by the snapshot and by convert, naming the
    checkpoint; nothing written."""
    root = _partitioned(tmp_path)
    deltalake.DeltaTable(str(root)).create_checkpoint()
    checkpoint = next((root / "_delta_log").glob("*.checkpoint.parquet"))
    table = pq.read_table(checkpoint)
    rows = table.to_pylist()
    changed = next(r for r in rows if r.get("add"))
    changed["add"]["partitionValues"] = [("no_such_column", "x")]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), checkpoint)
    with pytest.raises(CorruptLogError, match="no value for the partition column 'part'") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.file is not None and info.value.file.endswith(checkpoint.name)
    assert changed["add"]["path"] in str(info.value)
    code = main(["convert", str(root), "--format", fmt])
    assert code == 2 and not (root / "_iceberg").exists()


def test_a_null_partition_value_is_a_value(tmp_path: Path) -> None:
    """A key holding null is the null partition (what writers log for it): it loads and converts."""
    root = _partitioned(tmp_path)

    def null_value(actions: list[dict]) -> None:
        for action in actions:
            if "add" in action:
                action["add"]["partitionValues"] = {"part": None}

    edit_commit(root, 1, null_value)
    snapshot = DeltaTable(str(root)).snapshot()
    values = pc.map_lookup(snapshot.files.column("partitionValues").combine_chunks(), "part", "first")
    assert sorted(values.to_pylist(), key=str) == ["0", None]
    assert convert(str(root)).files_added == 2


def _drop_key(actions: list[dict]) -> None:
    for action in actions:
        if "add" in action:
            action["add"]["partitionValues"] = {}


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_json_add_without_a_partition_value_is_refused(fmt: str, tmp_path: Path) -> None:
    """The JSON commit's shape of the fuzz case: its reader types partitionValues by the partition columns, where a
    missing key read as null (the file converted as the null partition). Refused naming the commit; nothing
    written."""
    root = _partitioned(tmp_path)
    commit = edit_commit(root, 1, _drop_key)
    with pytest.raises(CorruptLogError, match="no value for the partition column 'part'") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(Path(commit).name)
    code = main(["convert", str(root), "--format", fmt])
    assert code == 2 and not (root / "_iceberg").exists()


def test_an_incremental_conversion_refuses_an_add_without_a_partition_value(tmp_path: Path) -> None:
    """A commit after the converted version, its add without the key: refused before its snapshot is written; the
    Iceberg table stays at the version converted before."""
    root = _partitioned(tmp_path)
    assert convert(str(root)).delta_version == 1
    before = iceberg_files(root)
    write_deltalake(str(root), pa.table({"id": pa.array([7], pa.int64()), "part": pa.array([20], pa.int64())}),
                    mode="append", partition_by=["part"])
    edit_commit(root, 2, _drop_key)
    with pytest.raises(CorruptLogError, match="no value for the partition column 'part'") as info:
        convert(str(root))
    assert info.value.version == 2 and info.value.file is not None and info.value.file.endswith("2.json")
    assert iceberg_files(root) == before


def test_an_add_without_the_key_that_a_later_commit_removes_loads(tmp_path: Path) -> None:
    """Only live files must give every partition column a value: an add lacking the key that a later commit removes
    (e.g. before the table was overwritten) leaves nothing wrong in the snapshot."""
    root = _partitioned(tmp_path)
    edit_commit(root, 1, _drop_key)
    write_deltalake(str(root), pa.table({"id": pa.array([1], pa.int64()), "part": pa.array([5], pa.int64())}),
                    mode="overwrite", partition_by=["part"])
    snapshot = DeltaTable(str(root)).snapshot()
    values = pc.map_lookup(snapshot.files.column("partitionValues").combine_chunks(), "part", "first")
    assert values.to_pylist() == ["5"]
    assert convert(str(root)).files_added == 1


@pytest.mark.parametrize("seed", range(20))
def test_without_absent_keys_as_a_line_by_line_parse_says(seed: int) -> None:
    """Against a reference that parses every line: null entries of add rows go where the line lacks the key; other
    rows (removes, rows without nulls) stay as they are; also on a slice."""
    rng = random.Random(seed)
    actions, maps = [], []
    for i in range(rng.randint(1, 30)):
        kind = "add" if rng.random() < 0.8 else "remove"
        written = {k: rng.choice([None, "v"]) for k in rng.sample(["a", "b", "c"], rng.randint(0, 3))}
        typed = [(k, written.get(k)) for k in ("a", "b", "c") if k in written or rng.random() < 0.7]
        actions.append({kind: {"path": f"p{i}", "partitionValues": written}})
        maps.append(typed)
    lines = b"".join(json.dumps(a).encode() + b"\n" for a in actions)
    is_add = np.array(["add" in a for a in actions])
    column = pa.array(maps, pa.map_(pa.string(), pa.string()))
    expected = [m if "remove" in a else [(k, v) for k, v in m if v is not None or k in a["add"]["partitionValues"]]
                for a, m in zip(actions, maps, strict=True)]
    assert without_absent_keys(column, is_add, lines).to_pylist() == expected
    start = rng.randint(0, len(maps) - 1)
    part = column.slice(start)
    part_lines = b"".join(json.dumps(a).encode() + b"\n" for a in actions[start:])
    assert without_absent_keys(part, is_add[start:], part_lines).to_pylist() == expected[start:]
