"""DeltaCommitTrigger run directly with asyncio: serialization, the events it fires while a background thread
appends to a deltalake table, its deadline, and errors as events."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.triggers import DeltaCommitTrigger

DATA = pa.table({"id": pa.array([1, 2], pa.int64())})


def first_event(trigger: DeltaCommitTrigger, timeout: float = 60) -> tuple[dict[str, Any], float]:
    """The payload of the trigger's first event and the seconds it took; the trigger must stop after it."""

    async def _run() -> tuple[dict[str, Any], float]:
        start = time.monotonic()
        events = trigger.run()
        event = await asyncio.wait_for(anext(events), timeout)
        elapsed = time.monotonic() - start
        # Single-event trigger: the generator is finished.
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(events), 5)
        return event.payload, elapsed

    return asyncio.run(_run())


def append_later(table: Path, delay: float, times: int = 1) -> threading.Thread:
    def _append() -> None:
        time.sleep(delay)
        for _ in range(times):
            write_deltalake(str(table), DATA, mode="append")

    thread = threading.Thread(target=_append, daemon=True)
    thread.start()
    return thread


def roundtrip(trigger: DeltaCommitTrigger) -> DeltaCommitTrigger:
    """Rebuilt from its JSON-encoded serialization, as the triggerer does."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    return cls(**json.loads(json.dumps(kwargs)))


def test_serialize_roundtrip_keeps_every_argument() -> None:
    trigger = DeltaCommitTrigger(
        table_uri="s3://bucket/t", start_version=4, start_from="previous_run", min_commits=3,
        wait_for_table=True, poll_interval=2.5, deltaberg_conn_id="aws_prod", end_at=1_900_000_000.5,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_deltaberg.triggers.delta_commit.DeltaCommitTrigger"
    assert roundtrip(trigger).serialize() == (classpath, kwargs)
    assert kwargs["deltaberg_conn_id"] == "aws_prod" and "storage_options" not in kwargs


def test_fires_when_a_background_writer_appends(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    writer = append_later(table, delay=1.0, times=2)
    trigger = roundtrip(DeltaCommitTrigger(table_uri=str(table), start_version=0, start_from="version",
                                           min_commits=2, poll_interval=0.2))
    payload, elapsed = first_event(trigger)
    writer.join()
    assert payload == {
        "status": "success",
        "result": {"table": str(table), "from_version": 1, "to_version": 2, "new_commits": 2,
                   "start_version": 0, "start_from": "version"},
    }
    assert elapsed >= 1.0  # it waited for the writer


def test_iceberg_start_is_read_at_each_poll(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))
    writer = append_later(table, delay=0.5)
    payload, _ = first_event(DeltaCommitTrigger(table_uri=str(table), poll_interval=0.2))
    writer.join()
    assert payload["status"] == "success"
    assert payload["result"] | {"table": None} == {
        "table": None, "from_version": 1, "to_version": 1, "new_commits": 1, "start_version": 0,
        "start_from": "iceberg",
    }


def test_deadline_ends_the_wait_with_a_timeout_event(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    payload, elapsed = first_event(DeltaCommitTrigger(
        table_uri=str(table), start_version=0, start_from="version", poll_interval=0.2, end_at=time.time() + 1.0,
    ))
    assert payload["status"] == "timeout"
    assert "0 new commit(s)" in payload["reason"]
    assert 0.9 <= elapsed < 10


def test_missing_table_is_an_error_event(tmp_path: Path) -> None:
    payload, _ = first_event(DeltaCommitTrigger(table_uri=str(tmp_path / "none"), start_version=0,
                                                start_from="version", poll_interval=0.2))
    assert payload["status"] == "error"
    assert payload["error"] == "NotADeltaTableError" and payload["retryable"] is False
    assert str(tmp_path / "none" / "_delta_log") in payload["message"]


def test_wait_for_table_waits_until_it_is_created(tmp_path: Path) -> None:
    table = tmp_path / "later"

    def create() -> None:
        time.sleep(0.8)
        write_deltalake(str(table), DATA)

    creator = threading.Thread(target=create, daemon=True)
    creator.start()
    payload, elapsed = first_event(DeltaCommitTrigger(table_uri=str(table), wait_for_table=True, poll_interval=0.2))
    creator.join()
    assert payload["status"] == "success"
    assert (payload["result"]["from_version"], payload["result"]["to_version"]) == (0, 0)
    assert elapsed >= 0.8


def test_a_table_that_disappears_while_waiting_is_an_error_event(tmp_path: Path) -> None:
    import shutil

    table = tmp_path / "t"
    write_deltalake(str(table), DATA)

    def delete() -> None:
        time.sleep(0.6)
        shutil.rmtree(table)

    deleter = threading.Thread(target=delete, daemon=True)
    deleter.start()
    payload, _ = first_event(DeltaCommitTrigger(table_uri=str(table), start_version=0, start_from="version",
                                                poll_interval=0.2))
    deleter.join()
    assert payload["status"] == "error" and payload["error"] == "NotADeltaTableError"


# -- the triggerer's event loop: a light module, no blocking call on the loop -----------------------------------


def test_importing_the_trigger_loads_no_storage_or_delta_code() -> None:
    """The triggerer imports the trigger class on its event loop (shared by every trigger): what is already
    loaded there is Airflow; the trigger's module must add no pyarrow, pyiceberg, fsspec or Delta engine."""
    import subprocess
    import sys

    script = (
        "import json, sys, time\n"
        "import airflow.sdk.exceptions, airflow.triggers.base\n"
        "before = set(sys.modules)\n"
        "start = time.perf_counter()\n"
        "from airflow._shared.module_loading import import_string\n"
        "import_string('airflow_deltaberg.triggers.delta_commit.DeltaCommitTrigger')\n"
        "print(json.dumps({'seconds': time.perf_counter() - start, 'new': sorted(set(sys.modules) - before)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    heavy = [m for m in loaded["new"] if m.split(".")[0] in ("pyarrow", "pyiceberg", "fsspec", "deltalake", "pydantic")
             or m.startswith(("airflow_deltaberg.core.delta", "airflow_deltaberg.core.storage",
                              "airflow_deltaberg.core.watch", "airflow_deltaberg.core.iceberg",
                              "airflow_deltaberg.hooks"))]
    assert heavy == []
    assert loaded["seconds"] < 0.25, loaded  # was 0.4 s on a quiet machine


