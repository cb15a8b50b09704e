"""The DAGs of benchmarks/bench_watchers.py: one per table listed in $DELTABERG_BENCH_WATCHER_TABLES (a JSON file of
table paths), scheduled on the table's asset with a DeltaCommitEventTrigger watcher; one EmptyOperator task (the
scheduler marks it done itself: no worker process per run)."""

from __future__ import annotations

import datetime as dt
import json
import os

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_deltaberg.triggers import DeltaCommitEventTrigger

TABLES = json.loads(open(os.environ["DELTABERG_BENCH_WATCHER_TABLES"]).read())
INTERVAL = float(os.environ.get("DELTABERG_BENCH_WATCHER_INTERVAL", "30"))

for index, table in enumerate(TABLES):
    trigger = DeltaCommitEventTrigger(table_uri=table, poll_interval=INTERVAL)
    asset = Asset(name=f"bench_table_{index}", uri=f"delta://file/{table.lstrip('/')}",
                  watchers=[AssetWatcher(name=f"bench_watcher_{index}", trigger=trigger)])
    with DAG(dag_id=f"bench_watcher_{index}", schedule=[asset], start_date=dt.datetime(2026, 1, 1),
             catchup=False, max_active_runs=1) as dag:
        EmptyOperator(task_id="noop")
    globals()[dag.dag_id] = dag
