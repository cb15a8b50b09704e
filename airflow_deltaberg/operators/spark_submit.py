"""What the operators that submit a Spark application of this package share (DeltaIcebergRegenerateOperator,
DeltaEnableIcebergWriterCompatOperator): where the driver runs, the settings that must stay off the command line,
the Python of a local master, spark-submit's output kept out of the task log (DEBUG, and one summary at INFO), and
the application's result document turned back into the task's outcome.

The Spark connection is read through the public ``BaseHook.get_connection`` the way SparkSubmitHook reads it
(master from the connection type, host and port; ``deploy-mode`` and ``spark-binary`` from the extra, an operator
argument overriding either), never through the hook's private members.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from airflow.sdk import BaseHook

from airflow_deltaberg.core.errors import DeltabergError
from airflow_deltaberg.hooks.masking import mask_secrets
from airflow_deltaberg.spark.protocol import error_from_document, read_result, remove_result, result_payload
from airflow_deltaberg.version_compat import AirflowException, AirflowFailException

DEFAULT_SPARK_BINARY = "spark-submit"


def application_file(module: str) -> str:
    """The file of an application module of the installed package (nothing for the user to copy)."""
    spec = find_spec(module)
    if spec is None or spec.origin is None:
        raise DeltabergError(f"{module} is not installed: the Spark application cannot be submitted")
    return spec.origin


@dataclass(frozen=True)
class SparkTarget:
    """Where a submission goes: the master, the deploy mode and the spark-submit binary."""

    master: str
    deploy_mode: str | None
    spark_binary: str

    @property
    def driver_is_local(self) -> bool:
        """The driver runs on this machine (client mode): it can read files written here."""
        return self.deploy_mode != "cluster"

    @property
    def local_master(self) -> bool:
        return self.master.startswith("local")


def spark_target(conn_id: str | None, *, deploy_mode: str | None = None,
                 spark_binary: str | None = None) -> SparkTarget:
    """The target SparkSubmitHook resolves for these arguments (yarn when the connection does not exist)."""
    master, extra = "yarn", {}
    if conn_id:
        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowException:
            conn = None
        if conn is not None:
            if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
                master = conn.host  # a connection made in the UI: the host is the whole master URL
            else:
                master = f"{conn.conn_type}://{conn.host or ''}"
            master = f"{master}:{conn.port}" if conn.port else master
            extra = conn.extra_dejson
    return SparkTarget(master=master, deploy_mode=deploy_mode or extra.get("deploy-mode"),
                       spark_binary=spark_binary or extra.get("spark-binary") or DEFAULT_SPARK_BINARY)


def local_python_env(target: SparkTarget, conf: Mapping[str, Any] | None,
                     env: Mapping[str, str] | None) -> dict[str, str] | None:
    """``env`` with, for a local master, what running the application here needs: this interpreter (which has this
    package) for the driver and the Python workers, unless ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` names
    one; and, when the spark-submit binary is not on the PATH, the one installed beside it (pyspark's)."""
    out = dict(env or {})
    if target.local_master:
        if "spark.pyspark.python" not in (conf or {}) and "PYSPARK_PYTHON" not in {**os.environ, **out}:
            out["PYSPARK_PYTHON"] = sys.executable
        beside = Path(sys.executable).parent
        if shutil.which(target.spark_binary, path=out.get("PATH")) is None and (beside / target.spark_binary).is_file():
            out["PATH"] = f"{beside}{os.pathsep}{out.get('PATH', os.environ.get('PATH', ''))}"
    return out or None


def with_openlineage(spark_conf: Mapping[str, Any] | None, context: Any, *, parent_job: bool,
                     transport: bool) -> dict[str, Any] | None:
    """``spark_conf`` with OpenLineage's parent job and/or transport settings (``spark.openlineage.*``) added the way
    the Spark provider's SparkSubmitOperator adds them (the common.compat functions: without the OpenLineage
    provider they add nothing and warn); settings already in ``spark_conf`` are kept."""
    if not (parent_job or transport):
        return dict(spark_conf) if spark_conf else None
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
        inject_transport_information_into_spark_properties,
    )

    out = dict(spark_conf or {})
    if parent_job:
        out = inject_parent_job_information_into_spark_properties(out, context)
    if transport:
        out = inject_transport_information_into_spark_properties(out, context)
    return out


def raise_task_failure(error: DeltabergError, table: str, cause: BaseException | None = None) -> NoReturn:
    """Fail the task with ``error``: itself when retryable (the task's retries apply), else an AirflowFailException
    (no retries) raised from it. The message names the error's class and the table."""
    if cause is not None and error.__cause__ is None:
        error.__cause__ = cause
    if error.retryable:
        raise error
    message = f"{type(error).__name__}: {error}"
    if table not in message:
        message += f" (table {table})"
    raise AirflowFailException(message) from error


class SparkOutput:
    """What spark-submit printed (Spark's log, the application's own lines): counted, with the application id and
    the lines that tell why a run failed, for the summary the task log gets instead of the whole output."""

    APPLICATION_ID = re.compile(r"\b(application_\d+_\d+|local-\d{10,}|app-\d{14}-\d{4,}|driver-\d{14}-\d{4,})\b")
    ERROR_LINE = re.compile(r"\b(ERROR|FATAL|SEVERE)\b|Traceback|Exception|Error:| failed: ")
    MAX_ERROR_LINES = 20

    def __init__(self) -> None:
        self.lines = 0
        self.application_id: str | None = None
        self.error_lines: deque[str] = deque(maxlen=self.MAX_ERROR_LINES)

    def add(self, line: str) -> None:
        self.lines += 1
        if self.application_id is None and (found := self.APPLICATION_ID.search(line)):
            self.application_id = found.group(1)
        if self.ERROR_LINE.search(line):
            self.error_lines.append(line.strip())

    def summary(self, failed: bool) -> str:
        application = f"application {self.application_id}" if self.application_id else "the application"
        outcome = "failed" if failed else "succeeded"
        text = f"spark-submit: {application} {outcome}; its {self.lines} lines of output are logged at DEBUG"
        if failed and self.error_lines:
            text += "; the error lines:\n" + "\n".join(f"  {line}" for line in self.error_lines)
        return text


class _SparkOutputLog:
    """A SparkSubmitHook's logger that sends spark-submit's own lines (the hook logs each as ``info(line)``, with no
    arguments) to DEBUG and to a SparkOutput; what the hook says itself (the command, an application id) keeps its
    level."""

    def __init__(self, log: Any, output: SparkOutput) -> None:
        self.task_log = log
        self._output = output

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            self.task_log.info(msg, *args, **kwargs)
            return
        self._output.add(str(msg))
        self.task_log.debug("%s", msg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task_log, name)


class SparkApplicationRun:
    """One submission of an application of this package, as a context: a private work directory for the settings
    files and the default result file, removed at the end.

    :param target: where the submission goes (``spark_target``).
    :param prefix: the work directory's name prefix.
    :param result_location: where the application writes its result document; default a file in the work
        directory. A document left there by an earlier try is removed first.
    :param storage_options: the table's storage options, which reach a ``result_location`` on an object store (the
        application writes it with the same options).
    """

    def __init__(self, target: SparkTarget, prefix: str, result_location: str | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.target = target
        self._prefix = prefix
        self._result_location = result_location
        self._storage_options = storage_options
        self._work: tempfile.TemporaryDirectory[str] | None = None
        self.output = SparkOutput()
        self._task_log: Any = None

    def capture(self, hook: Any) -> Any:
        """``hook`` (a SparkSubmitHook) with spark-submit's output logged at DEBUG only, kept for the summary
        ``result`` logs at INFO."""
        log = _SparkOutputLog(hook.log, self.output)
        hook._log = log  # LoggingMixin's logger slot: the hook's own messages go through it unchanged
        self._task_log = log.task_log
        return hook

    def __enter__(self) -> SparkApplicationRun:
        self._work = tempfile.TemporaryDirectory(prefix=self._prefix)
        if self._result_location:
            # A result left by an earlier try must not pass for this one's.
            remove_result(self._result_location, self._storage_options)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._work is not None:
            self._work.cleanup()
            self._work = None

    @property
    def work(self) -> str:
        assert self._work is not None, "use SparkApplicationRun as a context manager"
        return self._work.name

    @property
    def result_location(self) -> str:
        return self._result_location or os.path.join(self.work, "result.json")

    def settings_argument(self, flag: str, value: Mapping[str, Any]) -> str:
        """The argument that carries ``value`` (storage options, catalog properties) to the application.

        When the driver runs here it is ``@FILE``, a file in the work directory only this user can read: the
        command line would show the secrets to every user of the machine. Otherwise the JSON itself, its values
        masked in the logs (the hook logs the command line).
        """
        if not self.target.driver_is_local:
            mask_secrets(item for item in value.values() if isinstance(item, str))
            return json.dumps(dict(value))
        path = os.path.join(self.work, flag.strip("-") + ".json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(dict(value), handle)
        return f"@{path}"

    def result(self, submit: Callable[[], Any]) -> dict[str, Any] | None:
        """Run ``submit`` and return the payload of the application's result document (None when it wrote none,
        e.g. a driver in cluster mode writing to its own disk). A failure the application described is raised as
        the error class it reported (spark.protocol), from the submit's exception."""
        try:
            submit()
        except AirflowException as exc:
            self._log_summary(failed=True)
            document = read_result(self.result_location, self._storage_options)
            if document is not None and "error" in document:
                raise error_from_document(document) from self._without_output(exc)
            raise
        self._log_summary(failed=False)
        document = read_result(self.result_location, self._storage_options)
        return None if document is None else result_payload(document)

    def _without_output(self, error: AirflowException) -> AirflowException:
        """The hook's failure without the tail of spark-submit's output it carries, when the summary has logged the
        error lines already (and the application's error document says what failed)."""
        if self._task_log is None:
            return error
        return AirflowException(str(error).split("\nLast spark-submit output:", 1)[0])

    def _log_summary(self, failed: bool) -> None:
        if self._task_log is None:  # no captured hook: its output went to the task log as it came
            return
        summary = self.output.summary(failed)
        (self._task_log.error if failed else self._task_log.info)("%s", summary)
