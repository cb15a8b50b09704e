"""Validation benchmark: `deltaberg validate` against deltalake (delta-rs) loading the same table's protocol
and metadata, both inside the process and as a whole command.

Every measurement runs in a fresh subprocess; the sides alternate run by run, so a busy spell of the machine
hits all of them:

* ours-call: ``airflow_deltaberg.core.compat.validate(path, level)`` (no data checks), which loads the
  snapshot (log replay of every add action) and runs every rule of the level; timed inside the process
  (imports excluded), and the whole subprocess as the parent sees it
* ours-cli:  the command ``deltaberg validate TABLE --level LEVEL --format json`` (the console script's
  code, ``airflow_deltaberg.cli.main``), timed as a whole process: interpreter start, imports, load, rules,
  rendering, exit
* peer:      ``deltalake.DeltaTable(path)`` then ``.protocol()`` and ``.metadata()``, timed inside the
  process and as a whole subprocess

Ratios ours/peer: call time (ours-call vs peer) and whole-process time (ours-cli vs peer). Default table:
the 300k-add-action fixture (100 columns, partitioned, JSON commits, no data files). The figures are the
median of ``--runs`` runs. The script always exits 0: it measures, it does not test.

    python benchmarks/bench_validate.py [--runs 5] [--level writer-compat-v1] [--table PATH]
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
from pathlib import Path

from bench_common import fmt, loadavg, timed

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_TABLE = Path("/work/shared/fixtures/delta/300k-add-files-100-col-partitioned")
MODES = ("ours-call", "ours-cli", "peer")
# What the `deltaberg` console script runs (cwd = the repository, so this checkout's package is used).
CLI = "import sys; from airflow_deltaberg.cli import main; sys.exit(main())"


def child(mode: str, path: str, level: str) -> None:
    """Run the call once and print one JSON line of figures."""
    imports_started = time.perf_counter()
    if mode == "ours-call":
        sys.path.insert(0, str(REPO))
        from airflow_deltaberg.core.compat import validate

        def call() -> dict:
            report = validate(path, level)
            return {"version": report.version, "violations": len(report.violations),
                    "rules": len(report.rules_checked)}
    else:
        import deltalake

        def call() -> dict:
            table = deltalake.DeltaTable(path)
            protocol, metadata = table.protocol(), table.metadata()
            return {"version": table.version(), "reader": protocol.min_reader_version,
                    "partitions": len(metadata.partition_columns)}

    imports = time.perf_counter() - imports_started
    result = timed(call)
    result["imports"] = imports
    print(json.dumps(result))


def run_child(mode: str, path: Path, level: str, timeout: float) -> dict:
    if mode == "ours-cli":
        cmd = [sys.executable, "-c", CLI, "validate", str(path), "--level", level, "--format", "json"]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--level", level, str(path)]
    started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - started
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = done.ru_utime - children.ru_utime + done.ru_stime - children.ru_stime
    if mode == "ours-cli":
        if proc.returncode not in (0, 1):  # 0 compliant, 1 violations, 2 error
            raise RuntimeError(f"deltaberg validate exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        report = json.loads(proc.stdout)
        return {"process_seconds": wall, "process_cpu": process_cpu, "exit": proc.returncode,
                "version": report.get("version"),
                "violations": len(report.get("violations", []))}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{mode} exited {proc.returncode}: {' | '.join(tail)}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures.update(process_seconds=wall, process_cpu=process_cpu)
    return figures


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else None


def _ratio(ours: float | None, peer: float | None) -> float | None:
    return ours / peer if ours and peer else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per side; the median is reported")
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE, help="the Delta table to validate")
    parser.add_argument("--level", default="writer-compat-v1", help="compat-v1, compat-v2 or writer-compat-v1")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed for one run")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.path, args.level)
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
    if not (args.table / "_delta_log").is_dir():
        print(f"nothing to measure: {args.table} is not a Delta table")
        return 0
    print(f"table {args.table}, level {args.level}, {args.runs} run(s) per side, alternating")
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    errors: dict[str, str] = {}
    for i in range(args.runs):
        for mode in MODES:  # alternate, so that a busy spell of the machine hits every side
            if mode in errors:
                continue
            try:
                runs[mode].append(run_child(mode, args.table, args.level, args.timeout))
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                errors[mode] = str(exc)[:300]
        print(f"  run {i + 1}: " + ", ".join(
            f"{m} {runs[m][-1].get('seconds', runs[m][-1]['process_seconds']):.2f} s" if len(runs[m]) > i
            else f"{m} n/a" for m in MODES), flush=True)

    ours, cli, peer = runs["ours-call"], runs["ours-cli"], runs["peer"]
    print()
    print(f"Median of {args.runs} fresh processes per side. call s: the call inside the process (imports excluded); "
          f"process s: the whole subprocess as the parent sees it; CPU s: user+sys time (steadier than wall time on "
          f"a busy machine); load average now {loadavg()}")
    header = ["side", "what", "call s", "process s", "imports s", "CPU s (call)", "CPU s (process)", "peak MB"]
    lines = [
        ["ours", f"validate(path, {args.level!r})", fmt(_median(ours, "seconds"), ".2f"),
         fmt(_median(ours, "process_seconds"), ".2f"), fmt(_median(ours, "imports"), ".2f"),
         fmt(_median(ours, "cpu"), ".2f"), fmt(_median(ours, "process_cpu"), ".2f"),
         fmt(_median(ours, "peak_mb"), ".0f")],
        ["ours", f"deltaberg validate TABLE --level {args.level} --format json", "-",
         fmt(_median(cli, "process_seconds"), ".2f"), "-", "-", fmt(_median(cli, "process_cpu"), ".2f"), "-"],
        ["peer", "deltalake.DeltaTable(path) + protocol() + metadata()", fmt(_median(peer, "seconds"), ".2f"),
         fmt(_median(peer, "process_seconds"), ".2f"), fmt(_median(peer, "imports"), ".2f"),
         fmt(_median(peer, "cpu"), ".2f"), fmt(_median(peer, "process_cpu"), ".2f"),
         fmt(_median(peer, "peak_mb"), ".0f")],
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
    print()
    print(f"ratio ours/peer, call time (validate() vs open + protocol + metadata): "
          f"{fmt(_ratio(_median(ours, 'seconds'), _median(peer, 'seconds')), '.2f')} "
          f"(CPU: {fmt(_ratio(_median(ours, 'cpu'), _median(peer, 'cpu')), '.2f')})")
    print(f"ratio ours/peer, whole process (deltaberg validate vs a process opening the table with deltalake): "
          f"{fmt(_ratio(_median(cli, 'process_seconds'), _median(peer, 'process_seconds')), '.2f')} "
          f"(CPU: {fmt(_ratio(_median(cli, 'process_cpu'), _median(peer, 'process_cpu')), '.2f')})")
    if ours:
        last = ours[-1]
        print(f"ours: version {last['version']}, {last['rules']} rules, {last['violations']} violations")
    if cli:
        print(f"deltaberg validate: exit {cli[-1]['exit']}, version {cli[-1]['version']}, "
              f"{cli[-1]['violations']} violations")
    if peer:
        print(f"peer: version {peer[-1]['version']}")
    for mode, error in errors.items():
        print(f"error: {mode}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
