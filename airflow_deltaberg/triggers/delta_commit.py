"""DeltaCommitTrigger: the deferrable path of DeltaCommitSensor, polling the Delta log on the triggerer.

``check_commits`` is the one check both paths run (the sensor's poke and each poll of the trigger); its
result is the payload of the trigger's event, so the two paths reach the same outcome from the same state.

The triggerer imports this module on its event loop, and every trigger it runs shares that loop: the module
imports no storage or Delta code (pyarrow, fsspec, core.delta; they load on the first check, in a worker
thread), and every storage call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_deltaberg.core.errors import DeltabergError, NotADeltaTableError
from airflow_deltaberg.version_compat import AirflowException

if TYPE_CHECKING:
    from airflow_deltaberg.core.storage import Storage

#: core.watch.START_ICEBERG (the default start), spelled here so that the module needs no core.watch to load.
START_ICEBERG = "iceberg"

SUCCESS = "success"
WAITING = "waiting"
ERROR = "error"
TIMEOUT = "timeout"


def check_commits(
    storage: Storage,
    *,
    table_uri: str,
    start_version: int | None,
    start_from: str,
    min_commits: int,
    wait_for_table: bool,
) -> dict[str, Any]:
    """One check of the table, as a JSON-able payload with ``status``:

    * ``success``: at least ``min_commits`` new versions; ``result`` is the XCom value (NewCommits.to_dict()).
    * ``waiting``: not yet; ``reason`` says why.
    * ``error``: ``error`` (the core error class), ``message`` and ``retryable``.
    """
    from airflow_deltaberg.core.watch import poll_new_commits

    try:
        commits = poll_new_commits(storage, start_version=start_version, start_from=start_from, table=table_uri)
    except NotADeltaTableError as exc:
        if wait_for_table:
            return {"status": WAITING, "reason": f"waiting for the table to exist: {exc}"}
        return error_payload(exc)
    except DeltabergError as exc:
        return error_payload(exc)
    if commits.count >= min_commits:
        return {"status": SUCCESS, "result": commits.to_dict()}
    start = "no version" if commits.start_version is None else f"version {commits.start_version}"
    return {
        "status": WAITING,
        "reason": f"{table_uri} is at version {commits.latest_version}: {commits.count} new commit(s) after "
        f"{start} ({commits.start_from}), waiting for {min_commits}",
    }


def error_payload(exc: DeltabergError) -> dict[str, Any]:
    return {"status": ERROR, "error": type(exc).__name__, "message": str(exc), "retryable": exc.retryable}


def connection_error(conn_id: str | None, exc: Exception) -> dict[str, Any]:
    """The payload for a storage connection that cannot be used (not retryable: the connection must change)."""
    message = str(exc) if str(conn_id) in str(exc) else f"connection {conn_id!r}: {exc}"
    return {"status": ERROR, "error": type(exc).__name__, "message": message, "retryable": False}


class DeltaCommitTrigger(BaseTrigger):
    """Polls a Delta table until it has ``min_commits`` versions after the start point, then fires one event.

    The event payload is ``check_commits``'s (status ``success`` or ``error``), or status ``timeout`` once
    ``end_at`` (epoch seconds) has passed: the deadline travels with the trigger so that a wait ends even
    where nothing else enforces the deferral timeout (``dag.test()`` runs triggers inline without one).

    :param table_uri: the table location.
    :param start_version: the last version already handled; None for none. Ignored for ``start_from="iceberg"``,
        where the start is the Iceberg metadata's ``delta-version``, read again at each poll.
    :param start_from: ``version``, ``previous_run`` (both: ``start_version`` as given) or ``iceberg``.
    :param min_commits: how many new versions make the event fire.
    :param wait_for_table: treat a missing table as "not yet" instead of an error.
    :param poll_interval: seconds between polls.
    :param deltaberg_conn_id: the storage connection (DeltaStorageHook); resolved on the triggerer so no
        secret is stored with the serialized trigger.
    :param end_at: the deadline (epoch seconds); None for none.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        start_version: int | None = None,
        start_from: str = START_ICEBERG,
        min_commits: int = 1,
        wait_for_table: bool = False,
        poll_interval: float = 60.0,
        deltaberg_conn_id: str | None = None,
        end_at: float | None = None,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.start_version = start_version
        self.start_from = start_from
        self.min_commits = min_commits
        self.wait_for_table = wait_for_table
        self.poll_interval = poll_interval
        self.deltaberg_conn_id = deltaberg_conn_id
        self.end_at = end_at

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "start_version": self.start_version,
                "start_from": self.start_from,
                "min_commits": self.min_commits,
                "wait_for_table": self.wait_for_table,
                "poll_interval": self.poll_interval,
                "deltaberg_conn_id": self.deltaberg_conn_id,
                "end_at": self.end_at,
            },
        )

    def _open_storage(self) -> Storage:
        from airflow_deltaberg.core.storage import open_storage
        from airflow_deltaberg.hooks.storage import DeltaStorageHook

        options: Mapping[str, Any] = DeltaStorageHook(deltaberg_conn_id=self.deltaberg_conn_id).storage_options()
        return open_storage(self.table_uri, options)

    def _check(self, storage: Storage) -> dict[str, Any]:
        return check_commits(
            storage,
            table_uri=self.table_uri,
            start_version=self.start_version,
            start_from=self.start_from,
            min_commits=self.min_commits,
            wait_for_table=self.wait_for_table,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Storage calls (and the first import of the storage and Delta code) block: they run in a worker thread so
        # the triggerer's event loop, shared by every trigger, stays free.
        try:
            storage = await asyncio.to_thread(self._open_storage)
        except DeltabergError as exc:
            yield TriggerEvent(error_payload(exc))
            return
        except AirflowException as exc:
            yield TriggerEvent(connection_error(self.deltaberg_conn_id, exc))
            return
        while True:
            payload = await asyncio.to_thread(self._check, storage)
            if payload["status"] != WAITING:
                yield TriggerEvent(payload)
                return
            remaining = None if self.end_at is None else self.end_at - time.time()
            if remaining is not None and remaining <= 0:
                yield TriggerEvent({"status": TIMEOUT, "reason": payload["reason"]})
                return
            self.log.debug("%s; next poll in %ss", payload["reason"], self.poll_interval)
            await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))
