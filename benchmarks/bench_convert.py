"""Delta -> Iceberg conversion benchmark: full and incremental ``convert``, and the per-object manifest path.

Every measurement runs in a fresh subprocess; the wall time covers the ``convert`` call only (imports
excluded), the peak RSS (``ru_maxrss``) is that process's. Figures are the median of ``--runs`` runs.

* full: ``convert(table, full=True)`` of a generated 1M-file log with stats for 20 columns and of a 10k-file
  one (generated once into benchmarks/data/, reused after). Their Parquet checkpoints are laid out as Delta on
  Spark writes them: each add's stats both as JSON (``add.stats``) and as a struct (``add.stats_parsed``);
  the 1M table is also converted with a checkpoint holding the JSON only, as deltalake writes them;
* incremental: one commit on top of the converted table, ``convert(table)``: 100 adds with stats
  ("append"), and 100 removes plus 100 adds ("remove+add", which rewrites the manifests holding the
  removed files). The commit is written before and taken away after every run, together with the Iceberg
  files the run wrote, so each run starts from the same converted table;
* naive: the entries of the 1M table (as its full conversion writes them) written with pyiceberg's per-object
  manifest writer (``pyiceberg.manifest.write_manifest`` with ``DataFile`` objects) on the first
  ``--naive-entries`` entries, extrapolated to the full count, against this project's column-at-a-time
  ``write_manifest`` on the same entries and on all of them.

* ratio to deltalake: the whole command ``deltaberg convert TABLE --full --format json`` against a whole process
  running deltalake's ``DeltaTable(TABLE).get_add_actions(flatten=True)`` (which parses every add's stats into
  columns), on a generated 300k-file log with 20 stat columns whose checkpoint holds the stats as JSON only (as
  deltalake writes checkpoints), alternating run by run (``--ratio-only`` runs this part alone).

The 300k-add-action fixture has neither stats nor data files: its record counts cannot be known, so it
is not convertible. The script runs ``convert`` on a linked copy once and prints the error it raises.

Tables are converted in linked copies (hard links to the generated log, in a work directory under
``--data-dir``): the conversion writes an _iceberg/ folder into the table, never into the generated log.
The script always exits 0: it measures, it does not test.

    python benchmarks/bench_convert.py [--runs 3] [--profile auto|all|none] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import fmt, linked_copy, loadavg, print_profile, print_table, timed

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_FIXTURE = Path("/work/shared/fixtures/delta/300k-add-files-100-col-partitioned")
DEFAULT_DATA = HERE / "data"
# Checkpoints with add.stats and add.stats_parsed, as Delta on Spark writes them by default.
BIG = "delta-1m-files-20-stat-cols-checkpoint-stats-parsed"
SMALL = "delta-10k-files-20-stat-cols-checkpoint-stats-parsed"
# The same 1M table with add.stats only (deltalake's checkpoints; bench_snapshot_load.py uses it too).
BIG_JSON = "delta-1m-files-20-stat-cols-checkpoint"
#: The child's environment for the cases measured without the compiled stats decoder (the `fast` extra).
DECODER_OFF = {"DELTABERG_FAST_STATS": "0"}
PARAMS = {"num_stat_columns": 20, "num_partitions": 100, "commits": 10, "checkpoint": True, "seed": 0}
# The table of the whole-process ratio to deltalake: 300k files, JSON stats only.
RATIO_JSON = "delta-300k-files-20-stat-cols-checkpoint"
SIZES = {BIG: 1_000_000, SMALL: 10_000, BIG_JSON: 1_000_000, RATIO_JSON: 300_000}
STATS_STRUCT = {BIG, SMALL}
COMMIT_FILES = 100
REMOVED_PARTITION = "p00042"  # the removed files all come from one partition, picked at random in it
FULL_SECONDS, FULL_RSS_MB = 10.0, 2 * 1024
INCREMENTAL_SECONDS, INCREMENTAL_RATIO = 1.0, 1.5
CHILD_MODES = ("full", "incremental", "naive-ours", "naive-pyiceberg", "fixture", "pick-removed")
RATIO_TARGET = 1.2
# The two whole processes of the ratio (cwd = the repository, so this checkout's package is used).
RATIO_OURS = "from airflow_deltaberg.cli import run; run()"  # what the deltaberg command runs
RATIO_PEER = "import sys; from deltalake import DeltaTable; DeltaTable(sys.argv[1]).get_add_actions(flatten=True)"


# -- child side -------------------------------------------------------------------------------------


def _convert_child(mode: str, path: str, profile_out: str | None) -> dict:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.table import StaticTable

    from airflow_deltaberg.core.iceberg.convert import convert

    def run() -> dict:
        result = convert(path, full=mode == "full")
        return {"result": result.to_dict()}

    figures = timed(run, profile_out)
    result = figures["result"]
    # What the new snapshot's manifest list holds, read back with pyiceberg.
    snapshot = StaticTable.from_metadata(result["metadata_location"]).current_snapshot()
    manifests = snapshot.manifests(PyArrowFileIO())
    written = [m for m in manifests if m.added_snapshot_id == snapshot.snapshot_id]
    figures["manifests"] = len(manifests)
    figures["manifests_written"] = len(written)
    figures["entries_written"] = sum((m.added_files_count or 0) + (m.existing_files_count or 0)
                                     + (m.deleted_files_count or 0) for m in written)
    return figures


def _converted_entries(path: str, workdir: str, limit: int | None) -> tuple[object, object, int, object]:
    """The manifest entries (every column, stats included) a full conversion of a linked copy of ``path`` writes,
    in manifest order (the first ``limit``), with the table's schema, spec and snapshot id. The conversion state
    keeps no stats (the copies hold row starts only), so they are taken as the conversion writes them."""
    import pyarrow as pa

    from airflow_deltaberg.core.iceberg import conversion_state
    from airflow_deltaberg.core.iceberg.convert import convert
    from airflow_deltaberg.core.iceberg.publish import latest_metadata
    from airflow_deltaberg.core.storage import open_storage

    captured: list[pa.Table] = []
    index = conversion_state.entries_index

    def capture(entries: pa.Table, row_starts: object) -> pa.Table:
        captured.append(entries)
        return index(entries, row_starts)

    conversion_state.entries_index = capture
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        copy = linked_copy(Path(path), Path(tmp) / "t")
        convert(str(copy), full=True)
        metadata = latest_metadata(open_storage(str(copy))).metadata
    conversion_state.entries_index = index
    entries = pa.concat_tables(captured)
    if limit is not None:
        entries = entries.slice(0, limit)
    return entries, metadata.schema(), metadata.current_snapshot_id, metadata.spec()


def _naive_ours_child(path: str, entries: int, workdir: str) -> dict:
    """Our write_manifest on the first ``entries`` entries, then on all of them in manifests of MANIFEST_ROWS."""
    from airflow_deltaberg.core.iceberg.manifests.file_manifests import MANIFEST_ROWS
    from airflow_deltaberg.core.iceberg.manifests.manifest import write_manifest

    everything, schema, snapshot_id, spec = _converted_entries(path, workdir, None)
    subset = everything.slice(0, entries)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        def write_subset() -> dict:
            write_manifest(os.path.join(tmp, "subset.avro"), subset, schema=schema, spec=spec,
                           snapshot_id=snapshot_id)
            return {"entries": subset.num_rows}

        def write_all() -> dict:
            for i, offset in enumerate(range(0, everything.num_rows, MANIFEST_ROWS)):
                write_manifest(os.path.join(tmp, f"all-{i}.avro"), everything.slice(offset, MANIFEST_ROWS),
                               schema=schema, spec=spec, snapshot_id=snapshot_id)
            return {"entries": everything.num_rows}

        small = timed(write_subset, None)
        size = os.path.getsize(os.path.join(tmp, "subset.avro"))
        full = timed(write_all, None)
    return {"subset": small, "all": full, "subset_bytes": size, "total_entries": everything.num_rows,
            "seconds": small["seconds"], "peak_mb": full["peak_mb"], "idle_mb": small["idle_mb"],
            "per_manifest": MANIFEST_ROWS,
            "cpu": small["cpu"]}


def _naive_pyiceberg_child(path: str, entries: int, workdir: str, profile_out: str | None) -> dict:
    """pyiceberg's per-object path on the first ``entries`` entries: Python rows -> DataFile objects ->
    ManifestWriter.add one entry at a time."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
    from pyiceberg.manifest import write_manifest as pyiceberg_write_manifest
    from pyiceberg.typedef import Record

    everything, schema, snapshot_id, spec = _converted_entries(path, workdir, None)
    total = everything.num_rows
    subset = everything.slice(0, entries)
    del everything
    names = [f.name for f in spec.partition_type(schema).fields]

    def as_dict(items: list | dict | None) -> dict | None:
        if items is None:
            return None
        if isinstance(items, dict):  # a map kept as one struct child per key, None where absent
            return {int(k): v for k, v in items.items() if v is not None}
        return {k: v for k, v in items} if items and isinstance(items[0], tuple) else {
            i["key"]: i["value"] for i in items}

    def build() -> dict:
        out = []
        for row in subset.to_pylist():
            data_file = DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=row["file_path"],
                file_format=FileFormat.PARQUET,
                partition=Record(*(row["partition"][n] for n in names)),
                record_count=row["record_count"],
                file_size_in_bytes=row["file_size_in_bytes"],
                null_value_counts=as_dict(row["null_value_counts"]),
                lower_bounds=as_dict(row["lower_bounds"]),
                upper_bounds=as_dict(row["upper_bounds"]),
            )
            out.append(ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=row["snapshot_id"],
                sequence_number=row["sequence_number"], file_sequence_number=row["file_sequence_number"],
                data_file=data_file))
        return {"objects": out}

    built = timed(build, None)
    objects = built.pop("objects")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        target = os.path.join(tmp, "pyiceberg.avro")

        def write() -> dict:
            with pyiceberg_write_manifest(2, spec, schema, PyArrowFileIO().new_output(target), snapshot_id,
                                          "deflate") as writer:
                for entry in objects:
                    writer.add(entry)
            return {"entries": len(objects)}

        written = timed(write, profile_out)
        size = os.path.getsize(target)
    return {"build": built, "write": written, "subset_bytes": size, "total_entries": total,
            "seconds": built["seconds"] + written["seconds"], "peak_mb": written["peak_mb"],
            "idle_mb": built["idle_mb"], "cpu": built["cpu"] + written["cpu"]}


