"""Manifests and manifest lists written a column at a time, read back by pyiceberg and by fastavro."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import uuid
from pathlib import Path
from typing import Any

import fastavro  # in the test extra
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFileContent,
    ManifestContent,
    ManifestEntryStatus,
    construct_partition_summaries,
    read_manifest_list,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

import airflow_deltaberg.core.iceberg.manifests.manifest as manifest_module
from airflow_deltaberg.core.iceberg.avro.avro_encode import RowBuilder
from airflow_deltaberg.core.iceberg.avro.avro_iceberg import avro_schema, encode_rows
from airflow_deltaberg.core.iceberg.manifests.manifest import (
    FieldSummary,
    ManifestFileInfo,
    field_summary,
    manifest_metadata,
    serialize_bounds,
    write_manifest,
    write_manifest_list,
)
from airflow_deltaberg.core.iceberg.manifests.manifest_schema import MANIFEST_FILE_TYPE, manifest_entry_type

SNAPSHOT = 8_000_000_000_123
OTHER_SNAPSHOT = 77
LIST_SEQ = 42
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
KV_LONG = pa.list_(pa.struct([("key", pa.int32()), ("value", pa.int64())]))
KV_BINARY = pa.list_(pa.struct([("key", pa.int32()), ("value", pa.binary())]))
MAP_FIELDS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds")

# Partition source columns: (name, Iceberg type, Arrow type of the partition value).
PARTITION_COLUMNS = [
    ("p_int", IntegerType(), pa.int32()),
    ("p_long", LongType(), pa.int64()),
    ("p_str", StringType(), pa.string()),
    ("p_date", DateType(), pa.date32()),
    ("p_ts", TimestampType(), pa.timestamp("us")),
    ("p_tstz", TimestamptzType(), pa.timestamp("us", "UTC")),
    ("p_dec", DecimalType(9, 2), pa.decimal128(9, 2)),
    ("p_dec_same", DecimalType(9, 2), pa.decimal128(9, 2)),  # a second fixed named decimal_9_2
    ("p_dec_wide", DecimalType(38, 10), pa.decimal128(38, 10)),
    ("p_bool", BooleanType(), pa.bool_()),
    ("p_bin", BinaryType(), pa.binary()),
    ("p_float", FloatType(), pa.float32()),
    ("p_double", DoubleType(), pa.float64()),
    ("p_time", TimeType(), pa.time64("us")),
    ("p_uuid", UUIDType(), pa.binary(16)),
    ("p_fixed", FixedType(3), pa.binary(3)),
]


def table_schema() -> tuple[Schema, PartitionSpec]:
    fields = [NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)]
    fields += [NestedField(10 + i, name, t, required=False) for i, (name, t, _) in enumerate(PARTITION_COLUMNS)]
    schema = Schema(*fields, schema_id=3)
    spec = PartitionSpec(
        *[
            PartitionField(10 + i, 1000 + i, IdentityTransform(), name)
            for i, (name, _, _) in enumerate(PARTITION_COLUMNS)
        ],
        spec_id=5,
    )
    return schema, spec


def _partition_row(rng: np.random.Generator, i: int) -> dict[str, Any]:
    if i % 5 == 1:
        return {name: None for name, _, _ in PARTITION_COLUMNS}
    sign = -1 if i % 2 else 1
    row = {
        "p_int": sign * int(rng.integers(0, 2**31 - 1)),
        "p_long": [INT64_MIN, INT64_MAX][i % 2] if i < 4 else sign * int(rng.integers(0, 2**62)),
        "p_str": ["", "ä", "日本語-ü", "x" * 40, "plain"][i % 5],
        "p_date": dt.date(1970, 1, 1) + dt.timedelta(days=sign * int(rng.integers(0, 40000))),
        "p_ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999_999)
        + dt.timedelta(microseconds=int(rng.integers(0, 10**12))),
        "p_tstz": dt.datetime(2024, 2, 29, 12, tzinfo=dt.timezone.utc)
        - dt.timedelta(seconds=int(rng.integers(0, 10**6))),
        "p_dec": decimal.Decimal(f"{sign * int(rng.integers(0, 10**9))}E-2"),
        "p_dec_same": decimal.Decimal(["-1.28", "1.27", "-1.29", "0.00", "9999999.99"][i % 5]),
        "p_dec_wide": decimal.Decimal(f"{sign * (10**38 - 1 - i)}E-10"),  # exact: no context rounding
        "p_bool": bool(i % 3),
        "p_bin": bytes(range(i % 7)),
        "p_float": sign * float(np.float32(rng.random() * 100 + 0.5)),
        "p_double": [math.nan, sign * rng.random() * 1e300][i % 2] if i % 7 == 3 else sign * float(rng.random()),
        "p_time": dt.time(i % 24, (7 * i) % 60, (11 * i) % 60, (13 * i) % 1_000_000),
        "p_uuid": uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i).bytes,
        "p_fixed": bytes([i % 256, 0, 255]),
    }
    for k, name in enumerate(row):
        if (i + k) % 9 == 0:
            row[name] = None  # sparse nulls in otherwise filled partitions
    return row


def _map(rng: np.random.Generator, value: str, i: int) -> list[dict[str, Any]] | None:
    if i % 6 == 2:
        return None
    if i % 6 == 4:
        return []
    keys = sorted(rng.choice(np.arange(1, 200), size=int(rng.integers(1, 6)), replace=False).tolist())
    if value == "long":
        return [{"key": k, "value": int(rng.integers(0, 2**40)) * (1 if k % 3 else 1_000_003)} for k in keys]
    # Bounds: 4-, 8- and long string-like values in one map (uneven lengths).
    widths = [4, 8, int(rng.integers(0, 60))]
    return [{"key": k, "value": rng.bytes(widths[j % 3])} for j, k in enumerate(keys)]


def entries_table(n: int = 31, seed: int = 11) -> pa.Table:
    """Entries covering every field: nulls, empty maps, unicode, negative numbers, int64 extremes."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        status = [1, 0, 2][i % 3]
        added = status == 1
        rows.append(
            {
                "status": status,
                "snapshot_id": (None if i % 2 == 0 else SNAPSHOT) if added else [SNAPSHOT, OTHER_SNAPSHOT][i % 2],
                "sequence_number": None if added else [0, INT64_MAX, 7][i % 3],
                "file_sequence_number": None if added else [INT64_MAX, 0, 9][i % 3],
                "content": 0,
                "file_path": f"s3://bucket/ü/日本/part-{i:05d}" + "-x" * (i % 4) + ".parquet",
                "file_format": "PARQUET",
                "partition": _partition_row(rng, i),
                "record_count": INT64_MAX if i == 1 else [2**40, 0, 12345][i % 3],
                "file_size_in_bytes": [INT64_MAX, 1, 2**31][i % 3],
                "column_sizes": _map(rng, "long", i + 1),
                "value_counts": _map(rng, "long", i),
                "null_value_counts": _map(rng, "long", i + 2),
                "nan_value_counts": _map(rng, "long", i + 3),
                "lower_bounds": _map(rng, "bytes", i),
                "upper_bounds": _map(rng, "bytes", i + 5),
                "key_metadata": None if i % 4 else rng.bytes(i % 9),
                "split_offsets": None if i % 5 == 0 else [4, 2**40, INT64_MAX][: i % 4],
                "equality_ids": None,
                "sort_order_id": None if i % 3 == 0 else i % 3 - 1,
                "referenced_data_file": None,
            }
        )
    partition_type = pa.struct([(name, arrow) for name, _, arrow in PARTITION_COLUMNS])
    arrow_schema = pa.schema(
        [
            ("status", pa.int32()),
            ("snapshot_id", pa.int64()),
            ("sequence_number", pa.int64()),
            ("file_sequence_number", pa.int64()),
            ("content", pa.int32()),
            ("file_path", pa.string()),
            ("file_format", pa.string()),
            ("partition", partition_type),
            ("record_count", pa.int64()),
            ("file_size_in_bytes", pa.int64()),
            ("column_sizes", KV_LONG),
            ("value_counts", KV_LONG),
            ("null_value_counts", KV_LONG),
            ("nan_value_counts", KV_LONG),
            ("lower_bounds", KV_BINARY),
            ("upper_bounds", KV_BINARY),
            ("key_metadata", pa.binary()),
            ("split_offsets", pa.list_(pa.int64())),
            ("equality_ids", pa.list_(pa.int32())),
            ("sort_order_id", pa.int32()),
            ("referenced_data_file", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=arrow_schema)


def _norm(value: Any) -> Any:
    """Comparable plain values: temporal values as their Iceberg integers, UUIDs as bytes, maps as dicts."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list) and value and isinstance(value[0], dict) and set(value[0]) == {"key", "value"}:
        return {item["key"]: _norm(item["value"]) for item in value}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _write(tmp_path: Path, table: pa.Table, name: str = "m.avro", **kwargs: Any):
    schema, spec = table_schema()
    path = tmp_path / name
    summary = write_manifest(str(path), table, schema=schema, spec=spec, snapshot_id=SNAPSHOT, **kwargs)
    return path, summary


def _read_fastavro(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        return reader, list(reader)


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_manifest_entries_read_back_by_pyiceberg(tmp_path: Path, codec: str) -> None:
    table = entries_table()
    path, summary = _write(tmp_path, table, codec=codec, chunk_rows=7, block_rows=5)
    assert summary.length == path.stat().st_size
    list_path = tmp_path / "snap.avro"
    write_manifest_list(str(list_path), [summary.manifest_file()], SNAPSHOT, None, LIST_SEQ, codec=codec)

    fileio = PyArrowFileIO()
    (manifest,) = read_manifest_list(fileio.new_input(str(list_path)))
    entries = manifest.fetch_manifest_entry(fileio, discard_deleted=False)
    assert len(entries) == table.num_rows
    for entry, row in zip(entries, table.to_pylist(), strict=True):
        added = row["status"] == 1
        assert entry.status == ManifestEntryStatus(row["status"])
        # Nulls are inherited from the manifest list: snapshot always, sequence numbers for added entries.
        assert entry.snapshot_id == (row["snapshot_id"] if row["snapshot_id"] is not None else SNAPSHOT)
        assert entry.sequence_number == (LIST_SEQ if added else row["sequence_number"])
        assert entry.file_sequence_number == (LIST_SEQ if added else row["file_sequence_number"])
        df = entry.data_file
        assert df.content == DataFileContent.DATA
        assert df.file_path == row["file_path"]
        assert df.file_format.value == "PARQUET"
        expected_partition = [_norm(v) for v in row["partition"].values()]
        double_at = [name for name, _, _ in PARTITION_COLUMNS].index("p_double")
        if isinstance(expected_partition[double_at], float):
            # pyiceberg 0.12's Cython decoder reads doubles through a C float (fastavro checks the full value).
            with np.errstate(over="ignore"):
                expected_partition[double_at] = float(np.float32(expected_partition[double_at]))
        assert [_norm(v) for v in df.partition] == expected_partition
        assert df.record_count == row["record_count"]
        assert df.file_size_in_bytes == row["file_size_in_bytes"]
        for name in MAP_FIELDS:
            got = getattr(df, name)
            want = None if row[name] is None else {item["key"]: item["value"] for item in row[name]}
            assert (None if got is None else dict(got)) == want, name
        assert df.key_metadata == row["key_metadata"]
        assert (None if df.split_offsets is None else list(df.split_offsets)) == row["split_offsets"]
        assert df.equality_ids is None
        assert df.sort_order_id == row["sort_order_id"]


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_manifest_read_back_by_fastavro(tmp_path: Path, codec: str) -> None:
    table = entries_table(n=23)
    table = table.set_column(
        table.schema.get_field_index("equality_ids"),
        "equality_ids",
        pa.array([None if i % 2 else [1, -(2**31), 2**31 - 1][: i % 4] for i in range(23)], pa.list_(pa.int32())),
    )
    table = table.set_column(
        table.schema.get_field_index("split_offsets"),
        "split_offsets",
        pa.array(
            [None if i % 3 == 0 else [INT64_MIN, -1, 0, INT64_MAX][: i % 5] for i in range(23)], pa.list_(pa.int64())
        ),
    )
    path, _ = _write(tmp_path, table, codec=codec, chunk_rows=4, block_rows=3)
    reader, records = _read_fastavro(path)
    assert reader.codec == codec
    # 23 rows in chunks of 4 (last one 3 rows), each cut into blocks of at most 3 rows.
    with open(path, "rb") as f:
        assert [block.num_records for block in fastavro.block_reader(f)] == [3, 1] * 5 + [3]
    for record, row in zip(records, table.to_pylist(), strict=True):
        data_file = record.pop("data_file")
        assert record == {k: row[k] for k in ("status", "snapshot_id", "sequence_number", "file_sequence_number")}
        expected = {k: v for k, v in row.items() if k not in record}
        assert _norm(data_file) == _norm(expected)


def test_rows_are_byte_identical_to_fastavro_encoding() -> None:
    """Every encoded row equals fastavro's encoding of the same record with the same schema."""
    schema, spec = table_schema()
    entry_type = manifest_entry_type(spec.partition_type(schema))
    parsed = fastavro.parse_schema(avro_schema(entry_type, "manifest_entry"))
    table = entries_table(n=60, seed=5)
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    encoded = encode_rows(entry_type, {**columns, "data_file": columns}, table.num_rows).to_pylist()
    for row, got in zip(table.to_pylist(), encoded, strict=True):
        record = {k: row[k] for k in ("status", "snapshot_id", "sequence_number", "file_sequence_number")}
        record["data_file"] = {k: v for k, v in row.items() if k not in record}
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        assert got == buf.getvalue()


def test_varints_match_fastavro_for_extremes() -> None:
    longs = [0, 1, -1, 63, -64, 64, -65, 127, 128, 8191, 8192, 2**31 - 1, -(2**31), 2**56, INT64_MIN, INT64_MAX]
    b = RowBuilder(len(longs))
    b.long(np.array(longs, np.int64))
    ints = np.array([0, -1, 1, 2**31 - 1, -(2**31), 300, -300] * 2 + [5, 6], np.int32)
    b.long(ints)
    for (value, as_int), got in zip(zip(longs, ints, strict=True), b.finish().to_pylist(), strict=True):
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, "long", value)
        fastavro.schemaless_writer(expected, "int", int(as_int))
        assert got == expected.getvalue()


def test_wide_run_of_full_slots_between_variable_ones_keeps_each_row() -> None:
    """A run of full slots wide enough to become its own part, between varints of uneven length (one of them
    left out of some rows): every row still holds its parts in order."""
    n = 5
    first = np.array([0, 1, 300, -70000, 2**40], np.int64)
    wide = bytes(range(40))
    mat = np.arange(n * 8, dtype=np.uint8).reshape(n, 8)
    last = first[::-1].copy()
    active = np.array([True, False, True, True, False])
    b = RowBuilder(n)
    b.long(first)
    b.const(wide)
    b.matrix(mat)
    b.long(last, active)
    for i, got in enumerate(b.finish().to_pylist()):
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, "long", int(first[i]))
        expected.write(wide + mat[i].tobytes())
        if active[i]:
            fastavro.schemaless_writer(expected, "long", int(last[i]))
        assert got == expected.getvalue()


