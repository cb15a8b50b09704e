"""DeltaCommitSensor in real ``dag.test()`` runs, in poke, reschedule and deferrable mode (``dag.test()`` runs the
trigger in line): the same XCom range and the same task states on every path, with a deltalake table that a
background thread or an upstream task appends to."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG, task
from deltalake import DeltaTable as DeltalakeTable
from deltalake import write_deltalake

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.sensors import DeltaCommitSensor

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
DATA = pa.table({"id": pa.array([1, 2], pa.int64())})
MODES = ["poke", "reschedule", "deferrable"]
#: The task states that show a sensor is waiting on the given path (poke: it keeps running).
WAITING_STATES = {"poke": {"running"}, "reschedule": {"up_for_reschedule"}, "deferrable": {"deferred"}}


def make_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False)


def sensor(mode: str, **kwargs: Any) -> DeltaCommitSensor:
    kwargs.setdefault("poke_interval", 0.3)
    kwargs.setdefault("timeout", 120)
    return DeltaCommitSensor(
        task_id="wait", mode="reschedule" if mode == "reschedule" else "poke", deferrable=mode == "deferrable",
        **kwargs,
    )


def task_states(dag_id: str, task_id: str) -> list[str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(TaskInstance.state).where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
        return [str(state) for state in session.scalars(query)]


class WhenWaiting:
    """Runs ``action`` in a thread once the sensor task of ``dag_id`` is waiting on the path of ``mode`` (its
    first check found nothing): running for a few poke intervals (poke), up for reschedule, or deferred.

    dag.test() runs the trigger in line, and the deferred state may stay in its uncommitted session for the
    whole wait, so in deferrable mode the trigger's own checks are watched too: a check that found nothing to
    wait for counts as ``deferred``."""

    def __init__(self, dag_id: str, mode: str, action: Callable[[], None], poke_interval: float = 0.3):
        self.dag_id, self.mode, self.action, self.poke_interval = dag_id, mode, action, poke_interval
        self.seen: list[str] = []
        # Models are imported here, in the test's thread: importing them from two threads at once deadlocks.
        import airflow.models
        from sqlalchemy.orm import configure_mappers

        airflow.models.import_all_models()
        configure_mappers()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self._trigger_waited = threading.Event()
        self._unpatch: Callable[[], None] | None = None

    @property
    def waited(self) -> bool:
        """Whether the sensor was seen waiting on its path before the action ran."""
        return self._waiting()

    def _waiting(self) -> bool:
        if self.mode == "deferrable" and self._trigger_waited.is_set():
            return True
        return bool(WAITING_STATES[self.mode] & set(self.seen))

    def _watch_trigger(self) -> None:
        from airflow_deltaberg.triggers.delta_commit import WAITING, DeltaCommitTrigger

        check = DeltaCommitTrigger._check
        waited = self._trigger_waited

        def watched(trigger: DeltaCommitTrigger, storage: Any) -> dict[str, Any]:
            payload = check(trigger, storage)
            if payload["status"] == WAITING:
                waited.set()
            return payload

        DeltaCommitTrigger._check = watched  # type: ignore[method-assign]

        def unpatch() -> None:
            DeltaCommitTrigger._check = check  # type: ignore[method-assign]

        self._unpatch = unpatch

    def _run(self) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not self._waiting():
            try:
                states = task_states(self.dag_id, "wait")
            except Exception:  # the DB is busy: SQLite allows one writer
                states = []
            if states and (not self.seen or self.seen[-1] != states[0]):
                self.seen.append(states[0])
            time.sleep(0.05)
        if self.mode == "poke":
            time.sleep(3 * self.poke_interval)  # a few empty pokes
        self.action()

    def __enter__(self) -> WhenWaiting:
        if self.mode == "deferrable":
            self._watch_trigger()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(timeout=200)
        if self._unpatch is not None:
            self._unpatch()
        assert not self.thread.is_alive()


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "sales"
    write_deltalake(str(path), DATA)
    return path


def append(path: Path, times: int = 1) -> Callable[[], None]:
    def _append() -> None:
        for _ in range(times):
            write_deltalake(str(path), DATA, mode="append")

    return _append


# -- the same success on every path ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_waits_for_commits_a_background_writer_appends(
    mode: str, table: Path, run_dag: Callable[..., Any], dag_id: str
) -> None:
    with make_dag(dag_id) as dag:
        sensor(mode, table_uri=str(table), start_version=0, min_commits=2)
    with WhenWaiting(dag_id, mode, append(table, times=2)) as watcher:
        run = run_dag(dag)
    assert run.state == "success"
    assert watcher.waited, watcher.seen
    assert run.xcom("wait") == {
        "table": str(table), "from_version": 1, "to_version": 2, "new_commits": 2,
        "start_version": 0, "start_from": "version",
    }
    assert DeltalakeTable(str(table)).version() == 2


def test_start_version_from_an_upstream_task_that_appends(
    table: Path, run_dag: Callable[..., Any], dag_id: str
) -> None:
    with make_dag(dag_id) as dag:

        @task
        def append_rows() -> int:
            before = DeltalakeTable(str(table)).version()
            append(table, times=3)()
            return before

        append_rows() >> sensor("reschedule", table_uri=str(table),
                                start_version="{{ ti.xcom_pull(task_ids='append_rows') }}")
    run = run_dag(dag)
    assert run.state == "success"
    assert run.xcom("wait") | {"table": None} == {
        "table": None, "from_version": 1, "to_version": 3, "new_commits": 3, "start_version": 0,
        "start_from": "version",
    }


def test_iceberg_start_and_default_deferrable_from_the_config(
    table: Path, run_dag: Callable[..., Any], dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without start_version: the delta-version of the Iceberg metadata. Without deferrable: [operators]
    default_deferrable."""
    convert(str(table))
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    with make_dag(dag_id) as dag:
        waiting = DeltaCommitSensor(task_id="wait", table_uri=str(table), poke_interval=0.3, timeout=120)
    assert waiting.deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert DeltaCommitSensor(task_id="other", table_uri=str(table)).deferrable is False

    with WhenWaiting(dag_id, "deferrable", append(table)) as watcher:
        run = run_dag(dag)
    assert run.state == "success"
    assert watcher.waited, watcher.seen
    assert run.xcom("wait") | {"table": None} == {
        "table": None, "from_version": 1, "to_version": 1, "new_commits": 1, "start_version": 0,
        "start_from": "iceberg",
    }


