"""The executor side of the enable rewrite without Spark (core.enable.rewrite): the files
written with pyarrow (field ids on every field, nested ones included, col-<id> names, widened types, one
partition value per file), their stats and partition values, the log actions, and the result document."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.small_disk import fill, small_disk

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.partition_codec import serialize_partition_value
from airflow_deltaberg.core.delta.schema import PrimitiveType, parse_schema
from airflow_deltaberg.core.enable.rewrite.actions import add_action, remove_actions
from airflow_deltaberg.core.enable.rewrite.files import (
    RewriteSpec,
    WrittenFile,
    written_file_from_row,
    written_files_batch,
)
from airflow_deltaberg.core.enable.rewrite.stats import FileStats
from airflow_deltaberg.core.enable.rewrite.writer import write_files
from airflow_deltaberg.core.errors import StorageWriteRefusedError

FIELD_ID = b"PARQUET:field_id"
UTC = dt.UTC


def field(name: str, type_: Any, cid: int, nested: dict[str, int] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{cid}"}
    if nested:
        metadata["delta.columnMapping.nested.ids"] = nested
    return {"name": name, "type": type_, "nullable": True, "metadata": metadata}


#: The target schema of a table in id mode: every kind of nesting, a widened byte column, a partition column.
SCHEMA = {"type": "struct", "fields": [
    field("id", "integer", 1),
    field("name", "string", 2),
    field("grid", {"type": "array", "containsNull": True,
                   "elementType": {"type": "array", "elementType": "long", "containsNull": True}},
          3, {"col-3.element": 20, "col-3.element.element": 21}),
    field("attrs", {"type": "map", "keyType": "string", "valueContainsNull": True,
                    "valueType": {"type": "struct", "fields": [field("x", "double", 5)]}},
          4, {"col-4.key": 22, "col-4.value": 23}),
    field("st", {"type": "struct", "fields": [field("ts", "timestamp", 7), field("amount", "decimal(10,2)", 8)]}, 6),
    field("p", "string", 9),
]}
SCHEMA_STRING = json.dumps(SCHEMA)
#: What a Delta reader hands over: logical names, a byte column (widened to integer by the target schema).
LOGICAL = pa.schema([
    ("id", pa.int8()), ("name", pa.large_string()), ("grid", pa.list_(pa.list_(pa.int64()))),
    ("attrs", pa.map_(pa.string(), pa.struct([("x", pa.float64())]))),
    ("st", pa.struct([("ts", pa.timestamp("us", "Europe/Paris")), ("amount", pa.decimal128(10, 2))])),
    ("p", pa.string()),
])
ROWS = [
    {"id": 1, "name": "a" * 40, "grid": [[1, 2], None, []], "attrs": [("k", {"x": 1.5})],
     "st": {"ts": dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC), "amount": Decimal("1.25")}, "p": "A"},
    {"id": 2, "name": "b", "grid": None, "attrs": None, "st": None, "p": "A"},
    {"id": 3, "name": None, "grid": [[3]], "attrs": [], "st": {"ts": None, "amount": Decimal("-3.10")}, "p": None},
    {"id": 4, "name": "d", "grid": [], "attrs": [("z", None)], "st": {"ts": None, "amount": None}, "p": None},
    {"id": 5, "name": "e", "grid": [[5, None]], "attrs": None,
     "st": {"ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "amount": None}, "p": "B"},
]
EXPECTED_IDS = {"col-1": 1, "col-2": 2, "col-3": 3, "col-3.element": 20, "col-3.element.element": 21,
                "col-4": 4, "col-4.key": 22, "col-4.value": 23, "col-4.value.col-5": 5, "col-6": 6,
                "col-6.col-7": 7, "col-6.col-8": 8, "col-9": 9}


def parquet_ids(path: Path) -> dict[str, int]:
    """Field id of every parquet column path (list/map wrapper groups without ids left out), names joined by dots
    as the parquet schema has them minus the ``list``/``key_value`` repeated groups."""
    out: dict[str, int] = {}

    def walk(f: pa.Field, prefix: str) -> None:
        name = f"{prefix}{f.name}"
        if f.metadata and FIELD_ID in f.metadata:
            out[name] = int(f.metadata[FIELD_ID])
        t = f.type
        if pa.types.is_map(t):
            walk(t.key_field, f"{name}."), walk(t.item_field, f"{name}.")
        elif pa.types.is_list(t):
            walk(t.value_field, f"{name}.")
        elif pa.types.is_struct(t):
            for child in t:
                walk(child, f"{name}.")

    for f in pq.read_schema(path):
        walk(f, "")
    return out


def write(tmp_path: Path, batches: list[pa.RecordBatch]) -> list[WrittenFile]:
    spec = RewriteSpec(str(tmp_path), SCHEMA_STRING, ("p",))
    return list(write_files(iter(batches), spec))


def test_files_have_ids_physical_names_and_one_partition_value_each(tmp_path: Path) -> None:
    batch = pa.RecordBatch.from_pylist(ROWS, schema=LOGICAL)
    # Sorted by partition as Spark hands them over, cut so that runs of one value span two batches.
    files = write(tmp_path, [batch.slice(0, 1), batch.slice(1, 3), batch.slice(4)])

    assert [f.partition_values for f in files] == [{"col-9": "A"}, {"col-9": None}, {"col-9": "B"}]
    assert [f.num_records for f in files] == [2, 2, 1]
    back = []
    for f in files:
        assert parquet_ids(tmp_path / f.path) == EXPECTED_IDS
        table = pq.read_table(tmp_path / f.path)
        assert table.schema.field("col-1").type == pa.int32()  # byte widened
        assert table.schema.field("col-6").type.field("col-7").type == pa.timestamp("us", "UTC")
        back += table.to_pylist()
    assert [r["col-9"] for r in back] == [r["p"] for r in ROWS]  # partition values materialized
    assert [r["col-3"] for r in back] == [r["grid"] for r in ROWS]
    assert [r["col-4"] for r in back] == [
        None if r["attrs"] is None else [(k, None if v is None else {"col-5": v["x"]}) for k, v in r["attrs"]]
        for r in ROWS
    ]
    assert [r["col-6"] for r in back] == [
        None if r["st"] is None else {"col-7": r["st"]["ts"], "col-8": r["st"]["amount"]} for r in ROWS
    ]


def test_stats_of_the_files(tmp_path: Path) -> None:
    """Bounds truncated as the protocol says (strings to a prefix, with a too-long maximum left out; timestamps
    down to milliseconds, before 1970 too), decimals exact, null counts counting null parents, no stats for the
    partition column and no bounds for arrays and maps."""
    batch = pa.RecordBatch.from_pylist(ROWS, schema=LOGICAL)
    files = write(tmp_path, [batch])
    stats = [json.loads(f.stats) for f in files]
    assert stats[0] == {
        "numRecords": 2,
        "minValues": {"col-1": 1, "col-2": "a" * 32, "col-6": {"col-7": "2024-01-01T12:00:00.123Z", "col-8": 1.25}},
        "maxValues": {"col-1": 2, "col-2": "b", "col-6": {"col-7": "2024-01-01T12:00:00.123Z", "col-8": 1.25}},
        "nullCount": {"col-1": 0, "col-2": 0, "col-3": 1, "col-4": 1, "col-6": {"col-7": 1, "col-8": 1}},
    }
    assert '"col-8":-3.10' in files[1].stats  # an exact decimal, not a float
    assert stats[2]["minValues"]["col-6"] == {"col-7": "1969-12-31T23:59:59.999Z"}


def test_float_bounds_are_left_out_with_nan_or_infinity() -> None:
    schema = parse_schema(json.dumps({"type": "struct", "fields": [
        field("f", "double", 1), field("g", "float", 2), field("h", "double", 3), field("n", "long", 4)]}))
    stats = FileStats(schema)
    stats.update(pa.record_batch({"col-1": [1.0, float("nan")], "col-2": pa.array([1.5, None], pa.float32()),
                                  "col-3": [float("-inf"), 2.0], "col-4": pa.array([None, None], pa.int64())}))
    assert stats.to_dict() == {
        "numRecords": 2,
        "minValues": {"col-2": 1.5},
        "maxValues": {"col-2": 1.5, "col-3": 2.0},
        "nullCount": {"col-1": 0, "col-2": 1, "col-3": 0, "col-4": 2},
    }


@pytest.mark.parametrize(("value", "type_", "expected"), [
    (dt.datetime(2024, 1, 1, 13, 30, 0, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))), "timestamp",
     "2024-01-01T12:30:00.000005Z"),
    (dt.datetime(2024, 1, 1, 13, 30), "timestamp_ntz", "2024-01-01 13:30:00.000000"),
    (dt.date(2024, 2, 29), "date", "2024-02-29"),
    (True, "boolean", "true"),
    (float("inf"), "double", "Infinity"),
    (0.1, "double", "0.1"),
    (Decimal("1E+2"), "decimal(10,0)", "100"),
    (-7, "integer", "-7"),
    (None, "string", None),
    ("", "string", ""),
])
def test_partition_value_serialization(value: Any, type_: str, expected: str | None) -> None:
    assert serialize_partition_value(value, PrimitiveType(type_)) == expected


def test_a_failure_mid_file_leaves_no_file(tmp_path: Path) -> None:
    batch = pa.RecordBatch.from_pylist(ROWS[:2], schema=LOGICAL)

    def batches() -> Any:
        yield batch
        raise RuntimeError("the executor died")

    with pytest.raises(RuntimeError, match="executor died"):
        list(write_files(batches(), RewriteSpec(str(tmp_path), SCHEMA_STRING, ("p",))))
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_is_a_typed_refusal(tmp_path: Path) -> None:
    """The rewrite writes data files through pyarrow's filesystem: no space left is StorageWriteRefusedError (not
    retryable), naming the file, and no half-written file stays."""
    with small_disk(tmp_path / "disk", size="256k") as disk:
        fill(disk)
        rows = pa.RecordBatch.from_pylist(ROWS * 2000, schema=LOGICAL)
        with pytest.raises(StorageWriteRefusedError, match=r"part-\d{5}-.*\.parquet") as info:
            write(disk, [rows])
        assert not info.value.retryable
        assert [p.name for p in disk.iterdir()] == ["filler"]


def test_written_files_round_trip_through_a_batch_and_become_add_actions(tmp_path: Path) -> None:
    files = write(tmp_path, [pa.RecordBatch.from_pylist(ROWS, schema=LOGICAL)])
    rows = written_files_batch(files).to_pylist()
    assert [written_file_from_row(r) for r in rows] == files
    add = add_action(files[1])["add"]
    assert add["partitionValues"] == {"col-9": None} and add["dataChange"] is False
    assert add["size"] == (tmp_path / add["path"]).stat().st_size


def test_remove_actions_keep_the_deletion_vector(fixtures_dir: Path) -> None:
    snapshot = DeltaTable(str(fixtures_dir / "table-with-dv-small")).snapshot()
    removes = [a["remove"] for a in remove_actions(snapshot.files, 123)]
    live = snapshot.files.to_pylist()
    assert [r["path"] for r in removes] == [f["path"] for f in live]
    for remove, f in zip(removes, live, strict=True):
        assert remove["dataChange"] is False and remove["deletionTimestamp"] == 123
        assert remove["deletionVector"] == f["deletionVector"]
        assert remove["size"] == f["size"] and remove["partitionValues"] == {}
