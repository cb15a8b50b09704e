"""The files of a table's earlier Iceberg histories (issue 26 §1-3): a Delta table deleted and written again at the
same path starts a new Iceberg history; the earlier histories' files stay while the new one is younger than
``deltaberg.cleanup.attempt-age-ms``, and a later run deletes them once it is older. The current history is read
back with pyiceberg (through the SQLite catalog and the version hint) and Iceberg Java (the shared Spark session),
against deltalake's kernel reader; files of attempts that may still be running survive."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.killed_run import killed_attempt
from support.oracle import delta_rows, open_sql_catalog, rows_of, sql_catalog_config

from airflow_deltaberg.core.errors import TablePropertyError
from airflow_deltaberg.core.iceberg.attempt_cleanup import (
    abandoned_attempt_files,
    attempt_of,
    remove_abandoned_attempts,
)
from airflow_deltaberg.core.iceberg.conversion_state import read_state
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.earlier_histories import FIRST_VERSION, REPLACED_UUID, START_MARKERS, STARTED_AT
from airflow_deltaberg.core.iceberg.publish import read_metadata
from airflow_deltaberg.core.iceberg.table_properties import ATTEMPT_AGE
from airflow_deltaberg.core.storage import LocalStorage, open_storage

IDENTIFIER = "db.events"
HINT = "version-hint.text"
#: Short enough to wait for, long enough that the run starting a history finishes well inside it.
THRESHOLD_MS = 4000


def metadata_folder(path: Path) -> Path:
    return path / "_iceberg" / "metadata"


def names(path: Path) -> set[str]:
    return {p.name for p in metadata_folder(path).iterdir()}


def run(path: Path, tmp_path: Path, threshold_ms: int | None = THRESHOLD_MS) -> ConversionResult:
    properties = {ATTEMPT_AGE: str(threshold_ms)} if threshold_ms is not None else None
    return convert(str(path), catalog_config=sql_catalog_config(tmp_path), identifier=IDENTIFIER,
                   table_properties=properties)


def write_table(path: Path, start: int, commits: int) -> None:
    """A Delta table of ``commits`` commits (the first creates it), as deltalake writes it."""
    for i in range(commits):
        rows = pa.table({"id": pa.array(range(start + 10 * i, start + 10 * i + 3), pa.int64()),
                         "label": [f"t{start}"] * 3})
        write_deltalake(str(path), rows, mode="append" if i else "error")


def recreate(path: Path, start: int, commits: int) -> None:
    """Delete the Delta table (everything but ``_iceberg``) and write another one at the path."""
    for p in path.iterdir():
        if p.name != "_iceberg":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    write_table(path, start, commits)


def properties(result: ConversionResult) -> dict[str, str]:
    return json.loads(Path(result.metadata_location).read_text())["properties"]


def wait_past_threshold(result: ConversionResult, threshold_ms: int = THRESHOLD_MS) -> None:
    """Sleep until the history ``result`` belongs to is older than the threshold."""
    started = int(properties(result)[STARTED_AT])
    time.sleep(max(0.0, (started + threshold_ms + 50) / 1000 - time.time()))


def assert_reads_as_delta(path: Path, tmp_path: Path, result: ConversionResult) -> None:
    """pyiceberg reads the current table as Delta's rows through the catalog, the version hint and its file."""
    expected = delta_rows(path)
    assert rows_of(open_sql_catalog(tmp_path).load_table(IDENTIFIER).scan().to_arrow()) == expected
    assert open_sql_catalog(tmp_path).load_table(IDENTIFIER).metadata_location == result.metadata_location
    assert rows_of(StaticTable.from_metadata(str(path / "_iceberg")).scan().to_arrow()) == expected
    assert rows_of(StaticTable.from_metadata(result.metadata_location).scan().to_arrow()) == expected
    hint = (metadata_folder(path) / HINT).read_text().strip()
    assert Path(result.metadata_location).name == f"v{hint}.metadata.json"


def three_histories(path: Path, tmp_path: Path) -> tuple[ConversionResult, set[str]]:
    """A table converted commit by commit, deleted and written again twice; returns the last run and the names of
    the earlier histories' files (without the version hint, which every history rewrites)."""
    write_table(path, 0, 3)
    for _ in range(3):
        write_deltalake(str(path), pa.table({"id": pa.array([99], pa.int64()), "label": ["x"]}), mode="append")
        run(path, tmp_path)
    first = names(path) - {HINT}
    recreate(path, 1000, 2)
    second = run(path, tmp_path)
    assert second.mode == "full"
    assert properties(second)[FIRST_VERSION] == Path(second.metadata_location).name[1:].split(".")[0]
    assert first <= names(path), "the first history's files went before the threshold"
    earlier = names(path) - {HINT}
    recreate(path, 2000, 2)
    third = run(path, tmp_path)
    assert third.mode == "full"
    assert earlier <= names(path), "an earlier history's files went before the threshold"
    return third, earlier


