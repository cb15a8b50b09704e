"""footer_stats: one file's Delta stats against its own parquet footer (issue 11). Files are written with pyarrow;
the stats are what parse_stats gives for the JSON a writer put in the log, honest or not."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_deltaberg.core.delta.file_checks.file_footer import FileFooter, read_file_footer
from airflow_deltaberg.core.delta.file_checks.footer_stats import size_mismatch, stats_columns, stats_mismatches
from airflow_deltaberg.core.delta.schema import StructType, parse_schema
from airflow_deltaberg.core.delta.stats.stats import parse_stats
from airflow_deltaberg.core.storage import open_storage

UTC = dt.timezone.utc


def delta_schema(*fields: tuple[str, Any], mapping: dict[str, tuple[int, str]] | None = None) -> StructType:
    def field(name: str, t: Any) -> dict[str, Any]:
        metadata = {}
        if mapping and name in mapping:
            column_id, physical = mapping[name]
            metadata = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": physical}
        return {"name": name, "type": t, "nullable": True, "metadata": metadata}
    return parse_schema(json.dumps({"type": "struct", "fields": [field(n, t) for n, t in fields]}))


def footer(tmp_path: Path, table: pa.Table, **options: Any) -> pq.FileMetaData:
    target = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
    pq.write_table(table, target, **options)
    return pq.ParquetFile(target).metadata


def parsed(stats: dict[str, Any], schema: StructType) -> dict[str, Any]:
    return parse_stats(pa.array([json.dumps(stats)]), schema).to_pylist()[0]


def check(schema: StructType, stats: dict[str, Any], meta: pq.FileMetaData, mode: str = "none",
          **kwargs: Any) -> list[str]:
    return stats_mismatches(parsed(stats, schema), meta, stats_columns(schema, mode), **kwargs)


TS = pa.timestamp("us", "UTC")


def ts_table() -> pa.Table:
    return pa.table({"ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, 1, 250, tzinfo=UTC),
                                     dt.datetime(2024, 1, 1, 0, 0, 4, 500, tzinfo=UTC), None], TS)})


def ts_stats(low: str, high: str, nulls: int = 1, records: int = 3) -> dict[str, Any]:
    return {"numRecords": records, "minValues": {"ts": low}, "maxValues": {"ts": high}, "nullCount": {"ts": nulls}}


def test_timestamps_truncated_to_milliseconds_cover(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"))
    meta = footer(tmp_path, ts_table())
    # What Delta (Spark, deltalake) writes: both bounds cut down to the millisecond.
    assert check(schema, ts_stats("2024-01-01T00:00:01.000Z", "2024-01-01T00:00:04.000Z"), meta) == []


def test_a_timestamp_minimum_above_the_file_is_flagged(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"))
    meta = footer(tmp_path, ts_table())
    problems = check(schema, ts_stats("2024-01-01T00:00:01.001Z", "2024-01-01T00:00:04.000Z"), meta)
    assert len(problems) == 1 and "column ts: minValues" in problems[0] and "00:00:01.000250" in problems[0]


def test_a_timestamp_maximum_below_the_files_millisecond_is_flagged(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"))
    meta = footer(tmp_path, ts_table())
    problems = check(schema, ts_stats("2024-01-01T00:00:01.000Z", "2024-01-01T00:00:03.999Z"), meta)
    assert len(problems) == 1 and "column ts: maxValues" in problems[0]


def test_timestamp_ntz_and_nanosecond_files(tmp_path: Path) -> None:
    schema = delta_schema(("t", "timestamp_ntz"))
    values = pa.array([dt.datetime(2021, 11, 18, 2, 30, 0, 123456), dt.datetime(2013, 7, 5, 17, 1)],
                      pa.timestamp("ns"))
    meta = footer(tmp_path, pa.table({"t": values}), coerce_timestamps=None, version="2.6")
    good = {"numRecords": 2, "minValues": {"t": "2013-07-05T17:01:00.000"},
            "maxValues": {"t": "2021-11-18T02:30:00.123"}, "nullCount": {"t": 0}}
    assert check(schema, good, meta) == []
    bad = {**good, "minValues": {"t": "2013-07-05T17:01:00.001"}}
    assert len(check(schema, bad, meta)) == 1


def test_record_and_null_counts_must_equal_the_footers(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"))
    meta = footer(tmp_path, ts_table())
    low, high = "2024-01-01T00:00:01.000Z", "2024-01-01T00:00:04.000Z"
    assert check(schema, ts_stats(low, high, records=2), meta) == ["numRecords 2 but the file has 3 rows"]
    assert check(schema, ts_stats(low, high, nulls=0), meta) == ["column ts: nullCount 0 but the file has 1 nulls"]


def test_wide_bounds_only_check_what_a_null_count_of_0_or_every_row_says(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"))
    meta = footer(tmp_path, ts_table())
    low, high = "2024-01-01T00:00:01.000Z", "2024-01-01T00:00:04.000Z"
    assert check(schema, {**ts_stats(low, high, nulls=2), "tightBounds": False}, meta) == []
    assert len(check(schema, {**ts_stats(low, high, nulls=0), "tightBounds": False}, meta)) == 1


def test_a_file_with_a_deletion_vector_only_checks_its_record_count(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"))
    meta = footer(tmp_path, ts_table())
    # Tight bounds of the rows not deleted may lie inside the footer's: not comparable.
    inside = ts_stats("2024-01-01T00:00:02.000Z", "2024-01-01T00:00:03.000Z", nulls=0)
    assert check(schema, inside, meta, has_deletion_vector=True) == []
    assert len(check(schema, {**inside, "numRecords": 2}, meta, has_deletion_vector=True)) == 1


def strings(values: list[str | None]) -> pa.Table:
    return pa.table({"s": pa.array(values, pa.string())})


S = delta_schema(("s", "string"))


def s_stats(low: str, high: str) -> dict[str, Any]:
    return {"numRecords": 2, "minValues": {"s": low}, "maxValues": {"s": high}, "nullCount": {"s": 0}}


def test_strings_cut_as_delta_on_spark_does_cover(tmp_path: Path) -> None:
    long_min, long_max = "a" * 40 + "x", "m" * 40 + "y"
    meta = footer(tmp_path, strings([long_min, long_max]))
    assert check(S, s_stats(long_min[:32], long_max[:32] + "\ufffd"), meta) == []
    assert check(S, s_stats(long_min[:32], long_max[:32] + "\x7f"), meta) == []  # Delta 4.x's tie-breaker
    # U+FFFD sorts below a character beyond U+FFFF: Delta's older cut, still not flagged.
    emoji = "e" * 32 + "\U0001F600"
    assert check(S, s_stats(long_min[:32], emoji[:32] + "\ufffd"), footer(tmp_path, strings([long_min, emoji]))) == []
    # A writer that cuts the maximum to the prefix length without a tie-breaker.
    assert check(S, s_stats(long_min[:32], long_max[:32]), meta) == []


def test_a_string_maximum_that_is_a_short_prefix_is_flagged(tmp_path: Path) -> None:
    meta = footer(tmp_path, strings(["apple", "banana"]))
    assert check(S, s_stats("apple", "banana"), meta) == []
    problems = check(S, s_stats("apple", "banan"), meta)
    assert len(problems) == 1 and "maxValues 'banan'" in problems[0]
    assert len(check(S, s_stats("apples", "banana"), meta)) == 1  # minimum above the file's


def test_strings_the_parquet_writer_cut_are_not_flagged(tmp_path: Path) -> None:
    true_min, true_max = "b" * 80 + "1", "y" * 80 + "2"
    # As parquet-rs writes them by default: cut to 64 bytes, the maximum's last character incremented.
    meta = footer(tmp_path, strings([true_min[:64], true_max[:63] + "z"]))
    assert check(S, s_stats(true_min, true_max), meta) == []


def test_floats_compare_at_the_files_precision_and_nan_says_nothing(tmp_path: Path) -> None:
    schema = delta_schema(("f", "float"), ("d", "double"))
    table = pa.table({"f": pa.array([1.1, 3.14, float("nan")], pa.float32()),
                      "d": pa.array([-0.0, 2.5, float("nan")], pa.float64())})
    meta = footer(tmp_path, table)
    stats = {"numRecords": 3, "minValues": {"f": 1.1, "d": 0.0}, "maxValues": {"f": 3.14, "d": 2.5},
             "nullCount": {"f": 0, "d": 0}}
    assert check(schema, stats, meta) == []
    assert check(schema, {**stats, "maxValues": {"f": "NaN", "d": "NaN"}}, meta) == []
    assert len(check(schema, {**stats, "maxValues": {"f": 3.13, "d": 2.4}}, meta)) == 2


def test_decimals_dates_and_integers_compare_exactly(tmp_path: Path) -> None:
    schema = delta_schema(("dec", "decimal(10,2)"), ("day", "date"), ("n", "short"))
    table = pa.table({"dec": pa.array([Decimal("-5.25"), Decimal("123.45")], pa.decimal128(10, 2)),
                      "day": pa.array([dt.date(2023, 1, 15), dt.date(2024, 6, 15)]),
                      "n": pa.array([-3, 7], pa.int16())})
    meta = footer(tmp_path, table)
    stats = {"numRecords": 2, "minValues": {"dec": -5.25, "day": "2023-01-15", "n": -3},
             "maxValues": {"dec": 123.45, "day": "2024-06-15", "n": 7}, "nullCount": {"dec": 0, "day": 0, "n": 0}}
    assert check(schema, stats, meta) == []
    lies = {**stats, "minValues": {"dec": -5.24, "day": "2023-01-16", "n": -2},
            "maxValues": {"dec": 123.44, "day": "2024-06-14", "n": 6}}
    assert len(check(schema, lies, meta)) == 6


def test_nested_struct_leaves_under_column_mapping(tmp_path: Path) -> None:
    struct_type = {"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True,
         "metadata": {"delta.columnMapping.id": 3, "delta.columnMapping.physicalName": "col-x"}}]}
    schema = delta_schema(("id", "long"), ("st", struct_type), mapping={"id": (1, "col-id"), "st": (2, "col-st")})
    inner = pa.field("col-x", pa.int64(), metadata={b"PARQUET:field_id": b"3"})
    arrow_schema = pa.schema([pa.field("col-id", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
                              pa.field("col-st", pa.struct([inner]), metadata={b"PARQUET:field_id": b"2"})])
    table = pa.table({"col-id": [1, 2, 3], "col-st": [{"col-x": 10}, None, {"col-x": 30}]}, schema=arrow_schema)
    meta = footer(tmp_path, table)
    stats = {"numRecords": 3, "minValues": {"col-id": 1, "col-st": {"col-x": 10}},
             "maxValues": {"col-id": 3, "col-st": {"col-x": 30}}, "nullCount": {"col-id": 0, "col-st": {"col-x": 1}}}
    for mode in ("name", "id"):
        assert check(schema, stats, meta, mode) == []
        lie = {**stats, "maxValues": {"col-id": 3, "col-st": {"col-x": 29}}}
        problems = check(schema, lie, meta, mode)
        assert len(problems) == 1 and problems[0].startswith("column st.x: maxValues 29"), problems
    # id mode finds columns by field id when the file's names differ.
    renamed = arrow_schema.set(0, arrow_schema.field(0).with_name("other"))
    meta = footer(tmp_path, pa.table({"other": [1, 2, 3], "col-st": table.column("col-st")}, schema=renamed))
    assert len(check(schema, {**stats, "minValues": {"col-id": 2}}, meta, "id")) == 1
    # Name mode: the file has no column col-id (its readers read nulls), so no bound can hold.
    problems = check(schema, {**stats, "minValues": {"col-id": 2}}, meta, "name")
    assert problems == ["column id: not in the file (every value null), but the stats give a minValues, a "
                        "maxValues, a nullCount of 0 (of 3 rows)"], problems


def test_columns_without_footer_statistics_or_comparable_types_are_skipped(tmp_path: Path) -> None:
    schema = delta_schema(("ts", "timestamp"), ("n", "long"))
    table = pa.table({"ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)], TS), "n": [5]})
    stats = {"numRecords": 1, "minValues": {"ts": "2025-01-01T00:00:00.000Z", "n": 6},
             "maxValues": {"ts": "2025-01-01T00:00:00.000Z", "n": 6}, "nullCount": {"ts": 0, "n": 0}}
    int96 = footer(tmp_path, table, use_deprecated_int96_timestamps=True, write_statistics=["n"])
    problems = check(schema, stats, int96)
    assert len(problems) == 1 and problems[0].startswith("column n: minValues 6")
    assert check(schema, stats, footer(tmp_path, table, write_statistics=False)) == []


def test_row_groups_are_combined(tmp_path: Path) -> None:
    schema = delta_schema(("n", "long"))
    meta = footer(tmp_path, pa.table({"n": [5, None, 1, 9, None, None]}), row_group_size=2)
    assert meta.num_row_groups == 3
    good = {"numRecords": 6, "minValues": {"n": 1}, "maxValues": {"n": 9}, "nullCount": {"n": 3}}
    assert check(schema, good, meta) == []
    assert len(check(schema, {**good, "minValues": {"n": 2}, "nullCount": {"n": 2}}, meta)) == 2


def test_partition_columns_and_absent_stats_are_skipped(tmp_path: Path) -> None:
    schema = delta_schema(("n", "long"), ("part", "string"))
    meta = footer(tmp_path, pa.table({"n": [1, 2]}))
    columns = stats_columns(schema, "none", ["part"])
    assert [c.name for c in columns] == ["n"]
    assert stats_mismatches(None, meta, columns) == []
    assert stats_mismatches(parsed({"numRecords": 2}, schema), meta, columns) == []


@pytest.mark.parametrize("stats", [{"numRecords": 2, "minValues": {"n": 1}}, {"numRecords": 2, "maxValues": {"n": 2}}])
def test_one_bound_alone_is_checked(stats: dict[str, Any], tmp_path: Path) -> None:
    schema = delta_schema(("n", "long"))
    meta = footer(tmp_path, pa.table({"n": [1, 2]}))
    assert check(schema, stats, meta) == []


# -- a column absent from the file (issue 11, A6a) ------------------------------------------------------------


def test_a_column_absent_from_the_file_is_all_null_so_its_stats_must_say_so(tmp_path: Path) -> None:
    """The fixture parsed-stats: its files have no ts_col (added to the schema by a writer that wrote none), its
    stats say nullCount 0 and give bounds. Readers read nulls; ``ts_col IS NULL`` data skipping loses every row."""
    schema = delta_schema(("id", "long"), ("ts_col", "timestamp"))
    meta = footer(tmp_path, pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    base = {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3}, "nullCount": {"id": 0}}
    honest = {**base, "nullCount": {"id": 0, "ts_col": 3}}
    assert check(schema, honest, meta) == []
    assert check(schema, base, meta) == []  # no stats for it at all: nothing claimed
    lying = {"numRecords": 3, "minValues": {"id": 1, "ts_col": "1970-01-01T00:00:01.000Z"},
             "maxValues": {"id": 3, "ts_col": "1970-01-01T00:00:02.000Z"}, "nullCount": {"id": 0, "ts_col": 0}}
    assert check(schema, lying, meta) == ["column ts_col: not in the file (every value null), but the stats give a "
                                          "minValues, a maxValues, a nullCount of 0 (of 3 rows)"]
    assert check(schema, {**honest, "nullCount": {"id": 0, "ts_col": 2}}, meta) == [
        "column ts_col: not in the file (every value null), but the stats give a nullCount of 2 (of 3 rows)"]
    # Wide bounds: a null count below the rows may be an undercount, 0 may not.
    assert check(schema, {**honest, "nullCount": {"id": 0, "ts_col": 2}, "tightBounds": False}, meta) == []
    assert len(check(schema, {**honest, "nullCount": {"id": 0, "ts_col": 0}, "tightBounds": False}, meta)) == 1
    # A deletion vector: the null count describes the rows not deleted; bounds are still impossible.
    assert check(schema, {**honest, "nullCount": {"id": 0, "ts_col": 1}}, meta, has_deletion_vector=True) == []
    assert len(check(schema, lying, meta, has_deletion_vector=True)) == 1


def test_an_absent_nested_leaf_is_flagged_and_a_footer_out_of_step_is_not(tmp_path: Path) -> None:
    struct_type = {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}},
                                                {"name": "y", "type": "long", "nullable": True, "metadata": {}}]}
    schema = delta_schema(("st", struct_type))
    meta = footer(tmp_path, pa.table({"st": pa.array([{"x": 1}, {"x": 2}], pa.struct([("x", pa.int64())]))}))
    stats = {"numRecords": 2, "minValues": {"st": {"x": 1}}, "maxValues": {"st": {"x": 2}},
             "nullCount": {"st": {"x": 0, "y": 0}}}
    assert check(schema, stats, meta) == [
        "column st.y: not in the file (every value null), but the stats give a nullCount of 0 (of 2 rows)"]


# -- footers without statistics: the values are read (issue 11, A6b) -------------------------------------------


def footer_of(tmp_path: Path, table: pa.Table, **options: Any) -> FileFooter:
    target = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
    pq.write_table(table, target, **options)
    return read_file_footer(open_storage(str(tmp_path)), str(target), table=str(tmp_path))


def check_file(schema: StructType, stats: dict[str, Any], found: FileFooter, **kwargs: Any) -> list[str]:
    return stats_mismatches(parsed(stats, schema), found.metadata, stats_columns(schema, "none"),
                            read_columns=found.read_columns, **kwargs)


def test_a_footer_without_statistics_is_checked_against_the_values(tmp_path: Path) -> None:
    """Photon (Databricks) writes no min/max in its footers: the bounds come from the column's values."""
    struct_type = {"type": "struct", "fields": [{"name": "s", "type": "string", "nullable": True, "metadata": {}}]}
    schema = delta_schema(("n", "long"), ("c", "string"), ("d", "decimal(5,2)"), ("day", "date"),
                          ("st", struct_type), ("f", "float"))
    table = pa.table({
        "n": pa.array([5, None, 1], pa.int64()),
        "c": pa.array(["new", "after", ""], pa.string()).dictionary_encode(),
        "d": pa.array([Decimal("1.50"), Decimal("-2.25"), None], pa.decimal128(5, 2)),
        "day": pa.array([dt.date(2024, 1, 2), dt.date(2023, 5, 6), None], pa.date32()),
        "st": pa.array([{"s": "b"}, None, {"s": "a"}], pa.struct([("s", pa.string())])),
        "f": pa.array([0.1, float("nan"), -3.5], pa.float32()),
    })
    found = footer_of(tmp_path, table, write_statistics=False)
    honest = {"numRecords": 3,
              "minValues": {"n": 1, "c": "", "d": "-2.25", "day": "2023-05-06", "st": {"s": "a"}, "f": -3.5},
              "maxValues": {"n": 5, "c": "new", "d": "1.50", "day": "2024-01-02", "st": {"s": "b"}, "f": 0.1},
              "nullCount": {"n": 1, "c": 0, "d": 1, "day": 1, "st": {"s": 1}, "f": 0}}
    assert check_file(schema, honest, found) == []
    assert check(schema, {**honest, "maxValues": {"c": "0000"}}, found.metadata) == []  # the footer alone: silent
    lies = {"maxValues": {"n": 4}, "minValues": {"c": "a"}, "nullCount": {"d": 0}}
    for part, values in lies.items():
        problems = check_file(schema, {**honest, part: {**honest[part], **values}}, found)
        (column,) = values
        assert len(problems) == 1 and problems[0].startswith(f"column {column}: {part} "), problems
    problems = check_file(schema, {**honest, "maxValues": {**honest["maxValues"], "st": {"s": "a"}}}, found)
    assert len(problems) == 1 and problems[0].startswith("column st.s: maxValues 'a'"), problems
    problems = check_file(schema, {**honest, "minValues": {**honest["minValues"], "day": "2023-05-07"}}, found)
    assert len(problems) == 1 and "2023-05-06" in problems[0], problems


