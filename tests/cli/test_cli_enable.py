"""`deltaberg enable`: exit 0 done, 1 blocked/refused, 2 error; --dry-run writes nothing. As ``cli.main`` in this
process (``deltaberg_here``), and as a real process where the process's environment is under test (Java, jars)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from support.cli import DELTABERG, deltaberg_here
from support.tables import id_mode_table, log_bytes, rows_of

from airflow_deltaberg.core.compat import validate


def test_dry_run_prints_the_plan_and_writes_nothing(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t", partition_by=["part"])
    before = log_bytes(path)
    result = deltaberg_here("enable", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "rewrite:  needed" in result.stdout
    assert "  - no-column-mapping: " in result.stdout and "  - partition-values-not-materialized: " in result.stdout
    assert "upgrade the protocol from 1/2 to 3/7" in result.stdout
    assert "result:   dry run: nothing was written" in result.stdout
    assert log_bytes(path) == before

    as_json = deltaberg_here("enable", str(path), "--dry-run", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["action"] == "dry-run" and doc["committed_version"] is None
    assert doc["plan"]["needs_rewrite"] is True and doc["plan"]["read_version"] == 0
    assert doc["plan"]["metadata"]["configuration"]["delta.enableIcebergWriterCompatV1"] == "true"
    assert log_bytes(path) == before


def test_enable_an_empty_table_then_again(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0))
    result = deltaberg_here("enable", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["action"], doc["committed_version"]) == ("metadata-only", 1)
    assert validate(str(path), data_checks=True).compliant

    again = deltaberg_here("enable", str(path))
    assert again.returncode == 0, again.stderr
    assert "already enabled" in again.stdout and "result:   nothing to do" in again.stdout
    assert sorted(log_bytes(path)) == [f"{v:020d}.json" for v in (0, 1)]


def test_metadata_only_mode_on_compliant_files(tmp_path: Path) -> None:
    path = id_mode_table(tmp_path / "t")
    before = rows_of(path)
    result = deltaberg_here("enable", str(path), "--mode", "metadata_only")
    assert result.returncode == 0, result.stderr
    assert "enabled in version 2 (one metadata commit, no data rewritten)" in result.stdout
    assert validate(str(path), data_checks=True).compliant
    assert rows_of(path) == before


def test_metadata_only_refused_when_a_rewrite_is_needed(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    result = deltaberg_here("enable", str(path), "--mode", "metadata_only")
    assert result.returncode == 1, result.stderr
    assert "refused" in result.stderr and "no-column-mapping" in result.stderr and str(path) in result.stderr
    assert log_bytes(path) == before
    dry = deltaberg_here("enable", str(path), "--mode", "metadata_only", "--dry-run")
    assert dry.returncode == 1  # what the same command without --dry-run would do
    assert log_bytes(path) == before


@pytest.mark.parametrize("dry_run", [False, True])
def test_blocked_table(deltalake_table: Callable[..., Path], rows: pa.Table, dry_run: bool) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0), configuration={"delta.enableChangeDataFeed": "true"})
    before = log_bytes(path)
    result = deltaberg_here("enable", str(path), "--format", "json", *(["--dry-run"] if dry_run else []))
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["plan"]["blockers"][0].startswith("change data feed is active")
    assert log_bytes(path) == before


def test_not_a_table_is_an_error(tmp_path: Path) -> None:
    result = deltaberg_here("enable", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "NotADeltaTableError" in result.stderr and "Traceback" not in result.stderr


# -- levels and the writers they leave -------------------------------------------------------------------------


def test_dry_run_lists_the_writers_of_each_level(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    default = deltaberg_here("enable", str(path), "--dry-run")
    assert default.returncode == 0, default.stderr
    text = default.stdout
    assert "level:    writer-compat-v1 (IcebergWriterCompatV1)" in text
    can, refuse = text.split("can still write:")[1].split("will refuse to write:")
    assert "Delta Kernel (Java) 4.4.0: writes" in can and "Delta on Spark 4.4.0" not in can
    assert "Delta on Spark 4.4.0 (Spark 4.1): refuses (DELTA_UNSUPPORTED_FEATURES_FOR_WRITE" in refuse
    assert "deltalake (delta-rs) 1.6.6: refuses" in refuse

    v2 = deltaberg_here("enable", str(path), "--dry-run", "--level", "compat-v2", "--format", "json")
    assert v2.returncode == 0, v2.stderr
    plan = json.loads(v2.stdout)["plan"]
    assert plan["level"] == "compat-v2"
    assert [e["engine"] for e in plan["writers"]["can_write"]][:1] == ["delta-spark-4.4"]
    assert "deltalake-1.6" in [e["engine"] for e in plan["writers"]["will_refuse"]]
    config = plan["metadata"]["configuration"]
    assert config["delta.enableIcebergCompatV2"] == "true" and "delta.enableIcebergWriterCompatV1" not in config
    assert "icebergWriterCompatV1" not in plan["protocol"]["writerFeatures"]

    v3 = deltaberg_here("enable", str(path), "--dry-run", "--level", "writer-compat-v3", "--format", "json")
    assert v3.returncode == 0, v3.stderr
    plan = json.loads(v3.stdout)["plan"]
    assert {"icebergCompatV3", "icebergWriterCompatV3", "rowTracking", "domainMetadata"} <= set(
        plan["protocol"]["writerFeatures"])
    assert "row-tracking" in [r.split(":")[0] for r in plan["reasons"]]
    assert log_bytes(path) == before

    bad = deltaberg_here("enable", str(path), "--level", "compat-v9")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    assert log_bytes(path) == before


def test_compat_v2_on_an_empty_table(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    """compat-v2 keeps byte/short and does not block on change data feed (IcebergWriterCompatV1 would)."""
    data = rows.slice(0, 0).append_column("small", pa.array([], pa.int16()))
    path = deltalake_table("t", data=data, configuration={"delta.enableChangeDataFeed": "true"})
    assert deltaberg_here("enable", str(path), "--dry-run").returncode == 1  # blocked at writer-compat-v1
    result = deltaberg_here("enable", str(path), "--level", "compat-v2", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["action"] == "metadata-only"
    report = validate(str(path), "compat-v2", data_checks=True)
    assert report.compliant, report.to_text()
    assert not validate(str(path), "writer-compat-v1").compliant
    from airflow_deltaberg.core.delta import DeltaTable

    assert DeltaTable(str(path)).snapshot().schema.field("small").type.name == "short"


# -- the local Spark of the rewrite: jars and Java, one clear line when missing -------------------------------


def _enable_needing_rewrite(path: Path, *args: str, env: dict[str, str] | None = None
                            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DELTABERG, "enable", str(path), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_missing_delta_jars_are_one_line(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    empty = tmp_path / "no-jars"
    empty.mkdir()
    for args, env in ((["--jars", str(empty)], {}), ([], {"DELTABERG_JARS_DIR": str(empty)}),
                      (["--jars", str(tmp_path / "absent.jar")], {})):
        result = _enable_needing_rewrite(path, *args, env=env)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("deltaberg enable: SparkStartError: the local Spark of the enable rewrite needs "
                                   "delta-spark_4.1_2.13-4.4.0.jar and delta-storage-4.4.0.jar"), lines[0]
        assert "--jars" in lines[0] and "scripts/fetch_jars.sh" in lines[0]
    assert log_bytes(path) == before


def test_missing_java_is_one_line(deltalake_table: Callable[..., Path], tmp_path: Path) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    result = _enable_needing_rewrite(path, env={"JAVA_HOME": str(tmp_path / "no-jdk")})
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"deltaberg enable: SparkStartError: the local Spark of the enable rewrite needs Java 17 or later: "
        f"JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java (set JAVA_HOME to a JDK or unset it to use java from PATH)"]
    assert log_bytes(path) == before
