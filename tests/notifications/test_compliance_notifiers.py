"""The compliance notifiers on real ``dag.test()`` runs: emails received by a local SMTP server (aiosmtpd) and
JSON received by a local HTTP server through an ``http`` connection (HttpHook)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_deltaberg.core.compat import Level, rules_for, validate
from airflow_deltaberg.core.errors import ComplianceViolationError, NotADeltaTableError
from airflow_deltaberg.notifications import ComplianceEmailNotifier, ComplianceWebhookNotifier
from airflow_deltaberg.operators import DeltaValidateOperator

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def make_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False)


def bodies(message: Message) -> tuple[dict[str, str], dict[str, bytes]]:
    """The bodies (content type -> text) and the attachments (file name -> bytes) of a received email."""
    texts: dict[str, str] = {}
    attachments: dict[str, bytes] = {}
    for part in message.walk():
        if part.is_multipart():
            continue
        filename = part.get_filename()
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        if filename:
            attachments[filename] = payload
        else:
            # SMTP carries CRLF line ends; the text itself has LF.
            texts[part.get_content_type()] = payload.decode(part.get_content_charset() or "utf-8").replace("\r\n", "\n")
    return texts, attachments


def parts(message: Message) -> tuple[str, dict[str, bytes]]:
    """The plain-text body and the attachments (file name -> bytes) of a received email."""
    texts, attachments = bodies(message)
    return texts["text/plain"], attachments


def http_conn(monkeypatch: pytest.MonkeyPatch, server: Any, conn_id: str = "compliance_hook", **fields: Any) -> str:
    """An ``http`` connection (environment variable) to the loopback webhook server; returns its id."""
    conn = {"conn_type": "http", "host": server.host, "port": server.port, "schema": "http", **fields}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return conn_id


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


def test_email_is_plain_text_with_an_html_alternative(run_dag, dag_id, plain_table: Path, smtp_server) -> None:
    """multipart/alternative: the markdown verbatim as text/plain (no &quot; or &#x27; in text shown as markdown),
    the same text as HTML, then the JSON report attached."""
    notifier = ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test")
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    result = run_dag(dag)

    (message,) = smtp_server.messages
    assert message.get_content_type() == "multipart/mixed"
    alternative, attachment = message.get_payload()
    assert alternative.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in alternative.get_payload()] == ["text/plain", "text/html"]
    assert attachment.get_filename() == "compliance_report.json"
    texts, attachments = bodies(message)
    markdown = validate(str(plain_table)).to_markdown()
    assert markdown in texts["text/plain"]
    assert "it must be 'true'" in markdown  # quotes the markdown must keep
    assert "&quot;" not in texts["text/plain"] and "&#x27;" not in texts["text/plain"]
    html_body = texts["text/html"]
    assert "<pre>" in html_body and "it must be 'true'" in html_body
    assert "&quot;" not in html_body and "&#x27;" not in html_body
    assert json.loads(attachments["compliance_report.json"]) == result.xcom("validate", "compliance_report")


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
    assert json.loads(attachments["compliance_report.json"]) == result.xcom("validate", "compliance_report")


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


def test_webhook_on_failure_posts_the_report(
    run_dag, dag_id, plain_table: Path, webhook_server, monkeypatch
) -> None:
    notifier = ComplianceWebhookNotifier(
        http_conn_id=http_conn(monkeypatch, webhook_server), endpoint="hooks/compliance", headers={"X-Team": "data"}
    )
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
    assert request.json()["report"] == report
    assert report["compliant"] is False


def test_webhook_body_names_the_run_the_table_and_the_summary(
    run_dag, dag_id, plain_table: Path, webhook_server, monkeypatch
) -> None:
    """dag_id, run_id and try number next to the table and the summary: a receiver routes and links on them."""
    notifier = ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server))
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    result = run_dag(dag)

    (request,) = webhook_server.requests
    body = request.json()
    report = result.xcom("validate", "compliance_report")
    assert (body["dag_id"], body["task_id"], body["run_id"], body["try_number"]) == (
        dag_id, "validate", result.dag_run.run_id, 1
    )
    assert body["table"] == str(plain_table) == report["table"]
    assert body["compliant"] is False
    assert body["summary"] == validate(str(plain_table)).summary()
    assert body["summary"].startswith(f"NOT COMPLIANT: {plain_table} at version 0")
    assert (body["report"], body["error"]) == (report, str(ComplianceViolationError(validate(str(plain_table)))))


def test_webhook_on_success_posts_the_xcom_report(
    run_dag, dag_id, compliant_table: Path, webhook_server, monkeypatch
) -> None:
    notifier = ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server))
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(compliant_table), on_success_callback=notifier)

    result = run_dag(dag)

    (request,) = webhook_server.requests
    body = request.json()
    assert body["report"] == result.xcom("validate", "compliance_report") == validate(str(compliant_table)).to_dict()
    assert (body["compliant"], body["error"], body["try_number"]) == (True, None, 1)


PASSWORD = "hunter2-secret-pw"
TOKEN = "tok-4f1c9e2d7a6b"
QUERY_SIG = "sig-0a9b8c7d6e5f"


def test_webhook_from_http_connection_keeps_its_secrets_out_of_the_log(
    run_dag, dag_id, plain_table: Path, webhook_server, monkeypatch, capfd
) -> None:
    conn_id = http_conn(monkeypatch, webhook_server, login="airflow", password=PASSWORD, extra={"X-Api-Key": TOKEN})
    notifier = ComplianceWebhookNotifier(http_conn_id=conn_id, endpoint=f"api/v1/compliance?sig={QUERY_SIG}")
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=notifier)

    result = run_dag(dag)

    (request,) = webhook_server.requests
    assert request.path == f"/api/v1/compliance?sig={QUERY_SIG}"
    assert request.headers["Authorization"] == "Basic " + base64.b64encode(f"airflow:{PASSWORD}".encode()).decode()
    assert request.headers["X-Api-Key"] == TOKEN
    assert request.json()["report"] == result.xcom("validate", "compliance_report")
    logs = capfd.readouterr()
    logged = logs.out + logs.err
    assert f"Posted the compliance notification of task {dag_id}.validate" in logged
    for secret in (PASSWORD, TOKEN, QUERY_SIG, base64.b64encode(f"airflow:{PASSWORD}".encode()).decode()):
        assert secret not in logged


def test_webhook_accepts_headers_nested_in_the_extra(
    run_dag, dag_id, plain_table: Path, webhook_server, monkeypatch, capfd
) -> None:
    """The shape the docs showed, ``{"headers": {...}}``: the headers reach the server, and no header named
    'headers' (HttpHook sends the extra's keys as headers; a nested object failed the request at send time)."""
    conn_id = http_conn(monkeypatch, webhook_server, extra={"headers": {"X-Api-Key": TOKEN}, "X-Team": "data"})
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table),
                              on_failure_callback=ComplianceWebhookNotifier(http_conn_id=conn_id))

    result = run_dag(dag)

    (request,) = webhook_server.requests
    assert (request.headers["X-Api-Key"], request.headers["X-Team"]) == (TOKEN, "data")
    assert "headers" not in {name.lower() for name in request.headers}
    assert request.json()["report"] == result.xcom("validate", "compliance_report")
    logs = capfd.readouterr()
    assert TOKEN not in logs.out + logs.err


