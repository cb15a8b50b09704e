"""enable() without a data rewrite: the metadata-only commit (empty tables, id-mode tables with col-<id> names
and compliant files), dry runs that write nothing, refusals, idempotence and a concurrent writer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.tables import COLUMNS, commit_lines, id_mode_table, log_bytes, rows_of

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.commit import commit_with_conflict_check
from airflow_deltaberg.core.enable.commit import OPERATION, commit_metadata_only, find_enable_commit
from airflow_deltaberg.core.enable.plan import plan_enable
from airflow_deltaberg.core.enable.run import enable
from airflow_deltaberg.core.errors import CommitConflictError, DeltaError, EnableBlockedError


def assert_enabled(path: Path, version: int) -> None:
    report = validate(str(path), data_checks=True)
    assert report.compliant, report.to_text()
    assert report.version == version
    lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    info = json.loads(lines[0])["commitInfo"]
    assert info["operation"] == OPERATION and info["engineInfo"].startswith("airflow-deltaberg/")
    assert [next(iter(json.loads(line))) for line in lines] == ["commitInfo", "protocol", "metaData"]


@pytest.mark.parametrize(("configuration", "partition_by", "data"), [
    (None, None, None),
    (None, ["part"], None),
    ({"delta.columnMapping.mode": "name"}, None, None),
    (None, None, pa.table({"b": pa.array([], pa.int8()), "s": pa.array([], pa.int16())})),
], ids=["plain", "partitioned", "name-mode", "byte-short"])
def test_empty_tables_are_enabled_in_one_commit(deltalake_table: Callable[..., Path], rows: pa.Table,
                                                configuration: dict[str, str] | None, partition_by: list[str] | None,
                                                data: pa.Table | None) -> None:
    path = deltalake_table("t", data=(rows if data is None else data).slice(0, 0), configuration=configuration,
                           partition_by=partition_by)
    result = enable(str(path))
    assert (result.action, result.committed_version) == ("metadata-only", 1)
    assert_enabled(path, 1)
    assert rows_of(path) == []
    fields = DeltaTable(str(path)).snapshot().schema.fields
    assert all(f.physical_name == f"col-{f.column_mapping_id}" for f in fields)
    if data is not None:
        assert [str(f.type) for f in fields] == ["integer", "integer"]


def test_id_mode_table_with_files_keeps_its_rows(tmp_path: Path) -> None:
    path = id_mode_table(tmp_path / "t")
    before = rows_of(path)
    assert len(before) == len(COLUMNS["id"])
    files_before = set(DeltaTable(str(path)).snapshot().files.column("path").to_pylist())
    result = enable(str(path), mode="metadata_only")
    assert result.action == "metadata-only" and result.committed_version == 2
    assert_enabled(path, 2)
    assert rows_of(path) == before
    assert set(DeltaTable(str(path)).snapshot().files.column("path").to_pylist()) == files_before


def test_the_enable_commit_is_found_in_the_log(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0))
    assert find_enable_commit(str(path), 0) is None
    write_deltalake(str(path), rows.slice(0, 0), mode="append")  # version 1, not ours
    assert enable(str(path)).committed_version == 2
    assert find_enable_commit(str(path), 1) == 2
    assert find_enable_commit(str(path), 0) is None  # planned at 1, not 0


def test_empty_fixture_in_id_mode_with_uuid_names(copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("partition_cm/id")
    assert enable(str(path)).action == "metadata-only"
    assert_enabled(path, 1)


def test_in_commit_timestamps_are_kept(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    """On a table with in-commit timestamps, the enable commit carries one, after the previous commit's."""
    path = deltalake_table("t", data=rows.slice(0, 0))
    table = DeltaTable(str(path))
    md = table.snapshot().metadata.to_action()
    md["configuration"] = {**md["configuration"], "delta.enableInCommitTimestamps": "true"}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7,
                "writerFeatures": ["appendOnly", "invariants", "inCommitTimestamp"]}
    commit_with_conflict_check(table, [{"protocol": protocol}, {"metaData": md}], read_version=0, operation="SET")
    result = enable(str(path))
    assert result.committed_version == 2
    assert_enabled(path, 2)
    infos = [commit_lines(path, v)[0]["commitInfo"] for v in (1, 2)]
    assert infos[1]["inCommitTimestamp"] > infos[0]["inCommitTimestamp"]
    assert "inCommitTimestamp" in DeltaTable(str(path)).snapshot().protocol.writer_features
    assert DeltaTable(str(path)).commit_timestamps()[2] == infos[1]["inCommitTimestamp"]