def test_earlier_histories_files_go_after_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events"
    third, earlier = three_histories(path, tmp_path)
    first_version = int(properties(third)[FIRST_VERSION])
    assert_reads_as_delta(path, tmp_path, third)
    wait_past_threshold(third)

    again = run(path, tmp_path)

    assert again.mode == "up-to-date"
    left = names(path) & earlier
    assert not left, f"{len(left)} files of the earlier histories are left, e.g. {sorted(left)[:3]}"
    assert_reads_as_delta(path, tmp_path, again)
    # What is left is the current history's: its metadata files and what its snapshot uses.
    table = StaticTable.from_metadata(again.metadata_location)
    attempts = {attempt_of(Path(table.current_snapshot().manifest_list).name)}
    attempts |= {attempt_of(Path(m.manifest_path).name) for m in table.current_snapshot().manifests(table.io)}
    stray = {n for n in names(path) if not n.endswith(".metadata.json") and n != HINT and attempt_of(n) not in attempts}
    assert not stray
    # The next commits go on incrementally, read as Delta.
    write_deltalake(str(path), pa.table({"id": pa.array([5], pa.int64()), "label": ["y"]}), mode="append")
    later = run(path, tmp_path)
    assert later.mode == "incremental"
    assert_reads_as_delta(path, tmp_path, later)
    # The cleanup is recorded: the start markers are gone (the replaced uuid stays), and the runs after it look for
    # no earlier history's file.
    assert not set(START_MARKERS) & set(properties(later))
    assert properties(later)[REPLACED_UUID] == properties(third)[REPLACED_UUID]
    checked: list[str] = []
    exists = LocalStorage.exists
    monkeypatch.setattr(LocalStorage, "exists", lambda self, key: checked.append(key) or exists(self, key))
    for i in range(2):
        write_deltalake(str(path), pa.table({"id": pa.array([6 + i], pa.int64()), "label": ["y"]}), mode="append")
        last = run(path, tmp_path)
        assert last.mode == "incremental"
    assert not [k for k in checked if k.endswith(f"/v{first_version - 1}.metadata.json")]
    assert_reads_as_delta(path, tmp_path, last)


def test_new_history_records_its_start_and_keeps_earlier_files_before_the_threshold(tmp_path: Path) -> None:
    """Default threshold (1 hour): however old the earlier files are, runs within the hour delete none of them."""
    path = tmp_path / "events"
    write_table(path, 0, 3)
    first = run(path, tmp_path, threshold_ms=None)
    long_ago = time.time() - 30 * 24 * 3600
    for p in metadata_folder(path).iterdir():
        os.utime(p, (long_ago, long_ago))
    old = names(path) - {HINT}
    recreate(path, 1000, 2)
    before = time.time() * 1000
    second = run(path, tmp_path, threshold_ms=None)
    recorded = properties(second)
    assert before <= int(recorded[STARTED_AT]) <= time.time() * 1000
    assert recorded[FIRST_VERSION] == Path(second.metadata_location).name[1:].split(".")[0]
    assert recorded[REPLACED_UUID] == json.loads(Path(first.metadata_location).read_text())["table-uuid"]
    for i in range(12):  # past a sequence number of 10, where the attempt cleanup looks anyway
        write_deltalake(str(path), pa.table({"id": pa.array([i], pa.int64()), "label": ["z"]}), mode="append")
        result = run(path, tmp_path, threshold_ms=None)
        assert properties(result)[STARTED_AT] == recorded[STARTED_AT]  # later metadata files keep the start
    assert old <= names(path)
    assert_reads_as_delta(path, tmp_path, result)


