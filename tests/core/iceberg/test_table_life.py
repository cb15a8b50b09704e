"""A table's life (issue 26): a seeded life of a Delta table written by deltalake (tests/support/life.py: >= 500
commits of appends, deletes, updates, compaction, checkpoints, VACUUM, log cleanup, restore, schema overwrite,
repartition, and the table deleted and created again; no recreation in the last 40% of the commits, appends only
in the last 10%), converted with ``convert()`` and its defaults after every operation, in this process, but for
``deltaberg.cleanup.attempt-age-ms``: a life of minutes stands for years, and the hour an earlier Iceberg history's
files wait for readers (docs/HISTORY.md) shrinks to seconds with it.

The life runs once (module fixture) and records each run's outcome; each test asserts one group of invariants over
it, so that a test passes as soon as the fix it needs has landed:

- every run converts, and the current Iceberg snapshot (pyiceberg) is Delta's current version with Delta's rows
  (deltalake's kernel reader);
- at the end, Iceberg Java (Spark) reads every retained snapshot equal to Delta at the snapshot's ``delta-version``
  (the rows deltalake returned for that version while the life ran: VACUUM and log cleanup take older versions
  away from Delta's readers);
- the metadata stays bounded (issue 26 section 2, as benchmarks/bench_life.py measures it): manifests of the
  current snapshot <= 2x what a full conversion of the same version writes + 10, bytes under ``_iceberg`` <= 3x (the
  full conversion's + the retained snapshots' own files).

Failure messages name the step (its number, operation, table incarnation and Delta version). ``DELTABERG_LIFE_COMMITS``
(default 500) and ``DELTABERG_LIFE_SEED`` (default 26) make the life longer or another one locally.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from support.life import Step, TableLife
from support.oracle import kernel_arrow, normal_type, normalized_rows

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_VERSION
from airflow_deltaberg.core.iceberg.table_properties import ATTEMPT_AGE

LIFE_COMMITS = int(os.environ.get("DELTABERG_LIFE_COMMITS", "500"))
LIFE_SEED = int(os.environ.get("DELTABERG_LIFE_SEED", "26"))
#: The threshold after which a run deletes the files of earlier histories (and of killed attempts): a few runs.
TABLE_PROPERTIES = {ATTEMPT_AGE: "5000"}
#: Operation kinds (an operation's first word) the life must contain.
OPERATIONS = {"create", "append", "delete", "update", "compact", "checkpoint", "vacuum", "log", "restore",
              "overwrite", "repartition"}
SHOWN = 5  # failures spelled out in a message; the rest are counted


@dataclass
class Run:
    """One conversion after one step: its mode, and what broke (None when nothing did)."""

    step: Step
    seconds: float
    mode: str | None = None
    failure: str | None = None
    #: The delta-versions of the snapshots the run's metadata file names (None when it was not read).
    snapshot_versions: set[int] | None = None


@dataclass
class Life:
    path: Path
    runs: list[Run] = field(default_factory=list)
    metadata_location: str | None = None  # the last run's, when it converted
    #: Delta's rows at each version of the last incarnation, read when the version was the latest.
    delta_rows: dict[int, pa.Table] = field(default_factory=dict)
    seconds: float = 0.0


def same_rows(ours: pa.Table, theirs: pa.Table, columns: list[str]) -> bool:
    """True only when both hold the same rows over ``columns``: both cast to normal_type (as normalized_rows casts),
    of the same types, sorted by every column and equal (a few ms in Arrow, against ~60 ms of Python tuples for the
    tables of a late step). False says nothing: NaN, -0.0, unsortable types or types that differ go through
    normalized_rows."""
    try:
        tables = []
        for table in (ours, theirs):
            table = table.select(columns)
            schema = pa.schema([pa.field(f.name, normal_type(f.type)) for f in table.schema])
            table = table.cast(schema, safe=False).combine_chunks()
            tables.append(table.sort_by([(c, "ascending") for c in columns]))
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return tables[0].schema == tables[1].schema and tables[0].equals(tables[1])


def difference(iceberg: pa.Table | list[dict[str, Any]], delta: pa.Table, reader: str) -> str | None:
    """What differs between a reader's rows and Delta's (None when nothing does)."""
    columns = delta.column_names
    if isinstance(iceberg, list):
        names = sorted(iceberg[0]) if iceberg else None
    else:
        names = sorted(iceberg.column_names)
    if names is not None and names != sorted(columns):
        return f"{reader} has the columns {names}, Delta {sorted(columns)}"
    if isinstance(iceberg, list):
        try:
            iceberg = pa.Table.from_pylist(iceberg, schema=delta.schema) if iceberg else delta.schema.empty_table()
        except (pa.ArrowException, TypeError, ValueError) as error:
            return f"{reader}'s values do not fit Delta's schema {delta.schema}: {error}"
    if same_rows(iceberg, delta, columns):
        return None
    ours, theirs = Counter(normalized_rows(iceberg, columns)), Counter(normalized_rows(delta, columns))
    if ours == theirs:
        return None
    extra, missing = list((ours - theirs).elements()), list((theirs - ours).elements())
    return (f"{reader} has {iceberg.num_rows} rows, Delta {delta.num_rows}: {len(extra)} rows only in {reader} "
            f"(e.g. {extra[:2]}), {len(missing)} only in Delta (e.g. {missing[:2]}), columns {columns}")


def check_run(life: Life, step: Step) -> Run:
    """Convert after ``step`` and compare the current snapshot with Delta."""
    started = time.monotonic()
    try:
        result = convert(str(life.path), table_properties=TABLE_PROPERTIES)
    except Exception as error:  # noqa: BLE001 - a failed run is an outcome the test reports
        return Run(step, time.monotonic() - started, failure=f"convert raised {type(error).__name__}: {error}")
    run = Run(step, time.monotonic() - started, mode=result.mode)
    life.metadata_location = result.metadata_location
    if result.delta_version != step.version:
        run.failure = f"convert ({result.mode}) says Delta version {result.delta_version}"
        return run
    try:
        table = StaticTable.from_metadata(result.metadata_location)
        run.snapshot_versions = {int(s.summary[DELTA_VERSION]) for s in table.metadata.snapshots
                                 if s.summary and DELTA_VERSION in s.summary}
        snapshot = table.current_snapshot()
        version = snapshot.summary[DELTA_VERSION] if snapshot and snapshot.summary else None
        if version != str(step.version):
            run.failure = f"the current Iceberg snapshot has delta-version {version}"
            return run
        # The batch reader casts every file to the table schema: deltalake's deletes and updates write string_view
        # columns, its appends string, and pyiceberg's to_arrow() cannot concatenate the two.
        rows = table.scan().to_arrow_batch_reader().read_all()
    except Exception as error:  # noqa: BLE001 - pyiceberg failing to read is an outcome the test reports
        run.failure = f"pyiceberg fails to read the current snapshot: {type(error).__name__}: {error}"
        return run
    found = difference(rows, life.delta_rows[step.version], "Iceberg (pyiceberg)")
    if found:
        run.failure = f"after a {result.mode} run, {found}"
    return run


def live(path: Path) -> Life:
    """The life: a step, Delta's rows of the versions it wrote, a conversion, until LIFE_COMMITS commits."""
    life = Life(path)
    recorded: dict[int, pa.Table] = {}  # the rows of the versions of a step, before the step ends

    def record(version: int) -> None:
        recorded[version] = kernel_arrow(table.table())

    table = TableLife(path, LIFE_SEED, recreate_until=LIFE_COMMITS * 3 // 5, appends_from=LIFE_COMMITS * 9 // 10,
                      on_commit=record)
    started = time.monotonic()
    incarnation = 0
    while table.commits < LIFE_COMMITS:
        step = table.next_step()
        if step.incarnation != incarnation:
            life.delta_rows.clear()
            incarnation = step.incarnation
        life.delta_rows.update(recorded)
        recorded.clear()
        if step.commits or step.version not in life.delta_rows:
            life.delta_rows[step.version] = kernel_arrow(table.table())
        # The step's other versions no one was told of (a recreated table's appends, up to a few hundred) are read
        # after the run, and only those a snapshot names: the Java test needs Delta's rows of retained snapshots
        # alone, and no later run writes a snapshot of an earlier version than its first (all of them when the
        # run failed before its metadata was read).
        unread = [v for v in range(step.version - step.commits + 1, step.version) if v not in life.delta_rows]
        run = check_run(life, step)
        life.runs.append(run)
        for version in unread:
            if run.snapshot_versions is None or version in run.snapshot_versions:
                life.delta_rows[version] = kernel_arrow(path, version)
    life.seconds = time.monotonic() - started
    return life


