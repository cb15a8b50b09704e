"""The Spark engine of a full conversion's manifests: Spark executors write the groups the core planned.

The core plans everything (``core.iceberg.manifests.file_manifests``): the driver's replay of the log, the live files
with their stats, the pruning order and the groups of ``MANIFEST_ROWS`` files, one per data manifest. This engine only
distributes ``write_group`` over the groups. A full conversion's groups come spilled by the core under the table's
``_iceberg/metadata`` (``manifest_spill``; the engine asks for it with ``spills_in_table``; the names hold the
attempt's id, so a failed attempt's cleanup deletes them too): each Spark task reads its groups from those spill
files through the plan's storage, so the driver never holds more than a chunk of the files. Each task writes its
groups' manifests and delete files and returns each group's manifest record (JSON) and delete entries (Arrow IPC).
The driver puts them back in group order; the core writes the delete manifests. Entries and grouping are those of
the in-process engine by construction.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import pyarrow as pa

from airflow_deltaberg.core.iceberg.conversion_state import IPC_OPTIONS, ManifestRecord
from airflow_deltaberg.core.iceberg.manifests.file_manifests import GroupManifests, Groups, SnapshotPlan, write_group
from airflow_deltaberg.core.iceberg.manifests.manifest_spill import SpilledGroups
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)

#: Groups (data manifests) per Spark task. A Python worker holds one group's files, stats and entries at a time.
GROUPS_PER_TASK = 1

#: What a task returns per group: its index, its manifest record (JSON), its delete entries (Arrow IPC) or None.
GroupResult = tuple[int, str, bytes | None]


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=IPC_OPTIONS) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


def write_task_groups(plan: SnapshotPlan, groups: SpilledGroups, indices: Iterable[int]) -> Iterator[GroupResult]:
    """The executor side: ``write_group`` on each group of ``indices``, read from its spill file."""
    storage = plan.open_storage()
    for index in indices:
        written = write_group(storage, plan, groups.group(index))
        deletes = None if written.deletes is None else _ipc_bytes(written.deletes)
        yield index, json.dumps(written.data.to_json()), deletes


def group_manifests(result: GroupResult) -> GroupManifests:
    _, record, deletes = result
    return GroupManifests(ManifestRecord.from_json(json.loads(record)),
                          None if deletes is None else pa.ipc.open_stream(deletes).read_all())


class SparkManifestEngine:
    """A ``ManifestEngine`` for core ``convert()`` (its ``manifest_engine``): Spark executors write the groups.

    :param spark: a SparkSession, or a function that starts one (called on the first full conversion only).
    :param groups_per_task: how many groups (data manifests) each Spark task writes.
    """

    #: The core spills a full conversion's groups under the table's ``_iceberg/metadata``, where tasks read them.
    spills_in_table = True

    def __init__(self, spark: Any | Callable[[], Any], *, groups_per_task: int = GROUPS_PER_TASK) -> None:
        self._spark = spark
        self._started = False
        self.groups_per_task = groups_per_task
        self.calls = 0

    @property
    def spark(self) -> Any:
        if callable(self._spark):
            self._spark = self._spark()
            self._started = True
        return self._spark

    def stop(self) -> None:
        """Stop the session if this engine started it."""
        if self._started:
            self._spark.stop()
            self._started = False

    def __call__(self, storage: Storage, plan: SnapshotPlan, groups: Groups) -> list[GroupManifests]:
        self.calls += 1
        count = len(groups)
        if count == 0:
            return []
        tasks = max(1, math.ceil(count / self.groups_per_task))
        log.info("%s: writing the manifests of %d files at version %d (%d groups) in %d Spark task(s)", plan.table,
                 groups.num_files, plan.delta_version, count, tasks)
        if not (isinstance(groups, SpilledGroups) and groups.area.location == plan.table):
            # The executors read their groups themselves: only files under the table reach them.
            raise TypeError(f"{plan.table}: the Spark engine takes groups spilled under the table "
                            f"(spills_in_table), not {type(groups).__name__}")
        results = (self.spark.sparkContext.parallelize(range(count), tasks)
                   .mapPartitions(partial(write_task_groups, plan, groups)).collect())
        results.sort(key=lambda result: result[0])
        if [r[0] for r in results] != list(range(count)):
            raise RuntimeError(f"{plan.table}: the Spark tasks returned groups {[r[0] for r in results]} of {count}")
        return [group_manifests(r) for r in results]