@pytest.mark.parametrize("extra", [{"headers": {"X-Api-Key": ["a", "list"]}}, {"headers": "X-Api-Key: t"},
                                   {"X-Api-Key": {"nested": TOKEN}}])
def test_webhook_connection_is_checked_when_the_task_starts(
    run_dag, dag_id, plain_table: Path, webhook_server, smtp_server, monkeypatch, extra: dict[str, Any]
) -> None:
    """A webhook connection that cannot send fails the task when it starts: the table is not read (no report),
    and the email of the same callback says why, instead of going out alone before the webhook fails."""
    conn_id = http_conn(monkeypatch, webhook_server, extra=extra)
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=str(plain_table), on_failure_callback=[
            ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test"),
            ComplianceWebhookNotifier(http_conn_id=conn_id)])

    result = run_dag(dag)

    assert result.ti("validate").state == "failed"
    assert result.xcom("validate", "compliance_report") is None  # failed before validating
    (message,) = smtp_server.messages
    body, _ = parts(message)
    assert "NotifierConfigError" in body and repr(conn_id) in body
    assert TOKEN not in body
    assert webhook_server.requests == []


def test_check_connection_names_what_is_missing(webhook_server, monkeypatch) -> None:
    from airflow_deltaberg.core.errors import NotifierConfigError

    with pytest.raises(NotifierConfigError, match="'no_such_hook' cannot be read"):
        ComplianceWebhookNotifier(http_conn_id="no_such_hook").check_connection()
    with pytest.raises(NotifierConfigError, match="'no_such_smtp' cannot be read"):
        ComplianceEmailNotifier(to="a@b.test", smtp_conn_id="no_such_smtp").check_connection()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_NO_SENDER", json.dumps({"conn_type": "smtp", "host": "localhost"}))
    with pytest.raises(NotifierConfigError, match="from_email"):
        ComplianceEmailNotifier(to="a@b.test", smtp_conn_id="smtp_no_sender").check_connection()
    ComplianceEmailNotifier(to="a@b.test", smtp_conn_id="smtp_no_sender", from_email="x@b.test").check_connection()
    ftp = http_conn(monkeypatch, webhook_server, conn_id="ftp_hook", schema="ftp")
    with pytest.raises(NotifierConfigError, match="http"):
        ComplianceWebhookNotifier(http_conn_id=ftp).check_connection()
    ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server,
                                                     extra={"headers": {"X": "1"}, "timeout": 5})).check_connection()


def test_webhook_without_report_posts_the_exception(
    run_dag, dag_id, tmp_path: Path, webhook_server, monkeypatch
) -> None:
    missing = tmp_path / "gone"
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(missing),
            on_failure_callback=ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server)),
        )

    result = run_dag(dag)

    (request,) = webhook_server.requests
    payload = request.json()
    assert (payload["report"], payload["compliant"]) == (None, None)
    assert (payload["dag_id"], payload["task_id"], payload["try_number"]) == (dag_id, "validate", 1)
    assert payload["run_id"] == result.dag_run.run_id
    assert payload["table"] == str(missing)
    assert payload["error"].startswith("NotADeltaTableError: not a Delta table")
    assert str(missing) in payload["error"]
    assert payload["summary"].endswith(payload["error"])