def test_constants_of_any_width_and_slots_empty_in_every_row() -> None:
    """Constants (of 11 and 2 bytes, one masked) go into every row through the run's template row; a slot that no
    row holds adds nothing, and an optional field null in every row is the null branch alone."""
    n = 4
    values = np.array([5, -3, 700, 0], np.int64)
    constant = bytes(range(100, 111))
    b = RowBuilder(n)
    b.const(constant)
    b.long(values, np.zeros(n, bool))
    b.long(values)
    b.const(b"\x07\x08", np.array([True, False, True, False]))
    for i, got in enumerate(b.finish().to_pylist()):
        expected = io.BytesIO()
        expected.write(constant)
        fastavro.schemaless_writer(expected, "long", int(values[i]))
        expected.write(b"\x07\x08" if i % 2 == 0 else b"")
        assert got == expected.getvalue()

    struct = StructType(NestedField(1, "a", LongType(), required=False), NestedField(2, "b", LongType(), required=True))
    rows = encode_rows(struct, {"a": pa.nulls(n, pa.int64()), "b": pa.array(values)}, n).to_pylist()
    parsed = fastavro.parse_schema(avro_schema(struct, "r"))
    for i, got in enumerate(rows):
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, parsed, {"a": None, "b": int(values[i])})
        assert got == expected.getvalue()


