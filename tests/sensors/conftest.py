"""The sensor tests reuse tests/airflow/conftest.py (DAG registration, ``dag.test()`` runs, XCom read-back).

It is loaded under its own module name (tests/airflow is no package); ``airflow_db`` is defined again here so
that a session running both folders migrates the throwaway metadata DB once, not twice.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load_airflow_conftest() -> ModuleType:
    name = "deltaberg_airflow_test_conftest"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "airflow" / "conftest.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


airflow_conftest = _load_airflow_conftest()
AIRFLOW = airflow_conftest.AIRFLOW
DagRunResult = airflow_conftest.DagRunResult
register_dag = airflow_conftest.register_dag
run_dag = airflow_conftest.run_dag
dag_id = airflow_conftest.dag_id


def _migrated(db: Path) -> bool:
    if not db.is_file():
        return False
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT count(*) FROM alembic_version").fetchone()[0] > 0
        except sqlite3.Error:
            return False


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The migrated SQLite metadata DB of the throwaway AIRFLOW_HOME (``airflow db migrate`` unless done)."""
    db = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    if not _migrated(db):
        result = subprocess.run(
            [AIRFLOW, "db", "migrate"], capture_output=True, text=True, timeout=300, env=os.environ.copy()
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert _migrated(db), f"airflow db migrate left no migrated {db}"
    return db