# -- a failure before any report: the notification still names the table -------------------------------


class CredentiallessOperator(BaseOperator):
    """Fails as a task reading object storage without credentials does, before any report exists."""

    template_fields = ("table_uri",)

    def __init__(self, *, table_uri: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri

    def execute(self, context: Any) -> None:
        from botocore.exceptions import NoCredentialsError

        raise NoCredentialsError()


def test_failure_before_a_report_names_the_table_of_the_task(
    run_dag, dag_id, webhook_server, smtp_server, monkeypatch
) -> None:
    table = "s3://KEY:SECRET@warehouse/sales"
    with DAG(dag_id, schedule=None, start_date=START, params={"table": table}) as dag:
        CredentiallessOperator(
            task_id="read",
            table_uri="{{ params.table }}",
            on_failure_callback=[
                ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server)),
                ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test"),
            ],
        )

    run_dag(dag)

    (request,) = webhook_server.requests
    payload = request.json()
    assert payload["error"] == "Unable to locate credentials"
    assert payload["table"] == "s3://***@warehouse/sales"  # the rendered argument, without its credentials
    assert "on table s3://***@warehouse/sales failed without a compliance report" in payload["summary"]
    (message,) = smtp_server.messages
    assert "s3://***@warehouse/sales" in message["Subject"]
    assert "SECRET" not in message["Subject"] and "SECRET" not in parts(message)[0]


def test_failure_before_a_report_names_the_table_of_the_exception(plain_table: Path, webhook_server,
                                                                  monkeypatch) -> None:
    """Without a table argument (a PythonOperator, a DAG callback), the table of the core error."""
    error = NotADeltaTableError("no _delta_log", table="gs://lake/orders")
    try:
        raise AirflowFailException(f"{type(error).__name__}: {error}") from error
    except AirflowFailException as exc:
        context = {"exception": exc}

    ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server))(context)

    (request,) = webhook_server.requests
    assert request.json()["table"] == "gs://lake/orders"
    assert "on table gs://lake/orders failed without a compliance report" in request.json()["summary"]


def test_both_notifiers_on_one_task(
    run_dag, dag_id, plain_table: Path, plain_failed_rules: frozenset[str], smtp_server, webhook_server, monkeypatch
) -> None:
    with make_dag(dag_id) as dag:
        DeltaValidateOperator(
            task_id="validate",
            table_uri=str(plain_table),
            on_failure_callback=[
                ComplianceEmailNotifier(to="owner@deltaberg.test", smtp_conn_id="smtp_test"),
                ComplianceWebhookNotifier(http_conn_id=http_conn(monkeypatch, webhook_server)),
            ],
        )

    result = run_dag(dag)

    report = result.xcom("validate", "compliance_report")
    (request,) = webhook_server.requests
    assert request.json()["report"] == report
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


def test_webhook_error_names_the_host_only(plain_table: Path, webhook_server, monkeypatch) -> None:
    webhook_server.status = 500
    secret_path = "services/T0000/B0000/very-secret-token"
    notifier = ComplianceWebhookNotifier(
        http_conn_id=http_conn(monkeypatch, webhook_server), endpoint=f"{secret_path}?sig=also-secret"
    )

    with pytest.raises(AirflowException) as info:
        notifier(_violation_context(plain_table))

    message = str(info.value)
    assert message == f"webhook at {webhook_server.url} answered HTTP 500 Internal Server Error"
    assert "very-secret-token" not in message and "also-secret" not in message
    assert "very-secret-token" not in repr(notifier)
    (request,) = webhook_server.requests  # it was sent, the server refused it
    assert request.json()["report"]["compliant"] is False


def test_webhook_unreachable_names_the_host_only(plain_table: Path, closed_port: int, monkeypatch) -> None:
    port = closed_port
    monkeypatch.setenv("AIRFLOW_CONN_CLOSED_HOOK", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port}))
    notifier = ComplianceWebhookNotifier(http_conn_id="closed_hook", endpoint="secret-path?token=abc", timeout=5)

    with pytest.raises(AirflowException) as info:
        notifier(_violation_context(plain_table))

    assert str(info.value).startswith(f"webhook at http://127.0.0.1:{port} could not be reached")
    assert "secret-path" not in str(info.value) and "token=abc" not in str(info.value)


def test_webhook_without_the_http_provider_says_what_to_install(plain_table: Path, monkeypatch) -> None:
    """The provider is a dependency; an install without it gets one clear line, not an ImportError trace."""
    monkeypatch.setitem(sys.modules, "airflow.providers.http.hooks.http", None)  # import fails

    with pytest.raises(AirflowException, match="needs apache-airflow-providers-http"):
        ComplianceWebhookNotifier(http_conn_id="any")(_violation_context(plain_table))
