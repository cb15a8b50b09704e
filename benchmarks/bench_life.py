"""A table's life: an append-only Delta table of one small file per commit, converted after every commit.

Issue 26 §2: the Iceberg metadata stays bounded over the table's life. The log is written fast (JSON commits whose
adds point at hard links of one real Parquet file; a checkpoint every ``--checkpoint-every`` commits, written by
deltalake, as Delta writers do), and ``convert()`` runs in this process after each commit. At the end, the figures
against the peer measured in the same run, a ``--full`` conversion of the same version (of a linked copy of the log):

- manifests in the current snapshot vs those ``--full`` writes (target <= 2x + 10);
- ``_iceberg`` bytes vs ``--full``'s plus the retained snapshots' own files: the files the retained snapshots other
  than the current one use and the current one does not (manifest lists, conversion states, the manifests and
  entry copies only they list) (target <= 3x);
- per-run CPU (this process's user + system time around ``convert()``, mean of the ``--window`` runs up to the
  commit) at the last commit vs at commit 100 (target <= 1.2x).

Snapshot expiry is ``convert()``'s default unless ``--retain-snapshots`` is given; the retained snapshots are
printed, since a run's cost and the bytes kept depend on them. Exits 1 when a target is missed.

    python benchmarks/bench_life.py /tmp/life --commits 10000 [--retain-snapshots 100] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
from bench_common import REPO, fmt, linked_copy, loadavg, print_table
from pyiceberg.table import StaticTable

sys.path.insert(0, str(REPO))
from airflow_deltaberg.core.iceberg.convert import convert  # noqa: E402

LOG_DIR = "_delta_log"
BASE_TIME_MS = 1_700_000_000_000
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "value", "type": "string", "nullable": True, "metadata": {}},
]}
DATA_FILE = "data.parquet"
TARGET_MANIFESTS = (2, 10)  # <= 2x full + 10
TARGET_BYTES = 3.0
TARGET_CPU = 1.2


def _commit(path: Path, version: int, actions: list[dict[str, Any]]) -> None:
    info = {"commitInfo": {"timestamp": BASE_TIME_MS + version * 1000, "operation": "WRITE",
                           "operationParameters": {"mode": "Append"}}}
    lines = [json.dumps(a, separators=(",", ":")) for a in [info, *actions]]
    (path / LOG_DIR / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def create_table(path: Path) -> None:
    """Version 0: protocol and metaData, no file; the one real data file the adds link to."""
    if path.exists():
        shutil.rmtree(path)
    (path / LOG_DIR).mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([0], pa.int64()), "value": ["x"]}), path / DATA_FILE)
    _commit(path, 0, [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(SCHEMA), "partitionColumns": [], "configuration": {},
                      "createdTime": BASE_TIME_MS}},
    ])


def append(path: Path, version: int) -> None:
    """Commit ``version``: one add of a new name for the data file (a hard link: same rows, same stats)."""
    name = f"part-{version:06d}.parquet"
    os.link(path / DATA_FILE, path / name)
    stats = {"numRecords": 1, "minValues": {"id": 0, "value": "x"}, "maxValues": {"id": 0, "value": "x"},
             "nullCount": {"id": 0, "value": 0}}
    _commit(path, version, [{"add": {"path": name, "partitionValues": {}, "size": (path / name).stat().st_size,
                                     "modificationTime": BASE_TIME_MS + version * 1000, "dataChange": True,
                                     "stats": json.dumps(stats)}}])


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _snapshot_files(table: StaticTable, snapshot: Any) -> set[str]:
    """The metadata-folder files a snapshot uses: manifest list, conversion state, manifests and entry copies."""
    files = {snapshot.manifest_list, f"{snapshot.manifest_list}.state.arrow"}
    for manifest in snapshot.manifests(table.io):
        files |= {manifest.manifest_path, manifest.manifest_path.removesuffix(".avro") + ".entries.arrow"}
    return files


def _local(location: str) -> Path:
    return Path(location.removeprefix("file://").removeprefix("file:"))


def figures(path: Path, metadata_location: str) -> dict[str, Any]:
    """Manifests of the current snapshot, ``_iceberg`` bytes, the retained snapshots' own bytes."""
    table = StaticTable.from_metadata(metadata_location)
    current = table.current_snapshot()
    current_files = _snapshot_files(table, current)
    others: set[str] = set()
    for snapshot in table.metadata.snapshots:
        if snapshot.snapshot_id != current.snapshot_id:
            others |= _snapshot_files(table, snapshot)
    own = sum(_local(f).stat().st_size for f in others - current_files if _local(f).exists())
    return {"manifests": len(current.manifests(table.io)), "iceberg_bytes": tree_bytes(path / "_iceberg"),
            "retained_snapshots": len(table.metadata.snapshots), "retained_own_bytes": own,
            "metadata_json_bytes": _local(metadata_location).stat().st_size,
            "metadata_files": len(list((path / "_iceberg" / "metadata").glob("*.metadata.json")))}


