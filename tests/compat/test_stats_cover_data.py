"""The data.stats-cover-data rule on real tables (issue 11): no finding on any fixture table written by Delta on
Spark, Delta Kernel or deltalake (no false positives: timestamps cut to milliseconds, strings cut to a prefix,
floats printed from float32, decimals, nested fields, column mapping, INT96, deletion vectors), and a finding
for exactly the file whose stats a test falsifies in a copy of the same tables (the comparisons do run).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.compat.model import Location

RULE = "data.stats-cover-data"
NOT_A_TABLE = "crc-malformed"
WITHOUT_DATA_FILES = ("300k-add-files-100-col-partitioned", "app-txn-with-last-updated",
                      "with_checkpoint_no_last_checkpoint")
#: The tables the issue names as the false-positive checks (partition_cm ships no data files).
KEY_TABLES = ["stats-writing-all-types/delta", "timestamp-truncation-stats", "data-reader-timestamp_ntz",
              "basic-decimal-table", "table-with-dv-small", "type-widening"]


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES))
def test_no_fixture_table_is_flagged(fixture_table: str, fixtures_dir: Path) -> None:
    report = validate(str(fixtures_dir / fixture_table), "compat-v2", data_checks=True, sample_size=None)
    assert RULE in report.rules_checked
    assert [v.message for v in report.violations if v.rule_id == RULE] == []


def _last_add_with_stats(table: Path) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    for commit in sorted((table / "_delta_log").glob("*.json"), reverse=True):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("stats")]
        if adds:
            return commit, actions, adds[-1]
    raise AssertionError(f"no add with stats in {table}")


def _falsify(table: Path, change: Callable[[dict[str, Any]], bool]) -> str | None:
    """Apply ``change`` to the stats of the newest add that has stats; the add's path, or None when ``change``
    found nothing to change."""
    commit, actions, add = _last_add_with_stats(table)
    stats = json.loads(add["stats"])
    if not change(stats):
        return None
    add["stats"] = json.dumps(stats)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return add["path"]


def _one_more_record(stats: dict[str, Any]) -> bool:
    stats["numRecords"] += 1
    return True


def _lower_an_integer_maximum(stats: dict[str, Any]) -> bool:
    def lower(values: dict[str, Any]) -> bool:
        for key, value in values.items():
            if isinstance(value, dict) and lower(value):
                return True
            if isinstance(value, int) and not isinstance(value, bool):
                values[key] = value - 1
                return True
        return False
    return lower(stats.get("maxValues") or {})


@pytest.mark.parametrize("name", KEY_TABLES)
@pytest.mark.parametrize("change", [_one_more_record, _lower_an_integer_maximum], ids=["num-records", "max"])
def test_a_falsified_file_of_a_key_table_is_flagged(name: str, change: Callable[[dict[str, Any]], bool],
                                                   copy_fixture: Callable[[str], Path]) -> None:
    table = copy_fixture(name)
    clean = validate(str(table), "compat-v2", data_checks=True, sample_size=None)
    assert RULE not in clean.failed_rule_ids
    path = _falsify(table, change)
    if path is None:
        pytest.skip(f"{name}: its stats have no integer maximum")
    report = validate(str(table), "compat-v2", data_checks=True, sample_size=None)
    found = [v for v in report.violations if v.rule_id == RULE]
    if change is _lower_an_integer_maximum and "deletionVector" in json.dumps(_last_add_with_stats(table)[2]):
        assert found == []  # bounds of a file with a deletion vector describe its rows not deleted: not compared
        return
    assert [v.location for v in found] == [Location("file", path)], [v.message for v in found]
