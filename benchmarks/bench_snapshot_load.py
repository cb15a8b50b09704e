"""Snapshot-load benchmark: this project's Delta log engine against delta-rs (the `deltalake` package).

Every measurement runs in a fresh subprocess; the sides alternate run by run, so a busy spell of the
machine hits all of them. Two times are reported for each:

* call s:    the load alone, timed inside the process (imports excluded);
* process s: the whole subprocess as the parent sees it (interpreter start, imports, the load, exit),
  which is what a command-line user waits for.

Loaders:

* ours-load:  ``DeltaTable(p).snapshot()`` (live files as Arrow, stats not parsed)
* ours-stats: ``DeltaTable(p).snapshot().files`` (live files with every column's stats parsed)
* peer-load:  ``deltalake.DeltaTable(p)`` then ``file_uris()`` (delta-rs parses the stats while loading)
* peer-stats: ``deltalake.DeltaTable(p)`` then ``get_add_actions(flatten=True)`` (stats as Arrow columns)

ours-load is compared with peer-load and ours-stats with peer-stats, as ratios ours/peer of both times.

Tables: the 300k-add-action fixture (JSON commits, no stats) and two generated logs of 1M files with stats
for 20 columns, read from their Parquet checkpoint: one whose checkpoint also carries the stats as a
struct (``add.stats_parsed``, as Delta writes it under delta.checkpoint.writeStatsAsStruct), one with
JSON stats only. They are generated once into benchmarks/data/ and reused. The figures are the median of
``--runs`` runs. The script always exits 0: it measures, it does not test.

    python benchmarks/bench_snapshot_load.py [--runs 3] [--tables 300k,1m-struct,1m-json] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import fmt, loadavg, print_profile, print_table, timed

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_FIXTURE = Path("/work/shared/fixtures/delta/300k-add-files-100-col-partitioned")
DEFAULT_DATA = HERE / "data"
GENERATED = {  # the 1M-file tables: parameters for gen_delta_log.generate
    "num_files": 1_000_000,
    "num_stat_columns": 20,
    "num_partitions": 100,
    "commits": 10,
    "checkpoint": True,
    "seed": 0,
}
TABLES = {  # key: (label, directory under --data-dir or None for the fixture, stats_struct, load target s)
    "300k": ("300k adds, JSON commits, no stats", None, False, 1.0),
    "1m-struct": ("1M adds, 20-col stats, checkpoint with stats_parsed",
                  "delta-1m-files-20-stat-cols-checkpoint-struct-stats", True, 4.0),
    "1m-json": ("1M adds, 20-col stats, checkpoint with JSON stats only", "delta-1m-files-20-stat-cols-checkpoint",
                False, 4.0),
}
MODES = ("ours-load", "peer-load", "ours-stats", "peer-stats")
PAIRS = (("load", "ours-load", "peer-load"), ("stats", "ours-stats", "peer-stats"))
PEAK_RSS_TARGET_MB = 1.5 * 1024  # 1.5 GiB


# -- child side -------------------------------------------------------------------------------------


def child(mode: str, path: str, profile_out: str | None) -> None:
    """Load ``path`` once with ``mode`` and print one JSON line of figures."""
    if mode == "noop":
        print(json.dumps({"seconds": 0.0}))
        return
    imports_started = time.perf_counter()
    if mode.startswith("ours"):
        sys.path.insert(0, str(REPO))
        from airflow_deltaberg.core.delta import DeltaTable

        def load() -> dict:
            t0 = time.perf_counter()
            snap = DeltaTable(path).snapshot()
            t1 = time.perf_counter()
            if mode == "ours-load":
                return {"rows": snap.num_files, "phases": {"snapshot": t1 - t0}}
            rows = snap.files.num_rows
            return {"rows": rows, "phases": {"snapshot": t1 - t0, "files": time.perf_counter() - t1}}
    else:
        import deltalake

        def load() -> dict:
            t0 = time.perf_counter()
            table = deltalake.DeltaTable(path)
            t1 = time.perf_counter()
            if mode == "peer-stats":
                rows = table.get_add_actions(flatten=True).num_rows
                step = "get_add_actions"
            else:
                rows = len(table.file_uris())
                step = "file_uris"
            return {"rows": rows, "phases": {"open": t1 - t0, step: time.perf_counter() - t1}}

    imports = time.perf_counter() - imports_started
    result = timed(load, profile_out)
    result["imports"] = imports
    print(json.dumps(result), flush=True)


# -- parent side ------------------------------------------------------------------------------------


@dataclass
class Figures:
    runs: list[dict] = field(default_factory=list)
    error: str | None = None

    def median(self, key: str) -> float | None:
        values = [r[key] for r in self.runs]
        return statistics.median(values) if values else None

    def phase_medians(self) -> dict[str, float]:
        if not self.runs:
            return {}
        return {k: statistics.median(r["phases"][k] for r in self.runs) for k in self.runs[0]["phases"]}


def run_child(mode: str, path: Path, timeout: float, profile_out: str | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path)]
    if profile_out:
        cmd += ["--profile-out", profile_out]
    started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - started
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = done.ru_utime - children.ru_utime + done.ru_stime - children.ru_stime
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{mode} exited {proc.returncode}: {' | '.join(tail)}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures.update(process_seconds=wall, process_cpu=process_cpu)
    return figures


def ensure_generated(data_dir: Path, name: str, stats_struct: bool, regenerate: bool) -> Path:
    sys.path.insert(0, str(HERE))
    from gen_delta_log import is_generated

    path = data_dir / name
    if not regenerate and is_generated(path, stats_struct=stats_struct, **GENERATED):
        print(f"reusing {path}")
        return path
    print(f"generating {path} ...", flush=True)
    cmd = [
        sys.executable, str(HERE / "gen_delta_log.py"), str(path), "--overwrite",
        "--num-files", str(GENERATED["num_files"]), "--stat-columns", str(GENERATED["num_stat_columns"]),
        "--partitions", str(GENERATED["num_partitions"]), "--commits", str(GENERATED["commits"]),
        "--seed", str(GENERATED["seed"]), "--checkpoint" if GENERATED["checkpoint"] else "--no-checkpoint",
        "--stats-struct" if stats_struct else "--no-stats-struct",
    ]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"generated in {time.perf_counter() - started:.1f} s")
    return path


def _ratio(ours: float | None, peer: float | None) -> float | None:
    return ours / peer if ours and peer else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per loader; the median is reported")
    parser.add_argument("--tables", default=",".join(TABLES), help=f"which tables, of {', '.join(TABLES)}")
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE, help="the 300k-add-action table")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="where the 1M-file logs are generated")
    parser.add_argument("--regenerate", action="store_true", help="rebuild the generated logs even if present")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one ours-stats load per table (cProfile) and print the hotspots")
    parser.add_argument("--top", type=int, default=20, help="hotspots to print with --profile")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed for one load")
    parser.add_argument("--json", type=Path, help="also write all raw figures to this file")
    parser.add_argument("--child", choices=(*MODES, "noop"), help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.path, args.profile_out)
        return 0
    try:
        return _bench(args)
    except Exception as exc:  # a measurement script: report, never fail the caller
        print(f"benchmark aborted: {type(exc).__name__}: {exc}")
        return 0


def _bench(args: argparse.Namespace) -> int:
    import deltalake
    import pyarrow

    print(f"python {platform.python_version()}, pyarrow {pyarrow.__version__}, deltalake {deltalake.__version__}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}, load average {loadavg()}")
    tables: list[tuple[str, Path, float]] = []
    for key in [k.strip() for k in args.tables.split(",") if k.strip()]:
        label, directory, stats_struct, limit = TABLES[key]
        if directory is None:
            if not (args.fixture / "_delta_log").is_dir():
                print(f"skipping the 300k fixture: {args.fixture} is not a Delta table")
                continue
            tables.append((label, args.fixture, limit))
        else:
            tables.append((label, ensure_generated(args.data_dir, directory, stats_struct, args.regenerate), limit))

    harness = [run_child("noop", Path("."), args.timeout)["process_seconds"] for _ in range(3)]
    results: dict[str, dict[str, Figures]] = {}
    for name, path, _ in tables:
        results[name] = {mode: Figures() for mode in MODES}
        print(f"  {name}: {', '.join(MODES)} x{args.runs}, alternating ...", flush=True)
        for _ in range(args.runs):
            for mode in MODES:
                fig = results[name][mode]
                if fig.error:
                    continue
                try:
                    fig.runs.append(run_child(mode, path, args.timeout))
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    fig.error = str(exc)[:300]

    print()
    print(f"Median of {args.runs} run(s), each in a fresh process. call s: the load inside the process (imports "
          f"excluded); process s: the whole subprocess (interpreter, imports, load; {statistics.median(harness):.2f} s "
          f"of it is the interpreter and this script starting); CPU s: user+sys time of the load (all threads; "
          f"steadier than wall time on a busy machine); peak MB: the process's ru_maxrss (MiB). "
          f"Load average now {loadavg()}.")
    header = ["table", "what", "files", "ours call s", "peer call s", "ratio call", "ours process s",
              "peer process s", "ratio process", "ours CPU s", "peer CPU s", "ours peak MB", "peer peak MB"]
    lines = []
    for name, _path, _ in tables:
        for what, ours_mode, peer_mode in PAIRS:
            ours, peer = results[name][ours_mode], results[name][peer_mode]
            rows = {r["rows"] for r in ours.runs + peer.runs}
            o_s, p_s = ours.median("seconds"), peer.median("seconds")
            o_p, p_p = ours.median("process_seconds"), peer.median("process_seconds")
            lines.append([
                name, f"{what} ({ours_mode} / {peer_mode})", "/".join(str(r) for r in sorted(rows)) or "n/a",
                fmt(o_s, ".2f"), fmt(p_s, ".2f"), fmt(_ratio(o_s, p_s), ".2f"),
                fmt(o_p, ".2f"), fmt(p_p, ".2f"), fmt(_ratio(o_p, p_p), ".2f"),
                fmt(ours.median("cpu"), ".2f"), fmt(peer.median("cpu"), ".2f"),
                fmt(ours.median("peak_mb"), ".0f"), fmt(peer.median("peak_mb"), ".0f"),
            ])
    print_table(header, lines)

    print()
    print("Details (medians; 'runs' lists every run's call time; CPU user+sys of the call well below its wall "
          "time means the process waited for a core, i.e. the machine was busy; above it, that it used both):")
    for name, _path, _ in tables:
        for mode in MODES:
            fig = results[name][mode]
            if not fig.runs:
                print(f"  {name} / {mode}: n/a  [error: {fig.error}]")
                continue
            phases = ", ".join(f"{k} {v:.2f}" for k, v in fig.phase_medians().items())
            runs = "/".join(f"{r['seconds']:.2f}" for r in fig.runs)
            print(f"  {name} / {mode}: runs {runs} s; phases {phases}; CPU {fig.median('cpu'):.2f} s (whole process "
                  f"{fig.median('process_cpu'):.2f} s); imports {fig.median('imports'):.2f} s; RSS before load "
                  f"{fig.median('idle_mb'):.0f} MB"
                  + (f"  [error: {fig.error}]" if fig.error else ""))

    print()
    print("Targets (on call time; the ratio must be <= 1 for 'not slower'):")
    for name, _path, limit in tables:
        for what, ours_mode, peer_mode in PAIRS:
            ours, peer = results[name][ours_mode], results[name][peer_mode]
            o_s, p_s, o_mb = ours.median("seconds"), peer.median("seconds"), ours.median("peak_mb")
            o_p, p_p = ours.median("process_seconds"), peer.median("process_seconds")
            checks = [
                (f"{name}, {what}: call <= {limit:g} s", o_s, o_s is not None and o_s <= limit,
                 f"{fmt(o_s, '.2f')} s"),
                (f"{name}, {what}: peak RSS <= 1.5 GB", o_mb, o_mb is not None and o_mb <= PEAK_RSS_TARGET_MB,
                 f"{fmt(o_mb, '.0f')} MB"),
                (f"{name}, {what}: not slower than deltalake (call)", o_s,
                 o_s is not None and p_s is not None and o_s <= p_s, f"ratio {fmt(_ratio(o_s, p_s), '.2f')}"),
                (f"{name}, {what}: not slower than deltalake (process)", o_p,
                 o_p is not None and p_p is not None and o_p <= p_p, f"ratio {fmt(_ratio(o_p, p_p), '.2f')}"),
            ]
            for label, value, ok, shown in checks:
                status = "unknown" if value is None else ("met" if ok else "NOT met")
                print(f"  [{status:^7}] {label} ({shown})")

    errors = [(n, m, f.error) for n, by_mode in results.items() for m, f in by_mode.items() if f.error]
    for name, mode, error in errors:
        print(f"error: {name} / {mode}: {error}")

    if args.profile:
        import tempfile

        print()
        for name, path, _ in tables:
            with tempfile.NamedTemporaryFile(suffix=".prof", delete=False) as tmp:
                out = tmp.name
            try:
                run_child("ours-stats", path, args.timeout, profile_out=out)
                print(f"Profile of ours-stats on {name} (one load, cProfile; top {args.top} by cumulative time):")
                print_profile(out, args.top)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"profile of {name} failed: {exc}")
            finally:
                os.unlink(out)

    if args.json:
        raw = {name: {m: {"runs": f.runs, "error": f.error} for m, f in by_mode.items()}
               for name, by_mode in results.items()}
        raw["_harness_process_seconds"] = harness  # type: ignore[assignment]
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
