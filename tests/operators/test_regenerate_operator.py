"""DeltaIcebergRegenerateOperator in one real ``dag.test()`` run: spark-submit of the packaged application on
``spark_default`` = local[*], the version range taken from an upstream task's XCom (as the Delta commit sensor
returns it), the ConversionResult as XCom, the Iceberg table read back with pyiceberg through a SQLite catalog,
and the asset event in the metadata DB. A version the table does not have fails inside the application and
arrives as VersionNotFoundError, without retries; bad ranges fail in the same run without retries and without
Spark."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG, Asset, task
from airflow.sdk.exceptions import AirflowFailException
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog
from support.secrets import STORAGE_SECRET, assert_secret_only_in_private_files

from airflow_deltaberg.core.errors import VersionNotFoundError
from airflow_deltaberg.core.iceberg.convert import ConversionResult
from airflow_deltaberg.operators.regenerate import DeltaIcebergRegenerateOperator, version_bounds

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
NO_DELAY = dt.timedelta(seconds=0)
#: A short-lived JVM: no UI, C1-only JIT and the serial GC (quicker on a 2-core machine).
SPARK_CONF = {"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"name-{i}" for i in ids],
                     "region": ["eu" if i % 2 else "us" for i in ids]})


def canonical(table: pa.Table) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in table.select(["id", "name", "region"]).to_pylist())


def asset_events(dag_id: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (select(AssetEvent, AssetModel.uri).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
             .where(AssetEvent.source_dag_id == dag_id).order_by(AssetEvent.id))
    with create_session() as session:
        return [{"uri": uri, "task_id": e.source_task_id, "extra": dict(e.extra)}
                for e, uri in session.execute(query).all()]


def test_regenerate_through_spark_submit(run_dag, dag_id: str, tmp_path: Path, secret_storage_connection: str,
                                         spark_submit_commands: list[dict[str, Any]]) -> None:
    table = tmp_path / "events"
    write_deltalake(str(table), rows(0, 6), partition_by=["region"])  # version 0
    write_deltalake(str(table), rows(6, 4), mode="append")  # version 1
    DeltaLakeTable(str(table)).create_checkpoint()
    write_deltalake(str(table), rows(10, 5), mode="append")  # version 2: not asked for
    catalog_config = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    caught: dict[str, BaseException | None] = {}

    def remember(context: Any) -> None:
        caught[context["ti"].task_id] = context.get("exception")

    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        @task
        def new_commits() -> dict[str, int]:
            return {"from_version": 0, "to_version": 1}

        DeltaIcebergRegenerateOperator(
            task_id="regenerate", table_uri=str(table), version_range=new_commits(), identifier="db.events",
            catalog_config=catalog_config, conf=SPARK_CONF, deltaberg_conn_id=secret_storage_connection,
            format_version=3,
        )
        DeltaIcebergRegenerateOperator(  # fails inside the Spark application: the error comes back typed
            task_id="too_far", table_uri=str(table), version=7, conf=SPARK_CONF,
            deltaberg_conn_id=secret_storage_connection, retries=2, retry_delay=NO_DELAY, on_failure_callback=remember,
        )
        DeltaIcebergRegenerateOperator(
            task_id="backwards", table_uri=str(table), version_range={"from_version": 3, "to_version": 1},
            retries=2, retry_delay=NO_DELAY, on_failure_callback=remember,
        )
        DeltaIcebergRegenerateOperator(
            task_id="disagreeing", table_uri=str(table), version=2, version_range='{"to_version": 1}',
            retries=2, retry_delay=NO_DELAY, on_failure_callback=remember,
        )
    assert dag.get_task("regenerate").outlets == [Asset(uri="iceberg://deltaberg/db/events")]

    result = run_dag(dag)

    ti = result.ti("regenerate")
    assert (ti.state, ti.try_number) == ("success", 1)
    summary = result.xcom("regenerate")
    assert set(summary) == set(ConversionResult.__dataclass_fields__)
    assert (summary["mode"], summary["delta_version"], summary["identifier"]) == ("full", 1, "db.events")
    assert (summary["records"], summary["files_added"]) == (10, len(DeltaLakeTable(str(table), version=1).file_uris()))
    iceberg = load_catalog("deltaberg", **catalog_config).load_table("db.events")
    assert iceberg.metadata_location == summary["metadata_location"]
    assert iceberg.metadata.format_version == 3  # --format-version reached the application
    read_back = iceberg.scan().to_arrow_batch_reader().read_all()
    assert canonical(read_back) == canonical(DeltaLakeTable(str(table), version=1).to_pyarrow_table())
    assert asset_events(dag_id) == [{
        "uri": "iceberg://deltaberg/db/events", "task_id": "regenerate",
        "extra": {k: summary[k] for k in ("table", "mode", "delta_version", "snapshot_id", "metadata_location",
                                          "records", "identifier")} | {"catalog_name": "deltaberg"},
    }]
    assert_secret_only_in_private_files(spark_submit_commands, STORAGE_SECRET)
    too_far = result.ti("too_far")
    assert (too_far.state, too_far.try_number, too_far.max_tries) == ("failed", 1, 2)  # not retryable
    assert type(caught["too_far"]) is AirflowFailException
    arrived = caught["too_far"].__cause__
    assert type(arrived) is VersionNotFoundError and arrived.retryable is False
    assert arrived.table == str(table) and str(caught["too_far"]) == f"VersionNotFoundError: {arrived}"
    for task_id, message in (("backwards", "from_version 3 > to_version 1"),
                             ("disagreeing", "version 2 and version_range's to_version 1 disagree")):
        failed = result.ti(task_id)
        assert (failed.state, failed.try_number, failed.max_tries) == ("failed", 1, 2), task_id
        assert type(caught[task_id]).__name__ == "AirflowFailException"
        assert message in str(caught[task_id])


@pytest.mark.parametrize(
    ("version", "version_range", "expected"),
    [
        (None, None, (None, None)),
        ("4", None, (None, 4)),
        (None, {"from_version": 2, "to_version": 5}, (2, 5)),
        (None, "{'from_version': 2, 'to_version': 5}", (2, 5)),  # rendered by a template without native objects
        (5, '{"to_version": 5}', (None, 5)),
    ],
)
def test_version_bounds(version: Any, version_range: Any, expected: tuple[int | None, int | None]) -> None:
    assert version_bounds(version, version_range) == expected


@pytest.mark.parametrize("version_range", [{"from_version": 1}, "[1, 2]", {"to_version": "latest"}])
def test_version_bounds_refuses(version_range: Any) -> None:
    with pytest.raises(ValueError):
        version_bounds(None, version_range)