def _field_ids(avro_type: Any, path: str, out: dict[str, int]) -> None:
    if isinstance(avro_type, list):
        for branch in avro_type:
            _field_ids(branch, path, out)
    elif isinstance(avro_type, dict) and avro_type.get("type") == "record":
        for field in avro_type["fields"]:
            out[f"{path}{field['name']}"] = field["field-id"]
            _field_ids(field["type"], f"{path}{field['name']}.", out)
    elif isinstance(avro_type, dict) and avro_type.get("type") == "array":
        if "element-id" in avro_type:
            out[f"{path}element"] = avro_type["element-id"]
        _field_ids(avro_type["items"], path, out)


def test_manifest_schema_has_spec_field_ids(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, entries_table(n=3))
    reader, _ = _read_fastavro(path)
    ids: dict[str, int] = {}
    _field_ids(reader.writer_schema, "", ids)
    expected = {
        "status": 0, "snapshot_id": 1, "sequence_number": 3, "file_sequence_number": 4, "data_file": 2,
        "data_file.content": 134, "data_file.file_path": 100, "data_file.file_format": 101,
        "data_file.partition": 102, "data_file.record_count": 103, "data_file.file_size_in_bytes": 104,
        "data_file.column_sizes": 108, "data_file.column_sizes.key": 117, "data_file.column_sizes.value": 118,
        "data_file.value_counts": 109, "data_file.value_counts.key": 119, "data_file.value_counts.value": 120,
        "data_file.null_value_counts": 110, "data_file.null_value_counts.key": 121,
        "data_file.null_value_counts.value": 122,
        "data_file.nan_value_counts": 137, "data_file.nan_value_counts.key": 138,
        "data_file.nan_value_counts.value": 139,
        "data_file.lower_bounds": 125, "data_file.lower_bounds.key": 126, "data_file.lower_bounds.value": 127,
        "data_file.upper_bounds": 128, "data_file.upper_bounds.key": 129, "data_file.upper_bounds.value": 130,
        "data_file.key_metadata": 131, "data_file.split_offsets": 132, "data_file.split_offsets.element": 133,
        "data_file.equality_ids": 135, "data_file.equality_ids.element": 136, "data_file.sort_order_id": 140,
        "data_file.referenced_data_file": 143,
    }  # fmt: skip
    expected |= {f"data_file.partition.{name}": 1000 + i for i, (name, _, _) in enumerate(PARTITION_COLUMNS)}
    assert ids == expected
    schema = json.loads(reader.metadata["avro.schema"])
    data_file = next(f for f in schema["fields"] if f["name"] == "data_file")["type"]
    bounds = next(f for f in data_file["fields"] if f["name"] == "lower_bounds")["type"]
    assert bounds[1]["logicalType"] == "map" and bounds[1]["items"]["name"] == "k126_v127"
    optional = [f for f in data_file["fields"] if isinstance(f["type"], list)]
    assert all(f["type"][0] == "null" and f["default"] is None for f in optional)


