"""Notifiers that send the compliance report of a DeltaValidateOperator task by email or to a webhook.

Both take the report from the task's exception or its cause (``ComplianceViolationError.report``) or else from the
``compliance_report`` XCom of the task instance. Without a report (the task failed for another reason) they
send a short message with the exception text.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook, BaseNotifier, Context
from airflow.sdk.exceptions import AirflowException

from airflow_deltaberg.core.compat import ComplianceReport
from airflow_deltaberg.hooks.storage import is_secret_key
from airflow_deltaberg.operators.validate import XCOM_KEY

_mask_secret: Callable[[Any], None] | None
try:
    from airflow.sdk.log import mask_secret as _mask_secret
except ImportError:  # pragma: no cover - Airflow 3.0/3.1
    try:
        from airflow.sdk.execution_time.secrets_masker import mask_secret as _mask_secret
    except ImportError:
        _mask_secret = None

log = logging.getLogger(__name__)

#: Header names (lower case) whose values are secrets, besides those matched by ``is_secret_key``.
SECRET_HEADERS = ("authorization", "proxy-authorization", "cookie", "auth")
REPORT_ATTACHMENT = "compliance_report.json"
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


def _task_label(context: Mapping[str, Any]) -> str:
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        dag = context.get("dag")
        return f"DAG {getattr(dag, 'dag_id', '?')}"
    return f"task {ti.dag_id}.{ti.task_id} (run {ti.run_id}, try {ti.try_number})"


def failure_text(context: Mapping[str, Any]) -> str:
    """A short message for a notification without a report: which task, and the exception text."""
    exc = context.get("exception")
    if exc is None:
        return f"{_task_label(context)} produced no compliance report"
    detail = str(exc) or type(exc).__name__
    return f"{_task_label(context)} failed without a compliance report: {detail}"


def _summary(report: ComplianceReport | None, context: Mapping[str, Any]) -> str:
    text = report.summary() if report is not None else failure_text(context)
    first_line = text.splitlines()[0] if text else ""
    return first_line if len(first_line) <= _SUMMARY_LIMIT else first_line[: _SUMMARY_LIMIT - 3] + "..."


class ComplianceEmailNotifier(BaseNotifier):
    """Email the compliance report through the SMTP provider's SmtpHook.

    The body is the report as markdown (or text), the JSON report is attached as ``compliance_report.json``.
    ``subject`` is a Jinja template; besides the task context it sees ``compliance_report`` (the
    ComplianceReport or None) and ``compliance_summary`` (its summary, or the failure message).

    :param to: recipient address(es).
    :param smtp_conn_id: the SMTP connection.
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

    def notify(self, context: Context) -> None:
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        report = find_report(context)
        summary = _summary(report, context)
        template_context = {**context, "compliance_report": report, "compliance_summary": summary}
        jinja_env = self.get_template_env(dag=context.get("dag"))
        subject = str(self.render_template(self.subject, template_context, jinja_env)).replace("\n", " ")

        if report is None:
            body = failure_text(context)
        else:
            rendered = report.to_markdown() if self.body_format == "markdown" else report.to_text()
            body = f"Compliance report of {_task_label(context)}:\n\n{rendered}"
        html_content = f"<pre>{html.escape(body)}</pre>"

        with tempfile.TemporaryDirectory(prefix="deltaberg-report-") as tmp:
            files: list[str] = []
            if report is not None:
                attachment = Path(tmp) / REPORT_ATTACHMENT
                attachment.write_text(report.to_json(), encoding="utf-8")
                files.append(str(attachment))
            with SmtpHook(smtp_conn_id=self.smtp_conn_id) as smtp:
                from_email = self.from_email or smtp.from_email
                if not from_email:
                    raise AirflowException(
                        f"ComplianceEmailNotifier: give from_email or set the from_email extra of connection "
                        f"{self.smtp_conn_id!r}"
                    )
                smtp.send_email_smtp(
                    to=self.to, subject=subject, html_content=html_content, from_email=from_email, files=files
                )
        self.log.info("Emailed the compliance notification of %s: %s", _task_label(context), summary)


