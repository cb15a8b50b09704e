"""The demo: the event-driven example DAG (dags_examples/deltaberg_event_driven.py) run end to end with
``dag.test()`` on a Delta table written here, then again after an append, with the Iceberg row counts read by
pyiceberg after each run.

Everything lives in .demo/ (rebuilt on every run): the Delta table ``sales``, the SQLite Iceberg catalog
``catalog.db``, the Airflow home ``airflow/`` and the full log of each step in ``logs/``. Spark runs locally
(``spark_default`` = local[*]); the Airflow and Spark output goes to the logs, the console gets one line per step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / ".demo"
TABLE = DEMO / "sales"
LOGS = DEMO / "logs"
CATALOG = {"type": "sql", "uri": f"sqlite:///{DEMO / 'catalog.db'}"}
IDENTIFIER = "demo.sales"
DAG_FILE = ROOT / "dags_examples" / "deltaberg_event_driven.py"
DAG_ID = "deltaberg_event_driven_regeneration"

#: The example DAG's settings are environment variables named after its DAG id.
SETTING = DAG_ID.upper() + "_"
# Read by Airflow when it is first imported, and by the example DAG when it is parsed: set before either.
os.environ.update({
    "AIRFLOW_HOME": str(DEMO / "airflow"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
    SETTING + "TABLE_URI": str(TABLE),
    SETTING + "IDENTIFIER": IDENTIFIER,
    SETTING + "CATALOG": json.dumps(CATALOG),
    # A small local job: no UI, few shuffle partitions, a JVM tuned for start-up rather than long runs.
    SETTING + "SPARK_CONF": json.dumps({"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                                      "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}),
    SETTING + "POKE_SECONDS": "1",
    SETTING + "WAIT_HOURS": "0.1",
})

#: The console: fd 1 as it was at start, kept while fds 1 and 2 point at a step's log file.
CONSOLE = os.fdopen(os.dup(1), "w", buffering=1)


def say(text: str = "") -> None:
    CONSOLE.write(text + "\n")


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


@contextlib.contextmanager
def output_to(log: Path) -> Iterator[None]:
    """Send everything written to fds 1 and 2 (Python, Airflow's logging, spark-submit) to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "a", encoding="utf-8") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def orders(first: int, days: list[str]) -> pa.Table:
    ids = list(range(first, first + len(days)))
    return pa.table({"order_id": pa.array(ids, pa.int64()), "day": days,
                     "amount": pa.array([round(9.5 + 3.25 * i, 2) for i in ids], pa.float64())})


def delta_rows() -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(TABLE)).to_pyarrow_dataset().count_rows()


def delta_version() -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(TABLE)).version()


def write_table() -> None:
    from deltalake import write_deltalake

    write_deltalake(str(TABLE), orders(0, ["2026-11-23", "2026-11-23", "2026-11-24"]), partition_by=["day"])
    write_deltalake(str(TABLE), orders(3, ["2026-11-24", "2026-11-25"]), mode="append")
    say(f"Delta table {shown(TABLE)} written with deltalake: version {delta_version()}, {delta_rows()} rows")


def append_rows() -> None:
    from deltalake import write_deltalake

    write_deltalake(str(TABLE), orders(5, ["2026-11-25", "2026-11-26", "2026-11-26"]), mode="append")
    say(f"Appended 3 rows with deltalake: version {delta_version()}, {delta_rows()} rows")


def migrate() -> None:
    log = LOGS / "airflow-db-migrate.log"
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:
        code = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], stdout=handle,
                              stderr=subprocess.STDOUT, env=os.environ.copy()).returncode
    if code != 0:
        say(f"airflow db migrate failed (exit {code}); its log, {shown(log)}, ends with:")
        say("\n".join(log.read_text(encoding="utf-8").splitlines()[-20:]))
        raise SystemExit(1)
    say(f"$ airflow db migrate   (AIRFLOW_HOME={shown(DEMO / 'airflow')}; {time.monotonic() - started:.0f} s)")


def iceberg_rows() -> None:
    from pyiceberg.catalog import load_catalog

    logging.getLogger("pyiceberg").setLevel(logging.WARNING)  # Airflow's logging config would print its INFO lines
    table = load_catalog("deltaberg", **CATALOG).load_table(IDENTIFIER)
    rows = sum(batch.num_rows for batch in table.scan().to_arrow_batch_reader())
    snapshot = table.current_snapshot()
    version = snapshot.summary.get("delta-version") if snapshot and snapshot.summary else None
    say(f"pyiceberg reads {IDENTIFIER}: {rows} rows, {len(table.metadata.snapshots)} snapshot(s), the newest from "
        f"Delta version {version}")


def xcom(dag_run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=dag_run.run_id, key="return_value", task_ids=task_id,
                                   dag_ids=dag_run.dag_id)
        rows = session.scalars(query).all()
        return XComModel.deserialize_value(rows[0]) if rows else None


def describe(task_id: str, value: Any) -> str:
    """One line about a task's XCom."""
    if not isinstance(value, dict):
        return ""
    if task_id == "wait_for_commits":
        versions = (f"version {value['to_version']} is" if value["from_version"] == value["to_version"]
                    else f"versions {value['from_version']}..{value['to_version']} are")
        since = ("no Iceberg metadata yet" if value["start_version"] is None
                 else f"Iceberg metadata at version {value['start_version']}")
        return f"Delta {versions} new ({since})"
    if task_id == "regenerate":
        return (f"spark-submit: {value['mode']} conversion, Iceberg snapshot of Delta version {value['delta_version']} "
                f"({value['records']} records)")
    if task_id == "check_row_counts":
        return f"Iceberg {value['iceberg_rows']} rows = Delta {value['delta_rows']} rows"
    return ""


def run_dag(number: int) -> None:
    log = LOGS / f"run-{number}.log"
    say(f"\nRun {number}: dag.test() of {DAG_ID}   (Airflow and Spark output: {shown(log)})")
    started = time.monotonic()
    with output_to(log):
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(DAG_FILE))
        if bag.import_errors:
            raise SystemExit(f"{DAG_FILE} does not load: {bag.import_errors}")
        dag = bag.dags[DAG_ID]
        dag_run = dag.test()
        instances = {ti.task_id: ti for ti in dag_run.get_task_instances()}
        lines = [(ti.task_id, str(ti.state), ti.duration, describe(ti.task_id, xcom(dag_run, ti.task_id)))
                 for ti in (instances[task_id] for task_id in dag.task_ids)]
    for task_id, state, duration, text in lines:
        took = f"{duration:4.0f} s" if duration is not None else "     "
        say(f"  {task_id:<17} {state:<8} {took}  {text}")
    if str(dag_run.state) != "success":
        say(f"The run ended {dag_run.state}: see {shown(log)}")
        raise SystemExit(1)
    say(f"  run {number} took {time.monotonic() - started:.0f} s")


def main() -> None:
    started = time.monotonic()
    shutil.rmtree(DEMO, ignore_errors=True)
    LOGS.mkdir(parents=True)
    write_table()
    migrate()
    run_dag(1)
    iceberg_rows()
    say()
    append_rows()
    run_dag(2)
    iceberg_rows()
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    took = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    say(f"\nThe Iceberg table caught up with the Delta table. Demo done in {took}.")
    say(f"The DAG: {shown(DAG_FILE)}; the other examples are next to it (README: Demo and example DAGs).")


if __name__ == "__main__":
    main()
