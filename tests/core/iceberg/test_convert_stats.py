"""Per-file stats the converter must not trust blindly (issue 11): stats that are not a JSON object, record
counts of 0 or below, counts and bounds beyond int64, add sizes of 0 or below.

Each table is written by deltalake (5 files x 10 rows, one file per commit), then one add's stats (or size) is
replaced in its commit or in a Parquet checkpoint. The outcome is either the rows deltalake wrote, read back
with pyiceberg (50, and the row ``id = 25`` found by a filtered scan), or a CorruptLogError naming the table, the
version, the log file and the data file, with nothing written under ``_iceberg``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as DeltalakeTable
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.expressions import EqualTo
from pyiceberg.table import StaticTable
from support.delta_log import commit_file
from support.tables import iceberg_files

from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert

FILES, ROWS = 5, 10
BAD_VERSION = 2  # the commit whose add is edited: ids 20..29


def append_file(path: Path, i: int) -> None:
    """One commit adding one file: ids i*10 .. i*10+9."""
    ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
    write_deltalake(str(path), pa.table({"id": ids, "label": [f"row-{v}" for v in ids.to_pylist()]}), mode="append")


def make_table(path: Path, files: int = FILES) -> None:
    for i in range(files):
        append_file(path, i)


def edit_add(path: Path, version: int, edit: Callable[[dict[str, Any]], None]) -> str:
    """Apply ``edit`` to the add action of commit ``version``; returns the add's path."""
    commit = commit_file(path, version)
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    (add,) = [a["add"] for a in actions if "add" in a]
    edit(add)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return add["path"]


def set_stats(text: str) -> Callable[[dict[str, Any]], None]:
    def edit(add: dict[str, Any]) -> None:
        add["stats"] = text
    return edit