class ComplianceWebhookNotifier(BaseNotifier):
    """POST the compliance report as JSON (``application/json``) to a URL, with urllib.

    The body is the report dict (``ComplianceReport.to_dict()``); without a report it is
    ``{"dag_id", "task_id", "run_id", "try_number", "report": null, "message", "error"}``.
    The URL comes from ``url`` or from an HTTP connection: host (with or without scheme), schema as the
    scheme, port, login/password as basic auth, and the extra as headers (a ``headers`` object, or
    the whole extra as in HttpHook). Neither the URL nor header values are logged; errors name the host only.

    :param url: the full URL; give it or ``http_conn_id``.
    :param http_conn_id: connection for the URL and credentials.
    :param endpoint: path appended to the connection's URL.
    :param headers: extra request headers (secret-looking values are masked in the logs).
    :param timeout: seconds to wait for the server.
    """

    template_fields: Sequence[str] = ("url", "http_conn_id", "endpoint", "headers")

    def __init__(
        self,
        *,
        url: str | None = None,
        http_conn_id: str | None = None,
        endpoint: str = "",
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        super().__init__()
        if (url is None) == (http_conn_id is None):
            raise ValueError("ComplianceWebhookNotifier needs exactly one of url and http_conn_id")
        self.url = url
        self.http_conn_id = http_conn_id
        self.endpoint = endpoint
        self.headers = dict(headers or {})
        self.timeout = timeout

    def __repr__(self) -> str:
        target = f"conn {self.http_conn_id}" if self.http_conn_id else _host_of(self.url or "")
        return f"ComplianceWebhookNotifier({target})"

    def _target(self) -> tuple[str, dict[str, str]]:
        """The URL and the headers from the url argument or the connection."""
        headers: dict[str, str] = {}
        if self.http_conn_id is None:
            url = self.url or ""
        else:
            conn = BaseHook.get_connection(self.http_conn_id)
            host = (conn.host or "").rstrip("/")
            if not host:
                raise AirflowException(f"connection {self.http_conn_id!r} has no host")
            if "://" not in host:
                host = f"{conn.schema or 'http'}://{host}"
            if conn.port and not urlsplit(host).port:
                host = f"{host}:{conn.port}"
            url = host
            extra = conn.extra_dejson
            conn_headers = extra.get("headers") if isinstance(extra.get("headers"), Mapping) else extra
            headers.update({str(k): str(v) for k, v in conn_headers.items() if isinstance(v, (str, int, float))})
            if conn.login:
                token = base64.b64encode(f"{conn.login}:{conn.password or ''}".encode()).decode()
                headers["Authorization"] = f"Basic {token}"
        if self.endpoint:
            url = f"{url.rstrip('/')}/{self.endpoint.lstrip('/')}"
        headers.update({str(k): str(v) for k, v in self.headers.items()})
        if urlsplit(url).scheme not in ("http", "https"):
            raise AirflowException(f"ComplianceWebhookNotifier: the URL must be http(s), not {urlsplit(url).scheme!r}")
        return url, headers

    def notify(self, context: Context) -> None:
        url, headers = self._target()
        _register_secrets(url, headers)
        report = find_report(context)
        if report is not None:
            payload: dict[str, Any] = report.to_dict()
        else:
            ti = context.get("ti") or context.get("task_instance")
            exc = context.get("exception")
            payload = {
                "dag_id": getattr(ti, "dag_id", None),
                "task_id": getattr(ti, "task_id", None),
                "run_id": getattr(ti, "run_id", None),
                "try_number": getattr(ti, "try_number", None),
                "report": None,
                "message": failure_text(context),
                "error": None if exc is None else str(exc),
            }
        body = json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(url, data=body, method="POST")
        for name, value in headers.items():
            request.add_header(name, value)
        request.add_header("Content-Type", "application/json")
        host = _host_of(url)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) only
                status = response.status
        except urllib.error.HTTPError as exc:
            raise AirflowException(f"webhook at {host} answered HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AirflowException(f"webhook at {host} could not be reached: {reason}") from None
        self.log.info("Posted the compliance notification of %s to %s (HTTP %s)", _task_label(context), host, status)


def _host_of(url: str) -> str:
    """scheme://host[:port] of a URL, without credentials, path or query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


def _register_secrets(url: str, headers: Mapping[str, str]) -> None:
    """Mask the URL (whole, its password and its query) and secret-looking header values in Airflow's logs."""
    if _mask_secret is None:  # pragma: no cover - no masker in this Airflow
        return
    parts = urlsplit(url)
    secrets = [url, parts.password, parts.query]
    secrets += [v for k, v in headers.items() if k.lower() in SECRET_HEADERS or is_secret_key(k)]
    for secret in secrets:
        if secret:
            try:
                _mask_secret(secret)
            except Exception:  # pragma: no cover - masking must never stop the notification
                pass
