"""Where the CPU of a full conversion goes: the thread CPU of each stage of ``convert(table, full=True)``.

Each run is a fresh process (numba's start and the imports included) that wraps the converter's stage functions
and sums the CPU time of the threads that run them (``time.thread_time``: a stage waiting for another thread counts
nothing). What Arrow does on its own thread pool (decoding the checkpoint's Parquet pages, multi-threaded takes and
sorts) is in no Python thread: it is the remainder of the process's CPU. Figures are medians of ``--runs``.

By default on the generated 1M-file, 20-stat-column log whose checkpoint holds the stats as JSON only (as deltalake
writes it; ``bench_convert.py`` generates it), converted in a linked copy.

    python benchmarks/bench_convert_stages.py [--table NAME] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import linked_copy, loadavg, print_table

HERE = Path(__file__).resolve().parent

#: (module, attribute, stage): the functions whose thread CPU makes a stage.
STAGES = [
    ("airflow_deltaberg.core.delta.table", "DeltaTable.snapshot", "log load (Python threads)"),
    ("airflow_deltaberg.core.delta.stats.stats_template", "_load_kernels", "stats decoder start (numba)"),
    ("airflow_deltaberg.core.delta.log.checkpoint_actions", "_batch_stats", "stats JSON decoded"),
    ("airflow_deltaberg.core.iceberg.manifests.file_manifests", "pruning_order", "pruning order"),
    ("airflow_deltaberg.core.iceberg.manifests.manifest_spill", "_route", "spill files written"),
    ("airflow_deltaberg.core.iceberg.manifests.manifest_spill", "SpilledGroups.group", "spill files read back"),
    ("airflow_deltaberg.core.iceberg.manifests.file_manifests", "_entries_in_order", "manifest entries built"),
    ("airflow_deltaberg.core.iceberg.conversion_state", "write_manifest", "Avro encoding"),
    ("airflow_deltaberg.core.iceberg.avro.avro_container", "deflate", "deflate"),
    ("airflow_deltaberg.core.iceberg.manifests.file_manifests", "write_manifest_record", "manifest written (+ above)"),
]


def child(table: str) -> None:
    import importlib
    import threading

    started = time.process_time()
    from airflow_deltaberg.core.iceberg.convert import convert

    spent: dict[str, float] = {"imports": time.process_time() - started}
    lock = threading.Lock()

    def wrap(owner: object, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def timed(*args: object, **kwargs: object) -> object:
            begin = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                with lock:
                    spent[stage] = spent.get(stage, 0.0) + time.thread_time() - begin

        setattr(owner, name, timed)

    for module_name, attribute, stage in STAGES:
        owner: object = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        wrap(owner, name, stage)
    cpu, wall = time.process_time(), time.perf_counter()
    convert(table, full=True)
    spent["total"] = time.process_time() - cpu
    spent["wall"] = time.perf_counter() - wall
    # write_manifest_record calls write_manifest: its own part is the copy of the entries kept in
    # the conversion state (the columns a rewrite needs and each row's start). Deflate runs on
    # the Avro writer's threads, outside write_manifest's thread.
    spent["manifest written (+ above)"] = (spent.get("manifest written (+ above)", 0.0)
                                           - spent.get("Avro encoding", 0.0))
    print(json.dumps(spent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=HERE / "data")
    parser.add_argument("--table", default="delta-1m-files-20-stat-cols-checkpoint")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    source = args.data_dir / args.table
    if not (source / "_delta_log").is_dir():
        print(f"{source} is missing: run benchmarks/bench_convert.py first (it generates the table)")
        return 0
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=args.data_dir) as work:
        table = linked_copy(source, Path(work) / args.table)
        for _ in range(args.runs):
            out = subprocess.run([sys.executable, __file__, "--child", str(table)], check=True,
                                 capture_output=True, text=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            shutil.rmtree(table / "_iceberg", ignore_errors=True)
    median = {key: statistics.median(run.get(key, 0.0) for run in runs) for key in runs[0]}
    stages = list(dict.fromkeys(stage for _, _, stage in STAGES))
    accounted = sum(median.get(stage, 0.0) for stage in stages)
    lines = [[stage.replace(" (+ above)", ": the copy of its entries in the state"), f"{median.get(stage, 0.0):.2f}"]
             for stage in stages]
    lines.append(["Arrow's own threads (checkpoint Parquet decoding, ...) and the rest",
                  f"{median['total'] - accounted:.2f}"])
    print(f"full conversion of {args.table}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load average "
          f"{loadavg()}, median of {len(runs)} runs: {median['wall']:.2f} s wall, {median['total']:.2f} s CPU "
          f"(imports excluded from both: {median['imports']:.2f} s CPU)")
    print_table(["stage", "CPU s"], lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
