"""DeltaValidateOperator in real ``dag.test()`` runs: task states, try numbers and the XCom report."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException
from support.flaky_fs import FlakyMemoryFileSystem, flaky_store

from airflow_deltaberg.core.compat import ComplianceReport, validate
from airflow_deltaberg.core.errors import ComplianceViolationError
from airflow_deltaberg.operators import DeltaValidateOperator

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
NO_DELAY = dt.timedelta(seconds=0)


def make_dag(dag_id: str, **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


def test_compliant_table_succeeds_and_publishes_the_report(run_dag, dag_id, compliant_table: Path) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(compliant_table))

    result = run_dag(dag)

    assert result.state == "success"
    ti = result.ti("validate")
    assert ti.state == "success"
    assert ti.try_number == 1
    report = result.xcom("validate", "compliance_report")
    assert report["compliant"] is True
    assert report["error_count"] == 0
    assert report["violations"] == []
    assert report["table"] == str(compliant_table)
    assert report["version"] == 0
    assert report["level"] == "writer-compat-v1"
    assert result.xcom("validate") is None  # pushed once, under compliance_report: no return_value copy
    assert report == validate(str(compliant_table)).to_dict()


def test_non_compliant_table_fails_without_retrying(
    run_dag, dag_id, plain_table: Path, plain_failed_rules: frozenset[str]
) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), retries=3, retry_delay=NO_DELAY)

    result = run_dag(dag)

    assert result.state == "failed"
    ti = result.ti("validate")
    assert ti.state == "failed"
    assert ti.try_number == 1  # retries=3 were available and not used
    assert ti.max_tries == 3
    report = result.xcom("validate", "compliance_report")
    assert report["compliant"] is False
    assert {v["rule_id"] for v in report["violations"] if v["severity"] == "error"} == plain_failed_rules
    assert report["error_count"] == len(report["violations"])
    assert ComplianceReport.from_dict(report).failed_rule_ids == plain_failed_rules
    assert result.xcom("validate") is None  # the report is pushed once, under compliance_report


def test_exception_carries_the_report_and_summary(run_dag, dag_id, plain_table: Path) -> None:
    caught: list[BaseException | None] = []
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(plain_table),
            on_failure_callback=lambda context: caught.append(context.get("exception")),
        )

    result = run_dag(dag)

    assert result.ti("validate").state == "failed"
    (exc,) = caught
    # No retries: Airflow's AirflowFailException, raised from the core error that carries the report.
    assert type(exc) is AirflowFailException
    violation = exc.__cause__
    assert isinstance(violation, ComplianceViolationError) and violation.retryable is False
    assert isinstance(violation.report, ComplianceReport)
    assert str(exc) == str(violation) == violation.report.summary()
    assert str(exc).startswith(f"NOT COMPLIANT: {plain_table} at version 0")
    assert violation.report.to_dict() == result.xcom("validate", "compliance_report")


def test_fail_on_violation_false_succeeds_with_the_failing_report(
    run_dag, dag_id, plain_table: Path, plain_failed_rules: frozenset[str]
) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), fail_on_violation=False)

    result = run_dag(dag)

    assert result.ti("validate").state == "success"
    report = result.xcom("validate", "compliance_report")
    assert report["compliant"] is False
    assert ComplianceReport.from_dict(report).failed_rule_ids == plain_failed_rules
    assert result.xcom("validate") is None


def report_log_levels(logged: str) -> list[str]:
    """The levels of the task log's "Compliance report" lines (dag.test prints ``... [level    ] message``)."""
    return re.findall(r"\[(\w+) *\] Compliance report:", logged)