def full_reference(path: Path, work: Path) -> dict[str, Any]:
    """``--full`` of the same version, on a linked copy of the log (the data files are not read)."""
    copy = work / "full"
    if copy.exists():
        shutil.rmtree(copy)
    linked_copy(path, copy)
    started = cpu_seconds()
    result = convert(str(copy), full=True)
    seconds = cpu_seconds() - started
    out = figures(copy, result.metadata_location)
    shutil.rmtree(copy)
    return {**out, "cpu": seconds}


def mean_cpu(cpu: list[float], commit: int, window: int) -> float:
    """Mean CPU of the runs of the ``window`` commits up to ``commit`` (1-based)."""
    return statistics.fmean(cpu[max(0, commit - window):commit])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="a scratch folder (the table goes to <work>/table)")
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=70, help="runs averaged for a CPU figure (a multiple of the "
                        "merge period, 7 at the default min-count)")
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--retain-snapshots", type=int, default=None, help="convert()'s retain_snapshots")
    parser.add_argument("--report-every", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="end the life early after this many seconds (the figures are those of the last commit)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.commits < 100:
        parser.error("--commits must be at least 100 (the CPU reference is commit 100)")
    path = args.work / "table"
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"load average {loadavg()}; {args.commits} commits, retain_snapshots={args.retain_snapshots}")
    create_table(path)
    options = {} if args.retain_snapshots is None else {"retain_snapshots": args.retain_snapshots}
    convert(str(path), **options)
    cpu: list[float] = []
    progress: list[dict[str, Any]] = []
    started = time.monotonic()
    for version in range(1, args.commits + 1):
        if args.max_seconds is not None and time.monotonic() - started > args.max_seconds and version > 101:
            print(f"  stopped after {version - 1} commits (--max-seconds)")
            args.commits = version - 1
            break
        append(path, version)
        if version % args.checkpoint_every == 0:
            deltalake.DeltaTable(str(path)).create_checkpoint()
        before = cpu_seconds()
        result = convert(str(path), **options)
        cpu.append(cpu_seconds() - before)
        if result.mode != "incremental":
            raise RuntimeError(f"commit {version}: the conversion ran {result.mode} ({result.fall_back})")
        if version % args.report_every == 0 or version == 100:
            point = {"commit": version, "cpu_ms": mean_cpu(cpu, version, args.window) * 1000,
                     **figures(path, result.metadata_location)}
            progress.append(point)
            print(f"  commit {version}: {point['cpu_ms']:.1f} ms CPU a run, {point['manifests']} manifests, "
                  f"{point['iceberg_bytes'] / 1e6:.2f} MB _iceberg, {point['retained_snapshots']} snapshots, "
                  f"metadata.json {point['metadata_json_bytes'] / 1e3:.0f} KB "
                  f"({time.monotonic() - started:.0f} s, load {loadavg()})", flush=True)
    if progress[-1]["commit"] != args.commits:
        progress.append({"commit": args.commits, "cpu_ms": mean_cpu(cpu, args.commits, args.window) * 1000,
                         **figures(path, result.metadata_location)})
    last = progress[-1]
    full = full_reference(path, args.work)
    at_100 = next(p for p in progress if p["commit"] == 100)
    manifest_bound = TARGET_MANIFESTS[0] * full["manifests"] + TARGET_MANIFESTS[1]
    bytes_reference = full["iceberg_bytes"] + last["retained_own_bytes"]
    byte_ratio = last["iceberg_bytes"] / bytes_reference
    cpu_ratio = last["cpu_ms"] / at_100["cpu_ms"]
    print(f"\nafter {args.commits} commits (load average {loadavg()}):")
    print_table(["figure", "life", "peer (--full of the same version)", "ratio", "target"], [
        ["manifests in the current snapshot", str(last["manifests"]), str(full["manifests"]),
         fmt(last["manifests"] / max(full["manifests"], 1), ".1f"), f"<= {manifest_bound}"],
        ["_iceberg MB", fmt(last["iceberg_bytes"] / 1e6, ".2f"),
         f"{full['iceberg_bytes'] / 1e6:.2f} + {last['retained_own_bytes'] / 1e6:.2f} retained snapshots' own",
         fmt(byte_ratio, ".2f"), f"<= {TARGET_BYTES}"],
        [f"CPU ms a run (mean of {args.window})", fmt(last["cpu_ms"], ".1f"), f"{at_100['cpu_ms']:.1f} at commit 100",
         fmt(cpu_ratio, ".2f"), f"<= {TARGET_CPU}"],
    ])
    print(f"retained snapshots {last['retained_snapshots']}, metadata files {last['metadata_files']} "
          f"({last['metadata_json_bytes'] / 1e3:.0f} KB each), --full CPU {full['cpu'] * 1000:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps({"progress": progress, "full": full, "cpu_ms": [c * 1000 for c in cpu]}))
    met = last["manifests"] <= manifest_bound and byte_ratio <= TARGET_BYTES and cpu_ratio <= TARGET_CPU
    print("targets met" if met else "a target is missed")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
