"""Airflow for the operator, sensor and notifier tests: the migrated SQLite metadata DB of the throwaway
AIRFLOW_HOME (support.environment), DAGs written to it as the DAG processor would, and ``dag.test()`` runs whose
task instances and XComs are read back."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.environment import AIRFLOW


def _migrated(db: Path) -> bool:
    if not db.is_file():
        return False
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT count(*) FROM alembic_version").fetchone()[0] > 0
        except sqlite3.Error:
            return False


#: Where the first worker of a run leaves its freshly migrated DB for the others (set by the process that starts
#: them: ``share_migrated_db``): ``airflow db migrate`` costs ~7 CPU s, copying its result nothing; the DB holds no
#: path of its AIRFLOW_HOME.
TEMPLATE_ENV = "DELTABERG_AIRFLOW_DB_TEMPLATE"


def share_migrated_db() -> None:
    """Let the workers this process starts after the call share one migrated DB (in a folder of its own, removed
    when this process ends)."""
    folder = tempfile.mkdtemp(prefix="deltaberg-airflow-db-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ[TEMPLATE_ENV] = os.path.join(folder, "airflow.db")


def migrate_airflow_db() -> Path:
    """The migrated SQLite metadata DB of AIRFLOW_HOME (``airflow db migrate`` unless already done, or a copy of the
    DB another worker of the run migrated)."""
    db = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    template = os.environ.get(TEMPLATE_ENV)
    if not _migrated(db) and template:
        with open(template + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker migrates, the others wait for its DB
            if _migrated(Path(template)):
                shutil.copyfile(template, db)
            else:
                _migrate(db)
                shutil.copyfile(db, template + ".partial")
                os.replace(template + ".partial", template)
    elif not _migrated(db):
        _migrate(db)
    assert _migrated(db), f"airflow db migrate left no migrated {db}"
    return db


def _migrate(db: Path) -> None:
    result = subprocess.run(
        [AIRFLOW, "db", "migrate"], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def register_dag(dag: Any) -> None:
    """Write ``dag`` to the metadata DB (DagModel, serialized DAG, version) as the DAG processor would.

    Airflow 3.3's ``dag.test()`` only runs DAGs that are serialized in the DB; DAGs defined in a test are in
    no DAG bundle, so they are written here under the default ``dags-folder`` bundle.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


@dataclass
class DagRunResult:
    """A finished ``dag.test()`` run, with its task instances and XComs read back from the metadata DB."""

    dag_run: Any

    @property
    def state(self) -> str:
        return str(self.dag_run.state)

    def ti(self, task_id: str) -> Any:
        (ti,) = [ti for ti in self.dag_run.get_task_instances() if ti.task_id == task_id]
        return ti

    def xcom(self, task_id: str, key: str = "return_value") -> Any:
        """The stored XCom value of ``task_id``; None when there is none."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            query = XComModel.get_many(
                run_id=self.dag_run.run_id, key=key, task_ids=task_id, dag_ids=self.dag_run.dag_id
            )
            rows = session.scalars(query).all()
            return XComModel.deserialize_value(rows[0]) if rows else None


def run_dag(dag: Any, **test_kwargs: Any) -> DagRunResult:
    """Register ``dag`` and run ``dag.test(**test_kwargs)`` (the metadata DB must be migrated)."""
    register_dag(dag)
    return DagRunResult(dag.test(**test_kwargs))


def dag_id_for(test_name: str, prefix: str = "deltaberg_") -> str:
    """A DAG id unique to the test named ``test_name``."""
    return prefix + "".join(c if c.isalnum() else "_" for c in test_name)[:200]
