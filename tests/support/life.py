"""A seeded life of a Delta table, written by deltalake: the operations a table meets over years, one at a time.

``TableLife(path, seed).next_step()`` applies one operation drawn by the seeded generator and says what it did
(``Step``). The operations: create, append (one small parquet), delete and update of a few rows, compaction,
checkpoint, VACUUM (retention forced to zero), log cleanup (log retention set to zero for it), restore to a
version whose files are still there, overwrite with another schema (a column added, dropped, or ``v`` turned from
double to string), repartition (overwrite with another ``partition_by``), and the table deleted (everything but
``_iceberg``) and created again, a new ``metaData.id``, written up to the old version before the next step.
``recreate_until`` ends recreations after that many commits and ``appends_from`` makes the rest of the life appends
only, so that the end of a life has a long history and a quiet stretch. Tables stay small: tens of rows, six columns
at most; an append writes one parquet file.
"""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import deltalake
import pyarrow as pa
from deltalake import write_deltalake

#: The log retention a log cleanup runs with (it removes the commits before the last checkpoint at once), and the
#: one the table keeps otherwise (Delta's default: a reader of the Iceberg table may time travel over it).
LOG_RETENTION_ZERO = {"delta.logRetentionDuration": "interval 0 seconds"}
LOG_RETENTION_DEFAULT = {"delta.logRetentionDuration": "interval 30 days"}
#: The schemas an overwrite picks from: column -> type. ``v`` double -> string is an incompatible type change.
SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    "base": {"id": pa.int64(), "p": pa.string(), "k": pa.int32(), "n": pa.int64(), "v": pa.float64()},
    "wide": {"id": pa.int64(), "p": pa.string(), "k": pa.int32(), "n": pa.int64(), "v": pa.float64(),
             "note": pa.string()},
    "v_string": {"id": pa.int64(), "p": pa.string(), "k": pa.int32(), "n": pa.int64(), "v": pa.string()},
    "narrow": {"id": pa.int64(), "p": pa.string(), "k": pa.int32(), "n": pa.int64()},
}
PARTITIONINGS = (("p",), ("k",))
#: Operation -> weight of the draw (create happens on the first step and after a delete of the table).
WEIGHTS = {"append": 50, "delete": 8, "update": 8, "compact": 5, "checkpoint": 5, "vacuum": 4, "cleanup": 3,
           "restore": 5, "schema overwrite": 4, "repartition": 3, "recreate": 2}
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


@dataclass(frozen=True)
class Step:
    """One operation of the life: its number (1-based), what it was, the table's incarnation (0 the first table
    at the path, +1 each time it is deleted and created again), and the Delta version after it."""

    number: int
    operation: str
    incarnation: int
    version: int
    commits: int  # Delta commits the operation wrote (0 for a checkpoint, a log cleanup, a compaction with nothing)

    def __str__(self) -> str:
        return (f"step {self.number} ({self.operation}; table incarnation {self.incarnation}, "
                f"Delta version {self.version})")