def change_stats(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(add: dict[str, Any]) -> None:
        stats = json.loads(add["stats"])
        change(stats)
        add["stats"] = json.dumps(stats)
    return edit


def iceberg_ids(result: ConversionResult, row_filter: Any = None) -> list[int]:
    table = StaticTable.from_metadata(result.metadata_location)
    scan = table.scan(row_filter=row_filter) if row_filter is not None else table.scan()
    return sorted(scan.to_arrow().column("id").to_pylist())


def assert_all_rows(path: Path, result: ConversionResult) -> None:
    assert iceberg_ids(result) == list(range(FILES * ROWS))
    assert iceberg_ids(result, EqualTo("id", 25)) == [25]
    assert result.records == FILES * ROWS


def assert_refused(path: Path, info: pytest.ExceptionInfo[CorruptLogError], *, version: int, log_file: Path | None,
                   data_file: str, also: tuple[str, ...] = ()) -> None:
    message = str(info.value)
    assert str(path) in message and f"version {version}" in message and data_file in message, message
    assert info.value.version == version
    if log_file is not None:
        assert log_file.name in message, message
    for text in also:
        assert text in message, message
    assert not (path / "_iceberg").exists() or not any((path / "_iceberg").rglob("*.json")), \
        "a refused conversion wrote Iceberg metadata"


# -- defect 1: stats that are valid JSON but not an object -------------------------------------------------

NOT_OBJECTS = ["[1,2]", "123", '"str"', "null", ""]


@pytest.mark.parametrize("stats", NOT_OBJECTS, ids=["array", "number", "string", "null", "empty"])
def test_stats_that_are_not_an_object_in_a_commit_are_refused(stats: str, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    data_file = edit_add(path, BAD_VERSION, set_stats(stats))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=BAD_VERSION, log_file=commit_file(path, BAD_VERSION), data_file=data_file)


@pytest.mark.parametrize("stats", ["[1,2]", "null"], ids=["array", "null"])
def test_stats_that_are_not_an_object_in_an_incremental_commit_are_refused(stats: str, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path, FILES - 1)
    first = convert(str(path))
    before = iceberg_files(path)
    append_file(path, FILES - 1)
    data_file = edit_add(path, FILES - 1, set_stats(stats))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    message = str(info.value)
    assert f"version {FILES - 1}" in message and data_file in message and commit_file(path, FILES - 1).name in message
    assert iceberg_files(path) == before, "a refused conversion wrote files"
    assert iceberg_ids(first) == list(range(40))


def checkpoint_with_stats(path: Path, row_stats: Callable[[list[Any]], str]) -> tuple[Path, str]:
    """Write a Parquet checkpoint with deltalake (JSON stats only), then replace one add's stats there."""
    DeltalakeTable(str(path)).create_checkpoint()
    checkpoint = next((path / "_delta_log").glob("*.checkpoint.parquet"))
    table = pq.read_table(checkpoint)
    add = table.column("add").combine_chunks()
    stats = add.field("stats").to_pylist()
    row = next(i for i, value in enumerate(stats) if value is not None)
    stats[row] = row_stats(stats[row])
    children = [pa.array(stats, pa.string()) if f.name == "stats" else add.field(i) for i, f in enumerate(add.type)]
    broken = pa.StructArray.from_arrays(children, fields=list(add.type), mask=add.is_null())
    pq.write_table(table.set_column(table.schema.get_field_index("add"), table.schema.field("add"), broken),
                   checkpoint)
    return checkpoint, add.field("path")[row].as_py()


@pytest.mark.parametrize("stats", ["[1,2]", "null"], ids=["array", "null"])
def test_stats_that_are_not_an_object_in_a_checkpoint_are_refused(stats: str, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    checkpoint, data_file = checkpoint_with_stats(path, lambda _: stats)
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=FILES - 1, log_file=checkpoint, data_file=data_file)


def test_stats_with_leading_whitespace_still_parse(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    edit_add(path, BAD_VERSION, lambda add: add.update(stats="  \n " + add["stats"]))
    assert_all_rows(path, convert(str(path)))


def test_two_json_objects_in_one_stats_string_are_refused(tmp_path: Path) -> None:
    """pyarrow's NDJSON reader would read them as two rows, shifting every later file's stats by one."""
    path = tmp_path / "t"
    make_table(path)
    data_file = edit_add(path, BAD_VERSION, lambda add: add.update(stats=add["stats"] + '{"numRecords": 3}'))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=BAD_VERSION, log_file=commit_file(path, BAD_VERSION), data_file=data_file,
                   also=("not JSON",))


# -- defect 2: record counts -------------------------------------------------------------------------------


def test_num_records_zero_on_a_non_empty_file_reads_the_footer(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    edit_add(path, BAD_VERSION, change_stats(lambda s: s.update(numRecords=0)))
    assert_all_rows(path, convert(str(path)))


def test_num_records_zero_in_a_checkpoint_reads_the_footer(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    checkpoint_with_stats(path, lambda text: json.dumps({**json.loads(text), "numRecords": 0}))
    assert_all_rows(path, convert(str(path)))


def test_an_empty_parquet_file_keeps_record_count_zero(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    empty = "part-empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "label": pa.array([], pa.string())}), path / empty)
    version = DeltalakeTable(str(path)).version() + 1
    add = {"path": empty, "partitionValues": {}, "size": (path / empty).stat().st_size, "modificationTime": 1,
           "dataChange": True, "stats": json.dumps({"numRecords": 0})}
    commit_file(path, version).write_text(json.dumps({"commitInfo": {"timestamp": 1}}) + "\n"
                                          + json.dumps({"add": add}) + "\n")
    result = convert(str(path))
    assert_all_rows(path, result)
    entries = StaticTable.from_metadata(result.metadata_location).inspect.entries().to_pylist()
    counts = {e["data_file"]["file_path"].rsplit("/", 1)[1]: e["data_file"]["record_count"] for e in entries}
    assert counts[empty] == 0 and len(counts) == FILES + 1


@pytest.mark.parametrize("count", [-1, 2**70], ids=["negative", "beyond-int64"])
def test_num_records_negative_or_beyond_int64_is_refused(count: int, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    data_file = edit_add(path, BAD_VERSION, change_stats(lambda s: s.update(numRecords=count)))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=BAD_VERSION, log_file=commit_file(path, BAD_VERSION), data_file=data_file,
                   also=("numRecords",))


def test_num_records_negative_in_an_incremental_commit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path, FILES - 1)
    convert(str(path))
    before = iceberg_files(path)
    append_file(path, FILES - 1)
    data_file = edit_add(path, FILES - 1, change_stats(lambda s: s.update(numRecords=-5)))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    message = str(info.value)
    assert f"version {FILES - 1}" in message and data_file in message and "numRecords" in message, message
    assert iceberg_files(path) == before, "a refused conversion wrote files"


def test_null_count_beyond_int64_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    data_file = edit_add(path, BAD_VERSION, change_stats(lambda s: s["nullCount"].update(id=2**70)))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=BAD_VERSION, log_file=commit_file(path, BAD_VERSION), data_file=data_file,
                   also=("nullCount",))


def test_null_count_negative_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    data_file = edit_add(path, BAD_VERSION, change_stats(lambda s: s["nullCount"].update(id=-1)))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=BAD_VERSION, log_file=commit_file(path, BAD_VERSION), data_file=data_file,
                   also=("nullCount",))


@pytest.mark.parametrize("bound", ["minValues", "maxValues"])
def test_long_bound_beyond_int64_is_dropped(bound: str, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    value = 2**70 if bound == "maxValues" else -(2**70)
    data_file = edit_add(path, BAD_VERSION, change_stats(lambda s: s[bound].update(id=value)))
    result = convert(str(path))
    assert_all_rows(path, result)
    entries = StaticTable.from_metadata(result.metadata_location).inspect.entries().to_pylist()
    (entry,) = [e["data_file"] for e in entries if e["data_file"]["file_path"].endswith(data_file)]
    field = "upper_bounds" if bound == "maxValues" else "lower_bounds"
    id_field = StaticTable.from_metadata(result.metadata_location).schema().find_field("id").field_id
    assert id_field not in dict(entry[field] or {}), "a bound that does not fit int64 was written"


def test_decimal_bound_beyond_its_precision_is_dropped(tmp_path: Path) -> None:
    import decimal

    path = tmp_path / "t"
    for i in range(FILES):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        amounts = pa.array([decimal.Decimal(v) for v in ids], pa.decimal128(5, 2))
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "amount": amounts}), mode="append")
    edit_add(path, BAD_VERSION, change_stats(lambda s: s["maxValues"].update(amount=123456789.125)))
    result = convert(str(path))
    assert iceberg_ids(result) == list(range(FILES * ROWS))
    assert iceberg_ids(result, EqualTo("amount", decimal.Decimal("25.00"))) == [25]


