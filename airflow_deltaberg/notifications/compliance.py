"""Notifiers that send the compliance report of a DeltaValidateOperator task by email or to a webhook.

Both take the report from the task's exception or its cause (``ComplianceViolationError.report``) or else from the
``compliance_report`` XCom of the task instance. Without a report (the task failed for another reason, e.g. storage
credentials missing) they send a short message with the exception text, naming the table: the task's
``table_uri`` argument, else the exception's ``table`` attribute. A fleet report (core.fleet.FleetReport) that a
task hands over in the context under ``fleet_report`` is sent instead (the fleet DAG's report task): its markdown
table as the body, ``fleet_report.json`` attached; the webhook's ``fleet`` field.
"""

from __future__ import annotations

import html
import json
import logging
import smtplib
from collections.abc import Iterable, Mapping, Sequence
from email import policy
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseNotifier, Context

from airflow_deltaberg.core import display
from airflow_deltaberg.core.compat import ComplianceReport
from airflow_deltaberg.core.errors import NotifierConfigError
from airflow_deltaberg.core.fleet import FleetReport
from airflow_deltaberg.core.redact import is_secret_header, location_text
from airflow_deltaberg.hooks.masking import mask_secrets
from airflow_deltaberg.operators.validate import XCOM_KEY
from airflow_deltaberg.version_compat import AirflowException

log = logging.getLogger(__name__)

REPORT_ATTACHMENT = "compliance_report.json"
FLEET_ATTACHMENT = "fleet_report.json"
#: The context key under which a task hands a fleet report (core.fleet.FleetReport) to the notifiers.
FLEET_KEY = "fleet_report"
# RFC 5322's hard line limit rather than the folding at 78: a subject stays one header line as clients show it,
# and 7bit keeps a non-ASCII body transfer-encoded for servers without 8BITMIME.
_EMAIL_POLICY = policy.default.clone(max_line_length=998, cte_type="7bit")
_SUMMARY_LIMIT = 200


def find_report(context: Mapping[str, Any]) -> ComplianceReport | None:
    """The report carried by the context's exception (DeltaValidateOperator fails the task with an
    AirflowFailException raised from a ComplianceViolationError), else the task instance's ``compliance_report``
    XCom."""
    exc = context.get("exception")
    for carrier in (exc, getattr(exc, "__cause__", None)):
        report = getattr(carrier, "report", None)
        if isinstance(report, ComplianceReport):
            return report
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        return None
    map_index = getattr(ti, "map_index", None)
    pull_kwargs: dict[str, Any] = {"map_indexes": map_index} if isinstance(map_index, int) else {}
    try:
        data = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_KEY, **pull_kwargs)
    except Exception as exc:  # a notification must still go out without the XCom
        log.warning("Could not read the %s XCom of %s: %s", XCOM_KEY, ti.task_id, exc)
        return None
    if not isinstance(data, Mapping):
        return None
    try:
        return ComplianceReport.from_dict(dict(data))
    except (KeyError, TypeError, ValueError):
        return None


def find_table(context: Mapping[str, Any]) -> str | None:
    """The table a failed task was about, shown without URL credentials: the task's ``table_uri`` argument (as
    rendered), else the ``table`` attribute of the exception or of its cause (core.errors.DeltaError); None when
    neither names one."""
    ti = context.get("ti") or context.get("task_instance")
    task = context.get("task") or getattr(ti, "task", None)
    exc = context.get("exception")
    candidates = [getattr(task, "table_uri", None)]
    candidates += [getattr(carrier, "table", None) for carrier in (exc, getattr(exc, "__cause__", None))]
    for table in candidates:
        if isinstance(table, str) and table:
            return location_text(table)
    return None


def _task_label(context: Mapping[str, Any]) -> str:
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        dag = context.get("dag")
        return f"DAG {display.text(getattr(dag, 'dag_id', '?'))}"
    return display.text(f"task {ti.dag_id}.{ti.task_id} (run {ti.run_id}, try {ti.try_number})")