def test_int96_timestamps_are_checked_against_the_values(tmp_path: Path) -> None:
    """INT96 footers carry no usable bounds (their order is undefined): Spark's INT96 files are checked by value."""
    schema = delta_schema(("ts", "timestamp"))
    found = footer_of(tmp_path, ts_table(), use_deprecated_int96_timestamps=True)
    assert found.metadata.schema.column(0).physical_type == "INT96"
    low, high = "2024-01-01T00:00:01.000Z", "2024-01-01T00:00:04.000Z"
    assert check_file(schema, ts_stats(low, high), found) == []
    problems = check_file(schema, ts_stats("2024-01-01T00:00:01.001Z", high), found)
    assert len(problems) == 1 and problems[0].startswith("column ts: minValues"), problems
    assert len(check_file(schema, ts_stats(low, "2024-01-01T00:00:03.999Z"), found)) == 1
    # A deletion vector: the bounds describe the rows not deleted; the values are not read for them.
    assert check_file(schema, ts_stats("2024-01-01T00:00:02.000Z", high, nulls=0), found,
                      has_deletion_vector=True) == []


# -- the size of the file (issue 11, B2) ----------------------------------------------------------------------


def test_the_logged_size_must_be_the_files(tmp_path: Path) -> None:
    found = footer_of(tmp_path, pa.table({"n": [1, 2]}))
    real = (tmp_path / "f0.parquet").stat().st_size
    assert found.size == real
    assert size_mismatch(real, found) is None
    for wrong in (real + 1, 2**31 - 1, 2**63 - 1, 1):
        assert size_mismatch(wrong, found) == f"size {wrong} but the file has {real} bytes"