@pytest.mark.parametrize("size", [-1, 0])
def test_add_size_zero_or_negative_is_refused(size: int, tmp_path: Path) -> None:
    path = tmp_path / "t"
    make_table(path)
    data_file = edit_add(path, BAD_VERSION, lambda add: add.update(size=size))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=BAD_VERSION, log_file=None, data_file=data_file, also=("size",))


@pytest.mark.parametrize("bounds", ["maxValues", "minValues"])
def test_bounds_that_are_not_an_object_give_no_bounds(bounds: str, tmp_path: Path) -> None:
    """``"maxValues": 5`` sends the stats to the row-by-row parser; the null struct's children must read as null,
    not as the zeros pyarrow leaves there (an upper bound 0 made pyiceberg skip ids 20..29)."""
    path = tmp_path / "t"
    make_table(path)
    edit_add(path, BAD_VERSION, change_stats(lambda s: s.update({bounds: 5})))
    assert_all_rows(path, convert(str(path)))


def struct_stats_checkpoint(copy_fixture: Callable[[str], Path], num_records: int) -> tuple[Path, str]:
    """A copy of a table whose checkpoint holds only typed stats (add.stats_parsed), its first add's numRecords
    replaced; returns the table and that add's path."""
    path = copy_fixture("v1-single-part-struct-stats-only")
    checkpoint = path / "_delta_log" / f"{5:020d}.checkpoint.parquet"
    table = pq.read_table(checkpoint)
    rows = table.to_pylist()
    first = next(r["add"] for r in rows if r["add"] is not None)
    first["stats_parsed"]["numRecords"] = num_records
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), checkpoint)
    return path, first["path"]