def failure_text(context: Mapping[str, Any]) -> str:
    """A short message for a notification without a report: which task and table, and the exception text; one
    line, control characters escaped (core.display.text)."""
    table = find_table(context)
    subject = _task_label(context) + (f" on table {display.text(table)}" if table else "")
    exc = context.get("exception")
    if exc is None:
        return f"{subject} produced no compliance report"
    detail = str(exc) or type(exc).__name__
    return f"{subject} failed without a compliance report: {display.text(detail)}"


def find_fleet_report(context: Mapping[str, Any]) -> FleetReport | None:
    """The fleet report a task handed to the notifiers in its context (``FLEET_KEY``), else None."""
    fleet = context.get(FLEET_KEY)
    return fleet if isinstance(fleet, FleetReport) else None


def _summary(report: ComplianceReport | None, context: Mapping[str, Any]) -> str:
    fleet = find_fleet_report(context)
    text = fleet.summary() if fleet is not None else report.summary() if report is not None else failure_text(context)
    first_line = text.splitlines()[0] if text else ""
    return first_line if len(first_line) <= _SUMMARY_LIMIT else first_line[: _SUMMARY_LIMIT - 3] + "..."


def notification_payload(context: Mapping[str, Any]) -> dict[str, Any]:
    """The document a notification carries: which run and try of which task, the table, the summary (the
    report's, or the failure message), the report dict (None without one) and the exception text (None without
    one)."""
    ti = context.get("ti") or context.get("task_instance")
    exc = context.get("exception")
    report = find_report(context)
    fleet = find_fleet_report(context)
    if fleet is not None:
        return {"dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None),
                "run_id": getattr(ti, "run_id", None), "try_number": getattr(ti, "try_number", None),
                "map_index": getattr(ti, "map_index", None), "table": None, "compliant": None,
                "summary": fleet.summary(), "report": None, "error": None, "fleet": fleet.to_dict()}
    return {
        "dag_id": getattr(ti, "dag_id", None),
        "task_id": getattr(ti, "task_id", None),
        "run_id": getattr(ti, "run_id", None),
        "try_number": getattr(ti, "try_number", None),
        "map_index": getattr(ti, "map_index", None),
        "table": report.table if report is not None else find_table(context),
        "compliant": report.compliant if report is not None else None,
        "summary": report.summary() if report is not None else failure_text(context),
        "report": report.to_dict() if report is not None else None,
        "error": None if exc is None else str(exc) or type(exc).__name__,
    }


