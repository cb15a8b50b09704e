"""DeltaCommitEventTrigger run directly with asyncio against deltalake tables: accepted by AssetWatcher, one event
per batch of commits, nothing sent to Airflow per event, and a restart (a new instance) that starts from the Iceberg
metadata: it reports again what no conversion covers yet, and nothing that one does."""

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

DATA = pa.table({"id": pa.array([1, 2], pa.int64())})


class RecordingStore:
    """An asset state store as the triggerer injects it, recording every use (each is a request to its supervisor)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"the trigger used the asset state store: {name}")


def started(table: Path, store: RecordingStore | None = None, **kwargs: Any) -> DeltaCommitEventTrigger:
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


def test_one_event_per_batch_of_commits_with_the_versions_and_nothing_sent_per_event(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    store = RecordingStore()

    async def scenario() -> list[dict[str, Any]]:
        events = Running(started(table, store))
        first = await next_event(events)  # never converted: version 0 is new
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
    assert second["start_from"] == "last_event"  # the cursor in memory
    # No cursor write, no read: each would be a request the triggerer's supervisor serves.
    assert store.calls == []


def test_a_restart_after_the_run_converted_reports_only_the_new_commits(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))  # Iceberg at Delta version 0

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        events = Running(started(table))
        write_deltalake(str(table), DATA, mode="append")  # version 1
        first = await next_event(events)
        convert(str(table))  # the run the event scheduled converts version 1
        await events.aclose()  # the triggerer stops
        write_deltalake(str(table), DATA, mode="append")  # version 2, while no triggerer runs
        events = Running(started(table))
        second = await next_event(events)
        await no_event(events)
        await events.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert versions(first) == (0, 1, 1, 1) and first["start_from"] == "iceberg"
    assert first["table_id"] is not None and first["iceberg_metadata"].endswith(".metadata.json")
    assert versions(second) == (1, 2, 2, 1) and second["start_from"] == "iceberg"


def test_a_restart_reports_again_what_no_conversion_covers_yet(tmp_path: Path) -> None:
    # The event of version 1 was dropped before the triggerer stored it (or stored, and its run did not convert
    # before the restart): the restarted trigger reports version 1 again, with version 2, in one batch.
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        events = Running(started(table))
        write_deltalake(str(table), DATA, mode="append")  # version 1
        first = await next_event(events)
        await events.aclose()
        write_deltalake(str(table), DATA, mode="append")  # version 2
        events = Running(started(table))
        second = await next_event(events)
        await no_event(events)
        await events.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert versions(first) == (0, 1, 1, 1)
    assert versions(second) == (0, 1, 2, 2) and second["start_from"] == "iceberg"


def test_commits_the_iceberg_metadata_covers_make_no_event(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    write_deltalake(str(table), DATA, mode="append")
    convert(str(table))  # Iceberg at version 1: converted by other means, nothing to run on

    async def scenario() -> None:
        events = Running(started(table))
        await no_event(events)
        await events.aclose()

    asyncio.run(scenario())


def test_a_replaced_table_is_watched_again_from_its_next_conversion(tmp_path: Path) -> None:
    import shutil

    table = tmp_path / "t"
    for _ in range(3):
        write_deltalake(str(table), DATA, mode="append")  # versions 0..2
    convert(str(table))

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        events = Running(started(table))
        write_deltalake(str(table), DATA, mode="append")
        first = await next_event(events)  # the cursor is 3 now
        for path in table.iterdir():  # the table replaced: deleted but for its Iceberg metadata, written again
            if path.name != "_iceberg":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        write_deltalake(str(table), DATA)  # version 0: the cursor and the Iceberg delta-version 2 are past its end
        await no_event(events)
        convert(str(table), full=True)  # Iceberg at the new table's version 0
        await no_event(events)
        write_deltalake(str(table), DATA, mode="append")
        second = await next_event(events)
        await events.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert versions(first) == (2, 3, 3, 1)
    assert versions(second) == (0, 1, 1, 1) and second["start_from"] == "iceberg"


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


def test_a_missing_or_failing_table_is_logged_once_not_at_every_poll(tmp_path: Path, capsys) -> None:
    # Each log line is a message the triggerer's supervisor runs its whole loop for.
    table = tmp_path / "t"

    async def scenario() -> None:
        events = Running(started(table))
        await no_event(events, 0.4)  # ~8 polls of a missing table
        metadata = table / "_iceberg" / "metadata"
        metadata.mkdir(parents=True)
        (metadata / "v1.metadata.json").write_text("{not json")
        (metadata / "version-hint.text").write_text("1")
        await no_event(events, 0.4)  # ~8 polls that fail alike (the Iceberg metadata is read first)
        write_deltalake(str(table), DATA)
        await no_event(events, 0.4)
        assert not events.task.done()  # the watch goes on
        await events.aclose()

    asyncio.run(scenario())
    lines = capsys.readouterr().out.splitlines()
    assert sum("waiting for the table to exist" in line for line in lines) == 1, lines
    assert sum("IcebergStartError" in line for line in lines) == 1, lines


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
    trigger = started(table)
    trigger.poll_interval = 40

    async def scenario() -> None:
        monkeypatch.setattr(delta_commit_event.asyncio, "sleep", recorded)
        events = Running(trigger)
        while len(pauses) < 3:
            await real_sleep(0.01)
        await events.aclose()

    asyncio.run(scenario())
    assert pauses[:3] == [10.0, 40, 40]
