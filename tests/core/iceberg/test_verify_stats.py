"""Stats that lie (issue 11): a data file whose Delta ``minValues`` is later than the true minimum in its parquet
footer. Delta readers (deltalake's kernel) and Iceberg readers (pyiceberg, through the converted bounds) skip the
row ``ts = true minimum``. The converter cannot fix Delta's readers; ``validate --data-checks`` reports the file
(rule data.stats-cover-data, exit 1) and ``convert --verify-stats`` refuses it (StatsMismatchError, exit 2,
nothing written), in a full and in an incremental conversion. Healthy tables convert with ``--verify-stats``. The
commands run as ``cli.main`` in this process (``support.cli.deltaberg_here``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as PeerTable
from deltalake import QueryBuilder, write_deltalake
from pyiceberg.expressions import EqualTo
from pyiceberg.table import StaticTable
from support.cli import deltaberg_here
from support.tables import iceberg_files

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.verify_stats import verify_snapshot_stats

RULE = "data.stats-cover-data"
UTC = dt.timezone.utc
BASE = dt.datetime(2024, 1, 1, tzinfo=UTC)
ROWS = 10
LYING_VERSION = 1  # the second file: ids 10..19
TRUE_MIN = BASE + dt.timedelta(seconds=10, microseconds=250)  # ts of id 10, the lying file's smallest
TRUE_MIN_SQL = "2024-01-01T00:00:10.000250Z"


def append_file(path: Path, i: int) -> None:
    ids = list(range(i * ROWS, (i + 1) * ROWS))
    ts = pa.array([BASE + dt.timedelta(seconds=v, microseconds=250) for v in ids], pa.timestamp("us", "UTC"))
    write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "ts": ts}), mode="append")


def falsify(path: Path, version: int) -> str:
    """Move the minValues of the add in commit ``version`` two seconds later than its true minimum."""
    commit = path / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    (add,) = [a["add"] for a in actions if "add" in a]
    stats = json.loads(add["stats"])
    true_min = dt.datetime.fromisoformat(stats["minValues"]["ts"].replace("Z", "+00:00"))
    stats["minValues"]["ts"] = (true_min + dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    add["stats"] = json.dumps(stats)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return add["path"]


def lying_table(path: Path, files: int = 3) -> str:
    for i in range(files):
        append_file(path, i)
    return falsify(path, LYING_VERSION)


def deltalake_ids(path: Path, where: str) -> list[int]:
    table = PeerTable(str(path))
    result = pa.table(QueryBuilder().register("t", table).execute(f"SELECT id FROM t WHERE {where}"))
    return sorted(result.column("id").to_pylist())


def iceberg_ids(metadata_location: str, row_filter: object = None) -> list[int]:
    scan = StaticTable.from_metadata(metadata_location).scan(**({"row_filter": row_filter} if row_filter else {}))
    return sorted(scan.to_arrow().column("id").to_pylist())


def test_lying_stats_make_delta_and_iceberg_readers_skip_the_row(tmp_path: Path) -> None:
    """The defect itself, as both readers show it (what --verify-stats is for)."""
    path = tmp_path / "t"
    lying_table(path)
    assert deltalake_ids(path, "id = 10") == [10]
    assert deltalake_ids(path, "ts = '2024-01-01T00:00:00.000250Z'") == [0]  # an honest file: found
    assert deltalake_ids(path, f"ts = '{TRUE_MIN_SQL}'") == []  # the lying file: skipped
    result = convert(str(path))  # without verify_stats the lie is carried over into the Iceberg bounds
    assert iceberg_ids(result.metadata_location) == list(range(3 * ROWS))
    assert iceberg_ids(result.metadata_location, EqualTo("ts", TRUE_MIN.isoformat())) == []


def test_validate_data_checks_reports_the_lying_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    data_file = lying_table(path)
    result = deltaberg_here("validate", str(path), "--data-checks", "--sample-files", "all", "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    found = [v for v in report["violations"] if v["rule_id"] == RULE]
    assert [v["location"] for v in found] == [{"kind": "file", "path": data_file}]
    assert "column ts: minValues" in found[0]["message"] and found[0]["severity"] == "error"
    assert report["files_sampled"] == 3
    for level in ("compat-v1", "compat-v2", "writer-compat-v1"):
        assert RULE in deltaberg_here("validate", str(path), "--data-checks", "--sample-files", "all", "--level", level,
                           "--format", "json").stdout


def test_validate_sample_of_files_that_misses_the_liar_is_clean_of_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "t"
    lying_table(path)
    result = deltaberg_here("validate", str(path), "--data-checks", "--sample-files", "0", "--format", "json")
    assert RULE not in {v["rule_id"] for v in json.loads(result.stdout)["violations"]}


def test_convert_verify_stats_refuses_a_full_conversion(tmp_path: Path) -> None:
    path = tmp_path / "t"
    data_file = lying_table(path)
    result = deltaberg_here("convert", str(path), "--verify-stats")
    assert result.returncode == 2, result.stdout
    assert "StatsMismatchError" in result.stderr and data_file in result.stderr, result.stderr
    assert f"version {LYING_VERSION}" in result.stderr and str(path) in result.stderr
    assert not (path / "_iceberg").exists(), "a refused conversion wrote Iceberg files"
    with pytest.raises(StatsMismatchError) as info:
        convert(str(path), verify_stats=True)
    assert info.value.version == LYING_VERSION and info.value.file is not None and info.value.file.endswith(data_file)
    assert not (path / "_iceberg").exists()


def test_convert_verify_stats_refuses_an_incremental_conversion(tmp_path: Path) -> None:
    path = tmp_path / "t"
    append_file(path, 0)
    first = convert(str(path), verify_stats=True)
    before = iceberg_files(path)
    append_file(path, 1)
    append_file(path, 2)
    data_file = falsify(path, 2)
    with pytest.raises(StatsMismatchError) as info:
        convert(str(path), verify_stats=True)
    assert info.value.version == 2 and data_file in str(info.value)
    assert iceberg_files(path) == before
    assert iceberg_ids(first.metadata_location) == list(range(ROWS))
    result = deltaberg_here("convert", str(path), "--verify-stats")
    assert result.returncode == 2 and "StatsMismatchError" in result.stderr


def test_convert_verify_stats_passes_honest_tables(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for i in range(3):
        append_file(path, i)
    result = convert(str(path), verify_stats=True)
    assert iceberg_ids(result.metadata_location, EqualTo("ts", TRUE_MIN.isoformat())) == [10]
    append_file(path, 3)
    result = convert(str(path), verify_stats=True)
    assert result.mode == "incremental" and iceberg_ids(result.metadata_location) == list(range(4 * ROWS))
    cli = deltaberg_here("convert", str(path), "--verify-stats", "--full", "--format", "json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["records"] == 4 * ROWS


@pytest.mark.parametrize("value", ["-1", "some", "1.5"])
def test_sample_files_must_be_a_count_or_all(value: str, tmp_path: Path) -> None:
    path = tmp_path / "t"
    append_file(path, 0)
    result = deltaberg_here("validate", str(path), "--data-checks", "--sample-files", value)
    assert result.returncode == 2
    assert "--sample-files" in result.stderr and result.stdout == ""


# -- what else the add action says of its file (issue 11: A6a, A6b, B2) -----------------------------------------


def change_add(path: Path, version: int, change: Callable[[dict[str, Any]], None]) -> str:
    commit = path / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    adds = [a["add"] for a in actions if "add" in a]
    change(adds[-1])
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return adds[-1]["path"]


@pytest.mark.parametrize("wrong", [1, 2**31 - 1, 2**63 - 1], ids=["plus-one", "int-max", "long-max"])
def test_a_size_that_is_not_the_files_is_flagged_and_refused(wrong: int, tmp_path: Path) -> None:
    """Iceberg Java seeks the footer from file_size_in_bytes: a wrong size makes the converted file unreadable."""
    path = tmp_path / "t"
    for i in range(3):
        append_file(path, i)
    real: dict[str, int] = {}

    def resize(add: dict[str, Any]) -> None:
        real["size"] = add["size"]
        add["size"] = add["size"] + 1 if wrong == 1 else wrong

    data_file = change_add(path, LYING_VERSION, resize)
    report = json.loads(deltaberg_here("validate", str(path), "--data-checks", "--sample-files", "all", "--format",
                            "json").stdout)
    found = [v for v in report["violations"] if v["rule_id"] == RULE]
    assert [v["location"]["path"] for v in found] == [data_file]
    claimed = real["size"] + 1 if wrong == 1 else wrong
    assert f"size {claimed} but the file has {real['size']} bytes" in found[0]["message"]
    with pytest.raises(StatsMismatchError) as info:
        convert(str(path), verify_stats=True)
    assert f"size {claimed} but the file has {real['size']} bytes" in str(info.value)
    assert info.value.version == LYING_VERSION and not (path / "_iceberg").exists()


def test_the_parsed_stats_fixture_is_refused(copy_fixture: Callable[[str], Path]) -> None:
    """Its files have no ts_col, its stats say nullCount 0 (A6a): converted, ``ts_col IS NULL`` finds no row."""
    path = copy_fixture("parsed-stats")
    with pytest.raises(StatsMismatchError, match="column ts_col: not in the file"):
        convert(str(path), verify_stats=True)
    assert not (path / "_iceberg").exists()


def test_a_lying_maximum_in_a_file_without_footer_bounds_is_refused(copy_fixture: Callable[[str], Path]) -> None:
    """Photon writes no min/max: the values are read (fuzz case 5925: maxValues 'new' -> '0000')."""
    path = copy_fixture("compacted-log-files-table")
    change_add(path, 25, lambda add: add.update(stats=add["stats"].replace('"comment":"new"', '"comment":"0000"')))
    with pytest.raises(StatsMismatchError, match="column comment: maxValues '0000'"):
        convert(str(path), verify_stats=True)
    assert not (path / "_iceberg").exists()


@pytest.mark.fixture_tables(exclude=("crc-malformed", "300k-add-files-100-col-partitioned",
                                     "app-txn-with-last-updated", "with_checkpoint_no_last_checkpoint",
                                     "parsed-stats"))
def test_no_fixture_table_is_refused(fixture_table: str, fixtures_dir: Path) -> None:
    """No false positive: every fixture table with its data files passes the checks --verify-stats makes."""
    table = DeltaTable(str(fixtures_dir / fixture_table))
    snapshot = table.snapshot()
    verify_snapshot_stats(table.storage, snapshot)
