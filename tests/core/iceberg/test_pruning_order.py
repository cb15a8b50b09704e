"""The pruning order of a snapshot's files: by each partition value (as its Delta string, nulls first), then by path.

It is computed as one sort of the paths and a stable sort per partition key by the key's rank; it must be the order
of a sort by all the keys at once, which is its definition."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_deltaberg.core.iceberg.manifests.file_manifests import pruning_order

VALUES = [None, "", "a", "b", "a b", "é", "\N{GRINNING FACE}", "10", "9", "2024-01-01", "ab", "B"]


def plan_of(keys: list[str]) -> Any:
    """What pruning_order reads of a plan: the partition columns, their physical names and the spec's fields."""
    physical = [f"col-{k}" for k in keys]
    return SimpleNamespace(metadata=SimpleNamespace(partition_columns=keys, physical_partition_columns=physical),
                           spec=SimpleNamespace(fields=[SimpleNamespace(name=k) for k in keys]))


def files_of(rng: np.random.Generator, n: int, keys: list[str], same_layout: bool) -> pa.Table:
    rows = []
    for i in rng.permutation(n):
        entries = [(f"col-{k}", VALUES[int(rng.integers(len(VALUES)))]) for k in keys]
        if not same_layout:
            entries = [entries[j] for j in rng.permutation(len(entries))] + [("other", "x")]
        rows.append({"path": f"p{int(rng.integers(5))}/f-{i:05d}.parquet", "partitionValues": entries})
    return pa.Table.from_pylist(rows, schema=pa.schema([("path", pa.string()),
                                                        ("partitionValues", pa.map_(pa.string(), pa.string()))]))


def defined_order(files: pa.Table, keys: list[str]) -> list[int]:
    columns = {f"k{i}": pc.map_lookup(files.column("partitionValues"), f"col-{k}", "first") for i, k in enumerate(keys)}
    columns["path"] = files.column("path")
    order = pc.sort_indices(pa.table(columns), sort_keys=[(c, "ascending", "at_start") for c in columns])
    return order.to_pylist()


@pytest.mark.parametrize("keys", [[], ["a"], ["a", "b"], ["a", "b", "c"]])
@pytest.mark.parametrize("same_layout", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_order_is_by_every_partition_value_then_path(keys: list[str], same_layout: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    files = files_of(rng, 400, keys, same_layout)
    assert pruning_order(files, plan_of(keys)).to_pylist() == defined_order(files, keys)


@pytest.mark.parametrize("value", [None, "x"])
def test_every_file_with_the_same_partition_value(value: str | None) -> None:
    """One value, or null, in every file (an empty dictionary of values when all are null)."""
    rows = [{"path": f"f-{i}", "partitionValues": [("col-a", value)]} for i in (3, 1, 2)]
    files = pa.Table.from_pylist(rows, schema=pa.schema([("path", pa.string()),
                                                         ("partitionValues", pa.map_(pa.string(), pa.string()))]))
    assert pruning_order(files, plan_of(["a"])).to_pylist() == defined_order(files, ["a"]) == [1, 2, 0]


def test_files_in_chunks_and_no_files() -> None:
    rng = np.random.default_rng(7)
    files = files_of(rng, 300, ["a", "b"], True)
    chunked = pa.concat_tables([files.slice(0, 100), files.slice(100, 50), files.slice(150)])
    assert chunked.column("path").num_chunks == 3
    assert pruning_order(chunked, plan_of(["a", "b"])).to_pylist() == defined_order(files, ["a", "b"])
    assert pruning_order(files.slice(0, 0), plan_of(["a"])).to_pylist() == []
