"""A plain install (``pip install airflow-deltaberg``, no extras) on the lowest declared Airflow: every module of the
package imports, ``deltaberg inspect|validate|convert`` run on a real table, the convert operator runs in a DAG, and
none of it needs PySpark; ``deltaberg enable`` says in one line to install the ``spark`` extra when it must start Spark.

scripts/test.sh runs this folder a second time in .venv-floor (scripts/setup_floor.sh: no extras, apache-airflow at
its declared floor) with DELTABERG_FLOOR_VENV=1, where PySpark's absence and the floor versions are asserted. In the
main run (newest Airflow, pyspark installed) the same commands run in subprocesses where importing pyspark fails,
and the floor-only checks skip.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.table import StaticTable
from support.cli import DELTABERG
from support.oracle import assert_same_rows, kernel_arrow

IN_FLOOR_VENV = os.environ.get("DELTABERG_FLOOR_VENV") == "1"
floor_only = pytest.mark.skipif(
    not IN_FLOOR_VENV, reason="runs in .venv-floor (scripts/test.sh: no extras, the lowest declared Airflow)")

#: Makes every import of pyspark fail in the subprocess, as in an environment without it (the main venv has it).
BLOCK_PYSPARK = """
import sys

class _NoPyspark:
    # and no OpenLineage client (the `openlineage` extra; Airflow's provider, when installed, is read by Airflow's
    # configuration itself: the floor venv runs without it)
    BLOCKED = ("pyspark", "openlineage")

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in self.BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _NoPyspark())
"""

IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
import airflow_deltaberg
from airflow_deltaberg.provider_info import get_provider_info

modules = sorted(m.name for m in pkgutil.walk_packages(airflow_deltaberg.__path__, "airflow_deltaberg."))
# The one module made of an extra's code: the compiled stats decoder (the `fast` extra, numba), which the package
# imports only when numba is there.
EXTRA_ONLY = {"airflow_deltaberg.core.delta.stats.stats_kernels": "numba"}
for name in modules:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != EXTRA_ONLY.get(name):
            raise
info = get_provider_info()
classes = [c["hook-class-name"] for c in info["connection-types"]] + info["notifications"]
for path in classes:
    module, _, name = path.rpartition(".")
    getattr(importlib.import_module(module), name)
from airflow.providers_manager import ProvidersManager
print(json.dumps({
    "modules": modules,
    "classes": classes,
    "provider_registered": "airflow-deltaberg" in ProvidersManager().providers,
    "pyspark_modules": sorted(m for m in sys.modules if m.split(".")[0] == "pyspark"),
    "openlineage_modules": sorted(m for m in sys.modules if m.split(".")[0] == "openlineage"),
}))
"""

#: ``deltaberg`` (cli.main) with the arguments after ``-c``.
RUN_CLI = "from airflow_deltaberg.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"