def test_the_default_start_is_core_watchs() -> None:
    from airflow_deltaberg.core.watch import START_ICEBERG
    from airflow_deltaberg.triggers.delta_commit import START_ICEBERG as TRIGGER_START

    assert TRIGGER_START == START_ICEBERG
    assert DeltaCommitTrigger(table_uri="t").serialize()[1]["start_from"] == START_ICEBERG


class SlowStorage:
    """A storage whose every call takes ``delay`` seconds (a far object store)."""

    def __init__(self, storage: Any, delay: float) -> None:
        self._storage, self._delay, self.calls = storage, delay, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._storage, name)
        if not callable(attr):
            return attr

        def slow(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            time.sleep(self._delay)
            return attr(*args, **kwargs)

        return slow


def test_the_event_loop_keeps_running_while_the_trigger_reads_a_slow_storage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    slow: list[SlowStorage] = []
    open_real = DeltaCommitTrigger._open_storage

    def open_slow(self: DeltaCommitTrigger) -> SlowStorage:
        time.sleep(0.3)  # a connection lookup and a first import
        slow.append(SlowStorage(open_real(self), delay=0.4))
        return slow[-1]

    monkeypatch.setattr(DeltaCommitTrigger, "_open_storage", open_slow)
    writer = append_later(table, delay=2.0)
    trigger = DeltaCommitTrigger(table_uri=str(table), start_version=0, start_from="version", poll_interval=0.05)

    async def run() -> tuple[dict[str, Any], float]:
        gaps: list[float] = []

        async def heartbeat() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beating = asyncio.create_task(heartbeat())
        event = await asyncio.wait_for(anext(trigger.run()), 60)
        beating.cancel()
        return event.payload, max(gaps)

    payload, longest_gap = asyncio.run(run())
    writer.join()
    assert payload["status"] == "success" and payload["result"]["to_version"] == 1
    assert slow[0].calls >= 4  # the trigger spent seconds in storage calls...
    assert longest_gap < 0.3, longest_gap  # ...while the loop never stalled for one of them (0.4 s each)