def _fixture_child(path: str) -> dict:
    """convert() on a table without stats and data files: the error it raises, and why."""
    import pyarrow.compute as pc

    from airflow_deltaberg.core.delta import DeltaTable
    from airflow_deltaberg.core.iceberg.convert import convert

    def run() -> dict:
        try:
            result = convert(path, full=True)
        except Exception as exc:  # noqa: BLE001 - the point is to see what it raises
            return {"error_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                    "error": str(exc)[:400]}
        return {"result": result.to_dict()}

    figures = timed(run, None)
    files = DeltaTable(path).snapshot().files
    counts = files.column("stats_parsed").combine_chunks().field("numRecords")
    sample = files.column("path").slice(0, 1000).to_pylist()
    figures.update(
        live_files=files.num_rows,
        without_num_records=counts.null_count,
        without_stats=int(pc.sum(pc.is_null(files.column("stats"))).as_py() or 0),
        data_files_found_of_1000=sum(os.path.exists(os.path.join(path, p)) for p in sample),
        metadata_written=os.path.isdir(os.path.join(path, "_iceberg")),
    )
    return figures


def child(mode: str, path: str, entries: int, workdir: str, profile_out: str | None) -> None:
    sys.path.insert(0, str(REPO))
    if mode in ("full", "incremental"):
        figures = _convert_child(mode, path, profile_out)
    elif mode == "naive-ours":
        figures = _naive_ours_child(path, entries, workdir)
    elif mode == "naive-pyiceberg":
        figures = _naive_pyiceberg_child(path, entries, workdir, profile_out)
    elif mode == "pick-removed":
        figures = _pick_removed_child(path)
    else:
        figures = _fixture_child(path)
    print(json.dumps(figures))


# -- parent side ------------------------------------------------------------------------------------


@dataclass
class Figures:
    runs: list[dict] = field(default_factory=list)
    error: str | None = None

    def median(self, key: str) -> float | None:
        values = [r[key] for r in self.runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    def median_of(self, part: str, key: str) -> float | None:
        values = [r[part][key] for r in self.runs]
        return statistics.median(values) if values else None


@dataclass
class Case:
    name: str
    table: str
    kind: str  # "full", "append", "remove+add"
    figures: Figures = field(default_factory=Figures)
    env: dict[str, str] = field(default_factory=dict)  # set in the child's environment


def run_child(mode: str, path: Path, args: argparse.Namespace, profile_out: str | None = None,
              env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path),
           "--naive-entries", str(args.naive_entries), "--work-dir", str(args.work)]
    if profile_out:
        cmd += ["--profile-out", profile_out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{mode} exited {proc.returncode}: {' | '.join(tail)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_table(data_dir: Path, name: str, regenerate: bool) -> Path:
    sys.path.insert(0, str(HERE))
    from gen_delta_log import is_generated

    path = data_dir / name
    params = dict(PARAMS, num_files=SIZES[name], stats_struct=name in STATS_STRUCT)
    if not regenerate and is_generated(path, **params):
        print(f"reusing {path}")
        return path
    print(f"generating {path} ...", flush=True)
    cmd = [
        sys.executable, str(HERE / "gen_delta_log.py"), str(path), "--overwrite",
        "--num-files", str(params["num_files"]), "--stat-columns", str(params["num_stat_columns"]),
        "--partitions", str(params["num_partitions"]), "--commits", str(params["commits"]),
        "--seed", str(params["seed"]), "--checkpoint",
        *(["--stats-struct"] if params["stats_struct"] else []),
    ]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"generated in {time.perf_counter() - started:.1f} s")
    return path


class IncrementalSetup:
    """Adds one commit to a converted table; ``undo`` deletes it and the Iceberg files written since."""

    def __init__(self, table: Path, removed):  # noqa: ANN001 - a pyarrow table or None
        from gen_delta_log import append_commit

        self.metadata = table / "_iceberg" / "metadata"
        self.before = set(os.listdir(self.metadata))
        self.hint = (self.metadata / "version-hint.text").read_bytes()
        version = append_commit(table, COMMIT_FILES, removed)
        self.commit = table / "_delta_log" / f"{version:020d}.json"

    def undo(self) -> None:
        for name in set(os.listdir(self.metadata)) - self.before:
            os.unlink(self.metadata / name)
        (self.metadata / "version-hint.text").write_bytes(self.hint)
        self.commit.unlink()


def _pick_removed_child(path: str) -> dict:
    """COMMIT_FILES live files of one partition, picked at random (in the 1M table they sit in every manifest)."""
    import numpy as np
    import pyarrow.compute as pc

    sys.path.insert(0, str(HERE))
    from gen_delta_log import checkpoint_files

    files = checkpoint_files(path)
    files = files.filter(pc.equal(files.column("part"), REMOVED_PARTITION))
    rows = np.random.default_rng(3).choice(files.num_rows, size=COMMIT_FILES, replace=False)
    return {"rows": files.take(np.sort(rows)).to_pylist()}


def removed_files(table: Path, args: argparse.Namespace):  # noqa: ANN201 - pyarrow table
    # Picked in a child: reading the checkpoint here would raise this process's peak RSS, which every child
    # started after it inherits in ru_maxrss (Linux carries the high-water mark over fork and exec).
    import pyarrow as pa

    return pa.Table.from_pylist(run_child("pick-removed", table, args)["rows"])


def measure(case: Case, work: Path, args: argparse.Namespace, removed: dict, profile_out: str | None = None,
            runs: int | None = None) -> None:
    table = work / case.table
    for _ in range(args.runs if runs is None else runs):
        setup = None
        try:
            if case.kind == "full":
                shutil.rmtree(table / "_iceberg", ignore_errors=True)
            else:
                setup = IncrementalSetup(table, removed[case.table] if case.kind == "remove+add" else None)
            figures = run_child("full" if case.kind == "full" else "incremental", table, args, profile_out,
                                case.env)
            if profile_out is None:
                case.figures.runs.append(figures)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, OSError) as exc:
            case.figures.error = str(exc)[:300]
            break
        finally:
            if setup is not None:
                setup.undo()


def _revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "airflow_deltaberg"], capture_output=True,
                               text=True, cwd=REPO, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {head}" + (" with uncommitted changes in airflow_deltaberg/" if dirty else "")


