"""`deltaberg enable` run as a real process: exit 0 done, 1 blocked/refused, 2 error; --dry-run writes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from support.cli import run_deltaberg
from support.tables import id_mode_table, log_bytes, rows_of

from airflow_deltaberg.core.compat import validate


def test_dry_run_prints_the_plan_and_writes_nothing(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t", partition_by=["part"])
    before = log_bytes(path)
    result = run_deltaberg("enable", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "rewrite:  needed" in result.stdout
    assert "  - no-column-mapping: " in result.stdout and "  - partition-values-not-materialized: " in result.stdout
    assert "upgrade the protocol from 1/2 to 3/7" in result.stdout
    assert "result:   dry run: nothing was written" in result.stdout
    assert log_bytes(path) == before

    as_json = run_deltaberg("enable", str(path), "--dry-run", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["action"] == "dry-run" and doc["committed_version"] is None
    assert doc["plan"]["needs_rewrite"] is True and doc["plan"]["read_version"] == 0
    assert doc["plan"]["metadata"]["configuration"]["delta.enableIcebergWriterCompatV1"] == "true"
    assert log_bytes(path) == before


def test_enable_an_empty_table_then_again(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0))
    result = run_deltaberg("enable", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["action"], doc["committed_version"]) == ("metadata-only", 1)
    assert validate(str(path), data_checks=True).compliant

    again = run_deltaberg("enable", str(path))
    assert again.returncode == 0, again.stderr
    assert "already enabled" in again.stdout and "result:   nothing to do" in again.stdout
    assert sorted(log_bytes(path)) == [f"{v:020d}.json" for v in (0, 1)]


def test_metadata_only_mode_on_compliant_files(tmp_path: Path) -> None:
    path = id_mode_table(tmp_path / "t")
    before = rows_of(path)
    result = run_deltaberg("enable", str(path), "--mode", "metadata_only")
    assert result.returncode == 0, result.stderr
    assert "enabled in version 2 (one metadata commit, no data rewritten)" in result.stdout
    assert validate(str(path), data_checks=True).compliant
    assert rows_of(path) == before


def test_metadata_only_refused_when_a_rewrite_is_needed(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    result = run_deltaberg("enable", str(path), "--mode", "metadata_only")
    assert result.returncode == 1, result.stderr
    assert "refused" in result.stderr and "no-column-mapping" in result.stderr and str(path) in result.stderr
    assert log_bytes(path) == before
    dry = run_deltaberg("enable", str(path), "--mode", "metadata_only", "--dry-run")
    assert dry.returncode == 1  # what the same command without --dry-run would do
    assert log_bytes(path) == before


@pytest.mark.parametrize("dry_run", [False, True])
def test_blocked_table(deltalake_table: Callable[..., Path], rows: pa.Table, dry_run: bool) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0), configuration={"delta.enableChangeDataFeed": "true"})
    before = log_bytes(path)
    result = run_deltaberg("enable", str(path), "--format", "json", *(["--dry-run"] if dry_run else []))
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["plan"]["blockers"][0].startswith("change data feed is active")
    assert log_bytes(path) == before


def test_not_a_table_is_an_error(tmp_path: Path) -> None:
    result = run_deltaberg("enable", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "NotADeltaTableError" in result.stderr and "Traceback" not in result.stderr
