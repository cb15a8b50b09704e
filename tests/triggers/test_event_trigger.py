"""DeltaCommitEventTrigger run directly with asyncio against deltalake tables: accepted by AssetWatcher, one event
per batch of commits, and a cursor that survives a restart (a new instance over the same asset state store)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.triggers import DeltaCommitEventTrigger
from airflow_deltaberg.triggers.delta_commit_event import WATERMARK_KEY

DATA = pa.table({"id": pa.array([1, 2], pa.int64())})


class FakeAccessor:
    """The async half of Airflow's AssetStateStoreAccessor, over a dict shared across triggerer 'restarts'."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.state.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.state[key] = json.loads(json.dumps(value))


class FakeStore:
    """AssetStateStoreAccessors' shape: one accessor per watched asset, by name."""

    def __init__(self, states: dict[str, dict[str, Any]]) -> None:
        self._by_name = {name: FakeAccessor(state) for name, state in states.items()}
        self._by_uri: dict[str, FakeAccessor] = {}


def started(table: Path, store: FakeStore | None = None, **kwargs: Any) -> DeltaCommitEventTrigger:
    """A trigger rebuilt from its serialization, as the triggerer does, with the store it injects."""
    classpath, config = DeltaCommitEventTrigger(table_uri=str(table), poll_interval=0.05, **kwargs).serialize()
    trigger = DeltaCommitEventTrigger(**json.loads(json.dumps(config)))
    trigger.asset_state_store = store
    return trigger