def test_enable_is_idempotent(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0))
    enable(str(path))
    log = log_bytes(path)
    again = enable(str(path))
    assert again.action == "already-enabled" and again.committed_version is None
    assert again.plan.already_enabled
    assert log_bytes(path) == log


# -- dry run ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "metadata_only", "rewrite"])
@pytest.mark.parametrize("empty", [True, False], ids=["empty", "with-files"])
def test_dry_run_writes_nothing(deltalake_table: Callable[..., Path], rows: pa.Table, mode: str, empty: bool) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0) if empty else rows, partition_by=["part"])
    before = log_bytes(path)
    files_before = sorted(p.relative_to(path) for p in path.rglob("*"))
    result = enable(str(path), mode=mode, dry_run=True)
    assert result.action == "dry-run" and result.committed_version is None
    assert result.plan.needs_rewrite is not empty
    assert log_bytes(path) == before
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == files_before


# -- refusals ----------------------------------------------------------------------------------------------


def test_metadata_only_is_refused_when_files_must_be_rewritten(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    before = log_bytes(path)
    with pytest.raises(EnableBlockedError) as info:
        enable(str(path), mode="metadata_only")
    assert "no-column-mapping" in str(info.value) and str(path) in str(info.value)
    assert info.value.plan.needs_rewrite
    assert log_bytes(path) == before


def test_blocked_table_is_refused(deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0), configuration={"delta.enableChangeDataFeed": "true"})
    before = log_bytes(path)
    with pytest.raises(EnableBlockedError, match="change data feed is active") as info:
        enable(str(path))
    assert info.value.version == 0 and info.value.table == str(path)
    assert log_bytes(path) == before


def test_a_needed_rewrite_without_an_injected_runner_is_refused_and_writes_nothing(
        deltalake_table: Callable[..., Path]) -> None:
    """Core runs no Spark itself: the caller injects the rewrite runner (the CLI a local Spark, the operator
    spark-submit); without one, a rewrite the plan needs is a typed error naming the table and version."""
    path = deltalake_table("t")
    before = log_bytes(path)
    with pytest.raises(DeltaError, match="no rewrite runner was given") as info:
        enable(str(path))
    assert info.value.table == str(path) and info.value.version == 0
    assert log_bytes(path) == before


def test_the_injected_runner_gets_the_table_and_the_planned_version(deltalake_table: Callable[..., Path]) -> None:
    path = deltalake_table("t")
    calls = []

    def runner(location: str, read_version: int, storage_options: Any, level: str) -> tuple[int, dict[str, Any]]:
        calls.append((location, read_version, storage_options, level))
        return 7, {"files_added": 1}

    result = enable(str(path), mode="rewrite", storage_options={"k": "v"}, rewrite_runner=runner)
    assert calls == [(str(path), 0, {"k": "v"}, "writer-compat-v1")]
    enable(str(path), mode="rewrite", level="compat-v2", rewrite_runner=runner)
    assert calls[-1] == (str(path), 0, None, "compat-v2")
    assert (result.action, result.committed_version, result.details) == ("rewrite", 7, {"files_added": 1})


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        enable("/nowhere", mode="fast")


# -- concurrency -------------------------------------------------------------------------------------------


def test_a_concurrent_append_to_an_empty_table_makes_the_metadata_only_commit_fail(
        deltalake_table: Callable[..., Path], rows: pa.Table) -> None:
    """Planned on the empty table; deltalake then appends a file without field ids: switching to id mode
    now would make its rows unreadable, so the commit must be refused."""
    path = deltalake_table("t", data=rows.slice(0, 0))
    table = DeltaTable(str(path))
    plan = plan_enable(table.snapshot())
    assert not plan.needs_rewrite
    write_deltalake(str(path), rows, mode="append")
    left_by_peer = log_bytes(path)
    with pytest.raises(CommitConflictError) as info:
        commit_metadata_only(table, plan)
    assert info.value.version == 1 and info.value.file.endswith(".parquet")
    assert log_bytes(path) == left_by_peer
    assert len(rows_of(path)) == rows.num_rows
