"""pyiceberg's metadata tables (``table.inspect``) over converted tables: every one loads, and what they say
matches the data files (per-file bounds and null counts, the snapshot history, the partition counts)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable as DeltalakeTable
from deltalake import write_deltalake
from pyiceberg.table import StaticTable

from airflow_deltaberg.core.iceberg.convert import convert

ROWS = pa.table({
    "id": pa.array([1, 2, 3, 4, 5, None], pa.int64()),
    "name": ["a", None, "c", "d", "e", "f"],
    "region": ["eu", "eu", "us", "us", None, "us"],
})


def _converted_history(path: Path) -> StaticTable:
    write_deltalake(str(path), ROWS, partition_by=["region"])
    convert(str(path))
    write_deltalake(str(path), ROWS.slice(0, 2), mode="append", partition_by=["region"])
    convert(str(path))
    DeltalakeTable(str(path)).delete("id = 3")
    return StaticTable.from_metadata(convert(str(path)).metadata_location)


def test_every_metadata_table_loads_and_agrees_with_the_data_files(tmp_path: Path) -> None:
    table = _converted_history(tmp_path / "t")
    inspect = table.inspect

    entries = inspect.entries()
    live = entries.filter(pc.not_equal(entries.column("status"), 2))
    live_paths = {f["file_path"] for f in live.column("data_file").to_pylist()}
    delta_paths = {str(Path(u).resolve()) for u in DeltalakeTable(str(tmp_path / "t")).file_uris()}
    assert {str(Path(p.removeprefix("file://")).resolve()) for p in live_paths} == delta_paths

    for data_file, metrics in zip(live.column("data_file").to_pylist(), live.column("readable_metrics").to_pylist(),
                                  strict=True):
        rows = pq.read_table(data_file["file_path"].removeprefix("file://"))
        assert data_file["column_sizes"] == []  # Delta keeps none; an empty map, not a null one
        assert data_file["record_count"] == rows.num_rows
        for column in ("id", "name"):
            values = rows.column(column)
            if pa.types.is_string_view(values.type):  # deltalake writes some strings as views
                values = values.cast(pa.string())
            low_high = pc.min_max(values)
            assert metrics[column]["lower_bound"] == low_high["min"].as_py(), (data_file["file_path"], column)
            assert metrics[column]["upper_bound"] == low_high["max"].as_py(), (data_file["file_path"], column)
            assert metrics[column]["null_value_count"] == values.null_count

    files = inspect.files()
    assert files.num_rows == len(delta_paths)
    assert sum(files.column("record_count").to_pylist()) == DeltalakeTable(str(tmp_path / "t")).to_pyarrow_table(
    ).num_rows

    snapshots = inspect.snapshots()
    assert snapshots.column("operation").to_pylist() == ["append", "append", "overwrite"]
    assert [s.snapshot_id for s in table.snapshots()] == snapshots.column("snapshot_id").to_pylist()
    assert inspect.history().num_rows == 3

    partitions = inspect.partitions()
    by_region = {p["region"]: n for p, n in zip(partitions.column("partition").to_pylist(),
                                                partitions.column("record_count").to_pylist(), strict=True)}
    regions = table.scan(selected_fields=("region",)).to_arrow_batch_reader().read_all().column("region")
    expected = pc.value_counts(regions).to_pylist()
    assert by_region == {item["values"]: item["counts"] for item in expected}

    manifests = inspect.manifests()
    assert manifests.num_rows == len(table.current_snapshot().manifests(table.io))
