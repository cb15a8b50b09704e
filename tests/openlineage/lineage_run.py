"""One ``dag.test()`` of every operator with Airflow's OpenLineage provider enabled, in a process of its own (the
provider reads its settings once a process; the test run's other processes keep it off). Run by
test_operator_lineage.py as ``python lineage_run.py SETTINGS_JSON``; writes the run's task states and XComs as JSON
to ``settings["result"]`` (not to stdout, where a log handler may write on the same line), and the spark-submit
command lines SparkSubmitHook built to ``settings["commands"]``."""

from __future__ import annotations

import datetime as dt
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import airflow  # noqa: F401 - first: support.environment then keeps this process's AIRFLOW_HOME (the test's)
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import DAG
from support.airflow_dags import run_dag
from support.spark_session import delta_spark_jars, submit_conf

from airflow_deltaberg.operators import (
    DeltaEnableIcebergWriterCompatOperator,
    DeltaIcebergRegenerateOperator,
    DeltaToIcebergOperator,
    DeltaValidateOperator,
)
from airflow_deltaberg.operators.validate import XCOM_KEY


def record_commands(path: Path) -> None:
    build = SparkSubmitHook._build_spark_submit_command

    def recording(self: SparkSubmitHook, application: str) -> list[str]:
        command = build(self, application)
        path.write_text(json.dumps([*json.loads(path.read_text() or "[]"), command]))
        return command

    path.write_text("[]")
    SparkSubmitHook._build_spark_submit_command = recording  # type: ignore[method-assign]


def count_lineage_replays(path: Path) -> None:
    """Write to ``path`` the table of every Delta log a snapshot replays for the lineage (a call from
    ``airflow_deltaberg.openlineage``) rather than for the task's own work, a line each; a file, as the provider's
    listener may build the facets in a forked process."""
    from airflow_deltaberg.core.delta.table import DeltaTable

    path.write_text("")
    snapshot = DeltaTable.snapshot

    def counted(self: DeltaTable, *args: Any, **kwargs: Any) -> Any:
        if any("airflow_deltaberg/openlineage/" in frame.filename for frame in traceback.extract_stack()):
            with path.open("a") as out:
                out.write(self.location + "\n")
        return snapshot(self, *args, **kwargs)

    DeltaTable.snapshot = counted  # type: ignore[method-assign]


def main(settings: dict[str, Any]) -> dict[str, Any]:
    record_commands(Path(settings["commands"]))
    replays = Path(settings["result"]).with_name("lineage_replays.txt")
    count_lineage_replays(replays)
    catalog = settings["catalog"]
    with DAG(settings["dag_id"], schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
             catchup=False) as dag:
        DeltaValidateOperator(task_id="validate", table_uri=settings["plain"], level="compat-v2",
                              fail_on_violation=False)
        DeltaToIcebergOperator(task_id="convert", table_uri=settings["plain"], identifier="db.events",
                               catalog_config=catalog)
        DeltaEnableIcebergWriterCompatOperator(task_id="enable", table_uri=settings["rewrite"],
                                               spark_jars=delta_spark_jars(), spark_conf=submit_conf())
        DeltaIcebergRegenerateOperator(task_id="regenerate", table_uri=settings["spark"], identifier="db.spark",
                                       catalog_config=catalog, conf=submit_conf())
        DeltaToIcebergOperator(task_id="broken", table_uri=settings["missing"], identifier="db.missing",
                               catalog_config=catalog)
    result = run_dag(dag)
    return {
        "run_id": result.dag_run.run_id,
        "states": {ti.task_id: str(ti.state) for ti in result.dag_run.get_task_instances()},
        "xcom": {task_id: result.xcom(task_id) for task_id in ("convert", "enable", "regenerate")},
        "report": result.xcom("validate", XCOM_KEY),
        "lineage_replays": replays.read_text().splitlines(),
    }


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    Path(settings["result"]).write_text(json.dumps(main(settings), default=str))