#: ``deltaberg`` (cli.main) once for each argument list of the JSON after ``-c``, one after another in one process (a
#: process start costs ~1 CPU s, more where nothing is compiled yet): each one's exit code, stdout and stderr as JSON.
RUN_CLIS = """
import contextlib, io, json
from airflow_deltaberg.cli import main

results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def python_without_pyspark(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_PYSPARK + code, *args], capture_output=True, text=True,
                          timeout=600)


def test_every_module_imports_without_pyspark() -> None:
    result = python_without_pyspark(IMPORT_EVERYTHING)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for package in ("operators", "sensors", "triggers", "hooks", "notifications", "cli", "provider_info", "core"):
        assert any(m.startswith(f"airflow_deltaberg.{package}") for m in report["modules"]), package
    assert {"airflow_deltaberg.operators.convert", "airflow_deltaberg.operators.regenerate",
            "airflow_deltaberg.operators.enable", "airflow_deltaberg.operators.validate"} <= set(report["modules"])
    assert len(report["classes"]) == 4
    assert report["provider_registered"]
    assert report["pyspark_modules"] == []
    assert "airflow_deltaberg.openlineage.facets" in report["modules"] and report["openlineage_modules"] == []


def test_cli_inspect_validate_convert_without_pyspark(copy_fixture, tmp_path: Path) -> None:
    table = copy_fixture("basic_partitioned")
    commands = [[command, str(table), "--format", "json"] for command in ("inspect", "validate", "convert")]
    result = python_without_pyspark(RUN_CLIS, json.dumps(commands))
    assert result.returncode == 0, result.stderr[-3000:]
    inspect, validate, convert = json.loads(result.stdout.strip().splitlines()[-1])

    assert inspect[0] == 0, inspect[2]
    assert json.loads(inspect[1])["version"] == kernel_version(table)

    assert validate[0] == 1, validate[2]  # a plain table: violations, reported
    report = json.loads(validate[1])
    assert report["compliant"] is False and report["violations"]

    assert convert[0] == 0, convert[2]
    location = json.loads(convert[1])["metadata_location"]
    assert_same_rows(StaticTable.from_metadata(location).scan().to_arrow(), kernel_arrow(table), "basic_partitioned")


def test_enable_that_must_rewrite_asks_for_the_spark_extra(tmp_path: Path, deltalake_table) -> None:
    # deltalake writes no column mapping: enabling must rewrite every file, which starts Spark here.
    table = deltalake_table("plain")
    before = sorted(p.name for p in (table / "_delta_log").iterdir())
    result = python_without_pyspark(RUN_CLI, "enable", str(table), "--mode", "rewrite")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "install airflow-deltaberg[spark]" in lines[0] and str(table) in lines[0]
    assert sorted(p.name for p in (table / "_delta_log").iterdir()) == before  # nothing committed


def test_convert_operator_dag_runs(run_dag, dag_id: str, copy_fixture, tmp_path: Path) -> None:
    from airflow.sdk import DAG

    from airflow_deltaberg.operators import DeltaToIcebergOperator

    table = copy_fixture("basic_partitioned")
    with DAG(dag_id, schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), catchup=False) as dag:
        DeltaToIcebergOperator(task_id="convert", table_uri=str(table))
    run = run_dag(dag)
    assert run.state == "success", run.state
    summary = run.xcom("convert")
    assert summary["mode"] == "full" and summary["delta_version"] == kernel_version(table)
    assert_same_rows(StaticTable.from_metadata(summary["metadata_location"]).scan().to_arrow(), kernel_arrow(table))


def kernel_version(table: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(table)).version()


# -- the floor venv only --------------------------------------------------------------------------------------


@floor_only
def test_pyspark_is_absent() -> None:
    """No PySpark with a JVM: neither the pyspark distribution nor its ``pyspark.core``. The ``pyspark`` package name
    itself exists: pyspark-client (the Spark Connect client, which the Airflow Spark provider requires) installs it."""
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("pyspark")
    assert importlib.util.find_spec("pyspark.core") is None
    from airflow_deltaberg.spark.local_rewrite import jvm_pyspark_installed

    assert not jvm_pyspark_installed()


@floor_only
def test_the_floor_venv_holds_the_declared_floors() -> None:
    """apache-airflow and the Spark provider at exactly the lowest versions pyproject.toml declares, and no extra."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    floors = {}
    for text in importlib.metadata.requires("airflow-deltaberg") or []:
        requirement = Requirement(text)
        if requirement.marker is None:
            floors[requirement.name] = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    for name in ("apache-airflow", "apache-airflow-providers-apache-spark"):
        assert floors[name] == [Version(importlib.metadata.version(name))], (name, floors[name])


@floor_only
def test_deltaberg_console_script_converts(copy_fixture) -> None:
    """The acceptance line: a plain install runs ``deltaberg convert`` (the console script, pyspark never blocked)."""
    table = copy_fixture("table-with-dv-small")
    result = subprocess.run([DELTABERG, "convert", str(table), "--format", "json"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    location = json.loads(result.stdout)["metadata_location"]
    assert_same_rows(StaticTable.from_metadata(location).scan().to_arrow(), kernel_arrow(table), "table-with-dv-small")


@floor_only
def test_deltaberg_console_script_enable_asks_for_the_spark_extra(deltalake_table) -> None:
    """pyspark-client's ``pyspark`` is importable here (nothing blocked): a rewrite still stops before Spark."""
    table = deltalake_table("plain")
    result = subprocess.run([DELTABERG, "enable", str(table), "--mode", "rewrite"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "install airflow-deltaberg[spark]" in line