@pytest.fixture(scope="module")
def life(tmp_path_factory: pytest.TempPathFactory) -> Life:
    return live(tmp_path_factory.mktemp("life") / "table")


@pytest.fixture(scope="module")
def full_copy(life: Life, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The life's last Delta version converted in full on a copy (its Delta log and data, no ``_iceberg``)."""
    copy = tmp_path_factory.mktemp("full") / "table"
    shutil.copytree(life.path, copy, ignore=shutil.ignore_patterns("_iceberg"))
    result = convert(str(copy))
    assert result.mode == "full"
    return copy, result.metadata_location


def failures(runs: list[Run]) -> str:
    failed = [r for r in runs if r.failure]
    shown = "\n".join(f"  {r.step}: {r.failure}" for r in failed[:SHOWN])
    more = f"\n  ... and {len(failed) - SHOWN} more" if len(failed) > SHOWN else ""
    return f"{len(failed)} of {len(runs)} runs broke, the first at {failed[0].step}:\n{shown}{more}"


def java_cause(error: Exception) -> str:
    """The innermost Java exception line of a py4j error (its first line says only which call failed)."""
    lines = [line.strip().removeprefix("Caused by: ").removeprefix(": ") for line in str(error).splitlines()]
    causes = [line for line in lines if re.match(r"[\w.$]+(Exception|Error)\b", line)]
    return (causes[-1] if causes else lines[0])[:300]


def last_table(life: Life) -> StaticTable:
    assert life.metadata_location is not None, "no run converted"
    last = life.runs[-1]
    assert last.failure is None or not last.failure.startswith("convert raised"), f"the last run failed: {last}"
    return StaticTable.from_metadata(life.metadata_location)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def local(location: str) -> Path:
    return Path(location.removeprefix("file:"))


def unreachable(table: StaticTable) -> list[Path]:
    """Files under the metadata folder that neither the current metadata file nor one of its metadata log names,
    through their snapshots, manifest lists and manifests, nor named after one of those (state, entries)."""
    reached: set[str] = {local(table.metadata_location).name, "version-hint.text"}
    for location in [table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)]:
        if not local(location).exists():
            continue
        older = StaticTable.from_metadata(location)
        reached.add(local(location).name)
        for snapshot in older.metadata.snapshots:
            name = local(snapshot.manifest_list).name
            if name not in reached and local(snapshot.manifest_list).exists():  # each list read once
                reached.update(local(m.manifest_path).name for m in snapshot.manifests(older.io))
            reached.add(name)
    folder = local(table.metadata_location).parent
    stems = {name.removesuffix(".avro") for name in reached}  # m0.avro's entries are m0.entries.arrow
    return sorted(p for p in folder.iterdir() if not any(p.name.startswith(stem) for stem in stems))


