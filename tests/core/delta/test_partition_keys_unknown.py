"""partitionValues keys that are not partition columns (issue 26 §5): the protocol's partitionValues is "a map from
partition column to value". Such an add is refused naming the table, version and file; one with very many keys
before the columnar parse, which spent ~80 us a key inferring a struct field for each (3e5 keys: 28 s, 1.4 GB)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.delta_log import edit_commit
from support.tables import iceberg_files

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import convert


def _table(tmp_path: Path, partitioned: bool) -> Path:
    root = tmp_path / "t"
    for start in (0, 10):
        write_deltalake(str(root), pa.table({"id": pa.array(range(start, start + 3), pa.int64()),
                                             "part": pa.array([start] * 3, pa.int64())}),
                        mode="append", partition_by=["part"] if partitioned else None)
    return root


def _extra_keys(n: int) -> Any:
    def change(actions: list[dict]) -> None:
        for action in actions:
            if "add" in action:
                action["add"]["partitionValues"].update({f"k{i}": "v" for i in range(n)})
    return change


@pytest.mark.parametrize("partitioned", [True, False])
def test_a_crowded_partition_map_is_refused_fast(tmp_path: Path, partitioned: bool) -> None:
    root = _table(tmp_path, partitioned)
    commit = edit_commit(root, 1, _extra_keys(300_000))
    started = time.monotonic()
    with pytest.raises(CorruptLogError, match="300000 partitionValues key.* not partition columns") as info:
        convert(str(root))
    assert time.monotonic() - started < 8  # was 14-28 s (0.4-1 s now, on a busy 2-core VM)
    assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(Path(commit).name)
    assert str(root) in str(info.value)
    assert iceberg_files(root) == []


@pytest.mark.parametrize("partitioned", [True, False])
def test_one_unknown_key_is_refused(tmp_path: Path, partitioned: bool) -> None:
    root = _table(tmp_path, partitioned)
    commit = edit_commit(root, 1, _extra_keys(1))
    with pytest.raises(CorruptLogError, match="partitionValues key 'k0', which is not a partition column") as info:
        DeltaTable(str(root)).snapshot()
    assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(Path(commit).name)
    with pytest.raises(CorruptLogError):
        convert(str(root))
    assert iceberg_files(root) == []


def test_an_incremental_conversion_refuses_an_unknown_key(tmp_path: Path) -> None:
    root = _table(tmp_path, True)
    convert(str(root))
    before = iceberg_files(root)
    write_deltalake(str(root), pa.table({"id": pa.array([7], pa.int64()), "part": pa.array([20], pa.int64())}),
                    mode="append", partition_by=["part"])
    edit_commit(root, 2, _extra_keys(1))
    with pytest.raises(CorruptLogError, match="not a partition column") as info:
        convert(str(root))
    assert info.value.version == 2
    assert iceberg_files(root) == before
