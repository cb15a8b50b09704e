"""DeltaCommitEventTrigger: an AssetWatcher's trigger that fires one event per batch of new Delta commits.

A DAG scheduled on ``Asset("delta://...", watchers=[AssetWatcher(name=..., trigger=DeltaCommitEventTrigger(...))])``
runs when the table has new commits; no run and no worker slot wait meanwhile, only this trigger on the triggerer.

The cursor (the last version an event reported) survives a triggerer restart: after each event it is stored in
Airflow's asset state store (key ``WATERMARK_KEY``, one per watched asset), and a poll starts from the later of it
and the Iceberg metadata's ``delta-version`` (core.watch.commits_after_cursor). ``serialize()`` holds only the
configuration: the triggerer captures it once, so a cursor kept there would be lost on restart, and Airflow
identifies an event trigger by the hash of its kwargs (BaseEventTrigger.hash), which a moving cursor would change.

Like DeltaCommitTrigger, the module imports no storage or Delta code, and every storage call runs in a worker
thread: the triggerer's event loop is shared by every trigger it runs.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_deltaberg.core.errors import DeltabergError, NotADeltaTableError
from airflow_deltaberg.version_compat import AirflowException

if TYPE_CHECKING:
    from airflow_deltaberg.core.storage import Storage

#: The asset state store key of the cursor: the to_version of the last event.
WATERMARK_KEY = "deltaberg_delta_version"


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

    def _accessors(self) -> list[Any]:
        """One state accessor per watched asset; none when the triggerer injected no store (dag.test, tests).

        Several assets can share one trigger (same kwargs, same hash): each keeps its own cursor. Airflow 3.3's
        AssetStateStoreAccessors offers no iteration, so its per-asset accessors are read from its two maps."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return []
        accessors = [*getattr(store, "_by_name", {}).values(), *getattr(store, "_by_uri", {}).values()]
        return accessors or [store]

    async def _load_cursor(self) -> int | None:
        # The oldest cursor wins: after a partial write a batch is reported again rather than skipped.
        values = [await accessor.aget(WATERMARK_KEY) for accessor in self._accessors()]
        if not values or any(value is None for value in values):
            return None
        return min(int(value) for value in values)

    async def _store_cursor(self, version: int) -> None:
        for accessor in self._accessors():
            await accessor.aset(WATERMARK_KEY, version)

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
        cursor = await self._load_cursor()
        seen: int | None = None  # the newest Delta version the last poll saw; None: poll in full
        first = True
        while True:
            try:
                if storage is None:
                    storage = await asyncio.to_thread(self._open_storage)
                payload, seen = await asyncio.to_thread(self._check, storage, cursor, seen)
            except NotADeltaTableError as exc:
                self.log.info("waiting for the table to exist: %s", exc)
                payload, seen = None, None
            except (DeltabergError, AirflowException) as exc:
                self.log.error("%s: %s (next poll in %ss)", type(exc).__name__, exc, self.poll_interval)
                payload, seen = None, None
            if payload is not None:
                yield TriggerEvent(payload)
                # Stored once the event is handed to the triggerer, which persists it within its next sync.
                cursor = payload["to_version"]
                await self._store_cursor(cursor)
            # The first pause is a random part of the interval: the triggers a triggerer starts together would
            # otherwise poll together for ever, and their events reach its supervisor in bursts.
            await asyncio.sleep(self.poll_interval * (random.random() if first else 1.0))
            first = False
