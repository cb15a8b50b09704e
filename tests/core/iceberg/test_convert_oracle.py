"""Oracle tests: after convert(), pyiceberg reads exactly the rows that deltalake reads from the Delta table.

Both read paths of pyiceberg are checked: the metadata file (``StaticTable.from_metadata``) and the table
registered in a SQLite ``SqlCatalog``. Rows are compared as sorted lists of row tuples over every column.

Normalizations (the only differences tolerated between the two readers):

* types: every timestamp becomes ``timestamp[us]`` with tz ``UTC`` when it had any zone (Iceberg has only
  microseconds and UTC-adjusted ``timestamptz``; nanosecond Parquet timestamps are truncated to microseconds
  by both sides, pyiceberg with its documented downcast), ``string_view``/``large_string`` become ``string``,
  ``binary_view``/``large_binary`` become ``binary``, large lists become lists, dictionaries their values;
  byte/short columns (Iceberg ``int``) compare as Python ints, which is exact;
* values: NaN becomes a marker (NaN != NaN would fail equal lists), a struct becomes a tuple of its
  (name, value) pairs, lists and map entries become tuples (entry order kept: both read the same Parquet);
* rows: compared sorted by their ``repr`` (Delta and Iceberg promise no row order), columns by name in the
  Delta schema's order (the column name sets must be equal).

Oracle: ``deltalake.DeltaTable(path).to_pyarrow_table()``. Where that pyarrow reader refuses the table
(reader features it does not implement: deletionVectors, columnMapping, v2Checkpoint; or deltalake's own bug
parsing negative decimal partition values) the same deltalake table is read through its DataFusion engine
(``QueryBuilder``), which implements those features. Tables with column mapping always take DataFusion:
deltalake 1.6.6's pyarrow reader accepts reader version 2 column mapping (``id`` mode) but looks the
physical columns up by logical name and silently returns nulls (fixture cdf-column-mapping-id-mode).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.oracle import (
    assert_same_rows,
    delta_arrow,
    normal_type,
    normalized_rows,
    open_sql_catalog,
    sql_catalog_config,
)

from airflow_deltaberg.core.errors import NotADeltaTableError, UnsupportedTypeError
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert

CATALOG_NAME = "deltaberg"
IDENTIFIER = "oracle.converted"

# Fixture tables whose live files carry deletion vectors: conversion must refuse them and write nothing.
DV_TABLES = {"table-with-dv-small", "with-short-dv", "compacted-log-files-table", "cdf-table-with-cdc-and-dvs"}
# Fixture tables with a type Iceberg v2 cannot represent (or a type change its readers cannot apply).
UNSUPPORTED_TYPE_TABLES = {
    "void-column": "void",
    "unshredded-variant": "variant",
    "table-with-geo": "geometry",
    "type-widening": "widened from byte to double",
    # Column mapping without nested ids: the files give list elements and map keys/values no field ids.
    "stats-writing-all-types/delta": "list or map of primitives under column mapping without nested ids",
}
# Fixtures that ship their log without their data files (the log lists files that are not there).
MISSING_DATA_TABLES = {"300k-add-files-100-col-partitioned", "app-txn-with-last-updated",
                       "with_checkpoint_no_last_checkpoint"}
# Not a Delta table at all (a .crc file and no commit): both deltalake and our reader refuse it.
NOT_DELTA_TABLES = {"crc-malformed"}
# Tables that convert correctly but which pyiceberg cannot read, for a pyiceberg bug (strict: the xfail
# turns into a failure once pyiceberg is fixed, so the entry can go).
# (timestamp-partitioned-table used to be here: pyiceberg 0.12 raises ResolveError for a required partition
# column absent from the data file; the converter now makes partition columns optional.)
PYICEBERG_BUGS: dict[str, tuple[type[Exception], str]] = {}


# --------------------------------------------------------------------------------------------------- helpers


def convert_and_register(path: Path, tmp_path: Path, **kwargs: Any) -> ConversionResult:
    return convert(str(path), catalog_config=sql_catalog_config(tmp_path), identifier=IDENTIFIER, **kwargs)


def iceberg_reads(result: ConversionResult, tmp_path: Path) -> dict[str, pa.Table]:
    """The converted table read through the metadata file and through the SQL catalog."""
    static = StaticTable.from_metadata(result.metadata_location).scan().to_arrow()
    registered = open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER)
    assert registered.metadata_location == result.metadata_location
    return {"static": static, "catalog": registered.scan().to_arrow()}


def assert_oracle(path: Path, tmp_path: Path, **kwargs: Any) -> ConversionResult:
    """Convert ``path`` and check both pyiceberg read paths against deltalake."""
    result = convert_and_register(path, tmp_path, **kwargs)
    delta, _ = delta_arrow(path)
    for how, table in iceberg_reads(result, tmp_path).items():
        assert_same_rows(table, delta, f"{path.name} read via {how}")
    return result


def metadata_snapshot(root: Path) -> dict[str, bytes]:
    """Every file under <root>/metadata with its content (empty when there is no metadata folder)."""
    folder = root / "_iceberg" / "metadata"
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def data_files_on_disk(source: Path) -> list[Path]:
    """Files of the fixture outside its log (data, deletion vectors, change data)."""
    return [p for p in source.rglob("*") if p.is_file() and "_delta_log" not in p.relative_to(source).parts]


# ------------------------------------------------------------------------------------------- fixture tables


def test_every_fixture_table(fixture_table: str, fixtures_dir: Path,
                             copy_fixture: Callable[[str], Path], tmp_path: Path) -> None:
    """Each fixture table converts to the rows deltalake reads, or fails the way it must, writing nothing."""
    if fixture_table in MISSING_DATA_TABLES:
        assert not data_files_on_disk(fixtures_dir / fixture_table), "the fixture has data files now: test it"
        pytest.skip(f"{fixture_table} ships only its _delta_log: the data files its log lists are absent")
    path = copy_fixture(fixture_table)
    expected_error: tuple[type[Exception], str] | None = None
    if fixture_table in UNSUPPORTED_TYPE_TABLES:
        expected_error = (UnsupportedTypeError, UNSUPPORTED_TYPE_TABLES[fixture_table])
    elif fixture_table in NOT_DELTA_TABLES:
        expected_error = (NotADeltaTableError, "no commit")
    if expected_error is not None:
        error, text = expected_error
        with pytest.raises(error, match=text):
            convert_and_register(path, tmp_path)
        assert metadata_snapshot(path) == {}, "a refused conversion must write nothing"
        assert not open_sql_catalog(tmp_path, CATALOG_NAME).table_exists(IDENTIFIER)
        return
    if fixture_table in PYICEBERG_BUGS:
        bug, reason = PYICEBERG_BUGS[fixture_table]
        result = convert_and_register(path, tmp_path)
        try:
            delta, _ = delta_arrow(path)
            for table in iceberg_reads(result, tmp_path).values():
                assert_same_rows(table, delta)
        except bug:
            pytest.xfail(reason)
        pytest.fail(f"pyiceberg now reads {fixture_table}: drop it from PYICEBERG_BUGS ({reason})")
    assert_oracle(path, tmp_path)


# ------------------------------------------------------------------------------- tables written by deltalake

UTC = dt.timezone.utc


def _append_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"row-{i}" for i in ids]})


def test_appends(tmp_path: Path) -> None:
    path = tmp_path / "appends"
    for start in (0, 10, 20):
        write_deltalake(str(path), _append_rows(start, 5), mode="append")
    result = assert_oracle(path, tmp_path)
    assert result.records == 15


def test_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "overwrite"
    write_deltalake(str(path), _append_rows(0, 5))
    write_deltalake(str(path), _append_rows(100, 3), mode="overwrite")
    result = assert_oracle(path, tmp_path)
    assert result.records == 3


def test_deletes(tmp_path: Path) -> None:
    path = tmp_path / "deletes"
    write_deltalake(str(path), _append_rows(0, 10))
    write_deltalake(str(path), _append_rows(10, 10), mode="append")
    deltalake.DeltaTable(str(path)).delete("id % 3 = 0")  # rewrites both files
    deltalake.DeltaTable(str(path)).delete("id >= 10")  # removes what is left of the second file
    result = assert_oracle(path, tmp_path)
    assert result.records == len([i for i in range(10) if i % 3])


def test_partitions_with_nulls_and_special_characters(tmp_path: Path) -> None:
    path = tmp_path / "partitioned"
    values = ["a b", "x/y", "p%q", "c:d=e", "ü#&?", "__dunder__", None, "", "a b"]
    n = len(values)
    data = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "part": pa.array(values, pa.string()),
        "day": pa.array([dt.date(2024, 1, 1 + i % 3) if i % 4 else None for i in range(n)]),
        "num": pa.array([i % 2 if i % 5 else None for i in range(n)], pa.int32()),
        "flag": pa.array([bool(i % 2) if i % 3 else None for i in range(n)]),
        "amount": pa.array([decimal.Decimal(f"{i}.25") if i % 2 else None for i in range(n)], pa.decimal128(9, 2)),
        "at": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, 123456 + i, tzinfo=UTC) if i % 3 else None
                        for i in range(n)], pa.timestamp("us", "UTC")),
        "local": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, i) if i % 2 else None for i in range(n)],
                          pa.timestamp("us")),
    })
    write_deltalake(str(path), data, partition_by=["part", "day", "num", "flag", "amount", "at", "local"])
    write_deltalake(str(path), data.slice(0, 4), mode="append")
    assert_oracle(path, tmp_path)


def test_schema_evolution_merge(tmp_path: Path) -> None:
    path = tmp_path / "evolution"
    write_deltalake(str(path), _append_rows(0, 3), partition_by=["label"])
    more = pa.table({"id": pa.array([3, 4], pa.int64()), "label": ["row-3", "row-4"],
                     "extra": pa.array([1.5, None]),
                     "nested": pa.array([{"a": 1, "b": "x"}, None],
                                        pa.struct([("a", pa.int32()), ("b", pa.string())]))})
    write_deltalake(str(path), more, mode="append", schema_mode="merge")
    assert_oracle(path, tmp_path)


def all_types_table(start: int = 0) -> pa.Table:
    """Every Delta type Iceberg can represent, nested ones included, with nulls, extremes and NaN."""
    n = 6
    ids = list(range(start, start + n))
    nested_type = pa.struct([
        ("x", pa.int32()),
        ("inner", pa.struct([("y", pa.string()), ("z", pa.list_(pa.float64()))])),
    ])
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "b": pa.array([True, False, None, True, False, True]),
        "i8": pa.array([-128, 127, None, 0, 1, -1], pa.int8()),
        "i16": pa.array([-32768, 32767, None, 0, 2, -2], pa.int16()),
        "i32": pa.array([-(2**31), 2**31 - 1, None, 0, 3, -3], pa.int32()),
        "i64": pa.array([-(2**63), 2**63 - 1, None, 0, 4, -4], pa.int64()),
        "f32": pa.array([-1.5, 3.25, None, float("nan"), 0.0, -0.0], pa.float32()),
        "f64": pa.array([-1e300, 1e300, None, float("nan"), float("inf"), -0.0], pa.float64()),
        "dec": pa.array([decimal.Decimal(v) if v else None for v in ("-99999999.99", "99999999.99", "", "0.01",
                                                                       "-0.01", "0")], pa.decimal128(10, 2)),
        "s": pa.array(["", "ascii", None, "ünï©ødé", "x" * 40, "tab\tnew\nline"]),
        "bin": pa.array([b"", b"\x00\xff", None, b"bytes", b"\x00" * 40, b"z"], pa.binary()),
        "d": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None, dt.date(1970, 1, 1),
                       dt.date(2024, 2, 29), dt.date(1969, 12, 31)]),
        "ts": pa.array([dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(2262, 4, 11, tzinfo=UTC), None,
                        dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
                        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)], pa.timestamp("us", "UTC")),
        "ts_ntz": pa.array([dt.datetime(1900, 1, 1), dt.datetime(2262, 4, 11), None, dt.datetime(1970, 1, 1),
                            dt.datetime(2024, 1, 2, 3, 4, 5, 678901), dt.datetime(1969, 12, 31, 23, 59, 59, 999999)],
                           pa.timestamp("us")),
        "lst": pa.array([[1, 2], [], None, [None, 3], [4], [5, 6, 7]], pa.list_(pa.int32())),
        "mp": pa.array([[("a", 1)], [], None, [("b", None), ("c", 2)], [("d", 3)], [("e", 4)]],
                       pa.map_(pa.string(), pa.int64())),
        "st": pa.array([{"x": 1, "inner": {"y": "p", "z": [1.0]}}, {"x": None, "inner": None}, None,
                        {"x": 2, "inner": {"y": None, "z": None}}, {"x": 3, "inner": {"y": "q", "z": []}},
                        {"x": 4, "inner": {"y": "r", "z": [None, 2.5]}}], nested_type),
        # No null list of structs here: pyiceberg reads it as [] (test_null_collection_of_structs).
        "lst_of_st": pa.array([[{"k": "a", "v": [1]}], [None], [], [{"k": None, "v": None}], [{"k": "b", "v": []}],
                               [{"k": "c", "v": [2, 3]}]],
                              pa.list_(pa.struct([("k", pa.string()), ("v", pa.list_(pa.int64()))]))),
        "mp_of_lst": pa.array([[("a", [1.5])], None, [("b", None)], [], [("c", [])], [("d", [2.5, None])]],
                              pa.map_(pa.string(), pa.list_(pa.float64()))),
    })


def test_all_types(tmp_path: Path) -> None:
    path = tmp_path / "all_types"
    write_deltalake(str(path), all_types_table(0))
    write_deltalake(str(path), all_types_table(100), mode="append")
    assert_oracle(path, tmp_path)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "pyiceberg 0.12 bug: ArrowProjectionVisitor.list/map rebuild a list (map) of structs with "
    "LargeListArray.from_arrays / MapArray.from_arrays(offsets, ...) and drop its validity: null reads as []"))
@pytest.mark.parametrize("kind", ["list", "map"])
def test_null_collection_of_structs(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"null_{kind}_of_structs"
    element = pa.struct([("k", pa.string())])
    if kind == "list":
        column = pa.array([[{"k": "a"}], None, []], pa.list_(element))
    else:
        column = pa.array([[("a", {"k": "b"})], None, []], pa.map_(pa.string(), element))
    write_deltalake(str(path), pa.table({"id": [0, 1, 2], "c": column}))
    assert_oracle(path, tmp_path)


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping(mode: str, tmp_path: Path) -> None:
    path = tmp_path / f"column_mapping_{mode}"
    data = all_types_table(0).select(["id", "s", "dec", "ts"])
    write_deltalake(str(path), data, configuration={"delta.columnMapping.mode": mode})
    write_deltalake(str(path), all_types_table(100).select(data.column_names), mode="append")
    result = assert_oracle(path, tmp_path)
    # The physical names in the files are not the logical ones: the name mapping (or the field ids) did it.
    schema = StaticTable.from_metadata(result.metadata_location).schema()
    assert [f.name for f in schema.fields] == data.column_names


@pytest.mark.parametrize("column", ["lst", "mp"])
def test_column_mapping_lists_and_maps_without_nested_ids_are_refused(column: str, tmp_path: Path) -> None:
    """deltalake (like Delta without IcebergCompatV2) writes field ids on columns but none on list elements and map
    keys/values; Iceberg readers resolve such files by id and cannot read those columns (Iceberg Java fails)."""
    path = tmp_path / f"column_mapping_{column}"
    write_deltalake(str(path), all_types_table(0).select(["id", column]),
                    configuration={"delta.columnMapping.mode": "id"})
    with pytest.raises(UnsupportedTypeError, match=f"column {column} is a list or map of primitives"):
        convert_and_register(path, tmp_path)
    assert metadata_snapshot(path) == {}
    assert not open_sql_catalog(tmp_path, CATALOG_NAME).table_exists(IDENTIFIER)


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
def test_convert_again_after_new_commits(full: bool, tmp_path: Path) -> None:
    """A second conversion on top of the first reads the new rows; the first snapshot still reads the old."""
    path = tmp_path / "again"
    write_deltalake(str(path), _append_rows(0, 5), partition_by=["label"])
    first = assert_oracle(path, tmp_path)
    old_version = deltalake.DeltaTable(str(path)).version()
    write_deltalake(str(path), _append_rows(5, 5), mode="append", partition_by=["label"])
    deltalake.DeltaTable(str(path)).delete("id = 1")
    write_deltalake(str(path), _append_rows(10, 2), mode="append", partition_by=["label"])
    second = assert_oracle(path, tmp_path, full=full)
    assert second.mode == ("full" if full else "incremental")
    assert second.snapshot_id != first.snapshot_id
    assert second.delta_version == deltalake.DeltaTable(str(path)).version()

    old_rows, _ = delta_arrow(path, version=old_version)
    for table in (StaticTable.from_metadata(second.metadata_location),
                  open_sql_catalog(tmp_path, CATALOG_NAME).load_table(IDENTIFIER)):
        assert_same_rows(table.scan(snapshot_id=first.snapshot_id).to_arrow(), old_rows, "time travel")
        assert table.metadata.snapshot_by_id(first.snapshot_id) is not None
        ancestors = set()
        snap = table.metadata.snapshot_by_id(second.snapshot_id)
        while snap is not None:
            ancestors.add(snap.snapshot_id)
            snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
        assert first.snapshot_id in ancestors

    third = convert_and_register(path, tmp_path)
    assert third.mode == "up-to-date" and third.snapshot_id == second.snapshot_id


def test_empty_table_then_rows(tmp_path: Path) -> None:
    """A table whose only commit removed every row, then new rows."""
    path = tmp_path / "emptied"
    write_deltalake(str(path), _append_rows(0, 3))
    deltalake.DeltaTable(str(path)).delete()
    first = assert_oracle(path, tmp_path)
    assert first.records == 0
    write_deltalake(str(path), _append_rows(3, 2), mode="append")
    assert_oracle(path, tmp_path)



# ------------------------------------------------------------------------------------- filter pushdown safety

PUSHDOWN_SEED = 20_241_125
PUSHDOWN_PER_COLUMN = 16
LONG_PREFIX = "shared-prefix-longer-than-the-32-char-stats-prefix/"


def _pushdown_file(k: int) -> pa.Table:
    """File ``k`` of the pushdown table: value ranges shifted per file, nulls, negatives, NaN, long strings."""
    n = 8
    rows = range(n)
    null = {n - 1} if k != 2 else set()  # file 2 has no nulls at all

    def col(values: list[Any], t: pa.DataType, all_null: bool = False) -> pa.Array:
        return pa.array([None if (j in null or all_null) else v for j, v in zip(rows, values, strict=True)], t)

    base = dt.datetime(1969, 12, 31, 23, 59, 59, 998_500, tzinfo=UTC) + dt.timedelta(days=400 * (k - 1))
    return pa.table({
        "id": pa.array([k * 100 + j for j in rows], pa.int64()),
        "i8": col([(k - 2) * 40 + j for j in rows], pa.int8()),
        "i16": col([(k - 2) * 9000 + j * 3 for j in rows], pa.int16()),
        "i32": col([(k - 2) * 1_000_000 + j * 7 for j in rows], pa.int32(), all_null=k == 4),
        "i64": col([(k - 2) * 10**15 + j for j in rows], pa.int64()),
        "f32": col([(k - 2) * 1.5 + j * 0.25 for j in rows], pa.float32()),
        "f64": col([float("nan") if (k, j) == (3, 2) else (k - 2) * 1e6 + j / 3 for j in rows], pa.float64()),
        "dec": col([decimal.Decimal((k - 2) * 100_000 + j * 37).scaleb(-3) for j in rows], pa.decimal128(12, 3)),
        "s": col([f"{LONG_PREFIX}{k}{j}" if j % 2 else f"{'abc'[j % 3]}{k}-{j}" for j in rows], pa.string()),
        "bin": col([bytes([k, j]) * (1 + j % 3) for j in rows], pa.binary()),
        "d": col([dt.date(1969, 12, 25) + dt.timedelta(days=30 * k + j) for j in rows], pa.date32()),
        "ts": col([base + dt.timedelta(microseconds=j * 250_333) for j in rows], pa.timestamp("us", "UTC")),
        "ntz": col([base.replace(tzinfo=None) - dt.timedelta(microseconds=j * 1_001) for j in rows],
                   pa.timestamp("us")),
        "b": col([bool((j + k) % 2) if k != 1 else True for j in rows], pa.bool_()),
        "part": pa.array([None if k == 3 else f"p{k % 2}" for _ in rows], pa.string()),
    })


def _neighbours(v: Any, t: pa.DataType) -> list[Any]:
    """Values just below and just above ``v`` (for strings also its prefixes around the 32 char stats cut)."""
    if pa.types.is_boolean(t):
        return [True, False]
    if pa.types.is_integer(t):
        info = {8: 127, 16: 32767, 32: 2**31 - 1, 64: 2**63 - 1}[t.bit_width]
        return [x for x in (v - 1, v + 1) if -info - 1 <= x <= info]
    if pa.types.is_float32(t):
        import numpy as np

        f = np.float32(v)
        return [float(np.nextafter(f, np.float32(-np.inf))), float(np.nextafter(f, np.float32(np.inf)))]
    if pa.types.is_floating(t):
        return [math.nextafter(v, -math.inf), math.nextafter(v, math.inf)]
    if pa.types.is_decimal(t):
        step = decimal.Decimal(1).scaleb(-t.scale)
        return [v - step, v + step]
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return [v[:-1], v + v[:0].__class__(b"\x00" if isinstance(v, bytes) else "\x00"), v[:31], v[:32], v[:33]]
    if pa.types.is_date(t):
        return [v - dt.timedelta(days=1), v + dt.timedelta(days=1)]
    if pa.types.is_timestamp(t):
        us = dt.timedelta(microseconds=1)
        floor_ms = v - dt.timedelta(microseconds=v.microsecond % 1000)
        return [v - us, v + us, floor_ms, floor_ms + dt.timedelta(milliseconds=1), floor_ms - us]
    raise TypeError(t)


def _iceberg_literal(v: Any, t: pa.DataType) -> Any:
    if pa.types.is_timestamp(t):
        return v.isoformat()  # with +00:00 for timestamptz, without an offset for timestamp
    if pa.types.is_date(t):
        return v.isoformat()
    return v


def _predicates(delta: pa.Table, files: list[pa.Table], rng: Any) -> list[tuple[str, str, tuple[Any, ...]]]:
    """(column, operation, values) triples from the data's values, each file's boundaries and neighbours."""
    from pyarrow import compute as pc

    out: list[tuple[str, str, tuple[Any, ...]]] = []
    for name in delta.column_names:
        t = delta.schema.field(name).type
        present = [v for v in delta.column(name).to_pylist() if v is not None and not (isinstance(v, float)
                                                                                       and math.isnan(v))]
        if not present:
            continue
        ordered = sorted(set(present))
        anchors = {ordered[0], ordered[-1], ordered[len(ordered) // 2]}
        for f in files:
            column = f.column(name)
            if pa.types.is_floating(t):
                column = pc.filter(column, pc.invert(pc.is_nan(column)).fill_null(True))
            bounds = pc.min_max(column)
            anchors.update(x for x in (bounds["min"].as_py(), bounds["max"].as_py()) if x is not None)
        values = sorted(anchors | {n for a in anchors for n in _neighbours(a, t)}, key=repr)
        candidates: list[tuple[str, str, tuple[Any, ...]]] = [(name, "is_null", ()), (name, "not_null", ())]
        for v in values:
            ops = ["eq"] if pa.types.is_boolean(t) else ["eq", "lt", "gt", "lt_eq", "gt_eq"]
            candidates.extend((name, op, (v,)) for op in ops)
        if not pa.types.is_boolean(t):
            for _ in range(len(values)):
                lo, hi = sorted(rng.sample(values, 2))
                candidates.append((name, "range", (lo, hi)))
        rng.shuffle(candidates)
        out.extend(candidates[:PUSHDOWN_PER_COLUMN])
    return out


def test_filter_pushdown_never_loses_rows(tmp_path: Path) -> None:
    """Pruning by the converted bounds (and partition values) returns exactly the rows the filter selects."""
    import random

    from pyarrow import compute as pc
    from pyiceberg import expressions as ex
    from pyiceberg.io.pyarrow import ArrowScan

    path = tmp_path / "pushdown"
    files = [_pushdown_file(k) for k in range(5)]
    for k, f in enumerate(files):
        write_deltalake(str(path), f, mode="append" if k else "error", partition_by=["part"])
    result = convert(str(path))
    table = StaticTable.from_metadata(result.metadata_location)
    delta, how = delta_arrow(path)
    assert how == "pyarrow"
    delta = delta.cast(pa.schema([pa.field(f.name, normal_type(f.type)) for f in delta.schema]))
    columns = delta.column_names
    total_files = len(list(table.scan().plan_files()))
    assert total_files == 5

    rng = random.Random(PUSHDOWN_SEED)
    predicates = _predicates(delta.drop_columns(["id"]), files, rng)
    assert 150 <= len(predicates) <= 300
    iceberg_ops = {"eq": ex.EqualTo, "lt": ex.LessThan, "gt": ex.GreaterThan, "lt_eq": ex.LessThanOrEqual,
                   "gt_eq": ex.GreaterThanOrEqual}
    arrow_ops = {"eq": pc.equal, "lt": pc.less, "gt": pc.greater, "lt_eq": pc.less_equal,
                 "gt_eq": pc.greater_equal}
    pruned = 0
    for name, op, values in predicates:
        t = delta.schema.field(name).type
        field = pc.field(name)
        if op == "is_null":
            row_filter, expected = ex.IsNull(name), field.is_null()
        elif op == "not_null":
            row_filter, expected = ex.NotNull(name), field.is_valid()
        elif op == "range":
            lo, hi = values
            row_filter = ex.And(ex.GreaterThanOrEqual(name, _iceberg_literal(lo, t)),
                                ex.LessThan(name, _iceberg_literal(hi, t)))
            expected = pc.greater_equal(field, pa.scalar(lo, t)) & pc.less(field, pa.scalar(hi, t))
        else:
            (v,) = values
            row_filter = iceberg_ops[op](name, _iceberg_literal(v, t))
            expected = arrow_ops[op](field, pa.scalar(v, t))
        scan = table.scan(row_filter=row_filter)
        tasks = list(scan.plan_files())
        pruned += len(tasks) < total_files
        reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter, scan.case_sensitive)
        got = reader.to_table(tasks)
        want = delta.filter(expected)
        assert normalized_rows(got, columns) == normalized_rows(want, columns), f"{name} {op} {values!r}"
    # The bounds are used at all: a good share of the predicates skipped files.
    assert pruned > len(predicates) // 4


def test_type_widening_that_iceberg_can_promote(tmp_path: Path) -> None:
    """int -> long, float -> double and decimal(5,2) -> decimal(10,2) via delta.typeChanges: files written
    with the old types read as the new ones (Iceberg's valid promotions), and filters still see every row."""
    import json

    from pyiceberg import expressions as ex

    path = tmp_path / "widened"
    old = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "n": pa.array([-5, None, 2**31 - 1], pa.int32()),
                    "f": pa.array([1.5, -2.25, None], pa.float32()),
                    "dec": pa.array([decimal.Decimal("-999.99"), None, decimal.Decimal("1.05")], pa.decimal128(5, 2))})
    write_deltalake(str(path), old)
    log = path / "_delta_log"
    meta = next(json.loads(line)["metaData"] for line in (log / f"{0:020d}.json").read_text().splitlines()
                if "metaData" in line)
    schema = json.loads(meta["schemaString"])
    widened = {"n": ("integer", "long"), "f": ("float", "double"), "dec": ("decimal(5,2)", "decimal(10,2)")}
    for field in schema["fields"]:
        if field["name"] in widened:
            from_type, to_type = widened[field["name"]]
            field["type"] = to_type
            field["metadata"] = {"delta.typeChanges": [{"fromType": from_type, "toType": to_type, "tableVersion": 1}]}
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                "writerFeatures": ["typeWidening"]}
    actions = [{"commitInfo": {"timestamp": 1_800_000_000_000, "operation": "CHANGE COLUMN"}}, {"protocol": protocol},
               {"metaData": {**meta, "schemaString": json.dumps(schema),
                             "configuration": {"delta.enableTypeWidening": "true"}}}]
    (log / f"{1:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))

    result = convert(str(path))
    table = StaticTable.from_metadata(result.metadata_location)
    assert [str(f.field_type) for f in table.schema().fields] == ["long", "long", "double", "decimal(10, 2)"]
    # deltalake reads no typeWidening table: the expected rows are the old ones in the new types.
    expected = old.cast(pa.schema([("id", pa.int64()), ("n", pa.int64()), ("f", pa.float64()),
                                   ("dec", pa.decimal128(10, 2))]))
    assert_same_rows(table.scan().to_arrow(), expected)
    for row_filter, want in [(ex.EqualTo("n", 2**31 - 1), [3]), (ex.LessThan("f", -2.0), [2]),
                             (ex.GreaterThan("dec", decimal.Decimal("1.00")), [3])]:
        assert sorted(table.scan(row_filter=row_filter).to_arrow().column("id").to_pylist()) == want
