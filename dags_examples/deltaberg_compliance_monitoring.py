"""Compliance monitoring: check a Delta table against an IcebergCompat level every day, and send the compliance
report by email and to a webhook when it breaks a rule.

    validate  DeltaValidateOperator with data checks (file stats and sampled Parquet footers); a violation fails
              the task without retries, and its on_failure_callback sends the report:
              ComplianceEmailNotifier (markdown body, the JSON report attached) and ComplianceWebhookNotifier
              (the JSON report POSTed). A task that fails for another reason (table gone, storage down) sends a
              short message with the error instead.

The notifiers are task callbacks: a DAG-level ``on_failure_callback`` notifier crashes ``dag.test()`` in
Airflow 3.3.

Configuration: environment variables named after the DAG id, DELTABERG_COMPLIANCE_MONITORING_<SETTING>, read when
the file is parsed: set them for the dag-processor and the workers alike (a worker parses the file again to run a
task). A copy of this file under another DAG_ID reads its own. TABLE_URI is the default of the ``table_uri``
param, which a manual run can override. Until TABLE_URI is set the DAG has no schedule and no default table: it
checks no table nobody chose, and only a manual run that names one runs it. It is paused when first seen.

    TABLE_URI = (none)                              the Delta table (local path or fsspec URI)
    STORAGE_CONN_ID = (none)                        connection with the table's storage credentials
    SCHEDULE = @daily                               cron expression or preset
    VALIDATION_LEVEL = writer-compat-v1             compat-v1, compat-v2, compat-v3, writer-compat-v1 or -v3
    SAMPLE_FILES = 20                               data files whose Parquet footers the data checks read
    ALERT_EMAIL = data-platform@example.com         recipients, comma-separated
    SMTP_CONN_ID = smtp_default                     SMTP connection (host, port, login; extra: from_email)
    WEBHOOK_CONN_ID = deltaberg_compliance_webhook  HTTP connection of the webhook: host, schema, port,
                                                    login/password (basic auth), extra: headers, at its
                                                    top level or as {"headers": {...}}
    WEBHOOK_ENDPOINT = (none)                       path appended to the connection's URL
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Param

from airflow_deltaberg.notifications import ComplianceEmailNotifier, ComplianceWebhookNotifier
from airflow_deltaberg.operators import DeltaValidateOperator

DAG_ID = "deltaberg_compliance_monitoring"
#: This DAG's settings: the environment variables PREFIX + <SETTING>.
PREFIX = DAG_ID.upper() + "_"


def setting(name: str, default: str = "") -> str:
    """The environment variable ``PREFIX + name``; ``default`` when it is unset or blank."""
    return os.environ.get(PREFIX + name, "").strip() or default


TABLE_URI = setting("TABLE_URI")
STORAGE_CONN_ID = setting("STORAGE_CONN_ID") or None
SCHEDULE = setting("SCHEDULE", "@daily")
VALIDATION_LEVEL = setting("VALIDATION_LEVEL", "writer-compat-v1")
SAMPLE_FILES = int(setting("SAMPLE_FILES", "20"))
ALERT_EMAIL = [a.strip() for a in setting("ALERT_EMAIL", "data-platform@example.com").split(",") if a.strip()]
SMTP_CONN_ID = setting("SMTP_CONN_ID", "smtp_default")
WEBHOOK_CONN_ID = setting("WEBHOOK_CONN_ID", "deltaberg_compliance_webhook")
WEBHOOK_ENDPOINT = setting("WEBHOOK_ENDPOINT")

with DAG(
    dag_id=DAG_ID,
    description="Check a Delta table against an IcebergCompat level; email and post the report on violations" + (
        "" if TABLE_URI else f" (not scheduled: set {PREFIX}TABLE_URI)"),
    schedule=SCHEDULE if TABLE_URI else None,
    is_paused_upon_creation=True,  # whatever the deployment's default: a deployer unpauses it on purpose
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,  # a check of the table as it is now: past intervals have nothing to add
    params={"table_uri": Param(**({"default": TABLE_URI} if TABLE_URI else {}), type="string", minLength=1,
                               description="the Delta table location")},
    tags=["deltaberg", "example"],
) as dag:
    DeltaValidateOperator(
        task_id="validate",
        table_uri="{{ params.table_uri }}",
        level=VALIDATION_LEVEL,
        data_checks=True,
        sample_files=SAMPLE_FILES,
        deltaberg_conn_id=STORAGE_CONN_ID,
        retries=2,  # storage errors are retried; violations fail at once, without retries
        retry_delay=dt.timedelta(minutes=5),
        on_failure_callback=[
            ComplianceEmailNotifier(to=ALERT_EMAIL, smtp_conn_id=SMTP_CONN_ID),
            ComplianceWebhookNotifier(http_conn_id=WEBHOOK_CONN_ID, endpoint=WEBHOOK_ENDPOINT),
        ],
    )