def test_files_of_attempts_that_may_still_run_survive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An attempt on the earlier history (still writing when the table was written again) and one on the current
    history, both younger than the threshold, keep their files while the earlier history goes; once silent for the
    threshold, they go too."""
    path = tmp_path / "events"
    write_table(path, 0, 2)
    run(path, tmp_path)
    write_deltalake(str(path), pa.table({"id": pa.array([7], pa.int64()), "label": ["k"]}), mode="append")
    on_earlier = killed_attempt(path, monkeypatch, lambda: run(path, tmp_path))
    earlier = names(path) - {HINT} - {p.name for p in on_earlier}
    recreate(path, 1000, 2)
    second = run(path, tmp_path)
    wait_past_threshold(second)
    write_deltalake(str(path), pa.table({"id": pa.array([8], pa.int64()), "label": ["k"]}), mode="append")
    on_current = killed_attempt(path, monkeypatch, lambda: run(path, tmp_path))
    now = time.time()
    for p in on_earlier:  # still writing
        os.utime(p, (now, now))

    result = run(path, tmp_path)

    assert not names(path) & earlier
    assert all(p.exists() for p in on_earlier | on_current)
    assert_reads_as_delta(path, tmp_path, result)
    silent = time.time() - 2 * THRESHOLD_MS / 1000
    for p in on_earlier | on_current:
        os.utime(p, (silent, silent))
    write_deltalake(str(path), pa.table({"id": pa.array([9], pa.int64()), "label": ["k"]}), mode="append")
    # The attempt cleanup looks at once in ten snapshots once the earlier history is gone.
    for i in range(10):
        write_deltalake(str(path), pa.table({"id": pa.array([20 + i], pa.int64()), "label": ["k"]}), mode="append")
        result = run(path, tmp_path)
    assert not any(p.exists() for p in on_earlier | on_current)
    assert_reads_as_delta(path, tmp_path, result)


@pytest.mark.spark
def test_iceberg_java_reads_the_current_history_after_the_cleanup(tmp_path: Path, iceberg_spark: Any) -> None:
    """Iceberg Java reads the table through its version hint (HadoopTables) and its metadata file as Delta's rows,
    once the earlier histories' files are gone."""
    path = tmp_path / "events"
    third, earlier = three_histories(path, tmp_path)
    wait_past_threshold(third)
    result = run(path, tmp_path)
    assert not names(path) & earlier
    expected = delta_rows(path)
    for location in (str(path / "_iceberg"), result.metadata_location):
        df = iceberg_spark.read.format("iceberg").load(location)
        columns = sorted(df.columns)
        assert sorted(tuple(row[c] for c in columns) for row in df.collect()) == expected, location


@pytest.mark.parametrize("value", ["soon", "-5", "٣"])
def test_a_tampered_start_is_a_typed_error(tmp_path: Path, value: str) -> None:
    """A history start that is not a number (set through a catalog) refuses with TablePropertyError naming the
    table and the property, before anything is deleted."""
    path = tmp_path / "events"
    write_table(path, 0, 1)
    run(path, tmp_path)
    recreate(path, 1000, 1)
    recreate_result = run(path, tmp_path)
    published = read_metadata(open_storage(str(path)), int(properties(recreate_result)[FIRST_VERSION]))
    tampered = replace(published, metadata=published.metadata.model_copy(
        update={"properties": {**published.metadata.properties, STARTED_AT: value}}))
    before = names(path)
    with pytest.raises(TablePropertyError, match=f"{STARTED_AT}.*events|events.*{STARTED_AT}"):
        remove_abandoned_attempts(open_storage(str(path)), tampered, None, int(time.time() * 1000) + 10**9)
    assert names(path) == before


def test_the_newest_earlier_metadata_file_is_deleted_last(tmp_path: Path) -> None:
    """Earlier metadata files v9, v10, ... go in the order of their numbers (not of their names, where v10 sorts
    before v9), metadata before the files they use: a cleanup stopped part way leaves the newest earlier metadata
    file, whose absence alone then says the earlier histories are gone."""
    path = tmp_path / "events"
    write_table(path, 0, 1)
    run(path, tmp_path)
    for i in range(11):  # metadata files up to v12, the last ten and the current one kept
        write_deltalake(str(path), pa.table({"id": pa.array([i], pa.int64()), "label": ["x"]}), mode="append")
        run(path, tmp_path)
    recreate(path, 1000, 1)
    current = run(path, tmp_path)
    first_version = int(properties(current)[FIRST_VERSION])
    wait_past_threshold(current)
    storage = open_storage(str(path))
    published = read_metadata(storage, first_version)

    keys = abandoned_attempt_files(storage, published, read_state(storage, published.metadata.snapshots[-1]
                                                                  .manifest_list), int(time.time() * 1000))

    metadata = [k for k in keys if k.endswith(".metadata.json")]
    versions = [int(Path(k).name[1:].split(".")[0]) for k in metadata]
    assert {9, 10, first_version - 1} <= set(versions)
    assert versions == sorted(versions) and versions[-1] == first_version - 1
    assert keys[:len(metadata)] == metadata  # every metadata file before any file it uses
