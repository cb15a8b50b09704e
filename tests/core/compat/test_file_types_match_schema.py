"""The data.file-types-match-schema rule on real tables (issue 11, C4/C6): no finding on any fixture table (Delta
on Spark, Databricks, Delta Kernel, deltalake: INT96 and int64 timestamps, decimals of every width, type widening,
column mapping, nested types, materialized partitions), and a finding for every file when a copy's schema claims
a type its files do not have, or a NOT NULL column they lack; ``convert --verify-stats`` refuses those copies
before writing anything.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.verify_stats import verify_snapshot_stats

RULE = "data.file-types-match-schema"
NOT_A_TABLE = "crc-malformed"
WITHOUT_DATA_FILES = ("300k-add-files-100-col-partitioned", "app-txn-with-last-updated",
                      "with_checkpoint_no_last_checkpoint")


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES))
def test_no_fixture_table_is_flagged(fixture_table: str, fixtures_dir: Path) -> None:
    for level in ("compat-v1", "compat-v2", "writer-compat-v1"):
        report = validate(str(fixtures_dir / fixture_table), level, data_checks=True, sample_size=None)
        assert RULE in report.rules_checked
        assert [v.message for v in report.violations if v.rule_id == RULE] == []


def change_schema(table: Path, change: Callable[[dict[str, Any]], None]) -> int:
    """Apply ``change`` to the schema of the newest metaData action (in a commit); returns its version."""
    for commit in sorted((table / "_delta_log").glob("*.json"), reverse=True):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
                change(schema)
                action["metaData"]["schemaString"] = json.dumps(schema)
                commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
                return int(commit.name.split(".")[0])
    raise AssertionError(f"no metaData in a commit of {table}")


def retype(column: str, new_type: str) -> Callable[[dict[str, Any]], None]:
    def change(schema: dict[str, Any]) -> None:
        (field,) = [f for f in schema["fields"] if f["name"] == column]
        field["type"] = new_type
    return change


def add_required(schema: dict[str, Any]) -> None:
    schema["fields"].append({"name": "fuzz_extra", "type": "long", "nullable": False, "metadata": {}})


#: (fixture, how its schema lies, what the finding says): the fuzz catalogue's C4/C6 cases.
LIES = [
    ("basic-decimal-table", retype("col1", "decimal(38,38)"),
     "column col1: the schema says decimal(38,38), the file has INT32 Decimal(precision=5, scale=2)"),
    ("app-txn-no-checkpoint", retype("value", "string"), "column value: the schema says string, the file has INT32"),
    ("basic_partitioned", add_required,
     "column fuzz_extra: the schema says it is never null (NOT NULL), the file does not have it"),
    ("table-with-dv-small", retype("value", "date"), "column value: the schema says date, the file has INT32"),
]


@pytest.mark.parametrize(("name", "change", "message"), LIES, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(LIES)])
def test_a_schema_that_lies_about_the_files_is_flagged_and_refused(
        name: str, change: Callable[[dict[str, Any]], None], message: str,
        copy_fixture: Callable[[str], Path]) -> None:
    table = copy_fixture(name)
    change_schema(table, change)
    report = validate(str(table), "compat-v2", data_checks=True, sample_size=None)
    found = [v for v in report.violations if v.rule_id == RULE]
    assert len(found) == report.files_sampled > 0
    assert all(message in v.message and v.location.kind == "file" for v in found), [v.message for v in found]
    with pytest.raises(StatsMismatchError, match="the schema says"):
        convert(str(table), verify_stats=True)
    assert not (table / "_iceberg").exists()


@pytest.mark.parametrize("mapping", [None, "name"], ids=["no-mapping", "name"])
def test_deltalake_files_match_their_schema(mapping: str | None, tmp_path: Path) -> None:
    """Every type as deltalake writes it (large strings, microsecond timestamps, decimals of every width, nested,
    partitioned), then an appended column: no finding of either data rule, nor of the --verify-stats checks."""
    inner = pa.struct([("x", pa.int64()), ("when", pa.date32())])
    data = pa.table({
        "b": pa.array([1, None], pa.int8()), "sh": pa.array([1, 2], pa.int16()), "i": pa.array([1, 2], pa.int32()),
        "l": pa.array([1, 2], pa.int64()), "f": pa.array([1.5, None], pa.float32()), "d": pa.array([1.5, 2.5]),
        "bo": pa.array([True, None]), "s": pa.array(["a", None], pa.large_string()), "bin": pa.array([b"a", None]),
        "day": pa.array([dt.date(2024, 1, 1), None]),
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), None], pa.timestamp("us", "UTC")),
        "ntz": pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us")),
        "d5": pa.array([Decimal("1.25"), None], pa.decimal128(5, 2)),
        "d30": pa.array([Decimal("1.2500"), None], pa.decimal128(30, 4)),
        "arr": pa.array([[1, None], None], pa.list_(pa.int32())),
        "m": pa.array([[("k", {"x": 1, "when": None})], None], pa.map_(pa.string(), inner)),
        "st": pa.array([{"x": 1, "when": dt.date(2024, 1, 1)}, None], inner),
        "part": pa.array(["a", "b"]),
    })
    if mapping:
        # deltalake 1.6.6 leaves columnMapping out of the protocol when a timestamp without time zone makes it list
        # features, and then writes the files unmapped (tests/core/iceberg/test_column_mapping_protocol.py).
        data = data.drop_columns(["ntz"])
    path = tmp_path / "t"
    configuration = {"delta.columnMapping.mode": mapping} if mapping else None
    write_deltalake(str(path), data, partition_by=["part"], configuration=configuration)
    if mapping is None:
        write_deltalake(str(path), data.append_column("later", pa.array(["x", "y"])), mode="append",
                        schema_mode="merge")
    else:  # deltalake 1.6.6 merges a schema under column mapping with string ids, which this reader refuses
        write_deltalake(str(path), data, mode="append")
    report = validate(str(path), "compat-v2", data_checks=True, sample_size=None)
    assert report.files_sampled == 4
    assert [v.message for v in report.violations if v.rule_id in (RULE, "data.stats-cover-data")] == []
    table = DeltaTable(str(path))
    verify_snapshot_stats(table.storage, table.snapshot())