def test_the_life_has_every_operation(life: Life) -> None:
    """The seeded life is the one the module docstring describes (a check of the generator, not the converter)."""
    kinds = Counter(r.step.operation.split(" ")[0] for r in life.runs)
    assert sum(r.step.commits for r in life.runs) >= LIFE_COMMITS
    assert OPERATIONS <= set(kinds), f"missing: {OPERATIONS - set(kinds)}"
    recreated = [r.step for r in life.runs if r.step.operation.startswith("delete the table")]
    assert recreated, "the table is never deleted and created again"
    converting = [r.seconds for r in life.runs]
    print(f"\nlife of {len(life.runs)} steps, {sum(r.step.commits for r in life.runs)} commits, "
          f"{len(recreated)} recreations, {life.seconds:.0f} s ({sum(converting):.0f} s converting: "
          f"{sum(converting[:50]) / 50:.2f} s a run over the first 50, {sum(converting[-50:]) / 50:.2f} s over "
          f"the last 50); operations {dict(kinds)}")


def test_every_run_converts_and_reads_as_delta(life: Life) -> None:
    """After every step, convert() succeeds and the current snapshot is Delta's version with Delta's rows."""
    assert not any(r.failure for r in life.runs), failures(life.runs)


@pytest.mark.spark
def test_iceberg_java_reads_every_retained_snapshot_as_delta(life: Life, iceberg_spark: Any) -> None:
    """Iceberg Java reads each retained snapshot (time travel by snapshot id) with Delta's rows at its
    delta-version."""
    table = last_table(life)
    broken: list[str] = []
    snapshots = table.metadata.snapshots
    for snapshot in snapshots:
        version = int((snapshot.summary or {})[DELTA_VERSION])
        what = f"snapshot {snapshot.snapshot_id} (delta-version {version})"
        if version not in life.delta_rows:
            broken.append(f"{what}: the last incarnation of the Delta table never had that version")
            continue
        try:
            rows = (iceberg_spark.read.format("iceberg").option("versionAsOf", snapshot.snapshot_id)
                    .load(life.metadata_location).collect())
        except Exception as error:  # noqa: BLE001 - reported with the snapshot
            broken.append(f"{what}: Iceberg Java fails: {java_cause(error)}")
            continue
        found = difference([row.asDict() for row in rows], life.delta_rows[version], "Iceberg Java")
        if found:
            broken.append(f"{what}: {found}")
    shown = "\n".join(f"  {b}" for b in broken[:SHOWN])
    assert not broken, f"{len(broken)} of {len(snapshots)} retained snapshots read wrong:\n{shown}"


