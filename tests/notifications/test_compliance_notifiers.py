"""The compliance notifiers on real ``dag.test()`` runs: emails received by a local SMTP server and JSON
received by a local HTTP server."""

from __future__ import annotations

import base64
import datetime as dt
import json
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_deltaberg.core.compat import Level, rules_for, validate
from airflow_deltaberg.core.errors import ComplianceViolationError
from airflow_deltaberg.notifications import ComplianceEmailNotifier, ComplianceWebhookNotifier
from airflow_deltaberg.operators import DeltaValidateOperator

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def make_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False)


def parts(message: Message) -> tuple[str, dict[str, bytes]]:
    """The HTML body and the attachments (file name -> bytes) of a received email."""
    body = ""
    attachments: dict[str, bytes] = {}
    for part in message.walk():
        if part.is_multipart():
            continue
        filename = part.get_filename()
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        if filename:
            attachments[filename] = payload
        elif part.get_content_type() == "text/html":
            body += payload.decode(part.get_content_charset() or "utf-8")
    return body, attachments


# -- email ------------------------------------------------------------------------------------------


def test_email_on_failure_lists_the_failing_rules(
    run_dag, dag_id, plain_table: Path, plain_failed_rules: frozenset[str], smtp_server
) -> None:
    notifier = ComplianceEmailNotifier(
        to=["data-team@deltaberg.test", "oncall@deltaberg.test"], smtp_conn_id="smtp_test"
    )
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    result = run_dag(dag)

    assert result.ti("validate").state == "failed"
    (message,) = smtp_server.messages
    assert smtp_server.envelopes == [
        ("airflow@deltaberg.test", ["data-team@deltaberg.test", "oncall@deltaberg.test"])
    ]
    assert message["Subject"] == (
        f"[deltaberg] {dag_id}.validate: NOT COMPLIANT: {plain_table} at version 0, level writer-compat-v1 "
        f"({len(rules_for(Level.WRITER_COMPAT_V1, False))} rules, {len(plain_failed_rules)} errors, 0 warnings)"
    )
    body, attachments = parts(message)
    for rule_id in plain_failed_rules:
        assert f"`{rule_id}`" in body  # a markdown table row per violation
    assert f"run {result.dag_run.run_id}, try 1" in body
    report = json.loads(attachments["compliance_report.json"])
    assert report == result.xcom("validate", "compliance_report")


def test_email_text_body_and_custom_subject(run_dag, dag_id, plain_table: Path, smtp_server) -> None:
    notifier = ComplianceEmailNotifier(
        to="owner@deltaberg.test",
        smtp_conn_id="smtp_test",
        from_email="validator@deltaberg.test",
        subject="{{ compliance_report.errors | length if compliance_report else 'no' }} errors in {{ params.name }}",
        body_format="text",
    )
    with DAG(dag_id, schedule=None, start_date=START, params={"name": "orders"}) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    run_dag(dag)

    (message,) = smtp_server.messages
    assert smtp_server.envelopes[0][0] == "validator@deltaberg.test"
    assert message["Subject"] == "8 errors in orders"
    body, _ = parts(message)
    assert "- [error] protocol.writer-version: writer version is 2; writer version 7 is required" in body
    assert "| severity |" not in body


def test_email_on_success_uses_the_xcom_report(run_dag, dag_id, compliant_table: Path, smtp_server) -> None:
    notifier = ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test")
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(compliant_table), on_success_callback=notifier)

    result = run_dag(dag)

    assert result.ti("validate").state == "success"
    (message,) = smtp_server.messages
    assert "COMPLIANT: " in message["Subject"] and "NOT COMPLIANT" not in message["Subject"]
    body, attachments = parts(message)
    assert "Every rule holds." in body
    assert json.loads(attachments["compliance_report.json"]) == result.xcom("validate")


def test_email_without_report_sends_the_exception(run_dag, dag_id, tmp_path: Path, smtp_server) -> None:
    missing = tmp_path / "gone"
    notifier = ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test")
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(missing), on_failure_callback=notifier)

    run_dag(dag)

    (message,) = smtp_server.messages
    body, attachments = parts(message)
    assert attachments == {}
    assert "failed without a compliance report" in body
    assert "NotADeltaTableError" in body and str(missing) in body
    assert message["Subject"].startswith(f"[deltaberg] {dag_id}.validate: task {dag_id}.validate (run ")


# -- webhook ----------------------------------------------------------------------------------------


def test_webhook_on_failure_posts_the_report(run_dag, dag_id, plain_table: Path, webhook_server) -> None:
    notifier = ComplianceWebhookNotifier(url=f"{webhook_server.url}/hooks/compliance", headers={"X-Team": "data"})
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    result = run_dag(dag)

    assert result.ti("validate").state == "failed"
    (request,) = webhook_server.requests
    assert request.method == "POST"
    assert request.path == "/hooks/compliance"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Team"] == "data"
    report = result.xcom("validate", "compliance_report")
    assert request.json() == report
    assert report["compliant"] is False


