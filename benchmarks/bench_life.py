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
  commit) at the last commit vs at commit 100 (target <= 1.2x), measured against peers that see the same load.

The load of a shared machine moves a window's CPU by up to 2x between windows minutes apart, so the last window
is not compared with the one measured at the start. The life runs to ``commits - window``; then two young tables
of the same kind are made, each converted after every commit as the life is, one up to commit ``100 - window`` and
one up to ``200 - window`` (a copy of the life's folder would not do: the Iceberg metadata names the table's
location, so a copy elsewhere starts a new history). The life's last window then runs interleaved with the young
windows, one commit and conversion on each table in turn (the order rotates each round), all in this process:

- *commit 100* (the target's reference): the copy's commits ``101 - window`` .. 100, the history filling up
  (31-100 snapshots retained at the default window, no expiry);
- *commit 200, steady history*: the copy's commits ``201 - window`` .. 200, 100-110 snapshots and an expiry every
  ~10 runs as at commit 10,000, so against it the ratio is the table's age alone;
- *commit N*: the life's commits ``N + 1 - window`` .. N.

Each window ends on a checkpoint commit (at the default ``--checkpoint-every``). The windows' mean, fastest and
tenth-fastest runs are printed, and the commit-100 window measured at the start of the life (its own load).
``--profile DIR`` then runs one more window on each table, interleaved the same way, under cProfile (one stats
file per table); the young tables are then at commits 101-170 and 201-270, all three with the steady history, so
their profiles differ by the table's age alone.

Snapshot expiry is ``convert()``'s default unless ``--retain-snapshots`` is given; the retained snapshots are
printed, since a run's cost and the bytes kept depend on them. Exits 1 when a target is missed.

    python benchmarks/bench_life.py /tmp/life --commits 10000 [--retain-snapshots 100] [--json OUT] [--profile DIR]
"""

from __future__ import annotations

import argparse
import cProfile
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
from bench_common import REPO, fmt, linked_copy, loadavg, print_table, rss_mb
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
PEERS = {"commit 100": 100, "commit 200, steady history": 200}  # name: the last commit of the peer's window


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


def young_life(path: Path, at: int, options: dict[str, Any], checkpoint_every: int) -> Life:
    """A new table of the same kind at ``path``, its commits 1 .. ``at`` each converted as the life's were."""
    create_table(path)
    convert(str(path), **options)
    life = Life(path, 0, options, checkpoint_every)
    for _ in range(at):
        life.step()
    life.cpu.clear()
    return life


class Life:
    """One table and its runs: a commit, a checkpoint when due, a conversion whose CPU is recorded."""

    def __init__(self, path: Path, version: int, options: dict[str, Any], checkpoint_every: int) -> None:
        self.path, self.version, self.options, self.checkpoint_every = path, version, options, checkpoint_every
        self.cpu: list[float] = []
        self.result: Any = None

    def step(self, profiler: cProfile.Profile | None = None) -> None:
        self.version += 1
        append(self.path, self.version)
        if self.version % self.checkpoint_every == 0:
            deltalake.DeltaTable(str(self.path)).create_checkpoint()
        if profiler is not None:
            profiler.enable()
        before = cpu_seconds()
        self.result = convert(str(self.path), **self.options)
        self.cpu.append(cpu_seconds() - before)
        if profiler is not None:
            profiler.disable()
        if self.result.mode != "incremental":
            raise RuntimeError(f"{self.path} commit {self.version}: the conversion ran {self.result.mode} "
                               f"({self.result.fall_back})")


def interleave(lives: list[Life], runs: int, profilers: list[cProfile.Profile] | None = None) -> None:
    """``runs`` steps of each life, one on each in turn; the order rotates each round so none always goes first."""
    for round_ in range(runs):
        first = round_ % len(lives)
        for i in [*range(first, len(lives)), *range(first)]:
            lives[i].step(None if profilers is None else profilers[i])


def window_figures(cpu: list[float]) -> dict[str, float]:
    """Mean, fastest and tenth-fastest run of a window, ms."""
    ordered = sorted(cpu)
    return {"mean_ms": statistics.fmean(cpu) * 1000, "fastest_ms": ordered[0] * 1000,
            "tenth_fastest_ms": ordered[min(9, len(ordered) - 1)] * 1000, "median_ms": statistics.median(cpu) * 1000}


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
    parser.add_argument("--profile", type=Path, help="one more interleaved window under cProfile, stats here")
    args = parser.parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    copies = {name: end - args.window for name, end in PEERS.items()}
    if args.commits - args.window < max(copies.values()) or min(copies.values()) < 1:
        parser.error(f"--commits must be at least {max(PEERS.values())} and --window below 100")
    path = args.work / "table"
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"load average {loadavg()}; {args.commits} commits, retain_snapshots={args.retain_snapshots}")
    create_table(path)
    options = {} if args.retain_snapshots is None else {"retain_snapshots": args.retain_snapshots}
    convert(str(path), **options)
    life = Life(path, 0, options, args.checkpoint_every)
    progress: list[dict[str, Any]] = []
    started = time.monotonic()
    solo_end = args.commits - args.window
    while life.version < solo_end:
        if args.max_seconds is not None and time.monotonic() - started > args.max_seconds and life.version > 200:
            print(f"  stopped after {life.version} commits (--max-seconds)")
            solo_end = life.version
            args.commits = solo_end + args.window
            break
        life.step()
        if life.version % args.report_every == 0 or life.version == 100:
            _report(progress, life, args.window, started)
    peers = {name: young_life(args.work / f"young-{at}", at, options, args.checkpoint_every)
             for name, at in copies.items()}
    order = [*peers.values(), life]
    print(f"  the last {args.window} runs interleaved with the peers' (load {loadavg()})", flush=True)
    interleave(order, args.window)
    _report(progress, life, args.window, started)
    windows = {name: window_figures(peer.cpu) for name, peer in peers.items()}
    windows[f"commit {args.commits}"] = window_figures(life.cpu[-args.window:])
    last = progress[-1]
    full = full_reference(path, args.work)
    profiles = None
    if args.profile:
        profilers = [cProfile.Profile() for _ in order]
        interleave(order, args.window, profilers)
        profiles = []
        for name, profiler in zip([*peers, "life"], profilers, strict=True):
            out = args.profile / f"{name.split(',')[0].replace(' ', '-')}.prof"
            profiler.dump_stats(out)
            profiles.append(str(out))
    at_100 = next(p for p in progress if p["commit"] == 100)
    manifest_bound = TARGET_MANIFESTS[0] * full["manifests"] + TARGET_MANIFESTS[1]
    bytes_reference = full["iceberg_bytes"] + last["retained_own_bytes"]
    byte_ratio = last["iceberg_bytes"] / bytes_reference
    reference = windows["commit 100"]
    cpu_ratio = last["cpu_ms"] / reference["mean_ms"]
    steady = windows["commit 200, steady history"]
    print(f"\nafter {args.commits} commits (load average {loadavg()}):")
    print_table(["figure", "life", "peer", "ratio", "target"], [
        ["manifests in the current snapshot", str(last["manifests"]), f"{full['manifests']} (--full)",
         fmt(last["manifests"] / max(full["manifests"], 1), ".1f"), f"<= {manifest_bound}"],
        ["_iceberg MB", fmt(last["iceberg_bytes"] / 1e6, ".2f"),
         f"{full['iceberg_bytes'] / 1e6:.2f} (--full) + {last['retained_own_bytes'] / 1e6:.2f} retained snapshots' own",
         fmt(byte_ratio, ".2f"), f"<= {TARGET_BYTES}"],
        [f"CPU ms a run (mean of {args.window}, interleaved)", fmt(last["cpu_ms"], ".1f"),
         f"{reference['mean_ms']:.1f} at commit 100", fmt(cpu_ratio, ".2f"), f"<= {TARGET_CPU}"],
        ["same, against the steady history", fmt(last["cpu_ms"], ".1f"), f"{steady['mean_ms']:.1f} at commit 200",
         fmt(last["cpu_ms"] / steady["mean_ms"], ".2f"), "(the table's age alone)"],
    ])
    print(f"\ninterleaved windows of {args.window} runs, ms:")
    print_table(["window", "mean", "median", "fastest", "tenth-fastest"], [
        [name, *(f"{w[k]:.1f}" for k in ("mean_ms", "median_ms", "fastest_ms", "tenth_fastest_ms"))]
        for name, w in windows.items()])
    print(f"the commit-100 window at the start of the life (its own load): {at_100['cpu_ms']:.1f} ms")
    print(f"retained snapshots {last['retained_snapshots']}, metadata files {last['metadata_files']} "
          f"({last['metadata_json_bytes'] / 1e3:.0f} KB each), --full CPU {full['cpu'] * 1000:.0f} ms")
    if profiles:
        print("profiles: " + ", ".join(profiles))
    if args.json:
        args.json.write_text(json.dumps({"progress": progress, "full": full, "windows": windows,
                                         "cpu_ms": [c * 1000 for c in life.cpu],
                                         "peers_cpu_ms": {n: [c * 1000 for c in p.cpu] for n, p in peers.items()}}))
    met = last["manifests"] <= manifest_bound and byte_ratio <= TARGET_BYTES and cpu_ratio <= TARGET_CPU
    print("targets met" if met else "a target is missed")
    return 0 if met else 1


def _report(progress: list[dict[str, Any]], life: Life, window: int, started: float) -> None:
    point = {"commit": life.version, "cpu_ms": mean_cpu(life.cpu, life.version, window) * 1000,
             **figures(life.path, life.result.metadata_location)}
    progress.append(point)
    print(f"  commit {life.version}: {point['cpu_ms']:.1f} ms CPU a run, {point['manifests']} manifests, "
          f"{point['iceberg_bytes'] / 1e6:.2f} MB _iceberg, {point['retained_snapshots']} snapshots, "
          f"metadata.json {point['metadata_json_bytes'] / 1e3:.0f} KB, peak RSS {rss_mb():.0f} MB "
          f"({time.monotonic() - started:.0f} s, load {loadavg()})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