def test_manifest_file_metadata(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, entries_table(n=3))
    reader, _ = _read_fastavro(path)
    meta = reader.metadata
    schema, spec = table_schema()
    assert Schema.model_validate_json(meta["schema"]) == schema
    assert meta["schema-id"] == "3"
    assert json.loads(meta["partition-spec"]) == [
        {"name": f.name, "transform": "identity", "source-id": f.source_id, "field-id": f.field_id} for f in spec.fields
    ]
    assert meta["partition-spec-id"] == "5"
    assert meta["format-version"] == "2"
    assert meta["content"] == "data"
    assert manifest_metadata(schema, spec, "deletes")["content"] == "deletes"
    with open(path, "rb") as f:
        assert f.read(4) == b"Obj\x01"


def _pyiceberg_partition_value(value: Any, iceberg_type: Any) -> Any:
    if value is None:
        return None
    if isinstance(iceberg_type, UUIDType):
        return uuid.UUID(bytes=value)
    if isinstance(iceberg_type, (DateType, TimestampType, TimestamptzType, TimeType)):
        return _norm(value)
    return value


def test_summary_counts_and_partition_summaries_match_pyiceberg(tmp_path: Path) -> None:
    table = entries_table(n=40, seed=3)
    _, summary = _write(tmp_path, table)
    rows = table.to_pylist()
    for status, files, records in (
        (1, summary.added_files_count, summary.added_rows_count),
        (0, summary.existing_files_count, summary.existing_rows_count),
        (2, summary.deleted_files_count, summary.deleted_rows_count),
    ):
        assert files == sum(r["status"] == status for r in rows)
        assert records == sum(r["record_count"] for r in rows if r["status"] == status)
    live = [r["sequence_number"] for r in rows if r["status"] != 2 and r["sequence_number"] is not None]
    assert summary.min_sequence_number == min(live)

    schema, spec = table_schema()
    types = [f.field_type for f in spec.partition_type(schema).fields]
    records = [
        Record(*[_pyiceberg_partition_value(v, t) for v, t in zip(r["partition"].values(), types, strict=True)])
        for r in rows
    ]
    expected = construct_partition_summaries(spec, schema, records)
    for ours, theirs, (name, t, _) in zip(summary.partitions, expected, PARTITION_COLUMNS, strict=True):
        assert ours.contains_null == theirs.contains_null, name
        assert ours.lower_bound == theirs.lower_bound, name
        assert ours.upper_bound == theirs.upper_bound, name
        if not isinstance(t, (FloatType, DoubleType)):
            assert ours.contains_nan is False
    double = summary.partitions[[n for n, _, _ in PARTITION_COLUMNS].index("p_double")]
    assert double.contains_nan is True


