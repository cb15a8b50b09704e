"""file_types: the columns of a data file against the Delta schema (issue 11, C4/C6). A file whose column has a
type Delta could not have written for the schema's type (long read from a string column, decimal(5,2) data
under decimal(38,38)), or that lacks a column the schema declares NOT NULL, is unreadable for Iceberg readers
("Cannot promote ...", "Field is required") and read by casting, or not at all, by Delta readers. Files are
written with pyarrow, as Delta writers write each type."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_deltaberg.core.delta.file_checks.file_types import type_mismatches
from airflow_deltaberg.core.delta.schema import parse_schema

UTC = dt.timezone.utc
FIELD_ID = b"PARQUET:field_id"


def field(name: str, t: Any, *, nullable: bool = True, **metadata: Any) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": nullable, "metadata": metadata}


def mismatches(tmp_path: Path, fields: list[dict[str, Any]], table: pa.Table, mode: str = "none",
               partition_columns: tuple[str, ...] = (), **options: Any) -> list[str]:
    target = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
    pq.write_table(table, target, **options)
    schema = parse_schema(json.dumps({"type": "struct", "fields": fields}))
    return type_mismatches(schema, mode, partition_columns, pq.ParquetFile(target).metadata)


#: (Delta type, a column as a Delta writer writes it, pyarrow write options)
WRITTEN = [
    ("boolean", pa.array([True, None]), {}),
    ("byte", pa.array([1, None], pa.int8()), {}),
    ("short", pa.array([1, None], pa.int16()), {}),
    ("integer", pa.array([1, None], pa.int32()), {}),
    ("long", pa.array([1, None], pa.int64()), {}),
    ("float", pa.array([1.5, None], pa.float32()), {}),
    ("double", pa.array([1.5, None], pa.float64()), {}),
    ("string", pa.array(["a", None]), {}),
    ("binary", pa.array([b"a", None]), {}),
    ("date", pa.array([dt.date(2024, 1, 2), None]), {}),
    ("timestamp", pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC), None], pa.timestamp("us", "UTC")), {}),
    ("timestamp", pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC), None], pa.timestamp("ms", "UTC")), {}),
    ("timestamp", pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC), None], pa.timestamp("us", "UTC")),
     {"use_deprecated_int96_timestamps": True}),
    ("timestamp_ntz", pa.array([dt.datetime(2024, 1, 2), None], pa.timestamp("us")), {}),
    ("decimal(5,2)", pa.array([Decimal("1.25"), None], pa.decimal128(5, 2)), {}),
    ("decimal(5,2)", pa.array([Decimal("1.25"), None], pa.decimal128(5, 2)), {"store_decimal_as_integer": True}),
    ("decimal(18,3)", pa.array([Decimal("1.250"), None], pa.decimal128(18, 3)), {"store_decimal_as_integer": True}),
    ("decimal(38,0)", pa.array([Decimal("12"), None], pa.decimal128(38, 0)), {}),
]


@pytest.mark.parametrize(("delta_type", "values", "options"), WRITTEN,
                         ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRITTEN)])
def test_every_type_as_delta_writers_write_it_matches(delta_type: str, values: pa.Array, options: dict[str, Any],
                                                      tmp_path: Path) -> None:
    assert mismatches(tmp_path, [field("c", delta_type)], pa.table({"c": values}), **options) == []


#: (Delta type the schema claims, the file's column): the fuzz mutations of C4/C6 and their like.
NOT_WRITTEN = [
    ("string", pa.array([1], pa.int64()), "INT64"),
    ("date", pa.array([1], pa.int64()), "INT64"),
    ("decimal(10,2)", pa.array([1], pa.int32()), "INT32"),
    ("decimal(38,0)", pa.array(["a"]), "BYTE_ARRAY String"),
    ("short", pa.array([1], pa.int64()), "INT64"),
    ("integer", pa.array([1], pa.int64()), "INT64"),
    ("long", pa.array([1], pa.int32()), "INT32"),  # widened without delta.typeChanges: Delta never writes that
    ("float", pa.array([1.5], pa.float64()), "DOUBLE"),
    ("double", pa.array([1.5], pa.float32()), "FLOAT"),
    ("boolean", pa.array([1], pa.int32()), "INT32"),
    ("binary", pa.array(["a"]), "BYTE_ARRAY String"),
    ("timestamp", pa.array([dt.date(2024, 1, 2)]), "INT32 Date"),
    ("timestamp", pa.array([dt.datetime(2024, 1, 2)], pa.timestamp("us")), "INT64 Timestamp"),
    ("timestamp_ntz", pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC)], pa.timestamp("us", "UTC")), "INT64 Timestamp"),
    ("decimal(38,38)", pa.array([Decimal("-999.99")], pa.decimal128(5, 2)), "Decimal(precision=5, scale=2)"),
    ("decimal(6,2)", pa.array([Decimal("1.25")], pa.decimal128(5, 2)), "Decimal(precision=5, scale=2)"),
    ("long", pa.array([{"x": 1}], pa.struct([("x", pa.int64())])), "a struct"),
    ("string", pa.array([["a"]], pa.list_(pa.string())), "a list"),
]


@pytest.mark.parametrize(("delta_type", "values", "found"), NOT_WRITTEN,
                         ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(NOT_WRITTEN)])
def test_a_type_delta_could_not_have_written_is_flagged(delta_type: str, values: pa.Array, found: str,
                                                        tmp_path: Path) -> None:
    problems = mismatches(tmp_path, [field("id", "long"), field("c", delta_type)],
                          pa.table({"id": pa.array([1], pa.int64()), "c": values}))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"column c: the schema says {delta_type}, the file has ") and found in problems[0]


def test_type_widening_accepts_the_files_of_each_earlier_type(tmp_path: Path) -> None:
    """delta.typeChanges (the typeWidening feature): files written before the change keep the old type."""
    def widened(name: str, to: str, *sources: str, field_path: str | None = None) -> dict[str, Any]:
        changes = [{"fromType": s, "toType": t, **({"fieldPath": field_path} if field_path else {})}
                   for s, t in zip(sources, [*sources[1:], to], strict=True)]
        t: Any = to if field_path is None else {"type": "array", "elementType": to, "containsNull": True}
        return field(name, t, **{"delta.typeChanges": changes})

    fields = [widened("a", "long", "byte", "integer"), widened("b", "double", "float"),
              widened("c", "decimal(10,2)", "decimal(5,2)"), widened("d", "timestamp_ntz", "date"),
              widened("e", "decimal(21,1)", "long"), widened("f", "long", "integer", field_path="element")]
    table = pa.table({"a": pa.array([1], pa.int8()), "b": pa.array([1.5], pa.float32()),
                      "c": pa.array([Decimal("1.25")], pa.decimal128(5, 2)), "d": pa.array([dt.date(2024, 1, 2)]),
                      "e": pa.array([7], pa.int64()), "f": pa.array([[1]], pa.list_(pa.int32()))})
    assert mismatches(tmp_path, fields, table) == []
    # The files written after the change have the new type.
    table = pa.table({"a": pa.array([1], pa.int64()), "b": pa.array([1.5]),
                      "c": pa.array([Decimal("1.25")], pa.decimal128(10, 2)),
                      "d": pa.array([dt.datetime(2024, 1, 2)], pa.timestamp("us")),
                      "e": pa.array([Decimal("7.0")], pa.decimal128(21, 1)),
                      "f": pa.array([[1]], pa.list_(pa.int64()))})
    assert mismatches(tmp_path, fields, table) == []
    # Without the type change, the old files do not match.
    assert len(mismatches(tmp_path, [field("b", "double")], pa.table({"b": pa.array([1.5], pa.float32())}))) == 1


def test_nested_types_are_compared_leaf_by_leaf(tmp_path: Path) -> None:
    inner = {"type": "struct", "fields": [field("x", "long"), field("when", "date")]}
    fields = [field("s", inner), field("l", {"type": "array", "elementType": "integer", "containsNull": True}),
              field("m", {"type": "map", "keyType": "string", "valueType": inner, "valueContainsNull": True})]
    inner_type = pa.struct([("x", pa.int64()), ("when", pa.date32())])
    table = pa.table({"s": pa.array([{"x": 1, "when": dt.date(2024, 1, 1)}], inner_type),
                      "l": pa.array([[1, 2]], pa.list_(pa.int32())),
                      "m": pa.array([[("k", {"x": 2, "when": None})]], pa.map_(pa.string(), inner_type))})
    assert mismatches(tmp_path, fields, table) == []
    wrong = pa.struct([("x", pa.string()), ("when", pa.date32())])
    table = pa.table({"s": pa.array([{"x": "1", "when": None}], wrong), "l": pa.array([[1]], pa.list_(pa.int64())),
                      "m": pa.array([[("k", {"x": "2", "when": None})]], pa.map_(pa.string(), wrong))})
    problems = mismatches(tmp_path, fields, table)
    assert [p.split(":")[0] for p in problems] == ["column s.x", "column l.element", "column m.value.x"], problems
    # A nested field the file lacks is null (added later), unless the schema says it cannot be.
    fields[0] = field("s", {"type": "struct", "fields": [field("x", "long"), field("y", "long", nullable=False)]})
    table = pa.table({"s": pa.array([{"x": 1}], pa.struct([("x", pa.int64())]))})
    assert mismatches(tmp_path, fields[:1], table) == [
        "column s.y: the schema says it is never null (NOT NULL), the file does not have it"]


def test_columns_are_found_by_physical_name_and_field_id(tmp_path: Path) -> None:
    mapped = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-a"}
    fields = [field("a", "long", **mapped)]
    by_name = pa.table({"col-a": pa.array(["x"])})
    assert len(mismatches(tmp_path, fields, by_name, "name")) == 1
    assert mismatches(tmp_path, fields, by_name, "none") == []  # no column a: null, and nullable
    by_id = pa.table({"other": pa.array(["x"])}, schema=pa.schema([pa.field("other", pa.string(),
                                                                              metadata={FIELD_ID: b"1"})]))
    assert len(mismatches(tmp_path, fields, by_id, "id")) == 1
    assert mismatches(tmp_path, fields, by_id, "name") == []


def test_a_not_null_column_must_be_in_the_file_and_hold_no_null(tmp_path: Path) -> None:
    fields = [field("id", "long"), field("extra", "string", nullable=False)]
    problems = mismatches(tmp_path, fields, pa.table({"id": pa.array([1], pa.int64())}))
    assert problems == ["column extra: the schema says it is never null (NOT NULL), the file does not have it"]
    with_nulls = pa.table({"id": pa.array([1, 2], pa.int64()), "extra": pa.array(["a", None])})
    assert mismatches(tmp_path, fields, with_nulls) == [
        "column extra: the schema says it is never null (NOT NULL), the file has 1 null(s)"]
    assert mismatches(tmp_path, fields, with_nulls.set_column(1, "extra", pa.array(["a", "b"]))) == []


def test_partition_columns_may_be_materialized_or_not(tmp_path: Path) -> None:
    fields = [field("id", "long"), field("part", "integer", nullable=False)]
    ids = pa.array([1], pa.int64())
    assert mismatches(tmp_path, fields, pa.table({"id": ids}), partition_columns=("part",)) == []
    assert mismatches(tmp_path, fields, pa.table({"id": ids, "part": pa.array([3], pa.int32())}),
                      partition_columns=("part",)) == []
    problems = mismatches(tmp_path, fields, pa.table({"id": ids, "part": pa.array(["3"])}), partition_columns=("part",))
    assert len(problems) == 1 and problems[0].startswith("column part: the schema says integer"), problems


def test_types_without_a_parquet_form_of_their_own_are_not_judged(tmp_path: Path) -> None:
    """variant (a struct of binaries in the file), void (not written), geometry: nothing to compare."""
    fields = [field("v", "variant"), field("n", "void"), field("g", "geometry(OGC:CRS84)")]
    table = pa.table({"v": pa.array([{"metadata": b"\x01", "value": b"\x00"}],
                                    pa.struct([("metadata", pa.binary()), ("value", pa.binary())])),
                      "g": pa.array([b"\x01"])})
    assert mismatches(tmp_path, fields, table) == []
