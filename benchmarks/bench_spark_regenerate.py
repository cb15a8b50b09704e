"""Full Iceberg regeneration with Spark (local[2]) against the in-process converter, on a synthetic Delta log.

The table comes from gen_delta_log.py: ``--num-files`` adds (default 3M) with stats for ``--stat-columns`` columns
(default 20), 100 partitions,
10 commits and a classic Parquet checkpoint at the last version (``--no-checkpoint``: the JSON commits only). It is
generated once into benchmarks/data/ and reused. Each run converts its own linked copy (hard links to the log)
with a full conversion:

* in-process: ``deltaberg convert COPY --full --format json`` (one Python process);
* Spark: ``spark-submit --master local[2] --driver-memory 2g airflow_deltaberg/spark/regenerate.py --table COPY
  --full`` (the JVM, the Python driver and the Python workers; the driver replays the log without stats, Spark
  reads and reconciles it again and the workers parse the stats and write the manifests).

Figures per run: the wall time of the whole command (interpreter, JVM and Spark start included), the conversion's
own seconds (``ConversionResult.seconds``: the ``convert`` call, which starts the Spark session on the Spark side),
the CPU seconds of the process tree (at least the sum of each process's CPU when last sampled), and the peak
memory of the process tree: the sum of RSS over every process of the tree (sampled every 0.2 s with psutil;
counts pages that forked Python workers share more than once), the sum of PSS at the same instants, and for
Spark the split of that peak RSS between the JVM, the Python driver and the Python workers. The script
measures and prints; it always exits 0.

    python benchmarks/bench_spark_regenerate.py [--num-files 3000000] [--stat-columns 20] [--runs 1] [--json out.json]

Issue 13's targets are printed as met or NOT met: in-process peak RSS of the process tree <= 3 GB for 10M files with
10 stat columns and <= 1.5 GB for 1M with 20; the Spark side completing with the given driver memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from bench_common import fmt, linked_copy, loadavg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APP = REPO / "airflow_deltaberg" / "spark" / "regenerate.py"
BIN = Path(sys.executable).parent
STAT_COLUMNS, PARTITIONS, COMMITS, SEED = 20, 100, 10, 0
#: Peak RSS of the in-process conversion's process tree allowed by issue 13, by (files, stat columns).
PEAK_TARGETS_MB = {(10_000_000, 10): 3072, (1_000_000, 20): 1536}
SAMPLE_SECONDS = 0.2


# -- the table ----------------------------------------------------------------------------------------------------


def _label(num_files: int) -> str:
    if num_files % 1_000_000 == 0:
        return f"{num_files // 1_000_000}m"
    return f"{num_files // 1000}k" if num_files % 1000 == 0 else str(num_files)


def ensure_table(data_dir: Path, num_files: int, checkpoint: bool, stat_columns: int = STAT_COLUMNS) -> Path:
    """The generated log for these parameters (bench_convert.py's naming, so its 1M table is reused)."""
    sys.path.insert(0, str(HERE))
    from gen_delta_log import is_generated

    suffix = "checkpoint" if checkpoint else "json"
    path = data_dir / f"delta-{_label(num_files)}-files-{stat_columns}-stat-cols-{suffix}"
    params = {"num_files": num_files, "num_stat_columns": stat_columns, "num_partitions": PARTITIONS,
              "commits": COMMITS, "checkpoint": checkpoint, "seed": SEED}
    if is_generated(path, **params):
        print(f"reusing {path}")
        return path
    print(f"generating {path} ...", flush=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, str(HERE / "gen_delta_log.py"), str(path), "--overwrite",
                    "--num-files", str(num_files), "--stat-columns", str(stat_columns),
                    "--partitions", str(PARTITIONS), "--commits", str(COMMITS), "--seed", str(SEED),
                    "--checkpoint" if checkpoint else "--no-checkpoint"], check=True, stdout=subprocess.DEVNULL)
    print(f"generated in {time.perf_counter() - started:.1f} s")
    return path


# -- measuring a process tree -------------------------------------------------------------------------------------


def _kind(process: psutil.Process) -> str:
    try:
        name = process.name()
        cmdline = " ".join(process.cmdline())
    except psutil.Error:
        return "other"
    if "java" in name:
        return "jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python workers"
    return "python" if "python" in cmdline else name


@dataclass
class Run:
    command: list[str]
    wall: float = 0.0
    cpu: float = 0.0
    peak_rss_mb: float = 0.0
    pss_at_peak_mb: float = 0.0
    peak_split_mb: dict[str, float] = field(default_factory=dict)
    returncode: int = 0
    cpu_seen: dict[int, float] = field(default_factory=dict)  # pid -> user+system seconds at its last sample
    cpu_kind: dict[int, str] = field(default_factory=dict)  # pid -> jvm, python workers, python
    result: dict[str, Any] = field(default_factory=dict)
    output_tail: str = ""