def test_float_partition_summary_orders_signed_zeros_and_skips_nan() -> None:
    values = pa.array([0.0, -0.0, None, float("nan")], pa.float64())
    summary = field_summary(values, DoubleType())
    assert summary == FieldSummary(True, True, to_bytes(DoubleType(), -0.0), to_bytes(DoubleType(), 0.0))
    only_nan = field_summary(pa.array([float("nan")], pa.float32()), FloatType())
    assert only_nan == FieldSummary(False, True, None, None)


DECIMALS = ["0", "-1", "1", "127", "128", "-128", "-129", "255", "-256", "32767", "-32768", "32768"]

BOUND_CASES = [
    (BooleanType(), pa.bool_(), [True, False, None]),
    (IntegerType(), pa.int32(), [0, -1, 2**31 - 1, -(2**31), None]),
    (LongType(), pa.int64(), [0, -1, INT64_MAX, INT64_MIN, None]),
    (FloatType(), pa.float32(), [1.5, -0.0, float("inf"), None]),
    (DoubleType(), pa.float64(), [1e-300, -0.0, -2.5, None]),
    (DateType(), pa.date32(), [dt.date(1969, 12, 31), dt.date(2262, 4, 11), None]),
    (TimeType(), pa.time64("us"), [dt.time(0), dt.time(23, 59, 59, 999_999), None]),
    (TimestampType(), pa.timestamp("us"), [dt.datetime(1900, 1, 1), dt.datetime(2024, 5, 6, 7, 8, 9, 10), None]),
    (
        TimestamptzType(),
        pa.timestamp("us", "UTC"),
        [dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.timezone.utc), None],
    ),
    (StringType(), pa.string(), ["", "ü日本", "abc", None]),
    (BinaryType(), pa.binary(), [b"", b"\x00\xff", None]),
    (UUIDType(), pa.binary(16), [uuid.UUID(int=2**127 + 5).bytes, None]),
    (FixedType(3), pa.binary(3), [b"abc", None]),
    (DecimalType(5, 0), pa.decimal128(5, 0), [decimal.Decimal(v) for v in DECIMALS] + [None]),
    (
        DecimalType(38, 4),
        pa.decimal128(38, 4),
        [decimal.Decimal("9" * 34 + ".9999"), decimal.Decimal("-" + "9" * 34 + ".9999"), decimal.Decimal("-0.0001")],
    ),
    (DecimalType(10, 2), pa.decimal128(12, 3), [decimal.Decimal("1.230"), decimal.Decimal("-99.990")]),
]


@pytest.mark.parametrize(("iceberg_type", "arrow_type", "values"), BOUND_CASES, ids=lambda c: str(c)[:20])
def test_serialize_bounds_matches_pyiceberg(iceberg_type: Any, arrow_type: pa.DataType, values: list[Any]) -> None:
    arr = pa.array(values, arrow_type).slice(0)
    got = serialize_bounds(pa.chunked_array([arr[:1], arr[1:]]), iceberg_type).to_pylist()
    expected = []
    for v in values:
        if v is None:
            expected.append(None)
            continue
        if isinstance(iceberg_type, UUIDType):
            v = uuid.UUID(bytes=v)
        elif isinstance(iceberg_type, (DateType, TimeType, TimestampType, TimestamptzType)):
            v = _norm(v)
        elif isinstance(iceberg_type, DecimalType):
            v = v.quantize(decimal.Decimal(1).scaleb(-iceberg_type.scale), context=decimal.Context(prec=50))
        expected.append(to_bytes(iceberg_type, v))
    assert got == expected


