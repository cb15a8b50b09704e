"""DeltaEnableIcebergWriterCompatOperator: enables IcebergWriterCompatV1 (or another level) with the core planner;
the data rewrite is submitted as a Spark application through the Spark provider's SparkSubmitHook."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseOperator, Context

from airflow_deltaberg.core.enable.commit import find_enable_commit
from airflow_deltaberg.core.enable.levels import DEFAULT_LEVEL, enable_level
from airflow_deltaberg.core.enable.plan import EnablePlan
from airflow_deltaberg.core.enable.rewrite.result import RewriteResult
from airflow_deltaberg.core.enable.run import MODES, enable
from airflow_deltaberg.core.errors import CommitConflictError, DeltabergError
from airflow_deltaberg.hooks.storage import DeltaStorageHook
from airflow_deltaberg.openlineage import operators as lineage
from airflow_deltaberg.operators.delta_asset import add_delta_asset
from airflow_deltaberg.operators.notifier_check import fail_on_broken_notifiers
from airflow_deltaberg.operators.spark_submit import (
    SparkApplicationRun,
    application_file,
    local_python_env,
    raise_task_failure,
    spark_target,
    with_openlineage,
)
from airflow_deltaberg.version_compat import AirflowFailException, conf

PLAN_XCOM_KEY = "enable_plan"
REWRITE_MODULE = "airflow_deltaberg.spark.enable_rewrite"


def rewrite_application() -> str:
    """The path of the rewrite application file in the installed package."""
    return application_file(REWRITE_MODULE)


def _parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name} must be a boolean, not {value!r}")


def _setting(value: bool | None, option: str) -> bool:
    """``value``, or the ``[openlineage]`` option when it is None."""
    return conf.getboolean("openlineage", option, fallback=False) if value is None else bool(value)


class DeltaEnableIcebergWriterCompatOperator(BaseOperator):
    """Enable IcebergWriterCompatV1 (or the ``level`` given) on a Delta table.

    The plan (``EnablePlan.to_dict()``: what changes, whether and why the data must be rewritten, blockers, and
    under ``writers`` the known writers that can still write the table afterwards and those that will refuse) is
    pushed to XCom under ``enable_plan`` before anything is written; the result (``EnableResult.to_dict()``:
    action ``dry-run``, ``already-enabled``, ``metadata-only`` or ``rewrite``, committed version, plan) is the
    ``return_value``. ``mode``: ``auto`` (one metadata commit when no data rewrite is needed, else the
    rewrite), ``metadata_only`` (fails when the data must be rewritten), ``rewrite`` (always). ``dry_run``
    only plans.

    The rewrite is the PySpark application ``airflow_deltaberg/spark/enable_rewrite.py`` of the installed
    package, submitted with SparkSubmitHook (``spark_conn_id``, ``spark_conf``, ``spark_jars``,
    ``spark_packages`` and any other hook argument in ``spark_submit_kwargs``). It commits once, refusing when
    the table moved on meanwhile.

    **Asset.** The Delta table is the task's inlet and outlet (``delta://<scheme>/<path>``) unless ``table_uri`` is
    a template; each successful run's event on it has the extra table, action, level and committed_version (None
    when nothing was committed).

    **Failures.** A blocked or refused enable fails the task without retries; a concurrent commit (conflict)
    or a storage error fails it with retries (running again re-plans on the new version).

    :param table_uri: the Delta table location (local path or fsspec URI). Templated.
    :param mode: ``auto``, ``metadata_only`` or ``rewrite``. Templated.
    :param level: ``writer-compat-v1`` (IcebergWriterCompatV1, the default; Delta on Spark cannot write the table
        afterwards), ``compat-v2`` (IcebergCompatV2 with column mapping; Delta on Spark 3.1+ writes it) or
        ``writer-compat-v3`` (IcebergWriterCompatV3 with row tracking). Templated.
    :param dry_run: plan only, write nothing. Templated (``"True"``/``"False"`` render to booleans).
    :param deltaberg_conn_id: connection for the storage credentials (DeltaStorageHook); None for none.
    :param spark_conn_id: the Spark connection of the rewrite. Templated.
    :param spark_conf: Spark configuration of the rewrite. Templated.
    :param spark_jars: comma-separated jars (e.g. delta-spark and delta-storage). Templated.
    :param spark_packages: comma-separated Maven coordinates. Templated.
    :param spark_submit_kwargs: further SparkSubmitHook arguments (executor_memory, env_vars, ...).
    :param openlineage_inject_parent_job_info: add OpenLineage's parent job settings to the rewrite's Spark conf, as
        SparkSubmitOperator does (default: ``[openlineage] spark_inject_parent_job_info``).
    :param openlineage_inject_transport_info: add OpenLineage's HTTP transport settings to it (default:
        ``[openlineage] spark_inject_transport_info``).
    """

    template_fields: Sequence[str] = ("table_uri", "mode", "level", "dry_run", "spark_conn_id", "spark_conf",
                                      "spark_jars", "spark_packages")
    template_fields_renderers = {"spark_conf": "json"}
    ui_color = "#fde8c8"

    def __init__(
        self,
        *,
        table_uri: str,
        mode: str = "auto",
        level: str = DEFAULT_LEVEL,
        dry_run: bool | str = False,
        deltaberg_conn_id: str | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_jars: str | None = None,
        spark_packages: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.mode = mode
        self.level = level
        self.dry_run = dry_run
        self.deltaberg_conn_id = deltaberg_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf) if spark_conf else None
        self.spark_jars = spark_jars
        self.spark_packages = spark_packages
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.openlineage_inject_parent_job_info = openlineage_inject_parent_job_info
        self.openlineage_inject_transport_info = openlineage_inject_transport_info
        self._hook: SparkSubmitHook | None = None
        self._submit_conf: dict[str, Any] | None = None
        self.delta_asset = add_delta_asset(self, inlet=True, outlet=True)

    def execute(self, context: Context) -> dict[str, Any]:
        fail_on_broken_notifiers(self, context)
        try:
            if self.mode not in MODES:
                raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
            dry_run = _parse_bool(self.dry_run, "dry_run")
            level = enable_level(self.level).name
        except ValueError as exc:
            raise AirflowFailException(f"DeltaEnableIcebergWriterCompatOperator({self.table_uri}): {exc}") from exc
        storage_options = DeltaStorageHook(deltaberg_conn_id=self.deltaberg_conn_id).storage_options()

        lineage.keep(self, start=True)
        self._submit_conf = with_openlineage(self.spark_conf, context, parent_job=_setting(
            self.openlineage_inject_parent_job_info, "spark_inject_parent_job_info"), transport=_setting(
            self.openlineage_inject_transport_info, "spark_inject_transport_info"))

        def publish(plan: EnablePlan) -> None:
            lineage.keep(self, plan=plan.to_dict(), read_schema=plan.read_schema)
            context["ti"].xcom_push(key=PLAN_XCOM_KEY, value=plan.to_dict())
            self.log.info("Plan for %s at version %s (level %s): rewrite %s%s%s\nWriters after enabling %s:%s",
                          plan.table, plan.read_version, plan.level, "needed" if plan.needs_rewrite else "not needed",
                          "".join(f"\n  reason: {r}" for r in plan.reasons),
                          "".join(f"\n  blocked by: {b}" for b in plan.blockers), plan.level,
                          "".join(f"\n  {line}" for line in plan.writers.lines()))

        try:
            result = enable(self.table_uri, storage_options=storage_options, mode=self.mode, level=level,
                            dry_run=dry_run, rewrite_runner=self._submit_rewrite, on_plan=publish)
        except CommitConflictError:
            raise  # running again re-plans on the table as the other writer left it
        except DeltabergError as exc:  # the rewrite job's errors arrive as their own classes (spark.protocol)
            raise_task_failure(exc, str(self.table_uri))
        self.log.info("Enable of %s: %s%s", self.table_uri, result.action,
                      f" (version {result.committed_version})" if result.committed_version is not None else "")
        lineage.keep(self, result=result)
        if self.delta_asset is not None:
            context["outlet_events"][self.delta_asset].extra = {
                "table": str(self.table_uri), "action": result.action, "level": level,
                "committed_version": result.committed_version}
        return result.to_dict()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (the ``openlineage`` extra): the Delta table in, and out when committed to."""
        return lineage.enablement(self, complete=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return lineage.enablement(self, complete=False)

    # -- the rewrite through SparkSubmit ------------------------------------------------------------------

    def _submit_rewrite(self, location: str, read_version: int, storage_options: Mapping[str, Any] | None,
                        level: str = DEFAULT_LEVEL) -> tuple[int, dict[str, Any]]:
        kwargs = dict(self.spark_submit_kwargs)
        target = spark_target(self.spark_conn_id, deploy_mode=kwargs.get("deploy_mode"),
                              spark_binary=kwargs.get("spark_binary"))
        with SparkApplicationRun(target, "deltaberg-enable-") as run:
            args = ["--table", location, "--read-version", str(read_version), "--level", level,
                    "--result-file", run.result_location]
            if storage_options:
                args += ["--storage-options-json", run.settings_argument("--storage-options-json", storage_options)]
            self._hook = SparkSubmitHook(
                application_args=args, conn_id=self.spark_conn_id, conf=self._submit_conf, jars=self.spark_jars,
                packages=self.spark_packages, name=kwargs.pop("name", f"deltaberg-enable-{self.task_id}"),
                env_vars=local_python_env(target, self._submit_conf, kwargs.pop("env_vars", None)), **kwargs,
            )
            self.log.info("Submitting the rewrite of %s (read version %s)", location, read_version)
            # A failure the job described is raised as its own error class (execute() decides about retries).
            payload = run.result(lambda: run.capture(self._hook).submit(rewrite_application()))
        if payload is not None:
            result = RewriteResult.from_dict(payload)
            return int(result.version), result.to_dict()
        # Cluster deploy mode: the driver wrote its result elsewhere. The log says whether the job committed.
        version = find_enable_commit(location, read_version, storage_options)
        if version is None:
            raise DeltabergError(f"the rewrite job finished but no enable commit after version {read_version} is in "
                                 f"the log (table {location})")
        return version, {}

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
