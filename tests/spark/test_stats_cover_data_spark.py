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
from airflow_deltaberg.core.iceberg.verify_stats import verify_snapshot_stats

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


# -- data.file-types-match-schema on Delta on Spark's own files (issue 11, C4/C6) --------------------------------

TYPES_RULE = "data.file-types-match-schema"
ALL_TYPES = """b TINYINT, sh SMALLINT, i INT, l BIGINT NOT NULL, f FLOAT, d DOUBLE, bo BOOLEAN, s STRING,
               bin BINARY, day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, d5 DECIMAL(5, 2), d15 DECIMAL(15, 3),
               d30 DECIMAL(30, 4), arr ARRAY<INT>, m MAP<STRING, STRUCT<x: BIGINT, y: DATE>>,
               st STRUCT<x: INT, inner: STRUCT<z: DECIMAL(20, 1)>>, part INT"""
ALL_VALUES = """CAST(id AS TINYINT), CAST(id AS SMALLINT), CAST(id AS INT), id, CAST(id AS FLOAT), id * 1.5,
                id % 2 = 0, CAST(id AS STRING), CAST(CAST(id AS STRING) AS BINARY), date_add(DATE'2024-01-01',
                CAST(id AS INT)), timestamp_micros(1700000000000000 + id), CAST(timestamp_micros(id) AS TIMESTAMP_NTZ),
                CAST(id / 3 AS DECIMAL(5, 2)), CAST(id / 3 AS DECIMAL(15, 3)), CAST(id / 3 AS DECIMAL(30, 4)),
                array(CAST(id AS INT), NULL), map(CAST(id AS STRING), named_struct('x', id, 'y', DATE'2024-01-01')),
                named_struct('x', CAST(id AS INT), 'inner', named_struct('z', CAST(id AS DECIMAL(20, 1)))),
                CAST(id % 2 AS INT)"""
SPARK_SETTINGS = {
    "int96": {},  # Spark's default: INT96 timestamps
    "micros": {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"},
    "millis": {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS"},
    "legacy-format": {"spark.sql.parquet.writeLegacyFormat": "true"},  # decimals as FIXED_LEN_BYTE_ARRAY
}


@pytest.mark.parametrize("mapping", ["none", "name", "id"])
@pytest.mark.parametrize("settings", list(SPARK_SETTINGS), ids=list(SPARK_SETTINGS))
def test_delta_on_spark_files_match_their_schema(spark: Any, tmp_path: Path, settings: str, mapping: str) -> None:
    """Every type as Delta on Spark writes it (nested, NOT NULL, partitioned, under column mapping), then a column
    added by ALTER TABLE that the older files do not have: no finding of either data rule, nor of the checks
    --verify-stats makes (which converts it: lists of primitives under column mapping need IcebergCompatV2's
    nested ids to convert at all)."""
    path = tmp_path / "t"
    properties = "" if mapping == "none" else f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mapping}')"
    for key, value in SPARK_SETTINGS[settings].items():
        spark.conf.set(key, value)
    try:
        spark.sql(f"CREATE TABLE delta.`{path}` ({ALL_TYPES}) USING delta PARTITIONED BY (part) {properties}")
        spark.sql(f"INSERT INTO delta.`{path}` SELECT {ALL_VALUES} FROM range(0, 20)")
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (later STRING, st2 STRUCT<a: INT>)")
        spark.sql(f"INSERT INTO delta.`{path}` SELECT {ALL_VALUES}, 'new', named_struct('a', 1) FROM range(20, 30)")
    finally:
        for key in SPARK_SETTINGS[settings]:
            spark.conf.unset(key)
    report = validate(str(path), "compat-v2", data_checks=True, sample_size=None)
    assert report.files_sampled >= 4
    assert [v.message for v in report.violations if v.rule_id in (TYPES_RULE, RULE)] == []
    table = DeltaTable(str(path))
    verify_snapshot_stats(table.storage, table.snapshot())
    if mapping == "none":
        assert convert(str(path), verify_stats=True).records == 30


def test_delta_on_spark_type_widening_keeps_its_older_files_valid(spark: Any, tmp_path: Path) -> None:
    """ALTER COLUMN ... TYPE under the typeWidening feature: the files written before keep the narrower type, and
    delta.typeChanges says so."""
    path = tmp_path / "t"
    spark.sql(f"""CREATE TABLE delta.`{path}` (i INT, f FLOAT, day DATE, d DECIMAL(5, 2)) USING delta
                  TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.feature.timestampNtz' = 'supported')""")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, 1.5, DATE'2024-01-01', 1.25)")
    for column, new_type in (("i", "BIGINT"), ("f", "DOUBLE"), ("day", "TIMESTAMP_NTZ"), ("d", "DECIMAL(10, 2)")):
        spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN {column} TYPE {new_type}")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (2, 2.5, TIMESTAMP_NTZ'2024-01-02 00:00:00', 2.5)")
    snapshot = DeltaTable(str(path)).snapshot()
    assert all("delta.typeChanges" in f.metadata for f in snapshot.schema.fields)
    report = validate(str(path), "compat-v2", data_checks=True, sample_size=None)
    assert report.files_sampled == 2
    assert [v.message for v in report.violations if v.rule_id in (TYPES_RULE, RULE)] == []
    # The same older file under a schema whose type changes were forgotten: its INT32 column is not a long.
    commit = max((path / "_delta_log").glob("*.json"))
    _forget_type_changes(path)
    report = validate(str(path), "compat-v2", data_checks=True, sample_size=None)
    found = [v.message for v in report.violations if v.rule_id == TYPES_RULE]
    assert len(found) == 1 and "column i: the schema says long, the file has INT32" in found[0], found
    assert commit.exists()


def _forget_type_changes(path: Path) -> None:
    """Commit the table's metaData again without delta.typeChanges (as a broken writer could)."""
    snapshot = DeltaTable(str(path)).snapshot()
    metadata = snapshot.metadata.to_action()
    schema = json.loads(metadata["schemaString"])
    for f in schema["fields"]:
        f["metadata"].pop("delta.typeChanges", None)
    metadata["schemaString"] = json.dumps(schema)
    commit = path / "_delta_log" / f"{snapshot.version + 1:020d}.json"
    commit.write_text(json.dumps({"commitInfo": {"timestamp": 1}}) + "\n" + json.dumps({"metaData": metadata}) + "\n")
