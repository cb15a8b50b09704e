"""A full conversion streams the live files into spill files of their manifest groups (``manifest_spill``) instead of
holding every file with its stats, and writes the same manifests as the in-memory path (every file in one table,
taken group by group in pruning order): same manifests in the same order, entry by entry.

The table: a fixture with deletion vectors, a checkpoint written by deltalake at version 12, and the commits after it
that remove files, re-add them with new deletion vectors and add new ones (the commits decide which checkpoint rows
are superseded), then four appends by deltalake. Manifests of 1 file, spill files holding up to 3 groups each and
buffers flushed every 2 rows make the routing cut the chunks.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from support.manifests import assert_same_manifests, written_manifests
from support.oracle import assert_same_rows, kernel_arrow

import airflow_deltaberg.core.iceberg.convert_full as convert_full_module
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.manifests import file_manifests, manifest_spill
from airflow_deltaberg.core.iceberg.manifests.manifest_spill import SpillArea, spill_groups

FIXTURE = "cdf-table-with-cdc-and-dvs"


def in_memory_manifests(storage: Any, plan: Any, snapshot: Snapshot,
                        engine: Any = file_manifests.in_process) -> list[Any]:
    """The path before the spill files: every live file with its stats in one table, taken group by group."""
    order = file_manifests.pruning_order(snapshot.file_keys(), plan)
    return file_manifests.write_file_manifests(storage, plan, snapshot.files, order=order, engine=engine)


@pytest.fixture
def checkpointed_dv_table(copy_fixture: Callable[[str], Path]) -> Path:
    path = copy_fixture(FIXTURE)
    for i in range(4):
        deltalake.write_deltalake(str(path), pa.table({"id": pa.array([100 + i, 200 + i], pa.int32()),
                                                       "comment": [f"appended {i}", None]}), mode="append")
    deltalake.DeltaTable(str(path), version=12).create_checkpoint()
    assert (path / "_delta_log" / f"{12:020}.checkpoint.parquet").exists()
    return path


@pytest.mark.parametrize("format_version", [2, 3])
def test_the_spilled_path_writes_the_in_memory_manifests(checkpointed_dv_table: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, format_version: int) -> None:
    monkeypatch.setattr(file_manifests, "MANIFEST_ROWS", 1)
    monkeypatch.setattr(manifest_spill, "SPILL_FILES", 2)
    monkeypatch.setattr(manifest_spill, "SPILL_BUFFER_ROWS", 2)
    reference = tmp_path / "reference"
    shutil.copytree(checkpointed_dv_table, reference)
    spilled: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        spilled.append(spill_groups(*args, **kwargs))
        return spilled[-1]

    monkeypatch.setattr(file_manifests, "spill_groups", spy)
    # The streaming path never builds the table of every file with its stats.
    files = Snapshot.files
    monkeypatch.setattr(Snapshot, "files", property(lambda self: pytest.fail("Snapshot.files was read")))

    streamed = convert(str(checkpointed_dv_table), format_version=format_version)

    monkeypatch.setattr(Snapshot, "files", files)
    monkeypatch.setattr(convert_full_module, "write_snapshot_manifests", in_memory_manifests)
    before = convert(str(reference), format_version=format_version)

    [groups] = spilled
    assert (groups.num_files, groups.groups_per_file, len(groups.keys)) == (6, 3, 2)
    expected = written_manifests(before.metadata_location, reference)
    assert_same_manifests(expected, written_manifests(streamed.metadata_location, checkpointed_dv_table))
    assert any(m["list_row"]["content"] == 1 for m in expected)  # the deletion vectors are there
    assert streamed.files_added == before.files_added == groups.num_files
    # Nothing of the spill is left next to the metadata, and the Iceberg table holds Delta's rows.
    assert not [p for p in (checkpointed_dv_table / "_iceberg").rglob("*spill*")]
    iceberg = StaticTable.from_metadata(streamed.metadata_location).scan().to_arrow()
    assert_same_rows(iceberg, kernel_arrow(checkpointed_dv_table))


@pytest.mark.parametrize(("rows", "per_manifest", "files_cap", "buffer", "chunk"),
                         [(10, 3, 128, 4, 3), (1000, 7, 5, 50, 64), (5, 10, 2, 1, 1), (0, 3, 2, 4, 3)])
def test_spilled_groups_are_the_taken_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int,
                                             per_manifest: int, files_cap: int, buffer: int, chunk: int) -> None:
    monkeypatch.setattr(manifest_spill, "SPILL_FILES", files_cap)
    monkeypatch.setattr(manifest_spill, "SPILL_BUFFER_ROWS", buffer)
    rng = np.random.default_rng(rows)
    table = pa.table({"path": pa.array([f"f{i}" for i in rng.permutation(rows)], pa.string()),
                      "size": pa.array(rng.integers(0, 10, rows))})
    order = pa.array(rng.permutation(rows).astype(np.int64))
    chunks = [table.slice(start, chunk) for start in range(0, rows, chunk)]
    expected = file_manifests.ManifestGroups(table, order, per_manifest)

    groups = spill_groups(SpillArea(str(tmp_path), None, "x-"), chunks, lambda: order, rows,
                          rows_per_manifest=per_manifest)

    assert len(groups) == len(expected)
    for index in range(len(groups)):
        assert groups.group(index).equals(expected.group(index))
    groups.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_routing_leaves_no_spill_file(tmp_path: Path) -> None:
    def chunks() -> Any:
        yield pa.table({"path": ["a", "b"]})
        raise RuntimeError("stats unreadable")

    with pytest.raises(RuntimeError, match="stats unreadable"):
        spill_groups(SpillArea(str(tmp_path), None, ""), chunks(), lambda: pa.array([1, 0, 2, 3]), 4,
                     rows_per_manifest=1)
    assert list(tmp_path.iterdir()) == []


class _InTableEngine:
    """A ``ManifestEngine`` whose workers would read the groups themselves: it declares ``spills_in_table``."""

    spills_in_table = True

    def __init__(self) -> None:
        self.areas: list[str] = []

    def __call__(self, storage: Any, plan: Any, groups: Any) -> list[Any]:
        self.areas.append(groups.area.location)
        # The spill files are under the table's Iceberg metadata while the groups are written.
        assert [p.name for p in Path(plan.table, "_iceberg", "metadata").glob("*spill*")]
        return file_manifests.in_process(storage, plan, groups)


@pytest.mark.parametrize("in_table", [False, True])
def test_the_engine_declares_where_groups_spill(checkpointed_dv_table: Path, monkeypatch: pytest.MonkeyPatch,
                                                in_table: bool) -> None:
    engine = _InTableEngine()
    if not in_table:
        engine.spills_in_table = False
    spilled: list[Any] = []

    def spy(area: SpillArea, *args: Any, **kwargs: Any) -> Any:
        spilled.append(area.location)
        return spill_groups(area, *args, **kwargs)

    monkeypatch.setattr(file_manifests, "spill_groups", spy)
    if not in_table:
        monkeypatch.setattr(_InTableEngine, "__call__", lambda self, *a: file_manifests.in_process(*a))

    result = convert(str(checkpointed_dv_table), manifest_engine=engine)

    table_location = str(checkpointed_dv_table)
    assert (spilled[0] == table_location) is in_table
    assert engine.areas == ([table_location] if in_table else [])
    assert not [p for p in (checkpointed_dv_table / "_iceberg").rglob("*spill*")]
    iceberg = StaticTable.from_metadata(result.metadata_location).scan().to_arrow()
    assert_same_rows(iceberg, kernel_arrow(checkpointed_dv_table))