class ComplianceEmailNotifier(BaseNotifier):
    """Email the compliance report through the SMTP connection of the SMTP provider's SmtpHook.

    The message is multipart: the body as ``text/plain`` (the report as markdown or text, names and messages from
    the table escaped for it: core.display) and as its ``text/html`` alternative (the same text, HTML-escaped and
    preformatted), and the JSON report (exact) attached as
    ``compliance_report.json``. ``subject`` is a Jinja template; besides the task context it sees
    ``compliance_report`` (the ComplianceReport or None) and ``compliance_summary`` (its summary, or the failure
    message).

    :param to: recipient address(es): a list, or one string separated by commas or semicolons.
    :param smtp_conn_id: the SMTP connection (host, port, TLS, login, retries, ``from_email`` extra).
    :param subject: subject template.
    :param from_email: sender; defaults to the connection's ``from_email`` extra.
    :param body_format: ``markdown`` or ``text``.
    """

    template_fields: Sequence[str] = ("to", "from_email", "smtp_conn_id")
    DEFAULT_SUBJECT = "[deltaberg] {{ ti.dag_id }}.{{ ti.task_id }}: {{ compliance_summary }}"

    def __init__(
        self,
        *,
        to: str | Iterable[str],
        smtp_conn_id: str = "smtp_default",
        subject: str = DEFAULT_SUBJECT,
        from_email: str | None = None,
        body_format: str = "markdown",
    ) -> None:
        super().__init__()
        if body_format not in ("markdown", "text"):
            raise ValueError(f"body_format must be 'markdown' or 'text', not {body_format!r}")
        self.to = to
        self.smtp_conn_id = smtp_conn_id
        self.subject = subject
        self.from_email = from_email
        self.body_format = body_format

    def check_connection(self) -> None:
        """Raise NotifierConfigError unless this notifier can send: recipients given, the SMTP connection
        defined, and a sender (``from_email`` or the connection's ``from_email`` extra). Reads the connection
        only; nothing is sent. Called when a task of this provider starts (operators.notifier_check)."""
        if not _addresses_or_none(self.to):
            raise NotifierConfigError("ComplianceEmailNotifier: no recipient in 'to'")
        conn = _connection(self.smtp_conn_id, "ComplianceEmailNotifier")
        extra = conn.extra_dejson if isinstance(conn.extra_dejson, Mapping) else {}
        if not conn.host:
            raise NotifierConfigError(f"ComplianceEmailNotifier: connection {self.smtp_conn_id!r} has no host")
        if not (self.from_email or extra.get("from_email")):
            raise NotifierConfigError(
                f"ComplianceEmailNotifier: give from_email or set the from_email extra of connection "
                f"{self.smtp_conn_id!r}"
            )

    def notify(self, context: Context) -> None:
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        report = find_report(context)
        summary = _summary(report, context)
        template_context = {**context, "compliance_report": report, "compliance_summary": summary}
        jinja_env = self.get_template_env(dag=context.get("dag"))
        subject = display.text(str(self.render_template(self.subject, template_context, jinja_env)).replace("\n", " "))

        fleet = find_fleet_report(context)
        if fleet is not None:
            body = f"Fleet report of {_task_label(context)}:\n\n{fleet.to_markdown()}"
        elif report is None:
            body = failure_text(context)
        else:
            rendered = report.to_markdown() if self.body_format == "markdown" else report.to_text()
            body = f"Compliance report of {_task_label(context)}:\n\n{rendered}"
        recipients = _addresses(self.to)
        with SmtpHook(smtp_conn_id=self.smtp_conn_id) as smtp:
            from_email = self.from_email or smtp.from_email
            if not from_email:
                raise AirflowException(
                    f"ComplianceEmailNotifier: give from_email or set the from_email extra of connection "
                    f"{self.smtp_conn_id!r}"
                )
            message = email_message(
                subject=subject, from_email=from_email, to=recipients, text=body,
                attachment=fleet.to_json() if fleet is not None else report.to_json() if report is not None else None,
                attachment_name=FLEET_ATTACHMENT if fleet is not None else REPORT_ATTACHMENT,
            )
            _send(smtp, message, from_email, recipients)
        self.log.info("Emailed the compliance notification of %s: %s", _task_label(context), summary)


def email_message(*, subject: str, from_email: str, to: Sequence[str], text: str,
                  attachment: str | None, attachment_name: str = REPORT_ATTACHMENT) -> EmailMessage:
    """multipart/mixed: a multipart/alternative of ``text`` as text/plain (verbatim: a markdown body stays
    markdown) and as text/html (escaped for HTML, quotes left as they are: they need no escaping in element
    content), then the JSON report attached when there is one."""
    message = EmailMessage(policy=_EMAIL_POLICY)
    message["Subject"] = subject
    message["From"] = from_email
    message["To"] = ", ".join(to)
    message["Date"] = formatdate(localtime=True)
    message.set_content(text, subtype="plain", charset="utf-8")
    message.add_alternative(f"<html><body><pre>{html.escape(text, quote=False)}</pre></body></html>",
                            subtype="html", charset="utf-8")
    if attachment is not None:
        message.add_attachment(attachment.encode("utf-8"), maintype="application", subtype="json",
                               filename=attachment_name)
    return message


