"""DeltaValidateOperator: checks a Delta table against an IcebergCompat level with the core validator."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_deltaberg.core.compat import Level, validate_snapshot
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import ComplianceViolationError, DeltabergError, DeltaError
from airflow_deltaberg.hooks.storage import DeltaStorageHook
from airflow_deltaberg.openlineage import operators as lineage
from airflow_deltaberg.operators.delta_asset import add_delta_asset
from airflow_deltaberg.operators.notifier_check import fail_on_broken_notifiers
from airflow_deltaberg.version_compat import AirflowFailException

#: The XCom key of the report dict, pushed once per try (also when the task then fails on a violation).
XCOM_KEY = "compliance_report"


def _parse_level(value: Any) -> Level:
    try:
        return Level(value)
    except ValueError:
        valid = ", ".join(lv.value for lv in Level)
        raise ValueError(f"level must be one of {valid}, not {value!r}") from None


def parse_version(value: Any) -> int | None:
    """A table version from a rendered template field: None, an int, or a string of digits."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    if isinstance(value, bool):
        raise ValueError(f"version must be an integer or None, not {value!r}")
    try:
        version = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"version must be an integer or None, not {value!r}") from None
    if version < 0:
        raise ValueError(f"version must not be negative, got {version}")
    return version


class DeltaValidateOperator(BaseOperator):
    """Validate a Delta table against an IcebergCompat level and publish the compliance report.

    The report dict (see ``airflow_deltaberg.core.compat.report``) is pushed to XCom once, under the key
    ``compliance_report`` (``XCOM_KEY``), before the task succeeds or fails on it; the task returns nothing (no
    ``return_value`` copy). Downstream: ``ti.xcom_pull(task_ids=..., key="compliance_report")`` or
    ``XComArg(validate_task, key="compliance_report")``. A non-compliant table fails the task without
    retries unless ``fail_on_violation`` is False: an AirflowFailException whose message is the report's summary,
    raised from a ``ComplianceViolationError`` (core.errors) that carries the report (``__cause__.report``).
    The report is logged at ERROR only when it fails the task; violations that do not (``fail_on_violation``
    False, or warnings only) are logged at WARNING, a clean report at INFO.
    Errors that retrying cannot fix (bad table, unsupported feature) fail the task without retries; storage errors
    are re-raised so the task's ``retries`` apply.

    The table is the task's inlet (``delta://<scheme>/<path>``) unless ``table_uri`` is a template.

    :param table_uri: the table location (local path or fsspec URI). Templated.
    :param level: ``compat-v1``, ``compat-v2`` or ``writer-compat-v1``. Templated.
    :param data_checks: also run the rules that read file stats and Parquet footers.
    :param sample_files: how many data files the data checks sample.
    :param version: the table version to check; None for the latest. Templated.
    :param deltaberg_conn_id: connection for the storage credentials (DeltaStorageHook); None for none.
    :param fail_on_violation: fail the task when the table is not compliant.
    """

    template_fields: Sequence[str] = ("table_uri", "level", "version")
    ui_color = "#cfe8fc"

    def __init__(
        self,
        *,
        table_uri: str,
        level: Level | str = Level.WRITER_COMPAT_V1,
        data_checks: bool = False,
        sample_files: int = 20,
        version: int | str | None = None,
        deltaberg_conn_id: str | None = None,
        fail_on_violation: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.level = level.value if isinstance(level, Level) else level
        self.data_checks = data_checks
        self.sample_files = sample_files
        self.version = version
        self.deltaberg_conn_id = deltaberg_conn_id
        self.fail_on_violation = fail_on_violation
        self.delta_asset = add_delta_asset(self, inlet=True)

    def execute(self, context: Context) -> None:
        fail_on_broken_notifiers(self, context)
        try:
            level = _parse_level(self.level)
            version = parse_version(self.version)
        except ValueError as exc:
            raise AirflowFailException(f"DeltaValidateOperator({self.table_uri}): {exc}") from exc
        lineage.keep(self, start=True)
        storage_options = DeltaStorageHook(deltaberg_conn_id=self.deltaberg_conn_id).storage_options()
        self.log.info(
            "Validating %s at %s against level %s (data checks: %s)",
            self.table_uri, "the latest version" if version is None else f"version {version}",
            level.value, self.data_checks,
        )
        try:
            table = DeltaTable(self.table_uri, storage_options)
            snapshot = table.snapshot(version)
            report = validate_snapshot(snapshot, table, level, data_checks=self.data_checks,
                                       sample_size=self.sample_files)
        except DeltabergError as exc:
            if exc.retryable:
                raise
            raise AirflowFailException(self._failure_message(exc, version)) from exc

        lineage.keep(self, report=report.to_dict(), schema=snapshot.schema)  # the lineage replays no log
        context["ti"].xcom_push(key=XCOM_KEY, value=report.to_dict())
        fails = not report.compliant and self.fail_on_violation
        log_level = logging.ERROR if fails else logging.WARNING if report.violations else logging.INFO
        self.log.log(log_level, "Compliance report:\n%s", report.to_text())
        if fails:
            violation = ComplianceViolationError(report)
            raise AirflowFailException(str(violation)) from violation
        if not report.compliant:
            self.log.warning("The table is not compliant; fail_on_violation is False, so the task succeeds")

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (the ``openlineage`` extra): the Delta table in, the rules checked as data-quality assertions."""
        return lineage.validation(self, complete=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return lineage.validation(self, complete=False)

    def _failure_message(self, exc: DeltabergError, version: int | None) -> str:
        """The error's message, naming the table and version when the error does not already."""
        message = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, DeltaError) and self.table_uri not in str(exc):
            where = "the latest version" if version is None else f"version {version}"
            message += f" (table {self.table_uri}, {where})"
        return message
