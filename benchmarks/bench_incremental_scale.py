"""Incremental conversion at scale: a 100-file append commit on a big converted table against the same on a small one.

Issue 13: incremental conversion stays O(change) at 10M files (a 100-file append <= 1.5x the 10k-file case). Both
tables are gen_delta_log.py logs converted already (e.g. the 10M table ``bench_spark_regenerate.py --keep-work``
converted, and a 10k table converted with ``deltaberg convert``). Each run appends one commit of 100 adds with
stats (``gen_delta_log.append_commit``), converts it in a fresh process (bench_convert.py's child: the ``convert``
call timed alone, ``ru_maxrss`` of the process), then deletes the commit and the Iceberg files the run wrote, so
every run starts from the same converted table. Runs alternate between the tables; medians are printed with the
ratio big/small. Always exits 0.

``--phases``: each run also converts the commit once more in another child whose phases (reading the metadata
and the conversion state, the new manifests, the state, the manifest list, the metadata file, ...) are timed with
``time.perf_counter`` around the functions that do them; their medians are printed per table (phases nest: a
phase's time includes the phases it calls).

    python benchmarks/bench_incremental_scale.py BIG_TABLE SMALL_TABLE [--runs 5] [--phases] [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from bench_common import loadavg
from bench_convert import COMMIT_FILES, INCREMENTAL_RATIO, INCREMENTAL_SECONDS, REPO, IncrementalSetup, run_child

#: (module, function, phase): the functions timed by ``--phases``, wrapped where their callers look them up.
PHASES = (
    ("airflow_deltaberg.core.iceberg.convert", "convert", "convert (all)"),
    ("airflow_deltaberg.core.iceberg.convert", "adopted_history", "read metadata.json (and check it)"),
    ("airflow_deltaberg.core.iceberg.convert", "_current_state", "read conversion state"),
    ("airflow_deltaberg.core.iceberg.convert", "convert_incremental", "convert_incremental"),
    ("airflow_deltaberg.core.iceberg.convert_incremental", "plan_snapshot", "  plan snapshot"),
    ("airflow_deltaberg.core.iceberg.convert_incremental", "_live_files_added_again", "  live files added again"),
    ("airflow_deltaberg.core.iceberg.convert_incremental", "file_entries", "  entries of the adds"),
    ("airflow_deltaberg.core.iceberg.convert_incremental", "write_entry_manifests", "  write new manifests"),
    ("airflow_deltaberg.core.iceberg.convert_incremental", "snapshot_summary", "  snapshot summary"),
    ("airflow_deltaberg.core.iceberg.convert_incremental", "commit_snapshot", "  commit snapshot"),
    ("airflow_deltaberg.core.iceberg.convert_commit", "write_state", "    write conversion state"),
    ("airflow_deltaberg.core.iceberg.convert_commit", "write_manifest_list", "    write manifest list"),
    ("airflow_deltaberg.core.iceberg.convert_commit", "write_manifest_list_rows", "    write manifest list"),
    ("airflow_deltaberg.core.iceberg.convert_commit", "build_metadata", "    build metadata"),
    ("airflow_deltaberg.core.iceberg.convert_commit", "publish_metadata", "    publish metadata.json"),
    ("airflow_deltaberg.core.iceberg.convert", "dropped_metadata_files", "dropped metadata files"),
)


def phases_child(path: str) -> None:
    """Convert the table once with the PHASES timed; prints their seconds as JSON."""
    sys.path.insert(0, str(REPO))
    # What bench_convert's child imports before its timed call (pyiceberg's table module is imported lazily).
    from pyiceberg.io.pyarrow import PyArrowFileIO  # noqa: F401
    from pyiceberg.table import StaticTable  # noqa: F401

    seconds: dict[str, float] = defaultdict(float)

    def timer(fn, phase):  # noqa: ANN001, ANN202
        @functools.wraps(fn)
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[phase] += time.perf_counter() - start
        return timed

    for module_name, name, phase in PHASES:
        module = importlib.import_module(module_name)
        if hasattr(module, name):  # a phase the code no longer has is left out
            setattr(module, name, timer(getattr(module, name), phase))
    convert = importlib.import_module("airflow_deltaberg.core.iceberg.convert").convert
    result = convert(path)
    print(json.dumps({"mode": result.mode, "phases": seconds}))


def run_phases_child(table: Path, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), str(table), str(table), "--phases-child", str(table)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_phases(runs: dict[str, list[dict]]) -> None:
    names = [phase for phase in dict.fromkeys(p for _module, _name, p in PHASES)
             if any(phase in r for rs in runs.values() for r in rs)]
    print(f"\nphases, median ms ({', '.join(f'{k}: {len(v)} runs' for k, v in runs.items())}):")
    print(f"  {'phase':<34}" + "".join(f"{k:>10}" for k in runs))
    for phase in names:
        cells = "".join(f"{statistics.median(r.get(phase, 0.0) for r in rs) * 1000:10.1f}" for rs in runs.values())
        print(f"  {phase:<34}{cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("big", type=Path, help="a converted generated table (e.g. 10M files)")
    parser.add_argument("small", type=Path, help="a converted generated table (e.g. 10k files)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--phases", action="store_true", help="also time the conversion's phases (extra children)")
    parser.add_argument("--json", type=Path, help="also write every run's figures (and phases) to this file")
    parser.add_argument("--phases-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phases_child:
        phases_child(args.phases_child)
        return 0
    # run_child's arguments for bench_convert's child.
    args.naive_entries, args.work = 0, args.big.parent
    print(f"load average {loadavg()}")
    runs: dict[str, list[dict]] = {"big": [], "small": []}
    phases: dict[str, list[dict]] = {"big": [], "small": []}
    try:
        for i in range(args.runs):
            for name, table in (("big", args.big), ("small", args.small)):
                setup = IncrementalSetup(table, None)
                try:
                    figures = run_child("incremental", table, args)
                finally:
                    setup.undo()
                mode = figures["result"]["mode"]
                if mode != "incremental":
                    raise RuntimeError(f"{table}: the conversion ran {mode}, not incremental")
                runs[name].append(figures)
                print(f"  run {i + 1} {name}: {figures['seconds']:.3f} s, {figures['peak_mb']:.0f} MB, "
                      f"{figures['manifests_written']} of {figures['manifests']} manifests written", flush=True)
                if args.phases:
                    setup = IncrementalSetup(table, None)
                    try:
                        timed = run_phases_child(table, args.timeout)
                    finally:
                        setup.undo()
                    if timed["mode"] != "incremental":
                        raise RuntimeError(f"{table}: the conversion ran {timed['mode']}, not incremental")
                    phases[name].append(timed["phases"])
    except Exception as exc:  # a measurement script: report, never fail the caller
        print(f"benchmark aborted: {type(exc).__name__}: {exc}")
        return 0
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "phases": phases}))
    big = statistics.median(r["seconds"] for r in runs["big"])
    small = statistics.median(r["seconds"] for r in runs["small"])
    print(f"\n{COMMIT_FILES}-file append, median of {args.runs}: big {big:.3f} s "
          f"({statistics.median(r['peak_mb'] for r in runs['big']):.0f} MB), small {small:.3f} s "
          f"({statistics.median(r['peak_mb'] for r in runs['small']):.0f} MB); load average now {loadavg()}")
    ratio = big / small
    print(f"  [{'  met  ' if ratio <= INCREMENTAL_RATIO else 'NOT met'}] big <= {INCREMENTAL_RATIO}x small "
          f"({ratio:.2f}x)")
    print(f"  [{'  met  ' if big <= INCREMENTAL_SECONDS else 'NOT met'}] big <= {INCREMENTAL_SECONDS} s ({big:.3f} s)")
    if args.phases:
        print_phases(phases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
