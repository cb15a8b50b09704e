"""What the plugin page shows, gathered in process (``lake_data.gather``) from a metadata DB that real
``dag.test()`` runs of the convert and validate operators filled, and from the tables on disk: compliance, lag,
the last run, the assets and the lag history of each table; each table read with one listing of its log."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG
from deltalake import write_deltalake

from airflow_deltaberg.assets import catalog_table_uri
from airflow_deltaberg.core.storage import LocalStorage
from airflow_deltaberg.operators import DeltaToIcebergOperator, DeltaValidateOperator
from airflow_deltaberg.plugins import lake_data

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def append(path: Path, first_id: int, count: int) -> None:
    ids = list(range(first_id, first_id + count))
    write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}),
                    mode="append")


def gathered(monkeypatch: pytest.MonkeyPatch, *tables: Path) -> tuple[list[Any], dict[Path, int]]:
    """The page's tables, read afresh (no cached read), and how many times each of ``tables``' logs was listed."""
    from airflow.utils.session import create_session

    listings = dict.fromkeys(tables, 0)
    list_from = LocalStorage.list_from

    def counted(self: LocalStorage, directory: str, start_after: str | None = None) -> list[Any]:
        for table in tables:
            if directory == "_delta_log" and Path(self.root) == table:
                listings[table] += 1
        return list_from(self, directory, start_after)

    monkeypatch.setattr(LocalStorage, "list_from", counted)
    monkeypatch.setattr(lake_data, "_cache", {})
    with create_session() as session:
        return lake_data.gather(session), listings


def test_gather_shows_compliance_lag_and_last_run_of_each_table(
    run_dag: Any, dag_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sales, orders = tmp_path / "sales", tmp_path / "orders"
    append(sales, 0, 5)
    append(orders, 100, 3)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        convert = DeltaToIcebergOperator(task_id="convert_sales", table_uri=str(sales), identifier="lake.sales",
                                         catalog_config=catalog)
        check = DeltaValidateOperator(task_id="validate_sales", table_uri=str(sales), level="compat-v1",
                                      fail_on_violation=False)
        convert >> check
        DeltaValidateOperator(task_id="validate_orders", table_uri=str(orders), level="compat-v1",
                              fail_on_violation=False)
    result = run_dag(dag)
    assert result.state == "success"
    report = result.xcom("validate_sales", key="compliance_report")
    summary = result.xcom("convert_sales")
    append(sales, 10, 2)  # one Delta commit the Iceberg table lacks

    tables, listings = gathered(monkeypatch, sales, orders)

    assert listings == {sales: 1, orders: 1}  # one listing of each log gives its version and commit times
    page = lake_data.find(tables, lake_data.location_key(str(sales)))
    assert page is not None and page.row.error is None
    assert (page.row.name, page.row.delta_version, page.row.iceberg_version, page.row.lag) == ("lake.sales", 1, 0, 1)
    assert page.row.rows == summary["records"] == 5
    assert (page.row.level, page.row.compliant, page.row.error_count) == (
        report["level"], report["compliant"], report["error_count"])
    assert (page.last_run.task_id, page.last_run.state, page.last_run.kind) == ("validate_sales", "success",
                                                                                 "validate")
    assert sorted(r.task_id for r in page.runs) == ["convert_sales", "validate_sales"]
    assert page.assets == (catalog_table_uri("deltaberg", "lake.sales"),)  # the conversion's event
    # The history: converted at version 0 with nothing behind, then the commit read from the log, one behind.
    assert (page.history[-1].delta_version, page.history[-1].iceberg_version) == (1, 0)
    assert any((p.delta_version, p.iceberg_version) == (0, 0) for p in page.history)
    assert [p.when for p in page.history] == sorted(p.when for p in page.history)

    other = lake_data.find(tables, lake_data.location_key(str(orders)))
    assert other is not None and other.row.error is None
    assert (other.row.delta_version, other.row.iceberg_version, other.row.lag) == (0, None, 1)
    assert other.row.status in ("compliant", "not compliant")
    assert (other.last_run.task_id, other.last_run.kind) == ("validate_orders", "validate")
    assert other.history and other.history[-1].delta_version == 0 and other.history[-1].iceberg_version is None