def test_num_records_negative_in_a_checkpoints_typed_stats_is_refused(copy_fixture: Callable[[str], Path]) -> None:
    path, data_file = struct_stats_checkpoint(copy_fixture, -1)
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    assert_refused(path, info, version=5, log_file=None, data_file=unquote(data_file), also=("numRecords",))


def test_num_records_zero_in_a_checkpoints_typed_stats_reads_the_footer(copy_fixture: Callable[[str], Path]) -> None:
    path, _ = struct_stats_checkpoint(copy_fixture, 0)
    result = convert(str(path))
    rows = QueryBuilder().register("t", DeltalakeTable(str(path))).execute("SELECT id FROM t")
    expected = sorted(pa.table(rows).column("id").to_pylist())
    assert iceberg_ids(result) == expected and len(expected) == 5


# -- record counts whose sum overflows the manifest list's longs (issue 11, D05) --------------------------------


@pytest.mark.parametrize("liars", [1, 2], ids=["one-file", "two-files"])
def test_num_records_summing_beyond_int64_are_refused_before_anything_is_written(liars: int,
                                                                                 tmp_path: Path) -> None:
    """Each count fits a long, their sum does not: Iceberg's manifest list holds row count sums as longs."""
    path = tmp_path / "t"
    make_table(path)
    liar_files = {version: edit_add(path, version, change_stats(lambda s: s.update(numRecords=2**63 - 1)))
                  for version in range(BAD_VERSION, BAD_VERSION + liars)}
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    message = str(info.value)
    assert "numRecords 9223372036854775807" in message and "sum" in message, message
    assert info.value.version in liar_files and str(path) in message, message
    assert info.value.file is not None and info.value.file.endswith(liar_files[info.value.version]), message
    assert not (path / "_iceberg").exists(), sorted(p.name for p in (path / "_iceberg").rglob("*"))


@pytest.mark.parametrize("liars", [1, 2], ids=["one-commit", "two-commits"])
def test_num_records_summing_beyond_int64_in_new_commits_write_nothing(liars: int, tmp_path: Path) -> None:
    """The same lie in commits after a conversion: each incremental snapshot's totals (the files it keeps plus the
    ones it adds) must fit a long; the refused run leaves the Iceberg metadata as it was."""
    path = tmp_path / "t"
    make_table(path)
    first = convert(str(path))
    before = sorted((p.name, p.stat().st_size) for p in (path / "_iceberg" / "metadata").iterdir())
    start = first.delta_version + 1
    for i in range(liars):
        append_file(path, FILES + i)
        edit_add(path, start + i, change_stats(lambda s: s.update(numRecords=2**63 - 1 - (s["numRecords"] if liars
                                                                                        == 1 else 0))))
    with pytest.raises(CorruptLogError) as info:
        convert(str(path))
    message = str(info.value)
    assert str(path) in message and "long" in message and info.value.version in range(start, start + liars), message
    assert sorted((p.name, p.stat().st_size) for p in (path / "_iceberg" / "metadata").iterdir()) == before
    assert StaticTable.from_metadata(first.metadata_location).scan().to_arrow().num_rows == FILES * ROWS