def test_manifest_list_read_back_by_pyiceberg_and_fastavro(tmp_path: Path) -> None:
    _, summary = _write(tmp_path, entries_table(n=9))
    ours = summary.manifest_file()
    deletes = ManifestFileInfo(
        manifest_path="s3://b/metadata/d-ü.avro",
        manifest_length=2**40,
        partition_spec_id=1,
        content=1,
        added_snapshot_id=OTHER_SNAPSHOT,
        added_files_count=2**31 - 1,
        existing_files_count=0,
        deleted_files_count=3,
        added_rows_count=INT64_MAX,
        existing_rows_count=0,
        deleted_rows_count=1,
        sequence_number=7,
        min_sequence_number=INT64_MIN,
        partitions=None,
        key_metadata=b"\x00key",
    )
    empty_partitions = ManifestFileInfo("m3.avro", 1, 0, 0, SNAPSHOT, 1, 0, 0, 5, 0, 0, None, 3, (), None)
    summaries = (FieldSummary(False, None, None, None), FieldSummary(True, True, b"", b"\xff"))
    two_fields = ManifestFileInfo("m4.avro", 1, 0, 0, SNAPSHOT, 1, 0, 0, 5, 0, 0, None, None, summaries)
    manifests = [ours, deletes, empty_partitions, two_fields]
    path = tmp_path / "snap-1.avro"
    length = write_manifest_list(str(path), manifests, SNAPSHOT, OTHER_SNAPSHOT, LIST_SEQ, codec="deflate")
    assert length == path.stat().st_size

    read = list(read_manifest_list(PyArrowFileIO().new_input(str(path))))
    assert len(read) == 4
    for got, want in zip(read, manifests, strict=True):
        assert got.manifest_path == want.manifest_path
        assert got.manifest_length == want.manifest_length
        assert got.partition_spec_id == want.partition_spec_id
        assert got.content == ManifestContent(want.content)
        assert got.sequence_number == (LIST_SEQ if want.sequence_number is None else want.sequence_number)
        assert got.min_sequence_number == (LIST_SEQ if want.min_sequence_number is None else want.min_sequence_number)
        assert got.added_snapshot_id == want.added_snapshot_id
        for name in ("added_files_count", "existing_files_count", "deleted_files_count"):
            assert getattr(got, name) == getattr(want, name)
        for name in ("added_rows_count", "existing_rows_count", "deleted_rows_count"):
            assert getattr(got, name) == getattr(want, name)
        assert got.key_metadata == want.key_metadata
        if want.partitions is None:
            assert got.partitions is None
        else:
            assert [tuple(p) for p in got.partitions] == [
                (p.contains_null, p.contains_nan, p.lower_bound, p.upper_bound) for p in want.partitions
            ]
    assert read[0].min_sequence_number == summary.min_sequence_number

    reader, _ = _read_fastavro(path)
    assert reader.metadata["snapshot-id"] == str(SNAPSHOT)
    assert reader.metadata["parent-snapshot-id"] == str(OTHER_SNAPSHOT)
    assert reader.metadata["sequence-number"] == str(LIST_SEQ)
    assert reader.metadata["format-version"] == "2"
    ids: dict[str, int] = {}
    _field_ids(reader.writer_schema, "", ids)
    assert ids == {
        "manifest_path": 500, "manifest_length": 501, "partition_spec_id": 502, "content": 517,
        "sequence_number": 515, "min_sequence_number": 516, "added_snapshot_id": 503, "added_files_count": 504,
        "existing_files_count": 505, "deleted_files_count": 506, "added_rows_count": 512,
        "existing_rows_count": 513, "deleted_rows_count": 514, "partitions": 507, "partitions.element": 508,
        "partitions.contains_null": 509, "partitions.contains_nan": 518, "partitions.lower_bound": 510,
        "partitions.upper_bound": 511, "key_metadata": 519,
    }  # fmt: skip
    assert avro_schema(MANIFEST_FILE_TYPE, "manifest_file") == reader.writer_schema | {"name": "manifest_file"}

    no_parent = tmp_path / "snap-0.avro"
    write_manifest_list(str(no_parent), [ours], SNAPSHOT, None, LIST_SEQ, codec="null")
    assert _read_fastavro(no_parent)[0].metadata["parent-snapshot-id"] == "null"


def test_manifest_list_refuses_unassigned_sequence_of_another_snapshot(tmp_path: Path) -> None:
    _, summary = _write(tmp_path, entries_table(n=3))
    with pytest.raises(ValueError, match="no sequence number"):
        write_manifest_list(io.BytesIO(), [summary.manifest_file()], OTHER_SNAPSHOT, None, LIST_SEQ)


def test_delete_manifest(tmp_path: Path) -> None:
    table = entries_table(n=4)
    table = table.set_column(table.schema.get_field_index("content"), "content", pa.array([1, 1, 2, 1], pa.int32()))
    refs = pa.array(["s3://b/data/a.parquet", None, None, "s3://b/ü.parquet"], pa.string())
    table = table.set_column(table.schema.get_field_index("referenced_data_file"), "referenced_data_file", refs)
    path, summary = _write(tmp_path, table, content="deletes")
    assert summary.content == 1
    list_path = tmp_path / "l.avro"
    write_manifest_list(str(list_path), [summary.manifest_file()], SNAPSHOT, None, LIST_SEQ)
    fileio = PyArrowFileIO()
    (manifest,) = read_manifest_list(fileio.new_input(str(list_path)))
    assert manifest.content == ManifestContent.DELETES
    contents = [e.data_file.content for e in manifest.fetch_manifest_entry(fileio, discard_deleted=False)]
    assert contents == [DataFileContent.POSITION_DELETES] * 2 + [DataFileContent.EQUALITY_DELETES] * 1 + [
        DataFileContent.POSITION_DELETES
    ]
    reader, records = _read_fastavro(path)
    assert reader.metadata["content"] == "deletes"
    assert [r["data_file"]["referenced_data_file"] for r in records] == refs.to_pylist()


def test_unpartitioned_manifest_without_partition_column(tmp_path: Path) -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    table = entries_table(n=5).drop_columns(["partition", "content", "column_sizes", "key_metadata"])
    stream = io.BytesIO()
    summary = write_manifest(stream, table, schema=schema, spec=PartitionSpec(), snapshot_id=SNAPSHOT, codec="null")
    assert summary.path is None and summary.partitions == ()
    with pytest.raises(ValueError, match="pass its path"):
        summary.manifest_file()
    records = list(fastavro.reader(io.BytesIO(stream.getvalue())))
    assert [r["data_file"]["partition"] for r in records] == [{}] * 5
    assert [r["data_file"]["content"] for r in records] == [0] * 5
    assert all(r["data_file"]["column_sizes"] is None and r["data_file"]["key_metadata"] is None for r in records)
    assert [r["data_file"]["file_path"] for r in records] == table.column("file_path").to_pylist()


def test_manifest_written_through_a_pyarrow_filesystem(tmp_path: Path) -> None:
    table = entries_table(n=6)
    schema, spec = table_schema()
    target = tmp_path / "fs" / "m.avro"
    target.parent.mkdir()
    summary = write_manifest(
        str(target), table, schema=schema, spec=spec, snapshot_id=SNAPSHOT, filesystem=pafs.LocalFileSystem()
    )
    assert summary.path == str(target) and summary.length == target.stat().st_size
    assert len(_read_fastavro(target)[1]) == 6


