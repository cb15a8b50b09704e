"""One triggerer watching many Delta tables (issue 28 §1): a real deployment (tests/support/deployment.py:
api-server, scheduler, dag-processor, triggerer; LocalExecutor, SQLite) with one DAG per table, each scheduled on
its table's asset through a DeltaCommitEventTrigger watcher (benchmarks/watcher_dags/).

The tables are small deltalake tables, converted once beforehand (their Iceberg ``delta-version`` is the watchers'
start: no event before the appends). Once every trigger runs, the triggerer's CPU (its process group: the
supervisor, the trigger runner and the log server, user + system time from /proc, printed by process) is measured
over ``--idle`` seconds of polling with no commit; then each table gets one deltalake append, spread evenly over one
interval, and the latency of each is the run's ``queued_at`` minus the append's end. Targets: median latency <=
interval + 5 s, triggerer CPU <= 10% of a core (idle polling, and over the appends). Prints the figures and whether
each target is met; exits 0.

    nice python benchmarks/bench_watchers.py /tmp/bench-watchers [--tables 200] [--interval 30] [--idle 120]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> dict[str, float]:
    """User + system CPU seconds of the live processes of process group ``pgid``, by role: its leader (the
    triggerer's supervisor: the DB and the in-process execution API), its log server, the trigger runner."""
    roles: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[2]) != pgid:  # fields[0] is the state: pgrp is the 5th field of stat, index 2 here
            continue
        role = ("supervisor" if int(entry.name) == pgid else "log server" if b"serve-logs" in command
                else "trigger runner")
        roles[role] = roles.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
    return roles


def cpu_shares(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Each role's CPU over ``seconds`` as a share of one core, and the total."""
    shares = {role: (after.get(role, 0.0) - before.get(role, 0.0)) / seconds for role in after}
    return {"total": sum(shares.values()), **shares}


def make_tables(root: Path, count: int) -> list[str]:
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_deltaberg.core.iceberg.convert import convert

    tables = []
    for index in range(count):
        path = root / "tables" / f"t{index:03d}"
        write_deltalake(str(path), pa.table({"id": [index, index + 1]}))
        convert(str(path))
        tables.append(str(path))
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--idle", type=float, default=120.0, help="seconds of CPU measurement with no commit")
    args = parser.parse_args()

    import pyarrow as pa
    from deltalake import write_deltalake
    from support.deployment import deployment

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    started = time.monotonic()
    tables = make_tables(args.workdir, args.tables)
    listing = args.workdir / "tables.json"
    listing.write_text(json.dumps(tables))
    print(f"{args.tables} tables written and converted in {time.monotonic() - started:.0f} s", flush=True)
    env = {"DELTABERG_BENCH_WATCHER_TABLES": str(listing), "DELTABERG_BENCH_WATCHER_INTERVAL": str(args.interval),
           "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "1"}
    with deployment(args.workdir / "airflow", env, dags_folder=HERE / "watcher_dags") as deploy:
        def running_triggers() -> int | None:
            [(n,)] = deploy.query("SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL AND classpath LIKE "
                                  "'%DeltaCommitEventTrigger'")
            return n if n >= args.tables else None

        deploy.wait_for(f"{args.tables} watcher triggers to run", running_triggers, timeout=900, interval=2)
        print(f"deployment up, {args.tables} triggers running after {time.monotonic() - started:.0f} s", flush=True)
        pgid = deploy.processes["triggerer"].pid
        time.sleep(args.interval)  # every trigger past its first poll
        cpu0, wall0 = group_cpu(pgid), time.monotonic()
        time.sleep(args.idle)
        idle_share = cpu_shares(cpu0, group_cpu(pgid), time.monotonic() - wall0)
        assert deploy.query("SELECT count(*) FROM dag_run") == [(0,)], "a run before any append"

        appended: dict[str, float] = {}
        cpu1, wall1 = group_cpu(pgid), time.monotonic()
        gap = args.interval / args.tables
        for index, table in enumerate(tables):
            write_deltalake(table, pa.table({"id": [-1]}), mode="append")
            appended[f"bench_watcher_{index}"] = time.time()
            time.sleep(max(0.0, wall1 + gap * (index + 1) - time.monotonic()))

        def all_queued() -> list[tuple[str, str]] | None:
            rows = deploy.query("SELECT dag_id, queued_at FROM dag_run WHERE queued_at IS NOT NULL")
            return rows if len(rows) >= args.tables else None

        rows = deploy.wait_for("a run per table", all_queued, timeout=args.interval * 4 + 120, interval=1)
        wall_busy = time.monotonic() - wall1
        busy_share = cpu_shares(cpu1, group_cpu(pgid), wall_busy)
        runs = deploy.query("SELECT dag_id, count(*) FROM dag_run GROUP BY dag_id HAVING count(*) > 1")
        # The asset event's time splits each latency: the watcher's part, then the scheduler's.
        events = dict(deploy.query("SELECT 'bench_watcher_' || substr(a.name, 13), min(e.timestamp) FROM asset_event e "
                                   "JOIN asset a ON a.id = e.asset_id GROUP BY a.name"))

    def epoch(text: str) -> float:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc).timestamp()

    latencies = sorted(epoch(queued) - appended[dag_id] for dag_id, queued in rows)
    watcher = sorted(epoch(events[dag_id]) - appended[dag_id] for dag_id, _ in rows)
    scheduler = sorted(epoch(queued) - epoch(events[dag_id]) for dag_id, queued in rows)
    median = statistics.median(latencies)
    p90 = latencies[int(len(latencies) * 0.9) - 1]
    print(f"date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.1f}")
    print(f"tables {args.tables}, poll interval {args.interval:.0f} s, runs {len(rows)}, DAGs with >1 run: {runs}")
    print(f"latency append -> run queued: median {median:.1f} s, p90 {p90:.1f} s, max {latencies[-1]:.1f} s, "
          f"min {latencies[0]:.1f} s: target median <= {args.interval + 5:.0f} s "
          f"{'met' if median <= args.interval + 5 else 'NOT met'}")
    for name, part in (("append -> asset event (the watcher)", watcher),
                       ("asset event -> run queued (the scheduler)", scheduler)):
        print(f"  {name}: median {statistics.median(part):.1f} s, p90 {part[int(len(part) * 0.9) - 1]:.1f} s, "
              f"max {part[-1]:.1f} s")
    for name, shares in (("idle polling", idle_share), ("during the appends", busy_share)):
        share = shares.pop("total")
        parts = ", ".join(f"{role} {part * 100:.1f}%" for role, part in sorted(shares.items()))
        print(f"triggerer CPU, {name}: {share * 100:.1f}% of a core ({parts}): target <= 10% "
              f"{'met' if share <= 0.10 else 'NOT met'}")
    extra = (busy_share_total := sum(busy_share.values())) - sum(idle_share.values())
    print(f"  during the appends minus idle polling: {extra * 100:.1f}% of a core over {wall_busy:.0f} s, "
          f"{extra * wall_busy / args.tables * 1000:.0f} ms of triggerer CPU an event "
          f"(total {busy_share_total * wall_busy / args.tables * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
