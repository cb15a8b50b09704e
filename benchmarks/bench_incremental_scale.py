"""Incremental conversion at scale: a 100-file append commit on a big converted table against the same on a small one.

Issue 13: incremental conversion stays O(change) at 10M files (a 100-file append <= 1.5x the 10k-file case). Both
tables are gen_delta_log.py logs converted already (e.g. the 10M table ``bench_spark_regenerate.py --keep-work``
converted, and a 10k table converted with ``deltaberg convert``). Each run appends one commit of 100 adds with
stats (``gen_delta_log.append_commit``), converts it in a fresh process (bench_convert.py's child: the ``convert``
call timed alone, ``ru_maxrss`` of the process), then deletes the commit and the Iceberg files the run wrote, so
every run starts from the same converted table. Runs alternate between the tables; medians are printed with the
ratio big/small. Always exits 0.

    python benchmarks/bench_incremental_scale.py BIG_TABLE SMALL_TABLE [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_common import loadavg
from bench_convert import COMMIT_FILES, INCREMENTAL_RATIO, INCREMENTAL_SECONDS, IncrementalSetup, run_child


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("big", type=Path, help="a converted generated table (e.g. 10M files)")
    parser.add_argument("small", type=Path, help="a converted generated table (e.g. 10k files)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    # run_child's arguments for bench_convert's child.
    args.naive_entries, args.work = 0, args.big.parent
    print(f"load average {loadavg()}")
    runs: dict[str, list[dict]] = {"big": [], "small": []}
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
    except Exception as exc:  # a measurement script: report, never fail the caller
        print(f"benchmark aborted: {type(exc).__name__}: {exc}")
        return 0
    big = statistics.median(r["seconds"] for r in runs["big"])
    small = statistics.median(r["seconds"] for r in runs["small"])
    print(f"\n{COMMIT_FILES}-file append, median of {args.runs}: big {big:.3f} s "
          f"({statistics.median(r['peak_mb'] for r in runs['big']):.0f} MB), small {small:.3f} s "
          f"({statistics.median(r['peak_mb'] for r in runs['small']):.0f} MB); load average now {loadavg()}")
    ratio = big / small
    print(f"  [{'  met  ' if ratio <= INCREMENTAL_RATIO else 'NOT met'}] big <= {INCREMENTAL_RATIO}x small "
          f"({ratio:.2f}x)")
    print(f"  [{'  met  ' if big <= INCREMENTAL_SECONDS else 'NOT met'}] big <= {INCREMENTAL_SECONDS} s ({big:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