def _run_reaped(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    """One whole process: wall seconds, CPU seconds and peak RSS (MiB) of that process alone (wait4's rusage, not
    the parent's RUSAGE_CHILDREN, whose peak is the largest of every child so far)."""
    import threading

    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, **(env or {})})
    chunks: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda name, pipe: chunks.__setitem__(name, pipe.read()), args=(n, p))
               for n, p in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    seconds = time.perf_counter() - started
    for reader in readers:
        reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    scale = 1 if sys.platform == "darwin" else 1024
    return {"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime,
            "peak_mb": usage.ru_maxrss * scale / (1 << 20), "exit": proc.returncode,
            "stdout": chunks.get("out", b"").decode(errors="replace"),
            "stderr": chunks.get("err", b"").decode(errors="replace")}


def ratio_to_deltalake(args: argparse.Namespace) -> dict:
    """``deltaberg convert --full`` against deltalake's get_add_actions(flatten=True), whole processes, on the
    300k-file JSON-only table, alternating run by run; the medians and their ratio."""
    source = ensure_table(args.data_dir, RATIO_JSON, args.regenerate)
    table = args.work / RATIO_JSON
    shutil.rmtree(table, ignore_errors=True)
    linked_copy(source, table)
    runs: dict[str, list[dict]] = {"ours": [], "peer": [], "ours-reader": []}
    ours = [sys.executable, "-c", RATIO_OURS, "convert", str(table), "--full", "--format", "json"]
    commands = {"ours": ours, "peer": [sys.executable, "-c", RATIO_PEER, str(table)], "ours-reader": ours}
    print(f"  300k files (JSON stats only): deltaberg convert vs deltalake, whole processes x{args.runs} ...",
          flush=True)
    for _ in range(args.runs):
        for side, cmd in commands.items():
            if side != "peer":
                shutil.rmtree(table / "_iceberg", ignore_errors=True)
            figures = _run_reaped(cmd, args.timeout, DECODER_OFF if side == "ours-reader" else None)
            if figures["exit"] != 0:
                return {"error": f"{side} exited {figures['exit']}: {figures['stderr'].strip()[-300:]}"}
            if side != "peer":
                figures["result"] = json.loads(figures["stdout"])
            del figures["stdout"], figures["stderr"]
            runs[side].append(figures)
    out: dict = {"runs": runs}
    for side in runs:
        for key in ("seconds", "cpu", "peak_mb"):
            out[f"{side}_{key}"] = statistics.median(r[key] for r in runs[side])
    out["ratio"] = out["ours_seconds"] / out["peer_seconds"]
    out["ratio_cpu"] = out["ours_cpu"] / out["peer_cpu"]
    return out