def test_an_informational_validate_logs_no_error(
    run_dag, dag_id, plain_table: Path, compliant_table: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A report that does not fail the task is a warning (or information), not an ERROR in the task log."""
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="informational", table_uri=str(plain_table), fail_on_violation=False)
    capfd.readouterr()

    result = run_dag(dag)

    assert result.ti("informational").state == "success"
    out = capfd.readouterr()
    logged = out.out + out.err
    assert report_log_levels(logged) == ["warning"]
    assert not re.search(r"\[error +\]", logged)  # no ERROR line at all (the report's own "- [error] rule" rows aside)
    assert "fail_on_violation is False, so the task succeeds" in logged

    with make_dag(dag_id + "_clean") as clean_dag:
        DeltaValidateOperator(task_id="clean", table_uri=str(compliant_table))
    run_dag(clean_dag)
    out = capfd.readouterr()
    assert report_log_levels(out.out + out.err) == ["info"]


def test_a_failing_validate_logs_its_report_at_error(
    run_dag, dag_id, plain_table: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table))
    capfd.readouterr()

    run_dag(dag)

    out = capfd.readouterr()
    assert report_log_levels(out.out + out.err) == ["error"]


def test_templated_table_level_and_version(run_dag, dag_id, compliant_table: Path, table_helpers) -> None:
    assert table_helpers.disable_writer_compat(compliant_table) == 1  # the latest version is no longer compliant
    with make_dag(dag_id, params={"table": str(compliant_table), "level": "writer-compat-v1", "version": 0}) as dag:
        DeltaValidateOperator(
            task_id="at_v0",
            table_uri="{{ params.table }}",
            level="{{ params.level }}",
            version="{{ params.version }}",
        )
        DeltaValidateOperator(task_id="latest", table_uri="{{ params.table }}", level="{{ params.level }}")
        DeltaValidateOperator(task_id="latest_compat_v2", table_uri="{{ params.table }}", level="compat-v2")

    result = run_dag(dag)

    at_v0 = result.xcom("at_v0", "compliance_report")
    assert result.ti("at_v0").state == "success"
    assert (at_v0["version"], at_v0["compliant"]) == (0, True)
    latest = result.xcom("latest", "compliance_report")
    assert result.ti("latest").state == "failed"
    assert (latest["version"], latest["compliant"]) == (1, False)
    assert [v["rule_id"] for v in latest["violations"]] == ["property.enable-writer-compat-v1"]
    compat_v2 = result.xcom("latest_compat_v2", "compliance_report")
    assert result.ti("latest_compat_v2").state == "success"
    assert (compat_v2["level"], compat_v2["compliant"]) == ("compat-v2", True)


def test_data_checks_sample_files(run_dag, dag_id, plain_table: Path) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate", table_uri=str(plain_table), data_checks=True, sample_files=5, fail_on_violation=False
        )

    result = run_dag(dag)

    report = result.xcom("validate", "compliance_report")
    assert result.ti("validate").state == "success"
    assert report["data_checks"] is True
    assert report["files_sampled"] == 1
    assert "data.num-records" in report["rules_checked"]


def test_storage_options_from_connection(run_dag, dag_id, compliant_table: Path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DELTABERG_LOCAL", '{"conn_type": "deltaberg", "extra": {}}')
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(compliant_table), deltaberg_conn_id="deltaberg_local")
        DeltaValidateOperator(task_id="missing_conn", table_uri=str(compliant_table), deltaberg_conn_id="no_such")

    result = run_dag(dag)

    assert result.ti("validate").state == "success"
    assert result.xcom("validate", "compliance_report")["compliant"] is True
    assert result.ti("missing_conn").state == "failed"
    assert result.xcom("missing_conn", "compliance_report") is None


def test_missing_table_fails_without_retrying_and_names_the_table(run_dag, dag_id, tmp_path: Path) -> None:
    missing = tmp_path / "no-table-here"
    caught: list[BaseException | None] = []
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(missing),
            retries=2,
            retry_delay=NO_DELAY,
            on_failure_callback=lambda context: caught.append(context.get("exception")),
        )

    result = run_dag(dag)

    ti = result.ti("validate")
    assert (ti.state, ti.try_number, ti.max_tries) == ("failed", 1, 2)
    (exc,) = caught
    assert type(exc).__name__ == "AirflowFailException"
    assert "NotADeltaTableError" in str(exc)
    assert str(missing) in str(exc)
    assert result.xcom("validate", "compliance_report") is None


def test_invalid_level_fails_without_retrying(run_dag, dag_id, compliant_table: Path) -> None:
    caught: list[BaseException | None] = []
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(compliant_table),
            level="compat-v9",
            retries=2,
            retry_delay=NO_DELAY,
            on_failure_callback=lambda context: caught.append(context.get("exception")),
        )

    result = run_dag(dag)

    ti = result.ti("validate")
    assert (ti.state, ti.try_number) == ("failed", 1)
    assert "compat-v9" in str(caught[0]) and "writer-compat-v1" in str(caught[0])


@pytest.fixture
def flaky_table(table_helpers) -> Any:
    with flaky_store():
        location = "flakymem://deltaberg/flaky-table"
        table_helpers.write_compliant_table(location)
        yield location


def test_storage_error_is_retried(run_dag, dag_id, flaky_table: str) -> None:
    FlakyMemoryFileSystem.failures = 1  # the first try's listing of _delta_log fails
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=flaky_table, retries=2, retry_delay=NO_DELAY)

    result = run_dag(dag)

    ti = result.ti("validate")
    assert (ti.state, ti.try_number) == ("success", 2)
    assert FlakyMemoryFileSystem.failures == 0
    assert result.xcom("validate", "compliance_report")["compliant"] is True


def test_storage_error_exhausts_retries(run_dag, dag_id, flaky_table: str) -> None:
    FlakyMemoryFileSystem.failures = 100
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=flaky_table, retries=1, retry_delay=NO_DELAY)

    result = run_dag(dag)

    ti = result.ti("validate")
    assert (ti.state, ti.try_number) == ("failed", 2)
    assert result.xcom("validate", "compliance_report") is None