class Running:
    """A trigger's run() consumed by a task, as the triggerer does (a timeout must not cancel the generator)."""

    def __init__(self, trigger: DeltaCommitEventTrigger) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.create_task(self._consume(trigger))

    async def _consume(self, trigger: DeltaCommitEventTrigger) -> None:
        async for event in trigger.run():
            await self.queue.put(event.payload)

    async def aclose(self) -> None:
        """Cancel it, as a triggerer shutting down does."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def next_event(events: Running, timeout: float = 10) -> dict[str, Any]:
    return await asyncio.wait_for(events.queue.get(), timeout)


async def no_event(events: Running, seconds: float = 0.5) -> None:
    await asyncio.sleep(seconds)
    assert events.queue.empty(), events.queue.get_nowait()


def versions(payload: dict[str, Any]) -> tuple[Any, ...]:
    return payload["start_version"], payload["from_version"], payload["to_version"], payload["new_commits"]


def test_an_asset_watcher_accepts_it_and_its_kwargs_hold_only_configuration() -> None:
    from airflow.sdk import Asset, AssetWatcher
    from airflow.triggers.base import BaseEventTrigger

    trigger = DeltaCommitEventTrigger(table_uri="s3://lake/sales", poll_interval=30, deltaberg_conn_id="lake")
    asset = Asset("delta://lake/sales", watchers=[AssetWatcher(name="sales_commits", trigger=trigger)])
    assert asset.watchers[0].trigger is trigger
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_deltaberg.triggers.delta_commit_event.DeltaCommitEventTrigger"
    assert kwargs == {"table_uri": "s3://lake/sales", "poll_interval": 30, "min_commits": 1,
                      "deltaberg_conn_id": "lake"}
    # Airflow identifies the trigger by this hash: the same before and after a run moved the cursor.
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(*DeltaCommitEventTrigger(
        **kwargs).serialize())


def test_one_event_per_batch_of_commits_with_the_versions(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    states: dict[str, dict[str, Any]] = {"sales": {}}

    async def scenario() -> list[dict[str, Any]]:
        events = Running(started(table, FakeStore(states)))
        first = await next_event(events)  # never converted, no cursor: version 0 is new
        await no_event(events)
        write_deltalake(str(table), DATA, mode="append")
        write_deltalake(str(table), DATA, mode="append")
        second = await next_event(events)
        await no_event(events)
        await events.aclose()
        return [first, second]

    first, second = asyncio.run(scenario())
    assert versions(first) == (None, 0, 0, 1) and first["start_from"] == "last_event"
    assert first["table"] == str(table) and first["table_id"] is None and first["iceberg_metadata"] is None
    assert versions(second) in {(0, 1, 2, 2), (0, 1, 1, 1)}  # one batch, or the poll fell between the appends
    assert states == {"sales": {WATERMARK_KEY: second["to_version"]}}


def test_a_restart_neither_repeats_nor_loses_a_commit(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))  # Iceberg at Delta version 0
    states: dict[str, dict[str, Any]] = {"a": {}, "b": {}}

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        events = Running(started(table, FakeStore(states)))
        write_deltalake(str(table), DATA, mode="append")  # version 1
        first = await next_event(events)
        await events.aclose()  # the triggerer stops; version 1 stays unconverted
        write_deltalake(str(table), DATA, mode="append")  # version 2, while no triggerer runs
        events = Running(started(table, FakeStore(states)))
        second = await next_event(events)
        await no_event(events)
        await events.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert versions(first) == (0, 1, 1, 1) and first["start_from"] == "iceberg"
    assert first["table_id"] is not None and first["iceberg_metadata"].endswith(".metadata.json")
    assert versions(second) == (1, 2, 2, 1) and second["start_from"] == "last_event"
    assert states == {"a": {WATERMARK_KEY: 2}, "b": {WATERMARK_KEY: 2}}  # each watched asset keeps its cursor


def test_the_oldest_cursor_of_several_assets_wins(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for _ in range(4):
        write_deltalake(str(table), DATA, mode="append")  # versions 0..3
    states: dict[str, dict[str, Any]] = {"a": {WATERMARK_KEY: 3}, "b": {WATERMARK_KEY: 1}}

    async def scenario() -> dict[str, Any]:
        events = Running(started(table, FakeStore(states)))
        payload = await next_event(events)
        await events.aclose()
        return payload

    assert versions(asyncio.run(scenario())) == (1, 2, 3, 2)
    assert states == {"a": {WATERMARK_KEY: 3}, "b": {WATERMARK_KEY: 3}}


def test_commits_converted_since_the_last_event_make_no_event(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    write_deltalake(str(table), DATA, mode="append")
    convert(str(table))  # Iceberg at version 1, the cursor at 0

    async def scenario() -> None:
        events = Running(started(table, FakeStore({"a": {WATERMARK_KEY: 0}})))
        await no_event(events)
        await events.aclose()

    asyncio.run(scenario())


def test_a_table_created_later_is_waited_for_and_min_commits_counts(tmp_path: Path) -> None:
    table = tmp_path / "later"

    async def scenario() -> dict[str, Any]:
        events = Running(started(table, None, min_commits=2))
        await no_event(events, 0.3)
        write_deltalake(str(table), DATA)
        await no_event(events, 0.3)  # one commit of two
        write_deltalake(str(table), DATA, mode="append")
        payload = await next_event(events)
        await events.aclose()
        return payload

    assert versions(asyncio.run(scenario())) == (None, 0, 1, 2)


class ReadsLogged(DeltaCommitEventTrigger):
    """The trigger over a LocalStorage that records the keys each poll reads and lists."""

    def _open_storage(self) -> Any:
        from airflow_deltaberg.core.storage import LocalStorage

        keys: list[str] = []
        self.keys = keys

        class Logged(LocalStorage):
            def read(self, key: str) -> bytes:
                keys.append(f"read {key}")
                return super().read(key)

            def exists(self, key: str) -> bool:
                keys.append(f"exists {key}")
                return super().exists(key)

            def list_from(self, directory: str, start_after: str | None = None) -> Any:
                keys.append(f"list {directory}")
                return super().list_from(directory, start_after)

        return Logged(self.table_uri)


def test_a_poll_with_nothing_new_lists_the_log_and_reads_nothing(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))  # Iceberg at version 0: its metadata and the version hint are there to be read
    trigger = ReadsLogged(table_uri=str(table), poll_interval=0.05)
    trigger.asset_state_store = FakeStore({"a": {}})

    async def scenario() -> tuple[list[str], dict[str, Any]]:
        events = Running(trigger)
        await no_event(events, 0.5)  # ~10 polls
        quiet = list(trigger.keys)
        write_deltalake(str(table), DATA, mode="append")
        payload = await next_event(events)
        await events.aclose()
        return quiet, payload

    quiet, payload = asyncio.run(scenario())
    first = quiet.index("list _delta_log")  # the first poll reads the Iceberg metadata and _last_checkpoint
    assert any("version-hint" in key for key in quiet[:first]) and "read _delta_log/_last_checkpoint" in quiet
    later = quiet[first + 1:]
    assert len(later) >= 3 and set(later) == {"list _delta_log"}, quiet
    # Once the log moved, the poll is a full one again: the event has the Iceberg start and the table id.
    assert versions(payload) == (0, 1, 1, 1) and payload["table_id"] is not None


def test_the_first_pause_is_a_random_part_of_the_interval_then_the_interval(tmp_path: Path, monkeypatch) -> None:
    # Triggers a triggerer starts together must not poll together for ever (their events would come in bursts).
    from airflow_deltaberg.triggers import delta_commit_event

    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(seconds: float) -> None:
        pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(delta_commit_event.random, "random", lambda: 0.25)
    trigger = started(table, FakeStore({"a": {}}))
    trigger.poll_interval = 40

    async def scenario() -> None:
        monkeypatch.setattr(delta_commit_event.asyncio, "sleep", recorded)
        events = Running(trigger)
        while len(pauses) < 3:
            await real_sleep(0.01)
        await events.aclose()

    asyncio.run(scenario())
    assert pauses[:3] == [10.0, 40, 40]