def print_ratio(ratio: dict, runs: int) -> None:
    print()
    if "error" in ratio:
        print(f"300k files (JSON stats only), ratio to deltalake: failed: {ratio['error']}")
        return
    print(f"300k files x 20 stat columns, checkpoint with JSON stats only (as deltalake writes it): whole processes, "
          f"median of {runs}, alternating run by run:")
    lines = [[f"ours: deltaberg convert TABLE --full --format json ({ratio['runs']['ours'][-1]['result'].get('mode')})",
              f"{ratio['ours_seconds']:.2f}", f"{ratio['ours_cpu']:.2f}", f"{ratio['ours_peak_mb']:.0f}",
              "/".join(f"{r['seconds']:.2f}" for r in ratio["runs"]["ours"])],
             ["peer: deltalake DeltaTable(TABLE).get_add_actions(flatten=True)", f"{ratio['peer_seconds']:.2f}",
              f"{ratio['peer_cpu']:.2f}", f"{ratio['peer_peak_mb']:.0f}",
              "/".join(f"{r['seconds']:.2f}" for r in ratio["runs"]["peer"])],
             ["ours, stats decoder off (DELTABERG_FAST_STATS=0: pyarrow's JSON reader)",
              f"{ratio['ours-reader_seconds']:.2f}", f"{ratio['ours-reader_cpu']:.2f}",
              f"{ratio['ours-reader_peak_mb']:.0f}",
              "/".join(f"{r['seconds']:.2f}" for r in ratio["runs"]["ours-reader"])]]
    print_table(["process", "wall s", "CPU s", "peak MB", "runs s"], lines)
    met = ratio["ratio"] <= RATIO_TARGET
    print(f"  [{'met' if met else 'NOT met':^7}] 300k files (JSON stats only): deltaberg convert <= {RATIO_TARGET:g}x "
          f"deltalake's load with stats ({ratio['ratio']:.2f}x wall, {ratio['ratio_cpu']:.2f}x CPU)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--naive-entries", type=int, default=50_000,
                        help="entries written with pyiceberg's per-object writer (extrapolated)")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE, help="the 300k-add-action table")
    parser.add_argument("--skip-fixture", action="store_true", help="do not try to convert the 300k fixture")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="where the tables are generated")
    parser.add_argument("--regenerate", action="store_true", help="rebuild the generated logs even if present")
    parser.add_argument("--keep-work", action="store_true", help="keep the converted copies after the run")
    parser.add_argument("--profile", choices=("auto", "all", "none"), default="auto",
                        help="cProfile the 1M cases: those missing a target (auto), all, or none")
    parser.add_argument("--top", type=int, default=15, help="hotspots to print per profile")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed for one child process")
    parser.add_argument("--json", type=Path, help="also write all raw figures to this file")
    parser.add_argument("--ratio-only", action="store_true",
                        help="only the 300k JSON-only table's whole-process ratio to deltalake")
    parser.add_argument("--child", choices=CHILD_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.path, args.naive_entries, args.work_dir, args.profile_out)
        return 0
    args.work = args.data_dir / "convert-work"
    try:
        return _bench(args)
    except Exception as exc:  # a measurement script: report, never fail the caller
        print(f"benchmark aborted: {type(exc).__name__}: {exc}")
        return 0
    finally:
        if not args.keep_work:
            shutil.rmtree(args.work, ignore_errors=True)