def _addresses_or_none(to: str | Iterable[str]) -> list[str]:
    items = to.replace(";", ",").split(",") if isinstance(to, str) else list(to)
    return [item.strip() for item in items if item and item.strip()]


def _addresses(to: str | Iterable[str]) -> list[str]:
    addresses = _addresses_or_none(to)
    if not addresses:
        raise AirflowException("ComplianceEmailNotifier: no recipient in 'to'")
    return addresses


def _connection(conn_id: str, owner: str) -> Any:
    """The Airflow connection ``conn_id``; NotifierConfigError naming it when it is not defined."""
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException (its module moved between releases) or a secrets error
        raise NotifierConfigError(f"{owner}: connection {conn_id!r} cannot be read: {type(exc).__name__}") from None


def connection_headers(conn_id: str, extra: Mapping[str, Any]) -> dict[str, str]:
    """The headers an ``http`` connection's extra gives, in either shape: at the top level of the extra (as
    HttpHook reads it) or under ``"headers"`` (``{"headers": {...}}``, the shape the docs showed first); top-level
    keys first, the nested ones over them. HttpHook's own options (timeout, verify, proxies, ...) are not headers.
    NotifierConfigError, naming the key only, for a value that is not text or a number."""
    nested = extra.get("headers")
    if "headers" in extra and not isinstance(nested, Mapping):
        raise NotifierConfigError(f"ComplianceWebhookNotifier: connection {conn_id!r}: extra 'headers' must be an "
                                  f"object of header names and values")
    top = {k: v for k, v in extra.items() if k != "headers" and k not in _HTTP_HOOK_OPTIONS}
    headers: dict[str, str] = {}
    for name, value in [*top.items(), *(nested or {}).items()]:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise NotifierConfigError(f"ComplianceWebhookNotifier: connection {conn_id!r}: the extra header "
                                      f"{display.text(str(name))!r} is not text ({type(value).__name__})")
        headers[str(name)] = str(value)
    return headers


#: The keys of an http connection's extra that HttpHook takes as options, not as headers (HTTP provider 6.x).
_HTTP_HOOK_OPTIONS = frozenset({"stream", "cert", "proxies", "proxy", "timeout", "verify", "verify_ssl",
                                "allow_redirects", "max_redirects", "trust_env", "check_response", "srv_lookup"})


def _send(smtp: Any, message: EmailMessage, from_email: str, recipients: list[str]) -> None:
    """Send through the SMTP client the hook logged in with (connection, TLS and login are the hook's), with the
    hook's retry limit. SmtpHook's own send builds an HTML-only message, hence its client here."""
    client = getattr(smtp, "_smtp_client", None)
    if client is None:  # pragma: no cover - an SmtpHook without its client
        raise AirflowException("ComplianceEmailNotifier: the SMTP hook has no open client")
    retries = int(getattr(smtp, "smtp_retry_limit", 0) or 0)
    for attempt in range(retries + 1):
        try:
            client.send_message(message, from_addr=from_email, to_addrs=recipients)
            return
        except smtplib.SMTPServerDisconnected:
            if attempt == retries:
                raise


