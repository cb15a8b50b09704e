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
from airflow_deltaberg.core.errors import StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert

RULE = "data.stats-cover-data"
NOT_A_TABLE = "crc-malformed"
WITHOUT_DATA_FILES = ("300k-add-files-100-col-partitioned", "app-txn-with-last-updated",
                      "with_checkpoint_no_last_checkpoint")
#: The tables the issue names as the false-positive checks (partition_cm ships no data files).
KEY_TABLES = ["stats-writing-all-types/delta", "timestamp-truncation-stats", "data-reader-timestamp_ntz",
              "basic-decimal-table", "table-with-dv-small", "type-widening"]


#: Tables whose logs lie about their data as shipped: parsed-stats' files have no ts_col, its stats say nullCount 0.
LYING_FIXTURES = ("parsed-stats",)


@pytest.mark.fixture_tables(exclude=(NOT_A_TABLE, *WITHOUT_DATA_FILES, *LYING_FIXTURES))
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


def test_the_parsed_stats_fixture_claims_a_column_its_files_do_not_have(fixtures_dir: Path) -> None:
    """Its data files have no ts_col (every reader reads nulls), its stats give nullCount 0 and bounds: Delta's
    data skipping, and Iceberg's through the converted bounds, drop every file for ``ts_col IS NULL``."""
    report = validate(str(fixtures_dir / "parsed-stats"), "compat-v2", data_checks=True, sample_size=None)
    found = [v for v in report.violations if v.rule_id == RULE]
    assert len(found) == report.files_sampled == 6
    for violation in found:
        assert "column ts_col: not in the file (every value null), but the stats give a minValues, a maxValues, " \
               "a nullCount of 0 (of 100 rows)" in violation.message, violation.message


#: Files without footer statistics (Photon writes none; INT96 timestamps have no usable order): the rule reads the
#: values of the column. (table, column, a maximum below the file's largest value)
UNSTATED_BOUNDS = [("compacted-log-files-table", "comment", "0000"),
                   ("timestamp-partitioned-table", "id", 0),
                   ("external-table-different-nullability", "i", 6),
                   ("timestamp-truncation-stats", "ts_col", "1970-01-01T00:00:07.000Z")]


@pytest.mark.parametrize(("name", "column", "maximum"), UNSTATED_BOUNDS, ids=[t[0] for t in UNSTATED_BOUNDS])
def test_a_lying_maximum_is_flagged_where_the_footer_states_no_bounds(
        name: str, column: str, maximum: Any, copy_fixture: Callable[[str], Path]) -> None:
    table = copy_fixture(name)

    def lower(stats: dict[str, Any]) -> bool:
        assert column in stats["maxValues"] and stats["maxValues"][column] != maximum
        stats["maxValues"][column] = maximum
        return True

    path = _falsify(table, lower)
    report = validate(str(table), "compat-v2", data_checks=True, sample_size=None)
    found = [v for v in report.violations if v.rule_id == RULE]
    assert [v.location for v in found] == [Location("file", path)], [v.message for v in found]
    assert f"column {column}: maxValues" in found[0].message


def _bounds(low: int, high: int, tight: bool) -> Callable[[dict[str, Any]], bool]:
    def change(stats: dict[str, Any]) -> bool:
        stats["minValues"]["value"], stats["maxValues"]["value"], stats["tightBounds"] = low, high, tight
        return True

    return change


@pytest.mark.parametrize(("low", "high", "tight", "wrong"), [
    (1, 8, True, None),  # the bounds of the rows the deletion vector keeps (values 0 and 9 are deleted)
    (0, 9, False, None),  # as shipped: the bounds before the deletes
    (1, 7, True, "maxValues 7"),  # value 8 is kept
    (2, 8, False, "minValues 2"),  # value 1 is kept
], ids=["tight", "as-shipped", "max-below-a-kept-value", "min-above-a-kept-value"])
def test_a_file_with_a_deletion_vector_is_checked_against_the_rows_it_keeps(
        low: int, high: int, tight: bool, wrong: str | None, copy_fixture: Callable[[str], Path]) -> None:
    """Fuzz seed 8 case 1553: with a deletion vector the rule checked nothing, so stats excluding a kept row (an
    Iceberg filter then pruned the file) went unreported. Now the bounds are checked against the kept rows."""
    table = copy_fixture("table-with-dv-small")
    path = _falsify(table, _bounds(low, high, tight))
    report = validate(str(table), "compat-v2", data_checks=True, sample_size=None)
    found = [v for v in report.violations if v.rule_id == RULE]
    if wrong is None:
        assert found == []
        assert convert(str(table), verify_stats=True).files_added == 1
    else:
        assert [v.location for v in found] == [Location("file", path)]
        assert wrong in found[0].message and "of the rows its deletion vector keeps" in found[0].message
        with pytest.raises(StatsMismatchError, match=wrong):
            convert(str(table), verify_stats=True)
        assert not (table / "_iceberg").exists()