def test_manifests_of_the_current_snapshot_stay_bounded(life: Life, full_copy: tuple[Path, str]) -> None:
    """Manifests in the current snapshot <= 2x a full conversion's + 10 (issue 26 section 2)."""
    table = last_table(life)
    full = StaticTable.from_metadata(full_copy[1])
    ours = len(table.current_snapshot().manifests(table.io))
    theirs = len(full.current_snapshot().manifests(full.io))
    print(f"\nmanifests of the current snapshot: {ours}; of a full conversion: {theirs}")
    assert ours <= 2 * theirs + 10, (f"after {len(life.runs)} steps, the current snapshot has {ours} manifests; a "
                                     f"full conversion of Delta version {life.runs[-1].step.version} has {theirs}")


def snapshot_files(table: StaticTable, snapshot: Any) -> set[Path]:
    """The metadata files a snapshot uses: manifest list, conversion state, manifests and their entry copies."""
    files = {local(snapshot.manifest_list), local(snapshot.manifest_list + ".state.arrow")}
    for manifest in snapshot.manifests(table.io):
        files |= {local(manifest.manifest_path), local(manifest.manifest_path.removesuffix(".avro") + ".entries.arrow")}
    return files


def test_iceberg_metadata_bytes_stay_bounded(life: Life, full_copy: tuple[Path, str]) -> None:
    """Bytes under ``_iceberg`` <= 3x (a full conversion's + the retained snapshots' own files), as
    benchmarks/bench_life.py measures issue 26 section 2: a retained snapshot's own files are those it uses and the
    current one does not (manifest list, conversion state, the manifests and entry copies only retained ones list)."""
    table = last_table(life)
    current = table.current_snapshot()
    others = set().union(*(snapshot_files(table, s) for s in table.metadata.snapshots
                           if s.snapshot_id != current.snapshot_id))
    own = sum(p.stat().st_size for p in others - snapshot_files(table, current) if p.exists())
    ours, theirs = folder_bytes(life.path / "_iceberg"), folder_bytes(full_copy[0] / "_iceberg")
    print(f"\n_iceberg bytes: {ours}; of a full conversion: {theirs}; the retained snapshots' own: {own}")
    if ours <= 3 * (theirs + own):
        return
    by_kind: Counter[str] = Counter()
    for path in (life.path / "_iceberg" / "metadata").iterdir():
        by_kind[path.name.split(".", 1)[-1]] += path.stat().st_size
    stray = unreachable(table)
    kinds = sorted({p.name.split(".", 1)[-1] for p in stray})
    stray_bytes = sum(p.stat().st_size for p in stray)
    pytest.fail(
        f"after {len(life.runs)} steps, _iceberg holds {ours} bytes, more than 3x the {theirs} a full conversion of "
        f"Delta version {life.runs[-1].step.version} writes plus the {own} of the {len(table.metadata.snapshots)} "
        f"retained snapshots' own files; bytes by kind {dict(by_kind.most_common())}; {len(stray)} files "
        f"({stray_bytes} bytes) are reached from no metadata file the table keeps (kinds: {kinds}; e.g. "
        f"{[p.name for p in stray[:3]]})")