class ComplianceWebhookNotifier(BaseNotifier):
    """POST the notification as JSON (``application/json``) through an HTTP connection (the HTTP provider's
    HttpHook): host (with or without scheme), schema, port, login/password as basic auth, the extra's headers at
    its top level (``{"X-Api-Key": "..."}``) or nested (``{"headers": {"X-Api-Key": "..."}}``).
    ``check_connection`` checks all of it without sending; this provider's operators call it when their task starts.

    The body (``notification_payload``)::

        {"dag_id", "task_id", "run_id", "try_number", "map_index", "table", "compliant", "summary",
         "report": <ComplianceReport.to_dict()> or null, "error": <exception text> or null}

    plus ``"fleet": <FleetReport.to_dict()>`` for a fleet report (then ``report`` and ``table`` are null).

    The URL, the connection's password and secret-looking header values are registered with Airflow's secrets
    masker; errors name the scheme, host and port only.

    :param http_conn_id: the HTTP connection of the webhook.
    :param endpoint: path appended to the connection's URL (may hold a token: it is masked in the logs).
    :param headers: extra request headers (secret-looking values are masked in the logs).
    :param timeout: seconds to wait for the server.
    """

    template_fields: Sequence[str] = ("http_conn_id", "endpoint", "headers")

    def __init__(
        self,
        *,
        http_conn_id: str = "http_default",
        endpoint: str = "",
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.http_conn_id = http_conn_id
        self.endpoint = endpoint
        self.headers = dict(headers or {})
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"ComplianceWebhookNotifier(conn {self.http_conn_id})"

    def check_connection(self) -> None:
        """Raise NotifierConfigError unless this notifier can post: the connection defined, an http(s) URL, and
        the extra's headers (top level or under ``"headers"``) text. Reads the connection only; nothing is sent.
        Called when a task of this provider starts (operators.notifier_check)."""
        self._prepared()

    def _prepared(self) -> tuple[Any, str, dict[str, str]]:
        """The hook, the URL and the request headers (the connection's, then this notifier's), secrets masked."""
        hook = _http_hook(self.http_conn_id)
        conn = _connection(self.http_conn_id, "ComplianceWebhookNotifier")
        extra = conn.extra_dejson if isinstance(conn.extra_dejson, Mapping) else {}
        conn_headers = connection_headers(self.http_conn_id, extra)
        url = hook.url_from_endpoint(self.endpoint)
        headers = {**conn_headers, "Content-Type": "application/json",
                   **{str(k): str(v) for k, v in self.headers.items()}}
        parts = urlsplit(url)
        mask_secrets([url, parts.query, conn.password,
                      *(v for k, v in headers.items() if is_secret_header(k))])
        if parts.scheme not in ("http", "https"):
            raise NotifierConfigError(f"ComplianceWebhookNotifier: connection {self.http_conn_id!r}: the URL must "
                                      f"be http(s), not {parts.scheme!r}")
        return hook, url, headers

    def notify(self, context: Context) -> None:
        hook, url, headers = self._prepared()
        payload = notification_payload(context)
        host = _host_of(url)
        import requests  # the HTTP provider's client; imported here, as the hook, to keep DAG parsing light

        try:
            response = hook.run(
                endpoint=self.endpoint, data=json.dumps(payload), headers=headers,
                extra_options={"timeout": self.timeout, "check_response": False},
            )
        except requests.RequestException as exc:
            # The exception's text holds the whole URL (a token in its path or query): name the host only.
            raise AirflowException(f"webhook at {host} could not be reached: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise AirflowException(f"webhook at {host} answered HTTP {response.status_code} {response.reason}")
        self.log.info(
            "Posted the compliance notification of %s to %s (HTTP %s)", _task_label(context), host,
            response.status_code,
        )


def _http_hook(http_conn_id: str) -> Any:
    try:
        from airflow.providers.http.hooks.http import HttpHook
    except ImportError as exc:  # a runtime dependency: missing only in a broken install
        raise AirflowException(
            "ComplianceWebhookNotifier needs apache-airflow-providers-http (a dependency of airflow-deltaberg): "
            f"pip install apache-airflow-providers-http ({exc})"
        ) from None

    class _WebhookHook(HttpHook):
        """HttpHook without the connection's nested ``headers`` object as a header of its own: the notifier
        passes those headers itself (connection_headers)."""

        def get_conn(self, headers: dict[Any, Any] | None = None,
                     extra_options: dict[str, Any] | None = None) -> Any:
            session = super().get_conn(headers, extra_options)
            session.headers.pop("headers", None)
            return session

    return _WebhookHook(method="POST", http_conn_id=http_conn_id)


def _host_of(url: str) -> str:
    """scheme://host[:port] of a URL, without credentials, path or query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"
