"""DeltaCommitEventTrigger: an AssetWatcher's trigger that fires one event per batch of new Delta commits.

A DAG scheduled on ``Asset("delta://...", watchers=[AssetWatcher(name=..., trigger=DeltaCommitEventTrigger(...))])``
runs when the table has new commits; no run and no worker slot wait meanwhile, only this trigger on the triggerer.

The cursor is kept in memory and derived again when the trigger starts: the Iceberg metadata's ``delta-version``,
which the runs its events schedule move (core.watch.commits_after_cursor takes the later of it and the last
event's ``to_version``). Nothing is written per event: a write goes through the triggerer's supervisor, and was a
third of its CPU an event (docs/benchmarks.md). The last stored asset event cannot be read instead: a trigger's
runner process has no DB access and its supervisor answers no asset-event request (Airflow 3.3).

Restarts, from Airflow's airflow/jobs/triggerer_job_runner.py: a yielded event goes to the runner's in-memory deque
(TriggerRunner.run_trigger) and the trigger polls on at once; the runner's loop hands the deque to the supervisor
at its next sync (about once a second), and the supervisor stores it (handle_events -> Trigger.submit_event: the
asset event, the runs it queues) after that read. A stop or kill in between drops the event (a stopped runner
leaves its loop without a last sync); the Iceberg metadata did not move, so the restarted trigger reports those
commits again, with any newer, once: none lost, none twice (a cursor written right after the yield would be
stored before the event, and a kill between the two would lose the batch). Once the event is stored and until
its run has converted, a restart reports the commits again: a second event. ``serialize()`` holds only the
configuration: the triggerer captures it once, and Airflow identifies an event trigger by the hash of its kwargs
(BaseEventTrigger.hash), which a moving cursor would change.

Like DeltaCommitTrigger, the module imports no storage or Delta code, and every storage call runs in a worker
thread: the triggerer's event loop is shared by every trigger it runs.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_deltaberg.core.errors import DeltabergError, NotADeltaTableError, VersionNotFoundError
from airflow_deltaberg.version_compat import AirflowException

if TYPE_CHECKING:
    from airflow_deltaberg.core.storage import Storage


def event_payload(table_uri: str, commits: Any, iceberg: Any) -> dict[str, Any]:
    """The event's payload (an asset event's extra holds it under ``payload``): the table, the new versions, the
    Delta table id the Iceberg metadata records (None before the first conversion) and that metadata file."""
    return {
        "table": table_uri,
        **{key: value for key, value in commits.to_dict().items() if key != "table"},
        "table_id": iceberg.delta_table_id,
        "iceberg_metadata": iceberg.location,
    }


class DeltaCommitEventTrigger(BaseEventTrigger):
    """Polls a Delta table and fires an event whenever it has ``min_commits`` versions after the cursor.

    The payload is ``event_payload``'s. Errors (storage, a table replaced under the cursor) are logged with the
    table and version and the poll goes on: a watcher outlives them, and an error is no commit to run on. A table
    that does not exist yet is waited for.

    :param table_uri: the table location.
    :param poll_interval: seconds between polls.
    :param min_commits: how many new versions make an event.
    :param deltaberg_conn_id: the storage connection (DeltaStorageHook), resolved on the triggerer so that no
        secret is stored with the serialized trigger.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        poll_interval: float = 60.0,
        min_commits: int = 1,
        deltaberg_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        if min_commits < 1:
            raise ValueError(f"min_commits must be at least 1, got {min_commits}")
        self.table_uri = table_uri
        self.poll_interval = poll_interval
        self.min_commits = min_commits
        self.deltaberg_conn_id = deltaberg_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "poll_interval": self.poll_interval,
                "min_commits": self.min_commits,
                "deltaberg_conn_id": self.deltaberg_conn_id,
            },
        )

    def _open_storage(self) -> Storage:
        from airflow_deltaberg.core.storage import open_storage
        from airflow_deltaberg.hooks.storage import DeltaStorageHook

        options: Mapping[str, Any] = DeltaStorageHook(deltaberg_conn_id=self.deltaberg_conn_id).storage_options()
        return open_storage(self.table_uri, options)

    def _check(self, storage: Storage, cursor: int | None, seen: int | None) -> tuple[dict[str, Any] | None, int]:
        """The event payload when there are enough new commits (else None), and the newest Delta version seen.

        ``seen`` is that version at the previous poll: while it is still the newest, this poll would find what
        that one found (no batch), so one listing answers it (core.watch.unchanged_since)."""
        from airflow_deltaberg.core.watch import commits_after_cursor, unchanged_since

        if seen is not None and unchanged_since(storage, seen, table=self.table_uri):
            return None, seen
        commits, iceberg = commits_after_cursor(storage, last_event_version=cursor, table=self.table_uri)
        if commits.count < self.min_commits:
            return None, commits.latest_version
        return event_payload(self.table_uri, commits, iceberg), commits.latest_version

    async def run(self) -> AsyncIterator[TriggerEvent]:
        storage: Storage | None = None
        cursor: int | None = None  # the to_version of the last event; the Iceberg delta-version counts as well
        seen: int | None = None  # the newest Delta version the last poll saw; None: poll in full
        said = _Said()
        first = True
        while True:
            try:
                if storage is None:
                    storage = await asyncio.to_thread(self._open_storage)
                payload, seen = await asyncio.to_thread(self._check, storage, cursor, seen)
                said.clear()
            except NotADeltaTableError as exc:
                if said.due(f"waiting for the table to exist: {exc}"):
                    self.log.info("waiting for the table to exist: %s", exc)
                payload, seen, cursor = None, None, None
            except VersionNotFoundError as exc:
                # The table was replaced: the versions reported were the old table's. Its next conversion's
                # delta-version is where the watch goes on.
                if said.due(f"{type(exc).__name__}: {exc}"):
                    self.log.error("%s: %s (polling every %ss)", type(exc).__name__, exc, self.poll_interval)
                payload, seen, cursor = None, None, None
            except (DeltabergError, AirflowException) as exc:
                if said.due(f"{type(exc).__name__}: {exc}"):
                    self.log.error("%s: %s (polling every %ss)", type(exc).__name__, exc, self.poll_interval)
                payload, seen = None, None
            if payload is not None:
                yield TriggerEvent(payload)
                cursor = payload["to_version"]
            # The first pause is a random part of the interval: the triggers a triggerer starts together would
            # otherwise poll together for ever, and their events reach its supervisor in bursts.
            await asyncio.sleep(self.poll_interval * (random.random() if first else 1.0))
            first = False


class _Said:
    """Which message a trigger logged last and when: the same one again only after ``REPEAT_SECONDS``.

    Each log line of a trigger is a message to the triggerer's supervisor, which runs its whole loop (its
    trigger-assignment and clean-up queries) for it: a table missing or failing at every poll must not cost that
    at every poll of every trigger."""

    REPEAT_SECONDS = 600.0

    def __init__(self) -> None:
        self.text: str | None = None
        self.at = 0.0

    def due(self, text: str) -> bool:
        now = time.monotonic()
        if text == self.text and now - self.at < self.REPEAT_SECONDS:
            return False
        self.text, self.at = text, now
        return True

    def clear(self) -> None:
        self.text = None