class TableLife:
    """The seeded life of the Delta table at ``path``."""

    def __init__(self, path: Path, seed: int, *, recreate_until: int | None = None, appends_from: int | None = None,
                 on_commit: Callable[[int], None] | None = None):
        self.path = path
        # No recreation from this many commits on: the history that the end of a life checks is a long one.
        self.recreate_until = recreate_until
        # Only appends from this many commits on: a quiet stretch, where nothing rewrites the manifests.
        self.appends_from = appends_from
        # Told each version of a step that writes several and may take one away from readers before the step ends
        # (VACUUM's automatic checkpoint, log cleanup) while the latest version has its rows. A recreated table's
        # appends are not told: every version of theirs stays loadable until a later step's log cleanup.
        self.on_commit = on_commit or (lambda version: None)
        self.rng = random.Random(seed)
        self.steps = 0
        self.commits = 0
        self.incarnation = -1
        self.next_id = 0
        self.vacuumed_at = 0  # restore targets start here: VACUUM removed the files of earlier versions
        self._table: deltalake.DeltaTable | None = None

    # -- the table as it is ------------------------------------------------------------------------------------

    def table(self) -> deltalake.DeltaTable:
        """The table at its latest version: one DeltaTable brought up to date with the commits since its last use
        (opening one reads the log and the checkpoint again: ~10 ms of CPU, four or five times a step; bringing it
        up to date <1 ms)."""
        if self._table is None:
            self._table = deltalake.DeltaTable(str(self.path))
        else:
            self._table.update_incremental()
        return self._table

    def schema_name(self) -> str:
        fields = {f.name: f.type for f in pa.schema(self.table().schema().to_arrow())}
        for name, schema in SCHEMAS.items():
            if set(schema) == set(fields) and _same_types(schema, fields):
                return name
        raise AssertionError(f"{self.path}: a schema the life did not write: {fields}")

    def partitioning(self) -> tuple[str, ...]:
        return tuple(self.table().metadata().partition_columns)

    def earliest_version(self) -> int:
        """The first version deltalake can still load (log cleanup removes the commits before a checkpoint)."""
        names = [p.name for p in (self.path / "_delta_log").iterdir()]
        commits = sorted(int(m.group(1)) for n in names if (m := COMMIT_FILE.match(n)))
        if commits and commits[0] == 0:
            return 0
        checkpoints = [int(m.group(1)) for n in names if (m := CHECKPOINT_FILE.match(n))]
        return min(c for c in checkpoints if c >= commits[0] - 1)

    # -- rows --------------------------------------------------------------------------------------------------

    def rows(self, schema: str, count: int, *, partition: tuple[str, object] | None = None) -> pa.Table:
        """``count`` new rows of ``schema`` (new ids); every row in one partition when ``partition`` is given."""
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        columns: dict[str, list[object]] = {
            "id": ids,
            "p": [f"p{self.rng.randrange(3)}" for _ in ids],
            "k": [self.rng.randrange(3) for _ in ids],
            "n": [self.rng.randrange(1000) for _ in ids],
            "v": [round(self.rng.uniform(-100, 100), 3) for _ in ids],
            "note": [self.rng.choice(["a", "b", None]) for _ in ids],
        }
        if partition is not None:
            columns[partition[0]] = [partition[1]] * count
        if schema == "v_string":
            columns["v"] = [str(v) for v in columns["v"]]
        types = SCHEMAS[schema]
        return pa.table({name: pa.array(columns[name], types[name]) for name in types})

    def some_ids(self, width: int) -> str:
        """A predicate on a few ids that may be in the table."""
        start = self.rng.randrange(max(1, self.next_id))
        return f"id >= {start} AND id < {start + width}"

    # -- operations --------------------------------------------------------------------------------------------

    def next_step(self) -> Step:
        """Apply the next operation; returns what it did."""
        before = self.table().version() if self.incarnation >= 0 else -1
        incarnation = self.incarnation
        if self.incarnation < 0:
            operation = self.create()
        else:
            late = self.recreate_until is not None and self.commits >= self.recreate_until
            quiet = self.appends_from is not None and self.commits >= self.appends_from
            weights = {op: 0 if (late and op == "recreate") or (quiet and op != "append") else w
                       for op, w in WEIGHTS.items()}
            operation = self.rng.choices(list(weights), weights=list(weights.values()))[0]
            operation = getattr(self, operation.replace(" ", "_"))()
        self.steps += 1
        version = self.table().version()
        commits = version + 1 if self.incarnation != incarnation else version - before
        self.commits += commits
        return Step(self.steps, operation, self.incarnation, version, commits)

    def create(self) -> str:
        self._table = None  # a new table at the path: its log starts again at version 0
        self.incarnation += 1
        self.vacuumed_at = 0
        schema = self.rng.choice(list(SCHEMAS))
        partitioning = self.rng.choice(PARTITIONINGS)
        write_deltalake(str(self.path), self.rows(schema, 12), partition_by=list(partitioning))
        return f"create ({schema}, partitioned by {','.join(partitioning)})"

    def append(self) -> str:
        partitioning = self.partitioning()
        column = partitioning[0]
        value: object = f"p{self.rng.randrange(3)}" if column == "p" else self.rng.randrange(3)
        rows = self.rows(self.schema_name(), self.rng.randint(2, 6), partition=(column, value))
        # Through the DeltaTable kept up to date: given the path, deltalake would open the table again.
        write_deltalake(self.table(), rows, mode="append", partition_by=list(partitioning))
        return f"append to {column}={value}"

    def delete(self) -> str:
        predicate = self.some_ids(4)
        self.table().delete(predicate)
        return f"delete where {predicate}"

    def update(self) -> str:
        predicate = self.some_ids(5)
        self.table().update(updates={"n": "n + 1"}, predicate=predicate)
        return f"update n = n + 1 where {predicate}"

    def compact(self) -> str:
        metrics = self.table().optimize.compact()
        return f"compact ({metrics['numFilesRemoved']} files into {metrics['numFilesAdded']})"

    def checkpoint(self) -> str:
        self.table().create_checkpoint()
        return "checkpoint"

    def vacuum(self) -> str:
        table = self.table()
        self.vacuumed_at = table.version()
        removed = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        # VACUUM's commits (start, end) change no rows; the automatic checkpoint may clean the first away.
        for version in range(self.vacuumed_at + 1, self.table().version() + 1):
            self.on_commit(version)
        return f"vacuum ({len(removed)} files removed)"

    def cleanup(self) -> str:
        """Log cleanup with the retention set to zero for it, and back to the default after (two commits that change
        no rows)."""
        self.table().alter.set_table_properties(LOG_RETENTION_ZERO)
        self.table().cleanup_metadata()
        self.table().alter.set_table_properties(LOG_RETENTION_DEFAULT)
        version = self.table().version()
        for changed in (version - 1, version):
            self.on_commit(changed)
        return f"log cleanup (versions before {self.earliest_version()} gone)"

    def restore(self) -> str:
        table = self.table()
        first = max(self.vacuumed_at, self.earliest_version())
        if first >= table.version():
            return self.append()
        target = self.rng.randrange(first, table.version())
        table.restore(target)
        return f"restore to version {target}"

    def schema_overwrite(self) -> str:
        schema = self.rng.choice([s for s in SCHEMAS if s != self.schema_name()])
        partitioning = self.partitioning()
        write_deltalake(str(self.path), self.rows(schema, self.rng.randint(8, 20)), mode="overwrite",
                        schema_mode="overwrite", partition_by=list(partitioning))
        return f"overwrite with schema {schema}"

    def repartition(self) -> str:
        partitioning = next(p for p in PARTITIONINGS if p != self.partitioning())
        table = self.table().to_pyarrow_table()
        write_deltalake(str(self.path), table, mode="overwrite", schema_mode="overwrite",
                        partition_by=list(partitioning))
        return f"repartition by {','.join(partitioning)}"

    def recreate(self) -> str:
        """Delete the table and write a new one up to the old one's version or a little past it, as a scheduled
        conversion finds a table recreated between two runs (a conversion after its first commit alone would see
        an older version than it converted, which every converter takes for a new start)."""
        old = self.table().version()
        for entry in self.path.iterdir():
            if entry.name == "_iceberg":
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        created = self.create()
        target = old + self.rng.choice((0, 0, 1, 3))
        while self.table().version() < target:
            self.append()
        return f"delete the table and {created}, appends up to version {target}"


def _same_types(schema: dict[str, pa.DataType], fields: dict[str, pa.DataType]) -> bool:
    def normal(t: pa.DataType) -> pa.DataType:
        return pa.string() if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t) \
            else t
    return all(normal(schema[name]) == normal(fields[name]) for name in schema)
