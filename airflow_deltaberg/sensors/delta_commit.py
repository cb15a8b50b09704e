"""DeltaCommitSensor: waits for new commits of a Delta table, in poke, reschedule or deferrable mode."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue, TaskInstanceState

from airflow_deltaberg.core.errors import DeltabergError, StorageError
from airflow_deltaberg.core.storage import open_storage
from airflow_deltaberg.core.watch import START_GIVEN, START_ICEBERG, START_PREVIOUS_RUN
from airflow_deltaberg.hooks.storage import DeltaStorageHook
from airflow_deltaberg.operators.validate import parse_version
from airflow_deltaberg.triggers.delta_commit import (
    ERROR,
    SUCCESS,
    TIMEOUT,
    DeltaCommitTrigger,
    check_commits,
    connection_error,
    error_payload,
)
from airflow_deltaberg.version_compat import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    conf,
)

START_CHOICES = (START_ICEBERG, START_PREVIOUS_RUN)


class DeltaCommitSensor(BaseSensorOperator):
    """Wait until a Delta table has at least ``min_commits`` versions newer than a start point.

    **Start point** (the last version already handled; "newer" means greater than it):

    * ``start_version`` when given (templated: ``"{{ var.value.sales_version }}"`` or an XCom pull work);
    * else ``start_from="iceberg"`` (default): the ``delta-version`` recorded in the table's Iceberg metadata,
      read again at every poke, so the sensor fires while the Iceberg metadata lags the Delta table by at
      least ``min_commits`` versions. A table with no Iceberg metadata yet has handled nothing: every version
      is new, and the sensor fires as soon as the table exists (the first conversion is due);
    * or ``start_from="previous_run"``: the ``to_version`` of this task's XCom in the most recent successful
      run with an earlier logical date (runs without a logical date have no "previous"). Without one (the
      first run), nothing has been handled: every version is new.

    **XCom** (``return_value``), the same on every path: ``{"table", "from_version", "to_version",
    "new_commits", "start_version", "start_from"}``; ``from_version``..``to_version`` is the inclusive range of
    new versions, ``start_version`` is None when nothing had been handled.

    **Cost.** A poke reads ``_last_checkpoint`` and lists ``_delta_log`` once from the start version (or the
    newest checkpoint, if later), whatever the length of the log; with ``start_from="iceberg"`` it also reads
    the Iceberg ``version-hint.text`` and the metadata file it names (after checking that no newer one exists;
    the metadata folder is listed only when the hint is behind).

    **Modes.** ``mode="poke"`` or ``"reschedule"``, or ``deferrable=True`` (default: the ``[operators]
    default_deferrable`` setting): the first check runs in the worker, then ``DeltaCommitTrigger`` polls on the
    triggerer every ``poke_interval`` seconds until ``timeout``. Every path runs the same check.

    **Failures** (the same on every path). A missing or deleted table, a start version the table never
    reached, or unusable Iceberg metadata fail the task without retries (``AirflowFailException``, naming the
    table and the file; skipped with ``soft_fail``). With ``wait_for_table=True`` a missing table is waited
    for instead, until ``timeout``. Storage errors (unreadable storage) raise ``StorageError`` so the task's
    ``retries`` apply. ``timeout`` (Airflow's ``[sensors] default_timeout`` unless given: set it) ends every
    wait with ``AirflowSensorTimeout`` (skipped with ``soft_fail``).

    :param table_uri: the Delta table location (local path or fsspec URI). Templated.
    :param start_version: the last version already handled. Templated; "" or "None" count as not given.
    :param start_from: ``iceberg`` or ``previous_run``: where the start comes from without ``start_version``.
    :param min_commits: how many new versions to wait for (at least 1).
    :param wait_for_table: wait for a missing table to appear instead of failing.
    :param deltaberg_conn_id: connection for the storage credentials (DeltaStorageHook); None for none.
    :param deferrable: wait on the triggerer instead of in a worker slot.
    """

    template_fields: Sequence[str] = ("table_uri", "start_version")
    ui_color = "#d8f0f8"

    def __init__(
        self,
        *,
        table_uri: str,
        start_version: int | str | None = None,
        start_from: str = START_ICEBERG,
        min_commits: int = 1,
        wait_for_table: bool = False,
        deltaberg_conn_id: str | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if start_from not in START_CHOICES:
            raise ValueError(f"start_from must be one of {', '.join(START_CHOICES)}, not {start_from!r}")
        if isinstance(min_commits, bool) or not isinstance(min_commits, int) or min_commits < 1:
            raise ValueError(f"min_commits must be an integer of at least 1, not {min_commits!r}")
        self.table_uri = table_uri
        self.start_version = start_version
        self.start_from = start_from
        self.min_commits = min_commits
        self.wait_for_table = wait_for_table
        self.deltaberg_conn_id = deltaberg_conn_id
        if deferrable is None:
            deferrable = conf.getboolean("operators", "default_deferrable", fallback=False)
        self.deferrable = deferrable
        self._start: tuple[int | None, str] | None = None

    # -- the start point ------------------------------------------------------------------------------

    def _resolve_start(self, context: Context) -> tuple[int | None, str]:
        """(start version, source); for ``iceberg`` the version is read by each check, so None here."""
        if self._start is None:
            try:
                given = parse_version(self.start_version)
            except ValueError as exc:
                raise AirflowFailException(f"DeltaCommitSensor({self.table_uri}): start_version: {exc}") from exc
            if given is not None:
                self._start = (given, START_GIVEN)
            elif self.start_from == START_PREVIOUS_RUN:
                self._start = (self._previous_run_version(context), START_PREVIOUS_RUN)
            else:
                self._start = (None, START_ICEBERG)
            self.log.info("Waiting for %d new commit(s) of %s after %s", self.min_commits, self.table_uri,
                          self._start_text(self._start))
        return self._start

    @staticmethod
    def _start_text(start: tuple[int | None, str]) -> str:
        version, source = start
        if source == START_ICEBERG:
            return "the delta-version of its Iceberg metadata (every version when it has none)"
        if version is None:
            return "no version (no earlier successful run: every version is new)"
        return f"version {version} ({source})"

    def _previous_run_version(self, context: Context) -> int | None:
        ti = context["ti"]
        previous = ti.get_previous_ti(state=TaskInstanceState.SUCCESS)
        if previous is None:
            return None
        value = ti.xcom_pull(task_ids=self.task_id, run_id=previous.run_id, map_indexes=ti.map_index)
        if not isinstance(value, dict) or not isinstance(value.get("to_version"), int):
            self.log.warning("The previous run %s left no to_version in its XCom (%r)", previous.run_id, value)
            return None
        if value.get("table") != self.table_uri:
            self.log.warning("The previous run %s watched %s, not %s: its version is not used",
                             previous.run_id, value.get("table"), self.table_uri)
            return None
        return int(value["to_version"])

    # -- one check, and its outcome -------------------------------------------------------------------

    def _check(self, context: Context) -> dict[str, Any]:
        start_version, start_from = self._resolve_start(context)
        try:
            options = DeltaStorageHook(deltaberg_conn_id=self.deltaberg_conn_id).storage_options()
            storage = open_storage(self.table_uri, options)
        except AirflowException as exc:
            # A connection that cannot work: the trigger reports it the same way.
            return connection_error(self.deltaberg_conn_id, exc)
        except DeltabergError as exc:
            return error_payload(exc)
        return check_commits(
            storage,
            table_uri=self.table_uri,
            start_version=start_version,
            start_from=start_from,
            min_commits=self.min_commits,
            wait_for_table=self.wait_for_table,
        )

    def _outcome(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The XCom value of a ``success`` payload, None while waiting; raises for errors and timeouts."""
        status = payload.get("status")
        if status == SUCCESS:
            result = payload["result"]
            self.log.info("%s has %d new commit(s): versions %d..%d", self.table_uri, result["new_commits"],
                          result["from_version"], result["to_version"])
            return result
        if status == ERROR:
            message = f"{payload['error']}: {payload['message']}"
            # Logged here too: soft_fail turns the exception into a skip whose message drops this reason.
            self.log.error("%s", message)
            if payload.get("retryable"):
                raise StorageError(payload["message"])
            raise AirflowFailException(message)
        if status == TIMEOUT:
            raise AirflowSensorTimeout(f"Sensor has timed out after {self.timeout}s: {payload.get('reason')}")
        # One line per poke: the start and the outcome are logged at INFO, each "not yet" only at DEBUG.
        self.log.debug("%s", payload.get("reason"))
        return None

    def poke(self, context: Context) -> PokeReturnValue:
        result = self._outcome(self._check(context))
        return PokeReturnValue(is_done=result is not None, xcom_value=result)

    # -- deferrable path ------------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        self._start = None  # resolved once per execution (dag.test() runs reuse the operator object)
        if not self.deferrable:
            return super().execute(context)
        try:
            result = self._outcome(self._check(context))
        except (AirflowFailException, AirflowSensorTimeout) as exc:
            # What BaseSensorOperator.execute does with a poke's failure.
            if self.soft_fail or self.never_fail:
                raise AirflowSkipException(f"Skipping: {exc}") from exc
            raise
        except StorageError as exc:
            if self.never_fail:
                raise AirflowSkipException(f"Skipping: {exc}") from exc
            raise
        if result is not None:
            return result
        start_version, start_from = self._resolve_start(context)
        self.defer(
            trigger=DeltaCommitTrigger(
                table_uri=self.table_uri,
                start_version=start_version,
                start_from=start_from,
                min_commits=self.min_commits,
                wait_for_table=self.wait_for_table,
                poll_interval=self.poke_interval,
                deltaberg_conn_id=self.deltaberg_conn_id,
                end_at=time.time() + self.timeout,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Called with the trigger's event; the same outcomes as a poke."""
        if event is None:
            raise AirflowFailException(f"DeltaCommitSensor({self.table_uri}): the trigger ended without an event")
        try:
            return self._outcome(event)
        except StorageError as exc:
            # resume_execution skips Airflow exceptions only; a poke's storage error is skipped by never_fail.
            if self.never_fail:
                raise AirflowSkipException(f"Skipping: {exc}") from exc
            raise