def test_webhook_on_success_posts_the_xcom_report(run_dag, dag_id, compliant_table: Path, webhook_server) -> None:
    notifier = ComplianceWebhookNotifier(url=webhook_server.url)
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(compliant_table), on_success_callback=notifier)

    result = run_dag(dag)

    (request,) = webhook_server.requests
    assert request.json() == result.xcom("validate") == validate(str(compliant_table)).to_dict()


def test_webhook_from_http_connection(run_dag, dag_id, plain_table: Path, webhook_server, monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_COMPLIANCE_HOOK",
        json.dumps(
            {
                "conn_type": "http",
                "host": webhook_server.host,
                "port": webhook_server.port,
                "schema": "http",
                "login": "airflow",
                "password": "hunter2-secret",
                "extra": {"headers": {"X-Api-Key": "key-123"}},
            }
        ),
    )
    notifier = ComplianceWebhookNotifier(http_conn_id="compliance_hook", endpoint="api/v1/compliance")
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    result = run_dag(dag)

    (request,) = webhook_server.requests
    assert request.path == "/api/v1/compliance"
    assert request.headers["Authorization"] == "Basic " + base64.b64encode(b"airflow:hunter2-secret").decode()
    assert request.headers["X-Api-Key"] == "key-123"
    assert request.json() == result.xcom("validate", "compliance_report")


def test_webhook_without_report_posts_the_exception(run_dag, dag_id, tmp_path: Path, webhook_server) -> None:
    missing = tmp_path / "gone"
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(missing),
            on_failure_callback=ComplianceWebhookNotifier(url=webhook_server.url),
        )

    result = run_dag(dag)

    (request,) = webhook_server.requests
    payload = request.json()
    assert payload["report"] is None
    assert (payload["dag_id"], payload["task_id"], payload["try_number"]) == (dag_id, "validate", 1)
    assert payload["run_id"] == result.dag_run.run_id
    assert payload["error"].startswith("NotADeltaTableError: not a Delta table")
    assert str(missing) in payload["error"]
    assert payload["message"].endswith(payload["error"])


def test_both_notifiers_on_one_task(
    run_dag, dag_id, plain_table: Path, plain_failed_rules: frozenset[str], smtp_server, webhook_server
) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(plain_table),
            on_failure_callback=[
                ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test"),
                ComplianceWebhookNotifier(url=webhook_server.url),
            ],
        )

    result = run_dag(dag)

    report = result.xcom("validate", "compliance_report")
    (request,) = webhook_server.requests
    assert request.json() == report
    (message,) = smtp_server.messages
    body, attachments = parts(message)
    assert all(rule_id in body for rule_id in plain_failed_rules)
    assert json.loads(attachments["compliance_report.json"]) == report


# -- direct calls: errors and secrets ---------------------------------------------------------------


def _violation_context(table: Path) -> dict[str, Any]:
    """The context of a failed validation: the AirflowFailException raised from the core error (as the operator
    raises it)."""
    violation = ComplianceViolationError(validate(str(table)))
    try:
        raise AirflowFailException(str(violation)) from violation
    except AirflowFailException as exc:
        return {"exception": exc}


def test_webhook_error_names_the_host_only(plain_table: Path, webhook_server) -> None:
    webhook_server.status = 500
    secret_path = "/services/T0000/B0000/very-secret-token"
    notifier = ComplianceWebhookNotifier(url=f"{webhook_server.url}{secret_path}?sig=also-secret")

    with pytest.raises(AirflowException) as info:
        notifier(_violation_context(plain_table))

    message = str(info.value)
    assert message == f"webhook at {webhook_server.url} answered HTTP 500 Internal Server Error"
    assert "very-secret-token" not in message and "also-secret" not in message
    assert "very-secret-token" not in repr(notifier)
    (request,) = webhook_server.requests  # it was sent, the server refused it
    assert request.json()["compliant"] is False


def test_webhook_unreachable_names_the_host_only(plain_table: Path, closed_port: int) -> None:
    port = closed_port
    notifier = ComplianceWebhookNotifier(url=f"http://127.0.0.1:{port}/secret-path?token=abc", timeout=5)

    with pytest.raises(AirflowException) as info:
        notifier(_violation_context(plain_table))

    assert str(info.value).startswith(f"webhook at http://127.0.0.1:{port} could not be reached")
    assert "secret-path" not in str(info.value) and "token=abc" not in str(info.value)


def test_webhook_needs_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ComplianceWebhookNotifier()
    with pytest.raises(ValueError, match="exactly one"):
        ComplianceWebhookNotifier(url="http://127.0.0.1:1", http_conn_id="x")