def test_large_random_manifest_with_long_and_uneven_strings(tmp_path: Path) -> None:
    table = entries_table(n=3000, seed=99)
    path, summary = _write(tmp_path, table, codec="deflate")
    _, records = _read_fastavro(path)
    assert summary.added_files_count + summary.existing_files_count + summary.deleted_files_count == 3000
    for record, row in zip(records, table.to_pylist(), strict=True):
        assert _norm(record["data_file"]["partition"]) == _norm(row["partition"])
        assert _norm(record["data_file"]["lower_bounds"]) == _norm(row["lower_bounds"])
        assert record["data_file"]["file_path"] == row["file_path"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.append_column("typo_column", pa.array([1] * t.num_rows)), "unknown manifest entry columns"),
        (lambda t: t.drop_columns(["status"]), "missing required column 'status'"),
        (lambda t: t.set_column(0, "status", pa.array([3] * t.num_rows, pa.int32())), "status must be"),
        (lambda t: t.set_column(0, "status", pa.array([0] * t.num_rows, pa.int32())), "explicit sequence_number"),
        (lambda t: t.set_column(4, "content", pa.array([1] * t.num_rows, pa.int32())), "holds only files"),
        (lambda t: t.drop_columns(["partition"]), "missing required column 'partition'"),
        (lambda t: t.drop_columns(["file_path"]), "missing required field 'file_path'"),
        (
            lambda t: t.set_column(5, "file_path", pa.array([None] * t.num_rows, pa.string())),
            "null in required field 'file_path'",
        ),
        (lambda t: t.set_column(7, "partition", _renamed_partition(t)), "partition struct fields"),
    ],
)
def test_write_manifest_rejects_invalid_entries(change: Any, message: str) -> None:
    table = entries_table(n=3).filter(pa.array([True, False, False]))  # one added entry with null sequence numbers
    with pytest.raises(ValueError, match=message):
        _write_to_stream(change(table))


def _renamed_partition(table: pa.Table) -> pa.Array:
    partition = table.column("partition").combine_chunks()
    names = [f.name for f in partition.type]
    return pa.StructArray.from_arrays(partition.flatten(), names=["p_integer", *names[1:]])


def _write_to_stream(table: pa.Table) -> None:
    schema, spec = table_schema()
    write_manifest(io.BytesIO(), table, schema=schema, spec=spec, snapshot_id=SNAPSHOT)


def test_added_entry_of_another_snapshot_needs_a_sequence_number() -> None:
    table = entries_table(n=1)
    table = table.set_column(1, "snapshot_id", pa.array([OTHER_SNAPSHOT], pa.int64()))
    with pytest.raises(ValueError, match="another snapshot"):
        _write_to_stream(table)


def test_delete_manifest_needs_content_column() -> None:
    schema, spec = table_schema()
    table = entries_table(n=1).drop_columns(["content"])
    with pytest.raises(ValueError, match="'content' column"):
        write_manifest(io.BytesIO(), table, schema=schema, spec=spec, snapshot_id=SNAPSHOT, content="deletes")


def _write_bytes(table: pa.Table, **kwargs: Any) -> bytes:
    schema, spec = table_schema()
    stream = io.BytesIO()
    write_manifest(stream, table, schema=schema, spec=spec, snapshot_id=SNAPSHOT, sync_marker=b"S" * 16, **kwargs)
    return stream.getvalue()


def _datums(container: bytes) -> bytes:
    """The concatenated (decompressed) row data of an Avro file, whatever its block layout."""
    return b"".join(block.bytes_.getvalue() for block in fastavro.block_reader(io.BytesIO(container)))


def _null_rows_covering_items(lists: pa.Array) -> pa.Array:
    """The same lists, but every null row spans one junk item in the child array (legal in Arrow)."""
    rows = lists.to_pylist()
    junk = {"key": 999, "value": b"junk"} if pa.types.is_binary(lists.type.value_type.field(1).type) else None
    junk = junk or {"key": 999, "value": -5}
    items, offsets = [], [0]
    for row in rows:
        items.extend(row if row is not None else [junk])
        offsets.append(len(items))
    mask = pa.array([row is None for row in rows])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(items, lists.type.value_type), mask=mask)


def _as_map_type(lists: pa.Array, value_type: pa.DataType) -> pa.Array:
    return pa.array(
        [None if r is None else [(i["key"], i["value"]) for i in r] for r in lists.to_pylist()],
        pa.map_(pa.int32(), value_type),
    )


def test_equivalent_arrow_layouts_write_identical_files() -> None:
    """Slices, chunking, map types, large/view types and null lists over items change nothing in the file."""
    table = entries_table(n=25, seed=8)
    expected = _write_bytes(table, codec="null")

    bigger = pa.concat_tables([entries_table(n=5, seed=1), table, entries_table(n=4, seed=2)])
    assert _write_bytes(bigger.slice(5, 25), codec="null") == expected
    chunked = pa.concat_tables([table.slice(0, 3), table.slice(3, 10), table.slice(13)])
    assert _datums(_write_bytes(chunked, codec="deflate", chunk_rows=6, block_rows=4)) == _datums(expected)

    variant = table
    for name in ("lower_bounds", "value_counts"):
        column = _null_rows_covering_items(variant.column(name).combine_chunks())
        variant = variant.set_column(variant.schema.get_field_index(name), name, column)
    for name, value_type in (("upper_bounds", pa.binary()), ("null_value_counts", pa.int64())):
        column = _as_map_type(variant.column(name).combine_chunks(), value_type)
        variant = variant.set_column(variant.schema.get_field_index(name), name, column)
    variant = variant.set_column(
        variant.schema.get_field_index("file_path"), "file_path", variant.column("file_path").cast(pa.large_string())
    )
    variant = variant.set_column(
        variant.schema.get_field_index("file_format"),
        "file_format",
        variant.column("file_format").cast(pa.string_view()),
    )
    assert _write_bytes(variant, codec="null") == expected


