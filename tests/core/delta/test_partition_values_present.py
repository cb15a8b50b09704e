"""Every live file gives every partition column a value (protocol, Consistency Between Table Metadata and Data
Files); found by the fuzz suite (seed 4 case 7027): a checkpoint add whose partitionValues lacked the partition
column converted with a null partition value, and a filter on the column pruned the file's rows."""

from __future__ import annotations

import random
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from support.delta_log import edit_commit

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
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
    checkpoint; nothing written. (A JSON commit's partitionValues are read typed by the partition columns, where a
    missing key and a null value look alike: only maps as a checkpoint holds them are checked.)"""
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
