"""Fixtures of the enable tests: the ONE Spark session of the test run (shared with tests/spark), the Airflow
metadata DB and ``dag.test()`` runner of tests/airflow, and small Delta tables written by deltalake.

Fixtures of another directory's conftest are not visible here, so both conftests are loaded by path under unique
module names and their fixtures re-declared on the same functions.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

TESTS = Path(__file__).resolve().parents[1]


def _load(relative: str, name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TESTS / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_spark = _load("spark/conftest.py", "deltaberg_enable_spark_conftest")
_airflow = _load("airflow/conftest.py", "deltaberg_enable_airflow_conftest")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs the local Spark session with Delta (tests/spark)")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The local Spark session with Delta (and Kernel/Iceberg jars): the same one tests/spark uses."""
    yield from _spark.spark_session()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    return _airflow.airflow_db.__wrapped__()  # type: ignore[attr-defined]


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[..., Any]:
    """``run_dag(dag, **test_kwargs)``: registers ``dag`` and runs ``dag.test()`` (tests/airflow/conftest.py)."""

    def _run(dag: Any, **kwargs: Any) -> Any:
        _airflow.register_dag(dag)
        return _airflow.DagRunResult(dag.test(**kwargs))

    return _run


@pytest.fixture
def dag_id(request: pytest.FixtureRequest) -> str:
    return "deltaberg_enable_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:180]


# -- tables ----------------------------------------------------------------------------------------------


def sample_rows(n: int = 6) -> pa.Table:
    """Rows with a partition-friendly string column, a nested list and struct, and nulls."""
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"n{i}" if i % 4 else None for i in range(n)], pa.string()),
        "part": pa.array(["a" if i % 2 else "b" for i in range(n)], pa.string()),
        "tags": pa.array([[f"t{i}", "x"] if i % 3 else None for i in range(n)], pa.list_(pa.string())),
        "point": pa.array([{"x": float(i), "y": -float(i)} for i in range(n)],
                          pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    })


@pytest.fixture
def rows() -> pa.Table:
    return sample_rows()


@pytest.fixture
def deltalake_table(tmp_path: Path, rows: pa.Table) -> Callable[..., Path]:
    """``deltalake_table(name, data=None, partition_by=None, configuration=None, appends=0)`` writes a table
    with deltalake (one file per write) and returns its root."""
    from deltalake import write_deltalake

    def _make(name: str, data: pa.Table | None = None, partition_by: list[str] | None = None,
              configuration: dict[str, str] | None = None, appends: int = 0) -> Path:
        root = tmp_path / name
        data = rows if data is None else data
        write_deltalake(str(root), data, partition_by=partition_by, configuration=configuration)
        for _ in range(appends):
            write_deltalake(str(root), data, mode="append")
        return root

    return _make