def _bench(args: argparse.Namespace) -> int:
    import pyarrow
    import pyiceberg

    print(f"python {platform.python_version()}, pyarrow {pyarrow.__version__}, pyiceberg {pyiceberg.__version__}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}, load average {loadavg()}; engine at {_revision()}")
    if args.ratio_only:
        args.work.mkdir(parents=True, exist_ok=True)
        ratio_300k = ratio_to_deltalake(args)
        print_ratio(ratio_300k, args.runs)
        if args.json:
            args.json.write_text(json.dumps({"ratio_300k": ratio_300k}, indent=1))
        print(f"\nload average at the end {loadavg()}")
        return 0
    sources = {name: ensure_table(args.data_dir, name, args.regenerate) for name in (SMALL, BIG, BIG_JSON)}
    shutil.rmtree(args.work, ignore_errors=True)
    for name, source in sources.items():
        linked_copy(source, args.work / name)
    removed = {name: removed_files(args.work / name, args) for name in (SMALL, BIG)}

    label = {SMALL: "10k files", BIG: "1M files"}
    cases = [Case(f"{label[t]}, {kind}", t, kind) for kind in ("full", "append", "remove+add") for t in (SMALL, BIG)]
    cases.insert(2, Case("1M files (JSON stats only), full", BIG_JSON, "full"))
    cases.insert(3, Case("1M files (JSON stats only), full, stats decoder off", BIG_JSON, "full", env=DECODER_OFF))
    # Full runs first: the last one leaves the converted table the incremental runs start from.
    for case in cases:
        print(f"  {case.name} x{args.runs} ...", flush=True)
        measure(case, args.work, args, removed)

    naive: dict[str, Figures] = {}
    for side in ("naive-ours", "naive-pyiceberg"):
        print(f"  {side} x{args.runs} ...", flush=True)
        naive[side] = Figures()
        for _ in range(args.runs):
            try:
                naive[side].runs.append(run_child(side, args.work / BIG, args))
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                naive[side].error = str(exc)[:300]
                break

    fixture: dict | None = None
    fixture_error = None
    if not args.skip_fixture and (args.fixture / "_delta_log").is_dir():
        print("  300k fixture: convert once ...", flush=True)
        try:
            fixture = run_child("fixture", linked_copy(args.fixture, args.work / "fixture-300k"), args)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
            fixture_error = str(exc)[:300]

    print()
    print(f"Median of {args.runs} run(s), each in a fresh process; 'convert s' is the convert call alone; "
          f"peak MB = ru_maxrss (MiB) of the process, interpreter and imports included; load average now "
          f"{loadavg()}")
    header = ["case", "convert s", "CPU s", "peak MB", "MB before", "runs s", "mode", "added", "removed",
              "manifests written"]
    lines = []
    for case in cases:
        fig = case.figures
        last = fig.runs[-1] if fig.runs else {}
        result = last.get("result", {})
        lines.append([
            case.name, fmt(fig.median("seconds"), ".2f"), fmt(fig.median("cpu"), ".2f"),
            fmt(fig.median("peak_mb"), ".0f"), fmt(fig.median("idle_mb"), ".0f"),
            "/".join(f"{r['seconds']:.2f}" for r in fig.runs) or "n/a",
            str(result.get("mode", "n/a")), str(result.get("files_added", "n/a")),
            str(result.get("files_removed", "n/a")),
            f"{last['manifests_written']} of {last['manifests']} ({last['entries_written']:,} entries)"
            if last else "n/a",
        ])
    print_table(header, lines)
    for case in cases:
        if case.figures.error:
            print(f"error: {case.name}: {case.figures.error}")

    print()
    ours, theirs = naive["naive-ours"], naive["naive-pyiceberg"]
    ratio = ratio_same = None
    if ours.runs and theirs.runs:
        n_sub = ours.runs[0]["subset"]["entries"]
        total = ours.runs[0]["total_entries"]
        o_sub, o_all = ours.median_of("subset", "seconds"), ours.median_of("all", "seconds")
        t_build, t_write = theirs.median_of("build", "seconds"), theirs.median_of("write", "seconds")
        scale = total / n_sub
        ratio_same = (t_build + t_write) / o_sub
        ratio = (t_build + t_write) * scale / o_all
        print(f"Naive path: the converted 1M table's manifest entries ({total:,}); pyiceberg on the first "
              f"{n_sub:,}, extrapolated x{scale:.0f} (median of {args.runs}, each side in a fresh process):")
        naive_lines = [
            ["ours: write_manifest (Arrow columns)", f"{n_sub:,}", f"{o_sub:.2f}", f"{o_sub * scale:.2f} (extrap.)",
             f"{ours.runs[0]['subset_bytes'] / n_sub:.0f}"],
            [f"ours: write_manifest, all entries, {ours.runs[0]['per_manifest']:,} per manifest", f"{total:,}",
             f"{o_all:.2f}", f"{o_all:.2f} (measured)", "-"],
            ["pyiceberg: rows -> DataFile/ManifestEntry objects", f"{n_sub:,}", f"{t_build:.2f}",
             f"{t_build * scale:.2f} (extrap.)", "-"],
            ["pyiceberg: write_manifest, writer.add per entry", f"{n_sub:,}", f"{t_write:.2f}",
             f"{t_write * scale:.2f} (extrap.)", f"{theirs.runs[0]['subset_bytes'] / n_sub:.0f}"],
            ["pyiceberg: objects + write", f"{n_sub:,}", f"{t_build + t_write:.2f}",
             f"{(t_build + t_write) * scale:.2f} (extrap.)", "-"],
        ]
        print_table(["writer", "entries", "s", f"s for {total:,}", "bytes/entry"], naive_lines)
        print(f"  ratio pyiceberg (objects + write) / ours: {ratio_same:.1f}x on the same {n_sub:,} entries; "
              f"{ratio:.1f}x for all {total:,} (pyiceberg extrapolated, ours measured); write alone "
              f"{t_write / o_sub:.1f}x")
        print(f"  peak MB: ours {ours.median('peak_mb'):.0f} (all entries in memory), pyiceberg "
              f"{theirs.median('peak_mb'):.0f} ({n_sub:,} objects)")
    for side, fig in naive.items():
        if fig.error:
            print(f"error: {side}: {fig.error}")

    print()
    if fixture is not None:
        print(f"300k fixture ({args.fixture}): NOT convertible. {fixture['live_files']:,} live files; "
              f"{fixture['without_stats']:,} without stats, {fixture['without_num_records']:,} without numRecords; "
              f"data files present: {fixture['data_files_found_of_1000']} of the first 1000. An Iceberg manifest "
              "needs each file's record_count; without numRecords it comes from the Parquet footer, and there "
              "is no file to read.")
        if "error_type" in fixture:
            print(f"  convert raised {fixture['error_type']} after {fixture['seconds']:.1f} s "
                  f"(_iceberg/ written: {fixture['metadata_written']}): {fixture['error']}")
        else:
            print(f"  convert unexpectedly succeeded: {fixture['result']}")
    elif fixture_error:
        print(f"300k fixture: the convert child failed: {fixture_error}")

    ratio_300k = ratio_to_deltalake(args)
    print_ratio(ratio_300k, args.runs)

    by_name = {c.name: c for c in cases}
    checks = []  # (text, value, ok, shown, case name, a target of the issue)
    for name in ("1M files, full", "1M files (JSON stats only), full"):
        full = by_name[name].figures
        f_s, f_mb = full.median("seconds"), full.median("peak_mb")
        target = name == "1M files, full"
        checks += [(f"{name}: convert <= {FULL_SECONDS:g} s", f_s, f_s is not None and f_s <= FULL_SECONDS,
                    f"{fmt(f_s, '.2f')} s", name, target),
                   (f"{name}: peak RSS <= {FULL_RSS_MB / 1024:g} GB", f_mb,
                    f_mb is not None and f_mb <= FULL_RSS_MB, f"{fmt(f_mb, '.0f')} MB", name, target)]
    for kind in ("append", "remove+add"):
        big = by_name[f"1M files, {kind}"].figures.median("seconds")
        small = by_name[f"10k files, {kind}"].figures.median("seconds")
        r = big / small if big is not None and small else None
        target = kind == "append"
        checks += [
            (f"{kind} commit of {COMMIT_FILES}: 1M <= {INCREMENTAL_RATIO:g}x 10k", r,
             r is not None and r <= INCREMENTAL_RATIO, f"{fmt(big, '.2f')} s / {fmt(small, '.2f')} s = "
             f"{fmt(r, '.2f')}x", f"1M files, {kind}", target),
            (f"{kind} commit of {COMMIT_FILES}: 1M <= {INCREMENTAL_SECONDS:g} s", big,
             big is not None and big <= INCREMENTAL_SECONDS, f"{fmt(big, '.2f')} s", f"1M files, {kind}", target),
        ]
    missed = set()
    for heading, targets in (("Targets (full conversion of the 1M table; a 100-file append):", True),
                             ("The same bounds on the JSON-only checkpoint and on a remove+add commit (measured, "
                              "not targets):", False)):
        print()
        print(heading)
        for text, value, ok, shown, name, target in checks:
            if target != targets:
                continue
            status = "unknown" if value is None else ("met" if ok else "NOT met")
            if value is not None and not ok:
                missed.add(name)
            print(f"  [{status:^7}] {text} ({shown})")

    profiled = {"auto": missed, "all": {c.name for c in cases if c.table != SMALL}, "none": set()}[args.profile]
    for profiled_case in cases:
        if profiled_case.name not in profiled:
            continue
        case = Case(profiled_case.name, profiled_case.table, profiled_case.kind)
        with tempfile.NamedTemporaryFile(suffix=".prof", delete=False, dir=args.work) as tmp:
            out = tmp.name
        print()
        measure(case, args.work, args, removed, profile_out=out, runs=1)
        if case.figures.error:
            print(f"profile of {case.name} failed: {case.figures.error}")
        else:
            print(f"Profile of {case.name} (one convert call, cProfile, main thread only):")
            print_profile(out, args.top)
        os.unlink(out)

    if args.json:
        raw = {"cases": {c.name: {"runs": c.figures.runs, "error": c.figures.error} for c in cases},
               "naive": {s: {"runs": f.runs, "error": f.error} for s, f in naive.items()},
               "fixture": fixture, "ratio": ratio, "ratio_same_entries": ratio_same, "ratio_300k": ratio_300k}
        args.json.write_text(json.dumps(raw, indent=1))
    print(f"\nload average at the end {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