def measured(command: list[str], env: dict[str, str], log: Path, timeout: float) -> Run:
    """Run ``command``; wall time, CPU of the tree (getrusage of waited-for descendants), peak RSS of the tree."""
    run = Run(command)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("w") as out:
        process = psutil.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        while process.poll() is None:
            if time.perf_counter() - started > timeout:
                for p in [*process.children(recursive=True), process]:
                    p.kill()
                break
            _sample(process, run)
            time.sleep(SAMPLE_SECONDS)
        run.returncode = process.wait()
    run.wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Descendants that no process waited for (Spark's Python workers) escape getrusage: take the larger of that and
    # the sum of each process's CPU at its last sample.
    run.cpu = max(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, sum(run.cpu_seen.values()))
    run.output_tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    return run


def _sample(root: psutil.Process, run: Run) -> None:
    rss: dict[str, float] = {}
    pss = 0.0
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for process in tree:
        try:
            info = process.memory_full_info()
            times = process.cpu_times()
        except psutil.Error:
            continue
        kind = _kind(process)
        if kind == "other" and process.pid in run.cpu_kind:
            kind = run.cpu_kind[process.pid]  # an exiting process no longer tells its command line
        run.cpu_seen[process.pid] = times.user + times.system
        run.cpu_kind[process.pid] = kind
        rss[kind] = rss.get(kind, 0.0) + info.rss / (1 << 20)
        pss += getattr(info, "pss", info.rss) / (1 << 20)
    total = sum(rss.values())
    if total > run.peak_rss_mb:
        run.peak_rss_mb, run.pss_at_peak_mb, run.peak_split_mb = total, pss, rss


# -- the two sides ------------------------------------------------------------------------------------------------


def in_process(table: Path, work: Path, args: argparse.Namespace) -> Run:
    command = [str(BIN / "deltaberg"), "convert", str(table), "--full", "--format", "json"]
    run = measured(command, dict(os.environ), work / "in-process.log", args.timeout)
    if run.returncode == 0:
        text = (work / "in-process.log").read_text()
        run.result = json.loads(text[text.index("{"):text.rindex("}") + 1])
    return run


def with_spark(table: Path, work: Path, args: argparse.Namespace) -> Run:
    result_file = work / "spark-result.json"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("SPARK_HOME", None)  # the pyspark install's own
    command = [str(BIN / "spark-submit"), "--master", args.master, "--driver-memory", args.driver_memory,
               "--conf", "spark.ui.enabled=false", str(APP), "--table", str(table), "--full",
               "--result-file", str(result_file)]
    run = measured(command, env, work / "spark.log", args.timeout)
    if result_file.exists():
        document = json.loads(result_file.read_text())
        run.result = document.get("result", document)  # the result protocol: {"result": ...} or {"error": ...}
    return run


# -- report -------------------------------------------------------------------------------------------------------


def _median(runs: list[Run], key: str) -> float | None:
    values = [getattr(r, key) for r in runs if r.returncode == 0]
    return statistics.median(values) if values else None


def report(sides: dict[str, list[Run]], num_files: int, args: argparse.Namespace) -> None:
    print()
    print(f"Full conversion of {num_files:,} files ({args.stat_columns} stat columns, {PARTITIONS} partitions, "
          f"{'checkpoint' if args.checkpoint else 'JSON commits only'}); median of {args.runs} run(s); "
          f"load average now {loadavg()}")
    header = ["", *sides]
    rows = [
        ["wall s (whole command)", *(fmt(_median(r, "wall"), ".1f") for r in sides.values())],
        ["convert s (ConversionResult.seconds)",
         *(fmt(_median_result(r, "seconds"), ".1f") for r in sides.values())],
        ["CPU s (process tree)", *(fmt(_median(r, "cpu"), ".1f") for r in sides.values())],
        ["peak RSS MB (process tree)", *(fmt(_median(r, "peak_rss_mb"), ".0f") for r in sides.values())],
        ["PSS MB at that peak", *(fmt(_median(r, "pss_at_peak_mb"), ".0f") for r in sides.values())],
        ["peak RSS split", *(_split(r) for r in sides.values())],
        ["CPU s split (sampled)", *(_cpu_split(r) for r in sides.values())],
        ["files added / records", *(_counts(r) for r in sides.values())],
        ["manifests written", *(_manifests(r) for r in sides.values())],
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    target = PEAK_TARGETS_MB.get((num_files, args.stat_columns))
    peak = _median(sides.get("in-process", []), "peak_rss_mb")
    if target is not None and peak is not None:
        print(f"\n  [{'  met  ' if peak <= target else 'NOT met'}] in-process peak RSS of the process tree <= "
              f"{target} MB ({peak:.0f} MB)")
    spark = sides.get("spark", [])
    if spark:
        done = all(r.returncode == 0 for r in spark)
        print(f"  [{'  met  ' if done else 'NOT met'}] Spark ({args.master}, driver memory {args.driver_memory}) "
              "completes")
    for name, runs in sides.items():
        for run in runs:
            if run.returncode != 0:
                print(f"\n{name} failed (exit {run.returncode}):\n{run.output_tail}")


def _median_result(runs: list[Run], key: str) -> float | None:
    values = [r.result[key] for r in runs if r.returncode == 0 and key in r.result]
    return statistics.median(values) if values else None


def _split(runs: list[Run]) -> str:
    last = next((r for r in reversed(runs) if r.returncode == 0), None)
    if last is None:
        return "n/a"
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(last.peak_split_mb.items(), key=lambda kv: -kv[1]))


def _cpu_split(runs: list[Run]) -> str:
    last = next((r for r in reversed(runs) if r.returncode == 0), None)
    if last is None:
        return "n/a"
    split: dict[str, float] = {}
    for pid, seconds in last.cpu_seen.items():
        split[last.cpu_kind[pid]] = split.get(last.cpu_kind[pid], 0.0) + seconds
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(split.items(), key=lambda kv: -kv[1]))


