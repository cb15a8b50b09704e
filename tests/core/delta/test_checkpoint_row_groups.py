"""Parquet checkpoints of several row groups, and footers whose statistics lie about them.

A checkpoint part is read row group by row group, and the row groups whose statistics say an action kind's key
column holds only nulls are skipped for that kind. A footer that says so of a row group that does hold such actions
(a buggy or hostile writer) was trusted: its actions were dropped without a word. Readers disagree on such a log: on
the table below deltalake 1.x trusts the statistics and lists 4 of the 6 files, Delta on Spark 4.1 lists all 6. The
checkpoint is refused now, naming the table, version, file, row group and column; nothing is converted.
"""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import delta_rows, rows_of
from support.parquet_footer import set_null_count

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import convert

CHECKPOINT = "00000000000000000005.checkpoint.parquet"


def two_rows_a_group(tmp_path: Path) -> Path:
    """Six appends of one row, and deltalake's checkpoint at version 5 rewritten in row groups of two actions, its
    protocol and metaData first (a row group without adds)."""
    root = tmp_path / "t"
    for i in range(6):
        write_deltalake(str(root), pa.table({"id": pa.array([i], pa.int64()), "p": pa.array(["a" if i % 2 else "b"])}),
                        mode="append", partition_by=["p"])
    deltalake.DeltaTable(str(root)).create_checkpoint()
    checkpoint = root / "_delta_log" / CHECKPOINT
    actions = pq.read_table(checkpoint)
    others_first = pc.array_sort_indices(actions.column("add").is_null(), order="descending")
    pq.write_table(actions.take(others_first), checkpoint, row_group_size=2)
    return root


def null_counts(checkpoint: Path, column: str) -> list[tuple[int, int]]:
    """(values, nulls) of ``column`` per row group, from the footer."""
    metadata = pq.ParquetFile(checkpoint).metadata
    out = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        chunk = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == column)
        out.append((chunk.num_values, chunk.statistics.null_count))
    return out


def test_row_groups_without_adds_are_skipped_and_every_add_is_converted(tmp_path: Path) -> None:
    root = two_rows_a_group(tmp_path)
    counts = null_counts(root / "_delta_log" / CHECKPOINT, "add.path")
    assert any(nulls == values for values, nulls in counts), counts  # a row group the adds' read skips
    assert sum(values - nulls for values, nulls in counts) == 6

    result = convert(str(root))
    assert rows_of(StaticTable.from_metadata(result.metadata_location).scan().to_arrow()) == delta_rows(root)
    assert len(delta_rows(root)) == 6


@pytest.mark.parametrize("column", ["add.path", "metaData.id", "protocol.minReaderVersion"])
def test_a_footer_that_calls_a_row_group_of_actions_empty_is_refused(
    tmp_path: Path, column: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = two_rows_a_group(tmp_path)
    checkpoint = root / "_delta_log" / CHECKPOINT
    counts = null_counts(checkpoint, column)
    group = next(g for g, (values, nulls) in enumerate(counts) if nulls < values)
    set_null_count(checkpoint, group, column, counts[group][0])
    assert null_counts(checkpoint, column)[group] == (counts[group][0], counts[group][0])
    assert pq.read_table(checkpoint).num_rows == sum(values for values, _ in counts)  # the data is intact

    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot().files  # noqa: B018 - stats read too
    error = info.value
    assert (error.table, error.version) == (str(root), 5)
    assert error.file is not None and error.file.endswith(CHECKPOINT)
    assert f"column {column} of row group {group} holds only nulls, but it holds" in str(error), str(error)
    for command in ("inspect", "validate", "convert"):
        assert main([command, str(root)]) == 2
        err = capsys.readouterr().err
        assert "CorruptLogError: " in err and len(err.strip().splitlines()) == 1, err
    assert not (root / "_iceberg").exists()

