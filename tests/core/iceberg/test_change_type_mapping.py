"""The name mapping and the change data feed's ``_change_type`` (issue 26 §3 loose end).

``_change_type`` is no column of the table; files under ``_change_data`` are no data files of it. But the protocol
lets a table with the change data feed hold ``_change_type`` in its data files too, and Delta on Spark does (null,
in the data files of UPDATE, DELETE and MERGE: the ``cdf-table`` fixture), where pyiceberg 0.12 reads nothing unless
the name mapping maps it. So the mapping maps it only for tables whose data files may hold it: the change data feed
on, or on before (its files stay). Rows are read back with pyiceberg and compared with deltalake's kernel reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import delta_rows, rows_of

from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.file_field_ids import RESERVED_IDS_START
from airflow_deltaberg.core.iceberg.schema import NAME_MAPPING_PROPERTY

CDF = {"delta.enableChangeDataFeed": "true"}


def mapping_of(result: ConversionResult) -> list[dict]:
    metadata = json.loads(Path(result.metadata_location).read_text())
    return json.loads(metadata["properties"][NAME_MAPPING_PROPERTY])


def mapped_names(result: ConversionResult) -> list[str]:
    return [name for entry in mapping_of(result) for name in entry["names"]]


def iceberg_rows(result: ConversionResult) -> list:
    return rows_of(StaticTable.from_metadata(result.metadata_location).scan().to_arrow())


def write_with_changes(path: Path, configuration: dict[str, str] | None) -> None:
    """A deltalake table with an update and a delete (with the change data feed on, they write _change_data)."""
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}),
                    configuration=configuration)
    DeltaTable(str(path)).update({"v": "'z'"}, predicate="id = 2")
    DeltaTable(str(path)).delete("id = 3")


def test_the_mapping_holds_only_the_columns_without_change_data_feed(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_with_changes(path, None)
    result = convert(str(path))
    assert mapped_names(result) == ["id", "v"]
    assert all(entry["field-id"] < RESERVED_IDS_START for entry in mapping_of(result))
    assert iceberg_rows(result) == delta_rows(path)
    # An incremental run keeps it so.
    write_deltalake(str(path), pa.table({"id": pa.array([4], pa.int64()), "v": ["d"]}), mode="append")
    again = convert(str(path))
    assert again.mode == "incremental" and mapped_names(again) == ["id", "v"]


def test_change_data_files_are_not_data_files(tmp_path: Path) -> None:
    """deltalake with the change data feed: _change_data files hold _change_type; the converted table lists only
    the data files, which read as Delta reads them."""
    path = tmp_path / "t"
    write_with_changes(path, CDF)
    assert any(pq.read_schema(f).names[-1] == "_change_type" for f in (path / "_change_data").iterdir())
    result = convert(str(path))
    table = StaticTable.from_metadata(result.metadata_location)
    listed = [task.file.file_path for task in table.scan().plan_files()]
    assert listed and not [p for p in listed if "/_change_data/" in p]
    assert mapped_names(result) == ["id", "v", "_change_type"]
    assert iceberg_rows(result) == delta_rows(path)


def test_spark_data_files_holding_change_type_read(copy_fixture: Callable[[str], Path]) -> None:
    """Data files Delta on Spark wrote with _change_type read through the mapping, also after the change data feed
    is turned off (the files keep the column)."""
    path = copy_fixture("cdf-table")
    with_column = [f for f in path.rglob("*.parquet") if "_change_data" not in f.parts
                   and "_change_type" in pq.read_schema(f).names]
    assert with_column
    result = convert(str(path))
    assert "_change_type" in mapped_names(result)
    assert iceberg_rows(result) == delta_rows(path)
    table = DeltaTable(str(path))
    table.alter.set_table_properties({"delta.enableChangeDataFeed": "false"})
    assert convert(str(path)).mode == "incremental"
    again = convert(str(path), full=True)
    assert "_change_type" in mapped_names(again)
    assert iceberg_rows(again) == delta_rows(path)
