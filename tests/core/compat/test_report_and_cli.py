"""The compliance report's JSON schema (stable, version 1), its text and markdown renderings, and
`deltaberg validate` (exit 0 compliant, 1 violations, 2 error): run as a real process once, then as ``cli.main`` in this
process (``deltaberg_here``: the same output and exit code, without a process start each)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.cli import deltaberg_here, run_deltaberg
from support.compat_tables import BuiltTable, add_files, array, create_compliant_table

from airflow_deltaberg.core import display
from airflow_deltaberg.core.compat import ComplianceReport, Severity, Violation, validate
from airflow_deltaberg.core.compat.model import Location
from airflow_deltaberg.core.compat.report import SCHEMA_VERSION

WV1 = "writer-compat-v1"

TOP_LEVEL_TYPES = {
    "schema_version": int,
    "table": str,
    "version": int,
    "level": str,
    "levels_checked": list,
    "data_checks": bool,
    "files_sampled": int,
    "compliant": bool,
    "error_count": int,
    "warning_count": int,
    "rules_checked": list,
    "violations": list,
}
VIOLATION_TYPES = {
    "rule_id": str,
    "title": str,
    "levels": list,
    "severity": str,
    "message": str,
    "location": dict,
    "hint": str,
    "spec": str,
}


@pytest.fixture()
def good(tmp_path: Path) -> BuiltTable:
    """A compliant table with one file."""
    table = create_compliant_table(tmp_path / "good", [("id", "long"), ("tags", array("string"))])
    add_files(table, {"id": [1, 2], "tags": [["a"], None]})
    return table


@pytest.fixture()
def bad(tmp_path: Path) -> Path:
    """A plain deltalake table (1/2, no column mapping) with one file."""
    path = tmp_path / "bad"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64())}))
    return path


@pytest.fixture()
def int96(tmp_path: Path) -> BuiltTable:
    """Compliant except for its files: INT96 timestamps, found only by the data checks."""
    table = create_compliant_table(tmp_path / "int96", [("id", "long"), ("at", "timestamp")])
    add_files(table, {"id": [1], "at": [None]}, int96_timestamps=True)
    return table


# -- JSON -----------------------------------------------------------------------------------------------


def _check_schema(data: dict) -> None:
    assert list(data) == list(TOP_LEVEL_TYPES)  # key order is part of the format
    for key, kind in TOP_LEVEL_TYPES.items():
        assert type(data[key]) is kind, key
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert all(isinstance(x, str) for x in data["levels_checked"] + data["rules_checked"])
    for v in data["violations"]:
        assert list(v) == list(VIOLATION_TYPES)
        for key, kind in VIOLATION_TYPES.items():
            assert type(v[key]) is kind, key
        assert v["severity"] in ("error", "warning")
        assert set(v["location"]) == {"kind", "path"}
        assert v["location"]["kind"] in ("protocol", "property", "column", "feature", "file", "table")
        assert v["rule_id"] in data["rules_checked"]
    errors = sum(v["severity"] == "error" for v in data["violations"])
    assert data["error_count"] == errors
    assert data["warning_count"] == len(data["violations"]) - errors
    assert data["compliant"] is (errors == 0)


def test_json_schema_of_a_failing_report(bad: Path) -> None:
    report = validate(str(bad), WV1)
    data = json.loads(report.to_json())
    _check_schema(data)
    assert data["level"] == WV1 and data["levels_checked"] == ["compat-v2", WV1]
    assert data["compliant"] is False and data["error_count"] > 0
    reader = next(v for v in data["violations"] if v["rule_id"] == "protocol.reader-version")
    assert reader["location"] == {"kind": "protocol", "path": "minReaderVersion"}
    assert reader["levels"] == ["compat-v1", "compat-v2", "compat-v3", WV1, "writer-compat-v3"]
    assert reader["severity"] == "error"


def test_json_schema_of_a_compliant_report(good: BuiltTable) -> None:
    data = json.loads(validate(good.location, WV1, data_checks=True).to_json(indent=None))
    _check_schema(data)
    assert data["compliant"] is True and data["violations"] == [] and data["files_sampled"] == 1
    assert data["data_checks"] is True and data["version"] == 1


def test_from_dict_round_trip(bad: Path, good: BuiltTable) -> None:
    for report in (validate(str(bad), WV1), validate(good.location, "compat-v2", data_checks=True)):
        again = ComplianceReport.from_dict(json.loads(report.to_json()))
        assert again == report
        assert again.to_dict() == report.to_dict()
        assert again.failed_rule_ids == report.failed_rule_ids


def test_from_dict_accepts_added_fields_and_older_reports(bad: Path) -> None:
    """Fields are only ever added: a reader of version 1 ignores new ones; files_sampled came later."""
    data = validate(str(bad), WV1).to_dict()
    data["a_future_field"] = {"x": 1}
    for v in data["violations"]:
        v["a_future_violation_field"] = 1
    del data["files_sampled"]
    again = ComplianceReport.from_dict(data)
    assert again.files_sampled == 0
    assert again.violations == validate(str(bad), WV1).violations


# -- text and markdown ----------------------------------------------------------------------------------


def test_text_rendering(bad: Path, good: BuiltTable) -> None:
    report = validate(str(bad), WV1)
    lines = report.to_text().splitlines()
    assert lines[0] == report.summary()
    assert lines[0].startswith(f"NOT COMPLIANT: {report.table} at version 0, level {WV1} (")
    assert f"{len(report.errors)} errors, 0 warnings)" in lines[0]
    assert len(lines) == 1 + 2 * len(report.violations)
    for v, (head, where) in zip(report.violations, zip(lines[1::2], lines[2::2], strict=True), strict=True):
        assert head == f"- [error] {v.rule_id}: {v.message}"
        assert where == f"    at {v.location.kind} {v.location.path}; fix: {v.hint}"
    ok = validate(good.location, WV1)
    assert ok.to_text() == ok.summary() and ok.summary().startswith("COMPLIANT: ")
    assert report.render("text") == report.to_text()


def test_markdown_rendering(bad: Path, good: BuiltTable) -> None:
    report = validate(str(bad), WV1)
    lines = report.to_markdown().splitlines()
    assert lines[0] == f"## {display.markdown(report.summary())}"  # the location escaped for markdown
    assert lines[2:4] == ["| severity | rule | location | message | how to fix |", "|---|---|---|---|---|"]
    assert len(lines) == 4 + len(report.violations)
    row = next(line for line in lines if "`column-mapping.mode`" in line)
    assert row.startswith("| error | `column-mapping.mode` | property `delta.columnMapping.mode` | ")
    ok = validate(good.location, WV1).to_markdown().splitlines()
    assert ok == [f"## {display.markdown(validate(good.location, WV1).summary())}", "", "Every rule holds."]
    assert report.render("markdown") == report.to_markdown()


def test_markdown_escapes_pipes() -> None:
    violation = Violation("x.rule", "X", ("compat-v2",), Severity.WARNING, "a | b", Location("column", "c|d"),
                          "fix | it", "spec")
    report = ComplianceReport("t", 3, "compat-v2", ("compat-v2",), False, ("x.rule",), (violation,))
    assert report.compliant  # warnings do not make a table non-compliant
    row = report.to_markdown().splitlines()[-1]
    assert row == "| warning | `x.rule` | column `c\\|d` | a \\| b | fix \\| it |"
    assert "(1 rules, 0 errors, 1 warnings)" in report.summary()


# -- the CLI --------------------------------------------------------------------------------------------


def test_cli_exit_0_on_a_compliant_table(good: BuiltTable) -> None:
    result = run_deltaberg("validate", good.location, "--data-checks", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    _check_schema(data)
    assert data["compliant"] and data["data_checks"] and data["files_sampled"] == 1 and data["level"] == WV1
    assert data == validate(good.location, WV1, data_checks=True).to_dict()


def test_cli_exit_1_on_violations_text_and_markdown(bad: Path) -> None:
    text = deltaberg_here("validate", str(bad))
    assert text.returncode == 1, text.stderr
    assert text.stdout.rstrip("\n") == validate(str(bad), WV1).to_text()
    markdown = deltaberg_here("validate", str(bad), "--format", "markdown", "--level", "compat-v2")
    assert markdown.returncode == 1
    assert markdown.stdout.startswith("## NOT COMPLIANT: ") and "level compat-v2" in markdown.stdout
    assert "`column-mapping.id-mode`" not in markdown.stdout  # a writer-compat-v1 rule


def test_cli_level_compat_v1(good: BuiltTable) -> None:
    result = deltaberg_here("validate", good.location, "--level", "compat-v1", "--format", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["level"] == "compat-v1" and data["levels_checked"] == ["compat-v1"]
    assert {v["rule_id"] for v in data["violations"]} == {
        "protocol.feature.compat-v1", "property.enable-compat-v1", "types.compat-v1-no-map-array-void"}


def test_cli_data_checks_and_version(int96: BuiltTable) -> None:
    without = deltaberg_here("validate", int96.location, "--format", "json")
    assert without.returncode == 0, without.stderr
    with_data = deltaberg_here("validate", int96.location, "--data-checks", "--sample-files", "5", "--format", "json")
    assert with_data.returncode == 1
    data = json.loads(with_data.stdout)
    assert [v["rule_id"] for v in data["violations"]] == ["data.timestamp-int64"]
    assert data["violations"][0]["location"]["kind"] == "file"
    # Version 0 has no files: nothing for the data checks to find.
    old = deltaberg_here("validate", int96.location, "--data-checks", "--version", "0", "--format", "json")
    assert old.returncode == 0 and json.loads(old.stdout)["version"] == 0


@pytest.mark.parametrize("case", ["missing", "version", "data-files"])
def test_cli_exit_2_on_errors(case: str, tmp_path: Path, bad: Path, fixtures_dir: Path) -> None:
    args, error = {
        "missing": ((str(tmp_path / "nowhere"),), "NotADeltaTableError"),
        "version": ((str(bad), "--version", "7"), "VersionNotFoundError"),
        # The log names data files the fixture does not hold.
        "data-files": ((str(fixtures_dir / "app-txn-with-last-updated"), "--data-checks"), "MissingDataFileError"),
    }[case]
    result = deltaberg_here("validate", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"deltaberg validate: {error}: ")
    assert len(result.stderr.strip().splitlines()) == 1  # one line, no traceback


def test_cli_rejects_an_unknown_level(bad: Path) -> None:
    result = deltaberg_here("validate", str(bad), "--level", "compat-v4")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_cli_exit_2_when_a_partition_column_is_not_in_the_schema(tmp_path: Path) -> None:
    """A metaData whose partitionColumns name no schema column: the log engine reports the broken metaData
    action with its file (exit 2, one line) instead of a traceback and exit code 1, the code of violations."""
    table = create_compliant_table(tmp_path / "t", [("id", "long"), ("p", "string")], partition_by=["p"])
    add_files(table, {"id": [1], "p": ["a"]})
    metadata = dict(table.metadata, partitionColumns=["nope"])
    table.commit([{"metaData": metadata}])
    result = deltaberg_here("validate", table.location, "--data-checks")
    assert result.returncode == 2
    assert result.stderr.startswith("deltaberg validate: CorruptLogError: the metaData action is invalid")
    assert "00000000000000000002.json" in result.stderr
    assert "nope" in result.stderr and len(result.stderr.strip().splitlines()) == 1
