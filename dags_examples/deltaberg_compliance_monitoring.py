"""Compliance monitoring: check a Delta table against an IcebergCompat level every day, and send the compliance
report by email and to a webhook when it breaks a rule.

    validate  DeltaValidateOperator with data checks (file stats and sampled Parquet footers); a violation fails
              the task without retries, and its on_failure_callback sends the report:
              ComplianceEmailNotifier (markdown body, the JSON report attached) and ComplianceWebhookNotifier
              (the JSON report POSTed). A task that fails for another reason (table gone, storage down) sends a
              short message with the error instead.

The notifiers are task callbacks: a DAG-level ``on_failure_callback`` notifier crashes ``dag.test()`` in
Airflow 3.3.

Configuration: environment variables read when the file is parsed. DELTABERG_TABLE_URI is the default of the
``table_uri`` param, which a manual run can override. Copy this file and change the defaults below to make it
yours.

    DELTABERG_TABLE_URI = /data/delta/sales         the Delta table (local path or fsspec URI)
    DELTABERG_STORAGE_CONN_ID = (none)              connection with the table's storage credentials
    DELTABERG_COMPLIANCE_SCHEDULE = @daily          cron expression or preset
    DELTABERG_VALIDATION_LEVEL = writer-compat-v1   compat-v1, compat-v2 or writer-compat-v1
    DELTABERG_SAMPLE_FILES = 20                     data files whose Parquet footers the data checks read
    DELTABERG_ALERT_EMAIL = data-platform@example.com   recipients, comma-separated
    DELTABERG_SMTP_CONN_ID = smtp_default           SMTP connection (host, port, login; extra: from_email)
    DELTABERG_WEBHOOK_CONN_ID = deltaberg_compliance_webhook
                                                    HTTP connection of the webhook: host, schema, port,
                                                    login/password (basic auth), extra: headers (HttpHook)
    DELTABERG_WEBHOOK_ENDPOINT = (none)             path appended to the connection's URL
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, Param

from airflow_deltaberg.notifications import ComplianceEmailNotifier, ComplianceWebhookNotifier
from airflow_deltaberg.operators import DeltaValidateOperator

TABLE_URI = os.environ.get("DELTABERG_TABLE_URI", "/data/delta/sales")
STORAGE_CONN_ID = os.environ.get("DELTABERG_STORAGE_CONN_ID") or None
SCHEDULE = os.environ.get("DELTABERG_COMPLIANCE_SCHEDULE", "@daily")
VALIDATION_LEVEL = os.environ.get("DELTABERG_VALIDATION_LEVEL", "writer-compat-v1")
SAMPLE_FILES = int(os.environ.get("DELTABERG_SAMPLE_FILES", "20"))
ALERT_EMAIL = [a.strip() for a in os.environ.get("DELTABERG_ALERT_EMAIL", "data-platform@example.com").split(",")
               if a.strip()]
SMTP_CONN_ID = os.environ.get("DELTABERG_SMTP_CONN_ID", "smtp_default")
WEBHOOK_CONN_ID = os.environ.get("DELTABERG_WEBHOOK_CONN_ID", "deltaberg_compliance_webhook")
WEBHOOK_ENDPOINT = os.environ.get("DELTABERG_WEBHOOK_ENDPOINT", "")

with DAG(
    dag_id="deltaberg_compliance_monitoring",
    description="Check a Delta table against an IcebergCompat level; email and post the report on violations",
    schedule=SCHEDULE,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,  # a check of the table as it is now: past intervals have nothing to add
    params={"table_uri": Param(TABLE_URI, type="string", description="the Delta table location")},
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