def test_previous_run_start_is_the_last_successful_to_version(
    table: Path, run_dag: Callable[..., Any], dag_id: str
) -> None:
    with make_dag(dag_id) as dag:
        sensor("poke", table_uri=str(table), start_from="previous_run")
    append(table, times=2)()
    first = run_dag(dag, logical_date=START)
    assert first.state == "success"
    # No earlier run: nothing was handled, every version is new.
    assert first.xcom("wait") | {"table": None} == {
        "table": None, "from_version": 0, "to_version": 2, "new_commits": 3, "start_version": None,
        "start_from": "previous_run",
    }
    append(table)()
    second = run_dag(dag, logical_date=START + dt.timedelta(days=1))
    assert second.state == "success"
    assert (second.xcom("wait")["start_version"], second.xcom("wait")["from_version"],
            second.xcom("wait")["to_version"]) == (2, 3, 3)


# -- the same failures on every path -----------------------------------------------------------------


@pytest.fixture
def broken_table(tmp_path: Path) -> Iterator[Path]:
    """A table whose `_delta_log` cannot be listed (a symlink loop: fails for root too)."""
    path = tmp_path / "broken"
    write_deltalake(str(path), DATA)
    shutil.rmtree(path / "_delta_log")
    (path / "_delta_log").symlink_to(path / "_delta_log")
    yield path


CASES = {
    # case: (sensor arguments, expected state, expected tries); the messages: test_sensor_outcomes.py
    "missing table": ({}, "failed", 1),  # not retried: AirflowFailException
    "missing table, soft_fail": ({"soft_fail": True}, "skipped", 1),
    "missing table waited for, timeout": ({"wait_for_table": True, "timeout": 2}, "failed", 1),
    "missing table waited for, timeout, soft_fail": ({"wait_for_table": True, "timeout": 2, "soft_fail": True},
                                                     "skipped", 1),
    "start version never reached": ({"start_version": 9}, "failed", 1),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mode", MODES)
def test_failures_end_the_wait_the_same_way_on_every_path(
    mode: str, case: str, tmp_path: Path, run_dag: Callable[..., Any], dag_id: str,
) -> None:
    arguments, expected_state, expected_tries = CASES[case]
    location = tmp_path / "missing"
    if case == "start version never reached":
        write_deltalake(str(location), DATA)
    with make_dag(dag_id) as dag:
        sensor(mode, table_uri=str(location), retries=1, retry_delay=dt.timedelta(0),
               **({"start_version": 0} | arguments))
    started = time.monotonic()
    run = run_dag(dag)
    ti = run.ti("wait")
    assert (str(ti.state), ti.try_number) == (expected_state, expected_tries)
    assert run.xcom("wait") is None
    assert time.monotonic() - started < 90  # never an endless poke


@pytest.mark.parametrize("mode", MODES)
def test_a_table_deleted_while_waited_on_fails_the_task(
    mode: str, table: Path, run_dag: Callable[..., Any], dag_id: str
) -> None:
    with make_dag(dag_id) as dag:
        sensor(mode, table_uri=str(table), start_version=0, retries=1, retry_delay=dt.timedelta(0))
    with WhenWaiting(dag_id, mode, lambda: shutil.rmtree(table)) as watcher:
        run = run_dag(dag)
    assert watcher.waited, watcher.seen
    ti = run.ti("wait")
    assert (str(ti.state), ti.try_number) == ("failed", 1)


@pytest.mark.parametrize("mode", MODES)
def test_unreadable_storage_fails_after_the_retries(
    mode: str, broken_table: Path, run_dag: Callable[..., Any], dag_id: str
) -> None:
    with make_dag(dag_id) as dag:
        sensor(mode, table_uri=str(broken_table), start_version=0, retries=1, retry_delay=dt.timedelta(0),
               soft_fail=True)
    run = run_dag(dag)
    ti = run.ti("wait")
    # A storage error is retryable (retries apply) and soft_fail does not hide it, on every path.
    assert (str(ti.state), ti.try_number) == ("failed", 2)