def _counts(runs: list[Run]) -> str:
    last = next((r for r in reversed(runs) if r.returncode == 0), None)
    return "n/a" if last is None else f"{last.result.get('files_added', 0):,} / {last.result.get('records', 0):,}"


def _manifests(runs: list[Run]) -> str:
    last = next((r for r in reversed(runs) if r.returncode == 0), None)
    if last is None or "metadata_location" not in last.result:
        return "n/a"
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(last.result["metadata_location"])
    manifests = table.current_snapshot().manifests(table.io)
    return f"{len(manifests)} (largest {max((m.added_files_count or 0) for m in manifests):,} entries)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-files", type=int, default=3_000_000)
    parser.add_argument("--stat-columns", type=int, default=STAT_COLUMNS, help="columns with stats (default 20)")
    parser.add_argument("--table", type=Path, help="a table generated already with these parameters (its log is "
                                                      "linked, not copied); default: generated into --data-dir")
    parser.add_argument("--checkpoint", action=argparse.BooleanOptionalAction, default=True,
                        help="read the files from a Parquet checkpoint (default) or from JSON commits only")
    parser.add_argument("--runs", type=int, default=1, help="runs per side; the median is reported")
    parser.add_argument("--sides", default="in-process,spark", help="comma-separated: in-process, spark")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--data-dir", type=Path, default=HERE / "data")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed for one command")
    parser.add_argument("--keep-work", action="store_true", help="keep the converted copies and logs")
    parser.add_argument("--json", type=Path, help="also write the raw figures to this file")
    args = parser.parse_args(argv)
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{psutil.virtual_memory().total / (1 << 30):.0f} GiB RAM, load average {loadavg()}")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    work_root = Path(tempfile.mkdtemp(prefix="spark-regenerate-", dir=args.data_dir))
    sides: dict[str, list[Run]] = {}
    try:
        source = args.table or ensure_table(args.data_dir, args.num_files, args.checkpoint, args.stat_columns)
        runners = {"in-process": in_process, "spark": with_spark}
        for name in [s.strip() for s in args.sides.split(",") if s.strip()]:
            sides[name] = []
            for i in range(args.runs):
                work = work_root / f"{name}-{i}"
                table = linked_copy(source, work / "table")
                print(f"  {name} run {i + 1}/{args.runs} ...", flush=True)
                run = runners[name](table, work, args)
                print(f"    {run.wall:.1f} s wall, peak RSS {run.peak_rss_mb:.0f} MB, exit {run.returncode}",
                      flush=True)
                sides[name].append(run)
        report(sides, args.num_files, args)
        if args.json:
            args.json.write_text(json.dumps({k: [r.__dict__ for r in v] for k, v in sides.items()}, indent=2,
                                            default=str))
    except Exception as exc:  # a measurement script: report, never fail the caller
        print(f"benchmark aborted: {type(exc).__name__}: {exc}")
    finally:
        if args.keep_work:
            print(f"work kept in {work_root}")
        else:
            shutil.rmtree(work_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