def test_wide_entries_are_encoded_a_few_rows_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows wider than CHUNK_BYTES allows in a full chunk are encoded in smaller chunks: the same rows."""
    table = entries_table(n=40, seed=6)
    expected = _write_bytes(table, codec="null")
    chunks: list[int] = []
    encode = manifest_module.encode_rows

    def counting(struct: Any, columns: Any, n: int) -> pa.BinaryArray:
        chunks.append(n)
        return encode(struct, columns, n)

    monkeypatch.setattr(manifest_module, "encode_rows", counting)
    monkeypatch.setattr(manifest_module, "MIN_CHUNK_ROWS", 1)
    monkeypatch.setattr(manifest_module, "CHUNK_BYTES", 10 * table.nbytes // table.num_rows)
    assert _datums(_write_bytes(table, codec="null")) == _datums(expected)  # a block per chunk, the same rows
    assert chunks == [10, 10, 10, 10]


def test_threaded_deflate_writes_the_same_bytes() -> None:
    table = entries_table(n=200, seed=4)
    single = _write_bytes(table, codec="deflate", compression_threads=1, chunk_rows=16, block_rows=8)
    threaded = _write_bytes(table, codec="deflate", compression_threads=3, chunk_rows=16, block_rows=8)
    assert threaded == single
    assert len(list(fastavro.reader(io.BytesIO(threaded)))) == 200


def test_empty_manifest_and_empty_manifest_list(tmp_path: Path) -> None:
    table = entries_table(n=2).slice(0, 0)
    path, summary = _write(tmp_path, table)
    assert (summary.added_files_count, summary.min_sequence_number) == (0, None)
    assert summary.partitions[0] == FieldSummary(False, False, None, None)
    assert _read_fastavro(path)[1] == []
    list_path = tmp_path / "l.avro"
    write_manifest_list(str(list_path), [], SNAPSHOT, None, LIST_SEQ)
    assert list(read_manifest_list(PyArrowFileIO().new_input(str(list_path)))) == []


def _keyed_columns_as_list_rows(struct: pa.StructArray, row_valid: list[bool]) -> list[Any]:
    """The struct-per-key form of a map as Python list rows, keys in child order, absent values left out."""
    rows = struct.to_pylist()
    return [
        [{"key": int(k), "value": v} for k, v in row.items() if v is not None] if ok else None
        for row, ok in zip(rows, row_valid, strict=True)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_maps_given_as_one_child_per_key_encode_like_lists(seed: int) -> None:
    """Bounds and counts kept as struct children per field id (fixed-width, uneven and long values, nulls, null
    map rows, rows with no entry) encode to the same bytes as the same maps as list<struct<key, value>>."""
    rng = np.random.default_rng(seed)
    n = 300
    keys = [3, 7, 70, 1000, 90_000]

    def nulls(p: float) -> np.ndarray:
        return rng.random(n) < p

    def fixed(width: int) -> pa.Array:
        data = pa.py_buffer(rng.integers(0, 256, n * width, np.uint8).tobytes())
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, data])

    def uneven(longest: int) -> pa.Array:
        return pa.array([bytes(rng.integers(0, 256, int(rng.integers(0, longest)), np.uint8)) for _ in range(n)])

    children = [fixed(8), uneven(40), uneven(3), pa.array([bytes(200)] * n), fixed(4)]
    children = [_with_nulls(c, nulls(p)) for c, p in zip(children, (0.3, 0.5, 0.1, 0.9, 1.0), strict=True)]
    counts = pa.StructArray.from_arrays(
        [_with_nulls(pa.array(rng.integers(-(2**40), 2**40, n), pa.int64()), nulls(p)) for p in (0.2, 0.0, 0.7)],
        names=["1", "2", "300"])
    row_valid = ~nulls(0.2)
    bounds = pa.StructArray.from_arrays(children, names=[str(k) for k in keys], mask=pa.array(~row_valid))

    map_type = MapType(10, IntegerType(), 11, BinaryType(), value_required=True)
    optional_values = MapType(12, IntegerType(), 13, LongType(), value_required=False)
    struct = StructType(
        NestedField(1, "bounds", map_type, required=False),
        NestedField(2, "counts", optional_values, required=True),
    )
    as_struct = encode_rows(struct, {"bounds": bounds, "counts": counts}, n)
    as_lists = encode_rows(struct, {
        "bounds": pa.array(_keyed_columns_as_list_rows(bounds, list(row_valid)),
                           pa.list_(pa.struct([("key", pa.int32()), ("value", pa.binary())]))),
        "counts": pa.array(_keyed_columns_as_list_rows(counts, [True] * n), KV_LONG),
    }, n)
    assert as_struct.equals(as_lists)
    decoded = [fastavro.schemaless_reader(io.BytesIO(row), avro_schema(struct, "r")) for row in as_struct.to_pylist()]
    assert decoded[0]["counts"] == [{"key": i["key"], "value": i["value"]}
                                    for i in _keyed_columns_as_list_rows(counts, [True] * n)[0]]


def _with_nulls(values: pa.Array, null: np.ndarray) -> pa.Array:
    return pc.if_else(pa.array(null), pa.scalar(None, values.type), values)
