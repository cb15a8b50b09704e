"""data.stats-cover-data and ``convert --verify-stats`` on tables Delta on Spark writes itself (issue 11): its
stats cut timestamps to milliseconds, strings to a 32-character prefix (the maximum with a tie-breaker, U+007F in
Delta 4.x, also after characters beyond U+FFFF), print floats from float32; none of it is a finding. A file
whose stats Delta on Spark computed and a test then falsified is one, and Delta on Spark itself skips its row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.compat.model import Location
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert

pytestmark = pytest.mark.spark

RULE = "data.stats-cover-data"
LONG = "x" * 40


def write_table(spark: Any, path: Path, properties: str = "") -> None:
    """Two inserts of 100 rows into a table partitioned by ``part``; timestamps as int64 (INT96 has no footer
    statistics to compare with)."""
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        _write(spark, path, properties)
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")


def _write(spark: Any, path: Path, properties: str) -> None:
    spark.sql(f"""CREATE TABLE delta.`{path}` (id BIGINT, ts TIMESTAMP, ntz TIMESTAMP_NTZ, s STRING, f FLOAT,
                  d DOUBLE, dec DECIMAL(12, 3), day DATE, st STRUCT<x: INT, y: STRING>, part STRING)
                  USING delta PARTITIONED BY (part) {properties}""")
    for batch in range(2):
        spark.sql(f"""INSERT INTO delta.`{path}` SELECT
            id, timestamp_micros(1700000000000000 + id * 1000123) AS ts,
            CAST(timestamp_micros(1600000000000000 + id * 777) AS TIMESTAMP_NTZ) AS ntz,
            CASE WHEN id % 3 = 0 THEN concat('{LONG}', CAST(id AS STRING))
                 WHEN id % 3 = 1 THEN concat('{LONG[:31]}', '\U0001F600', CAST(id AS STRING))
                 ELSE NULL END AS s,
            CAST(id / 7.0 AS FLOAT) AS f, id * 1.1 AS d, CAST(id / 3.0 AS DECIMAL(12, 3)) AS dec,
            date_add(DATE'2024-02-28', CAST(id AS INT)) AS day,
            named_struct('x', CAST(id AS INT), 'y', CASE WHEN id % 2 = 0 THEN concat('{LONG}', 'z') END) AS st,
            CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS part
            FROM range({batch * 100}, {batch * 100 + 100})""")


@pytest.mark.parametrize("properties", ["", "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
                                        "TBLPROPERTIES ('delta.columnMapping.mode' = 'id')"],
                         ids=["no-mapping", "name", "id"])
def test_delta_on_spark_stats_are_never_flagged(spark: Any, tmp_path: Path, properties: str) -> None:
    path = tmp_path / "t"
    write_table(spark, path, properties)
    report = validate(str(path), "compat-v2", data_checks=True, sample_size=None)
    assert report.files_sampled == DeltaTable(str(path)).snapshot().num_files >= 4
    assert [v.message for v in report.violations if v.rule_id == RULE] == []
    assert convert(str(path), verify_stats=True).records == 200
    # What makes this a test of Delta's rules: cut strings with tie-breakers, timestamps with footer statistics.
    files = DeltaTable(str(path)).snapshot().files.column("stats").to_pylist()
    maxima = [v for text in files for v in _strings(json.loads(text)["maxValues"])]
    assert any(v.endswith(("\x7f", "\ufffd")) for v in maxima) and any("\U0001F600" in v for v in maxima)
    assert "timestamp-int64" not in " ".join(report.failed_rule_ids)


def _strings(values: dict[str, Any]) -> list[str]:
    out = []
    for value in values.values():
        out += _strings(value) if isinstance(value, dict) else [value] if isinstance(value, str) else []
    return out


def test_a_falsified_delta_on_spark_file_is_flagged_and_refused(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_table(spark, path)
    commit = path / "_delta_log" / f"{1:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    add = next(a["add"] for a in actions if "add" in a)
    stats = json.loads(add["stats"])
    true_max = stats["maxValues"]["id"]
    stats["maxValues"]["id"] = true_max - 1
    add["stats"] = json.dumps(stats)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    (commit.parent / f".{commit.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old content
    # Delta on Spark trusts the stats it reads: the row with the file's largest id is skipped.
    assert spark.sql(f"SELECT id FROM delta.`{path}` WHERE id = {true_max}").count() == 0
    report = validate(str(path), "compat-v2", data_checks=True, sample_size=None)
    assert [v.location for v in report.violations if v.rule_id == RULE] == [Location("file", add["path"])]
    with pytest.raises(StatsMismatchError):
        convert(str(path), verify_stats=True)
    assert not (path / "_iceberg").exists()
