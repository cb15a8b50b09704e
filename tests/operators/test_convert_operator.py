"""DeltaToIcebergOperator in real ``dag.test()`` runs: task states, the XCom summary, the Iceberg table read back
through a SQLite catalog with pyiceberg, and the asset events recorded in the metadata DB."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import DAG, Asset, AssetAlias
from deltalake import DeltaTable as DeltalakeTable
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog
from pyiceberg.table import StaticTable
from support.flaky_fs import FlakyMemoryFileSystem, flaky_store
from support.small_disk import fill, small_disk

from airflow_deltaberg.operators import DeltaToIcebergOperator
from airflow_deltaberg.operators.convert import catalog_table_uri, location_uri

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
NO_DELAY = dt.timedelta(seconds=0)
SUMMARY_KEYS = {
    "table", "mode", "delta_version", "snapshot_id", "metadata_location", "files_added", "files_removed",
    "records", "seconds", "identifier", "snapshots_written", "snapshots_expired",
}


def make_dag(dag_id: str, **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


def rows(first_id: int, count: int) -> pa.Table:
    ids = list(range(first_id, first_id + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"name-{i}" for i in ids],
            "region": ["eu" if i % 2 else "us" for i in ids],
        }
    )


def write_delta(path: Path, data: pa.Table, mode: str = "error", partition_by: list[str] | None = None) -> Path:
    """Write with deltalake; partitioned by region unless ``partition_by`` says otherwise (appends keep the
    table's partitioning)."""
    if mode == "error" and partition_by is None:
        partition_by = ["region"]
    write_deltalake(str(path), data, mode=mode, partition_by=partition_by or None)
    return path


def delta_files(path: Path) -> int:
    return len(DeltalakeTable(str(path)).file_uris())


def delta_rows(path: Path) -> list[dict[str, Any]]:
    return DeltalakeTable(str(path)).to_pyarrow_table().sort_by("id").to_pylist()


def iceberg_rows(catalog_config: dict[str, Any], identifier: str) -> list[dict[str, Any]]:
    """The rows pyiceberg reads for ``identifier`` through a freshly opened catalog."""
    table = load_catalog("deltaberg", **catalog_config).load_table(identifier)
    return table.scan().to_arrow().sort_by("id").to_pylist()


def catalog_location(catalog_config: dict[str, Any], identifier: str) -> str:
    return load_catalog("deltaberg", **catalog_config).load_table(identifier).metadata_location


def asset_events(dag_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
    """The asset events the DAG's tasks emitted (oldest first), from the metadata DB."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (
        select(AssetEvent, AssetModel.uri)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .where(AssetEvent.source_dag_id == dag_id)
        .order_by(AssetEvent.id)
    )
    if run_id is not None:
        query = query.where(AssetEvent.source_run_id == run_id)
    with create_session() as session:
        return [
            {
                "uri": uri,
                "task_id": event.source_task_id,
                "run_id": event.source_run_id,
                "extra": dict(event.extra),
                "aliases": sorted(alias.name for alias in event.source_aliases),
            }
            for event, uri in session.execute(query).all()
        ]


def expected_extra(summary: dict[str, Any], catalog_name: str | None = "deltaberg") -> dict[str, Any]:
    extra = {k: summary[k] for k in ("table", "mode", "delta_version", "snapshot_id", "metadata_location",
                                     "files_added", "records")}
    if summary["identifier"] is not None:
        extra.update(identifier=summary["identifier"], catalog_name=catalog_name)
    return extra


@pytest.fixture
def catalog_config(tmp_path: Path) -> dict[str, Any]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}


@pytest.fixture
def events_table(tmp_path: Path) -> Path:
    """A deltalake-written table partitioned by region (two files), version 0, ids 0..4."""
    return write_delta(tmp_path / "events", rows(0, 5))


def test_convert_register_then_up_to_date_then_new_version(
    run_dag, dag_id, events_table: Path, catalog_config: dict[str, Any]
) -> None:
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(
            task_id="convert", table_uri=str(events_table), identifier="db.events", catalog_config=catalog_config
        )
    asset_uri = "iceberg://deltaberg/db/events"
    assert dag.get_task("convert").outlets == [Asset(uri=asset_uri)]
    assert dag.get_task("convert").inlets == [Asset(uri="delta://file" + str(events_table))]

    # 1. first conversion: Delta version 0 registered in the catalog
    first = run_dag(dag)

    assert first.state == "success"
    ti = first.ti("convert")
    assert (ti.state, ti.try_number) == ("success", 1)
    summary = first.xcom("convert")
    assert SUMMARY_KEYS <= set(summary)
    assert summary["table"] == str(events_table)
    assert (summary["mode"], summary["delta_version"], summary["identifier"]) == ("full", 0, "db.events")
    assert (summary["records"], summary["files_added"], summary["files_removed"]) == (5, 2, 0)
    assert delta_files(events_table) == 2
    assert summary["metadata_location"] == str(events_table / "_iceberg" / "metadata" / "v1.metadata.json")
    assert Path(summary["metadata_location"]).is_file()
    assert (events_table / "_iceberg" / "metadata" / "version-hint.text").read_text() == "1"
    assert catalog_location(catalog_config, "db.events") == summary["metadata_location"]
    assert iceberg_rows(catalog_config, "db.events") == delta_rows(events_table) == rows(0, 5).to_pylist()
    iceberg = load_catalog("deltaberg", **catalog_config).load_table("db.events")
    assert iceberg.metadata.current_snapshot_id == summary["snapshot_id"]
    assert asset_events(dag_id, first.dag_run.run_id) == [
        {"uri": asset_uri, "task_id": "convert", "run_id": first.dag_run.run_id, "extra": expected_extra(summary),
         "aliases": []}
    ]

    # 2. the Delta table did not change: nothing is written, the catalog stays, an event still tells "up-to-date"
    second = run_dag(dag)

    assert second.ti("convert").state == "success"
    unchanged = second.xcom("convert")
    assert unchanged["mode"] == "up-to-date"
    assert (unchanged["delta_version"], unchanged["files_added"], unchanged["records"]) == (0, 0, 5)
    assert unchanged["metadata_location"] == summary["metadata_location"]
    assert unchanged["snapshot_id"] == summary["snapshot_id"]
    published = (events_table / "_iceberg" / "metadata").glob("v*.metadata.json")
    assert sorted(p.name for p in published) == ["v1.metadata.json"]
    assert catalog_location(catalog_config, "db.events") == summary["metadata_location"]
    (event,) = asset_events(dag_id, second.dag_run.run_id)
    assert (event["uri"], event["extra"]) == (asset_uri, expected_extra(unchanged))

    # 3. append to the Delta table: a new Iceberg snapshot for the commit, the catalog moves, the rows catch up
    write_delta(events_table, rows(5, 3), mode="append")
    assert delta_files(events_table) == 4
    third = run_dag(dag)

    assert third.ti("convert").state == "success"
    caught_up = third.xcom("convert")
    assert (caught_up["mode"], caught_up["delta_version"], caught_up["snapshots_written"]) == ("incremental", 1, 1)
    assert (caught_up["records"], caught_up["files_added"], caught_up["files_removed"]) == (8, 2, 0)
    assert caught_up["metadata_location"] == str(events_table / "_iceberg" / "metadata" / "v2.metadata.json")
    assert Path(caught_up["metadata_location"]).is_file()
    assert caught_up["snapshot_id"] != summary["snapshot_id"]
    assert catalog_location(catalog_config, "db.events") == caught_up["metadata_location"]
    assert iceberg_rows(catalog_config, "db.events") == delta_rows(events_table) == rows(0, 8).to_pylist()
    (event,) = asset_events(dag_id, third.dag_run.run_id)
    assert (event["uri"], event["extra"]) == (asset_uri, expected_extra(caught_up))
    assert event["extra"]["delta_version"] == 1
    assert len(asset_events(dag_id)) == 3  # one per successful run


def test_full_forces_a_full_snapshot_of_an_up_to_date_table(
    run_dag, dag_id, events_table: Path, catalog_config: dict[str, Any]
) -> None:
    with make_dag(dag_id) as dag:
        first = DeltaToIcebergOperator(
            task_id="convert", table_uri=str(events_table), identifier="db.events", catalog_config=catalog_config
        )
        again = DeltaToIcebergOperator(
            task_id="convert_full", table_uri=str(events_table), identifier="db.events",
            catalog_config=catalog_config, full=True,
        )
        first >> again

    result = run_dag(dag)

    assert result.ti("convert").state == result.ti("convert_full").state == "success"
    before, forced = result.xcom("convert"), result.xcom("convert_full")
    assert (before["mode"], forced["mode"]) == ("full", "full")  # not "up-to-date"
    assert (forced["delta_version"], forced["records"], forced["files_added"]) == (0, 5, 2)
    assert forced["files_removed"] == 2  # the full snapshot replaces the first one's files
    assert forced["snapshot_id"] != before["snapshot_id"]
    assert forced["metadata_location"] == str(events_table / "_iceberg" / "metadata" / "v2.metadata.json")
    assert catalog_location(catalog_config, "db.events") == forced["metadata_location"]
    assert iceberg_rows(catalog_config, "db.events") == delta_rows(events_table)
    events = asset_events(dag_id, result.dag_run.run_id)
    assert [(e["task_id"], e["extra"]["snapshot_id"]) for e in events] == [
        ("convert", before["snapshot_id"]), ("convert_full", forced["snapshot_id"])
    ]
    assert {e["uri"] for e in events} == {"iceberg://deltaberg/db/events"}


def test_format_version_3_upgrades_the_table_and_a_downgrade_fails_without_retrying(
    run_dag, dag_id, events_table: Path, catalog_config: dict[str, Any]
) -> None:
    with make_dag(dag_id) as dag:
        v2 = DeltaToIcebergOperator(
            task_id="v2", table_uri=str(events_table), identifier="db.events", catalog_config=catalog_config
        )
        v3 = DeltaToIcebergOperator(
            task_id="v3", table_uri=str(events_table), identifier="db.events", catalog_config=catalog_config,
            format_version=3,
        )
        back = DeltaToIcebergOperator(
            task_id="back_to_v2", table_uri=str(events_table), identifier="db.events",
            catalog_config=catalog_config, format_version=2, full=True, retries=2,
        )
        v2 >> v3 >> back

    result = run_dag(dag)

    assert (result.ti("v2").state, result.ti("v3").state, result.ti("back_to_v2").state) == \
        ("success", "success", "failed")
    assert result.ti("back_to_v2").try_number == 1  # not retried
    upgraded = result.xcom("v3")
    assert upgraded["mode"] == "full"
    metadata = StaticTable.from_metadata(upgraded["metadata_location"]).metadata
    assert metadata.format_version == 3 and metadata.next_row_id == 5
    assert catalog_location(catalog_config, "db.events") == upgraded["metadata_location"]
    assert iceberg_rows(catalog_config, "db.events") == delta_rows(events_table)


def test_snapshot_expiry_by_count_and_age(
    run_dag, dag_id, events_table: Path, catalog_config: dict[str, Any]
) -> None:
    with make_dag(dag_id) as dag:
        first = DeltaToIcebergOperator(task_id="convert", table_uri=str(events_table), identifier="db.events",
                                       catalog_config=catalog_config)
        forced = DeltaToIcebergOperator(task_id="full", table_uri=str(events_table), identifier="db.events",
                                        catalog_config=catalog_config, full=True)
        by_age = DeltaToIcebergOperator(task_id="by_age", table_uri=str(events_table), identifier="db.events",
                                        catalog_config=catalog_config, max_snapshot_age=dt.timedelta(days=1))
        by_count = DeltaToIcebergOperator(task_id="by_count", table_uri=str(events_table), identifier="db.events",
                                          catalog_config=catalog_config, retain_snapshots=1)
        first >> forced >> by_age >> by_count

    result = run_dag(dag)

    assert result.ti("by_count").state == "success"
    assert result.xcom("by_age")["snapshots_expired"] == 0  # both snapshots are minutes old
    assert result.xcom("by_count")["snapshots_expired"] == 1
    table = load_catalog("deltaberg", **catalog_config).load_table("db.events")
    assert [s.snapshot_id for s in table.metadata.snapshots] == [result.xcom("full")["snapshot_id"]]
    assert iceberg_rows(catalog_config, "db.events") == delta_rows(events_table)
    assert delta_files(events_table) == 2  # data files untouched


def test_unpartitioned_table(run_dag, dag_id, tmp_path: Path, catalog_config: dict[str, Any]) -> None:
    table = write_delta(tmp_path / "flat", rows(0, 4), partition_by=[])
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(task_id="convert", table_uri=str(table), identifier="db.flat",
                               catalog_config=catalog_config)

    result = run_dag(dag)

    assert result.ti("convert").state == "success"
    assert result.xcom("convert")["records"] == 4
    assert iceberg_rows(catalog_config, "db.flat") == delta_rows(table)


def test_catalog_from_connection_with_overrides(
    run_dag, dag_id, tmp_path: Path, events_table: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    conn_catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'conn-catalog.db'}"}
    secret = "s3cr3t-value-never-logged"
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG",
        json.dumps({"conn_type": "generic", "extra": {**conn_catalog, "s3.secret-access-key": secret}}),
    )
    other = write_delta(tmp_path / "other", rows(100, 2))
    override = {"uri": f"sqlite:///{tmp_path / 'override-catalog.db'}"}
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(
            task_id="from_conn", table_uri=str(events_table), identifier="lake.events",
            catalog_conn_id="iceberg_catalog",
        )
        DeltaToIcebergOperator(
            task_id="overridden", table_uri=str(other), identifier="lake.other",
            catalog_conn_id="iceberg_catalog", catalog_config=override, catalog_name="lakehouse",
        )

    result = run_dag(dag)

    assert result.ti("from_conn").state == "success"
    assert result.ti("overridden").state == "success"
    from_conn = result.xcom("from_conn")
    assert (from_conn["mode"], from_conn["identifier"], from_conn["records"]) == ("full", "lake.events", 5)
    assert iceberg_rows(conn_catalog, "lake.events") == delta_rows(events_table)
    # the override's uri won: the second table is in the override catalog, under its catalog name, only
    override_catalog = load_catalog("lakehouse", **{**conn_catalog, **override})
    assert override_catalog.load_table("lake.other").scan().to_arrow().sort_by("id").to_pylist() == delta_rows(other)
    assert not load_catalog("lakehouse", **conn_catalog).table_exists("lake.other")
    assert not load_catalog("deltaberg", **{**conn_catalog, **override}).table_exists("lake.events")
    events = {e["task_id"]: e for e in asset_events(dag_id, result.dag_run.run_id)}
    assert events["from_conn"]["uri"] == "iceberg://deltaberg/lake/events"
    assert events["overridden"]["uri"] == "iceberg://lakehouse/lake/other"
    assert events["overridden"]["extra"] == expected_extra(result.xcom("overridden"), catalog_name="lakehouse")
    # the task logs name the catalog properties with the secret masked
    out = capfd.readouterr()
    logged = out.out + out.err
    assert "Converting" in logged and "lake.events" in logged
    assert secret not in logged
    assert "'s3.secret-access-key': '***'" in logged


def test_without_identifier_the_asset_is_the_table_location(run_dag, dag_id, events_table: Path) -> None:
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(task_id="convert", table_uri=str(events_table))
    asset_uri = "file://" + str(events_table)
    assert dag.get_task("convert").outlets == [Asset(uri=asset_uri)]

    result = run_dag(dag)

    assert result.ti("convert").state == "success"
    summary = result.xcom("convert")
    assert (summary["mode"], summary["identifier"], summary["records"]) == ("full", None, 5)
    metadata = Path(summary["metadata_location"])
    assert metadata.is_file() and metadata.parent == events_table / "_iceberg" / "metadata"
    read_back = StaticTable.from_metadata(str(metadata)).scan().to_arrow().sort_by("id").to_pylist()
    assert read_back == delta_rows(events_table)
    assert asset_events(dag_id, result.dag_run.run_id) == [
        {"uri": asset_uri, "task_id": "convert", "run_id": result.dag_run.run_id,
         "extra": expected_extra(summary), "aliases": []}
    ]


def test_templated_fields_emit_the_rendered_table_through_an_alias(
    run_dag, dag_id, events_table: Path, catalog_config: dict[str, Any]
) -> None:
    write_delta(events_table, rows(5, 3), mode="append")  # version 1
    params = {"table": str(events_table), "name": "events_v0", "version": 0, "catalog": catalog_config}
    with make_dag(dag_id, params=params) as dag:
        DeltaToIcebergOperator(
            task_id="convert",
            table_uri="{{ params.table }}",
            identifier="db.{{ params.name }}",
            version="{{ params.version }}",
            catalog_config={"type": "sql", "uri": "{{ params.catalog.uri }}"},
        )
    alias = AssetAlias(name=f"deltaberg-convert:{dag_id}.convert")
    assert dag.get_task("convert").outlets == [alias]
    assert dag.get_task("convert").inlets == []  # the Delta table is known at run time only

    result = run_dag(dag)

    assert result.ti("convert").state == "success"
    summary = result.xcom("convert")
    assert (summary["mode"], summary["delta_version"], summary["records"]) == ("full", 0, 5)
    assert summary["table"] == str(events_table) and summary["identifier"] == "db.events_v0"
    assert iceberg_rows(catalog_config, "db.events_v0") == rows(0, 5).to_pylist()  # version 0, not the latest
    assert asset_events(dag_id, result.dag_run.run_id) == [
        {"uri": "iceberg://deltaberg/db/events_v0", "task_id": "convert", "run_id": result.dag_run.run_id,
         "extra": expected_extra(summary), "aliases": [alias.name]}
    ]


def test_whole_catalog_config_template_with_native_rendering(
    run_dag, dag_id, events_table: Path, catalog_config: dict[str, Any]
) -> None:
    with make_dag(dag_id, params={"catalog": catalog_config}, render_template_as_native_obj=True) as dag:
        DeltaToIcebergOperator(
            task_id="convert", table_uri=str(events_table), identifier="db.events",
            catalog_config="{{ params.catalog }}",
        )

    result = run_dag(dag)

    assert result.ti("convert").state == "success"
    assert result.xcom("convert")["records"] == 5
    assert iceberg_rows(catalog_config, "db.events") == delta_rows(events_table)


def test_an_unsupported_type_fails_at_the_first_try_without_writing(
    run_dag, dag_id, copy_fixture, catalog_config: dict[str, Any]
) -> None:
    table = copy_fixture("void-column")
    caught: list[BaseException | None] = []
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(
            task_id="convert",
            table_uri=str(table),
            identifier="db.dv",
            catalog_config=catalog_config,
            retries=3,
            retry_delay=NO_DELAY,
            on_failure_callback=lambda context: caught.append(context.get("exception")),
        )

    result = run_dag(dag)

    assert result.state == "failed"
    ti = result.ti("convert")
    assert (ti.state, ti.try_number, ti.max_tries) == ("failed", 1, 3)  # retries=3 were available and not used
    (exc,) = caught
    assert type(exc).__name__ == "AirflowFailException"
    assert "UnsupportedTypeError" in str(exc) and str(table) in str(exc)
    assert not (table / "_iceberg" / "metadata").exists()
    assert result.xcom("convert") is None
    assert asset_events(dag_id) == []
    assert not load_catalog("deltaberg", **catalog_config).table_exists("db.dv")


def test_bad_inputs_fail_without_retrying(
    run_dag, dag_id, tmp_path: Path, catalog_config: dict[str, Any]
) -> None:
    events_table = write_delta(tmp_path / "events", rows(0, 2))
    caught: dict[str, BaseException | None] = {}
    with make_dag(dag_id, params={"catalog": catalog_config}) as dag:
        for task_id, uri, kwargs in (
            ("missing", str(tmp_path / "no-table"), {}),
            ("bad_version", str(events_table), {"version": "latest"}),
            ("future_version", str(events_table), {"version": 7}),
            ("string_catalog_config", str(events_table),
             {"identifier": "db.t", "catalog_config": "{{ params.catalog }}"}),
        ):
            DeltaToIcebergOperator(
                task_id=task_id, table_uri=uri, retries=2, retry_delay=NO_DELAY,
                on_failure_callback=lambda context: caught.update({context["ti"].task_id: context.get("exception")}),
                **kwargs,
            )

    result = run_dag(dag)

    for task_id in ("missing", "bad_version", "future_version", "string_catalog_config"):
        ti = result.ti(task_id)
        assert (ti.state, ti.try_number, ti.max_tries) == ("failed", 1, 2), task_id
        assert type(caught[task_id]).__name__ == "AirflowFailException", task_id
        assert result.xcom(task_id) is None
    assert "NotADeltaTableError" in str(caught["missing"]) and str(tmp_path / "no-table") in str(caught["missing"])
    assert "version must be an integer" in str(caught["bad_version"])
    assert "VersionNotFoundError" in str(caught["future_version"])
    assert "catalog_config must render to a mapping, not str" in str(caught["string_catalog_config"])
    assert not (events_table / "_iceberg" / "metadata").exists()
    assert asset_events(dag_id) == []


@pytest.fixture
def flaky_table(tmp_path: Path) -> Any:
    """A table (version 0, ids 0..4) copied into the flaky in-memory store."""
    with flaky_store() as flaky:
        local = write_delta(tmp_path / "source", rows(0, 5))
        location = "flakymem://lake/flaky-table"
        fs = flaky()
        for path in sorted(local.rglob("*")):
            if path.is_file():
                fs.pipe_file(f"{location}/{path.relative_to(local).as_posix()}", path.read_bytes())
        yield location


def test_storage_error_is_retried(run_dag, dag_id, flaky_table: str) -> None:
    FlakyMemoryFileSystem.failures = 1  # the first try's listing of _delta_log fails
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(task_id="convert", table_uri=flaky_table, retries=2, retry_delay=NO_DELAY)

    result = run_dag(dag)

    ti = result.ti("convert")
    assert (ti.state, ti.try_number) == ("success", 2)
    assert FlakyMemoryFileSystem.failures == 0
    summary = result.xcom("convert")
    assert (summary["mode"], summary["records"]) == ("full", 5)
    assert summary["metadata_location"] == f"{flaky_table}/_iceberg/metadata/v1.metadata.json"
    assert FlakyMemoryFileSystem().exists(summary["metadata_location"])
    (event,) = asset_events(dag_id, result.dag_run.run_id)
    assert event["uri"] == flaky_table


def test_a_refused_write_fails_without_retrying(run_dag, dag_id, tmp_path: Path) -> None:
    """A full disk is StorageWriteRefusedError, not retryable: the task fails at its first try (its retries would
    meet the same refusal)."""
    caught: list[BaseException | None] = []
    with small_disk(tmp_path / "disk") as disk:
        table = write_delta(disk / "t", rows(0, 3))
        fill(disk)
        with make_dag(dag_id) as dag:
            DeltaToIcebergOperator(task_id="convert", table_uri=str(table), retries=2, retry_delay=NO_DELAY,
                                   on_failure_callback=lambda context: caught.append(context.get("exception")))
        result = run_dag(dag)
    ti = result.ti("convert")
    assert (ti.state, ti.try_number, ti.max_tries) == ("failed", 1, 2)
    (exc,) = caught
    assert type(exc).__name__ == "AirflowFailException"
    assert "StorageWriteRefusedError" in str(exc) and "No space left" in str(exc) and str(table) in str(exc)


def test_asset_uris() -> None:
    assert catalog_table_uri("deltaberg", "db.events") == "iceberg://deltaberg/db/events"
    assert catalog_table_uri("prod", "a.b.my table") == "iceberg://prod/a/b/my%20table"
    assert location_uri("/data/lake/events/") == "file:///data/lake/events"
    assert location_uri("s3://bucket/lake/events/") == "s3://bucket/lake/events"
    # Airflow keeps these URIs as they are (no normalizer for iceberg://, a no-op one for file://)
    for uri in ("iceberg://deltaberg/db/events", "file:///data/lake/events", "s3://bucket/lake/events"):
        assert Asset(uri=uri).uri == uri
    with pytest.raises(ValueError):
        catalog_table_uri("deltaberg", "db..events")



def test_verify_stats_fails_on_stats_that_do_not_cover_a_file_without_retrying(
    run_dag, dag_id, tmp_path: Path, catalog_config: dict[str, Any]
) -> None:
    table = write_delta(tmp_path / "events", rows(0, 5))
    commit = table / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    add = next(a["add"] for a in actions if "add" in a)
    stats = json.loads(add["stats"])
    stats["maxValues"]["id"] -= 1  # below the file's largest id: readers would skip that row
    add["stats"] = json.dumps(stats)
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    caught: list[BaseException | None] = []
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(task_id="checked", table_uri=str(table), identifier="db.lies",
                               catalog_config=catalog_config, verify_stats=True, retries=3, retry_delay=NO_DELAY,
                               on_failure_callback=lambda context: caught.append(context.get("exception")))

    result = run_dag(dag)

    ti = result.ti("checked")
    assert (ti.state, ti.try_number) == ("failed", 1)
    (exc,) = caught
    assert type(exc).__name__ == "AirflowFailException"
    assert "StatsMismatchError" in str(exc) and add["path"] in str(exc) and "version 0" in str(exc)
    assert not (table / "_iceberg").exists()
    assert not load_catalog("deltaberg", **catalog_config).table_exists("db.lies")


def test_strict_fails_on_millisecond_timestamps_without_retrying_and_the_warning_reaches_xcom_otherwise(
    run_dag, dag_id, tmp_path: Path, catalog_config: dict[str, Any]
) -> None:
    """A data file storing INT64 TIMESTAMP_MILLIS (Iceberg Java's row-group filter skips its matching rows): a
    warning in the XCom's ``warnings`` (and the log), a failure without retries under ``strict``."""
    import pyarrow.parquet as pq

    table = tmp_path / "events"
    base = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    write_deltalake(str(table), pa.table({"id": pa.array([1, 2], pa.int64()),
                                          "time": pa.array([base, base + dt.timedelta(hours=9)],
                                                           pa.timestamp("us", "UTC"))}))
    (data_file,) = table.glob("*.parquet")
    pq.write_table(pq.read_table(data_file), data_file, coerce_timestamps="ms")  # Delta allows milliseconds
    commit = table / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in actions:
        if "add" in action:
            action["add"]["size"] = data_file.stat().st_size
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    caught: list[BaseException | None] = []
    with make_dag(dag_id) as dag:
        DeltaToIcebergOperator(task_id="strict", table_uri=str(table), identifier="db.millis",
                               catalog_config=catalog_config, strict=True, retries=3, retry_delay=NO_DELAY,
                               on_failure_callback=lambda context: caught.append(context.get("exception")))
        DeltaToIcebergOperator(task_id="warned", table_uri=str(table), identifier="db.millis",
                               catalog_config=catalog_config, trigger_rule="all_done")
    dag.get_task("strict") >> dag.get_task("warned")

    result = run_dag(dag)

    ti = result.ti("strict")
    assert (ti.state, ti.try_number) == ("failed", 1)
    (exc,) = caught
    assert "MisreadDataFileError" in str(exc) and data_file.name in str(exc) and "TIMESTAMP_MILLIS" in str(exc)
    assert result.ti("warned").state == "success"
    (warning,) = result.xcom("warned")["warnings"]
    assert "TIMESTAMP_MILLIS" in warning and data_file.name in warning
    assert iceberg_rows(catalog_config, "db.millis") == delta_rows(table)
