"""OpenLineage from the operators: the dataset naming rule, and one real ``dag.test()`` of every operator with
Airflow's OpenLineage provider sending its events over HTTP to a recording server on loopback. The run happens in a
process of its own (lineage_run.py): the provider reads its settings once a process, and the rest of the test run
keeps it off. Checked: the events name the Delta table (input) and the Iceberg table beside it (output) after the
naming spec, with their schema, version, storage, symlinks and column lineage facets; validation's rules arrive as
data-quality assertions; a failed conversion still names its datasets; the spark-submit of the regeneration
carries OpenLineage's parent job and transport settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.environment import REPO_ROOT

from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.openlineage.naming import catalog_namespace, dataset_name, iceberg_dataset_name

SCRIPT = Path(__file__).with_name("lineage_run.py")


@pytest.mark.parametrize(("location", "namespace", "name"), [
    ("/data/lake/sales/", "file", "/data/lake/sales"),
    ("file:///data/lake/sales", "file", "/data/lake/sales"),
    ("s3://lake/sales/2026", "s3://lake", "sales/2026"),
    ("s3a://key:secret@lake/sales", "s3://lake", "sales"),
    ("gs://lake/sales", "gs://lake", "sales"),
    ("gcs://lake/sales", "gs://lake", "sales"),
    ("abfss://box@acct.dfs.core.windows.net/sales", "abfss://box@acct.dfs.core.windows.net", "sales"),
    ("hdfs://user:pw@nn:8020/lake/sales?x=1#y", "hdfs://nn:8020", "lake/sales"),
])
def test_dataset_names_follow_the_naming_spec(location: str, namespace: str, name: str) -> None:
    assert dataset_name(location) == (namespace, name)


def test_iceberg_and_catalog_names() -> None:
    assert iceberg_dataset_name("/data/sales") == ("file", "/data/sales/_iceberg")
    assert iceberg_dataset_name("s3://lake/sales/") == ("s3://lake", "sales/_iceberg")
    assert catalog_namespace("deltaberg", "https://user:token@rest.example.com:8181/api?key=x") == (
        "https://rest.example.com:8181/api")
    assert catalog_namespace("deltaberg", "sqlite:////data/catalog.db") == "sqlite:////data/catalog.db"
    assert catalog_namespace("lake", None) == "iceberg://lake"


def events_by_task(requests: list[Any], dag_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(task id, event type) -> the last such OpenLineage run event the server received for the DAG's tasks."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for request in requests:
        event = request.json()
        job = event.get("job", {}).get("name", "")
        if job.startswith(f"{dag_id}.") and "eventType" in event:
            found[(job[len(dag_id) + 1:], event["eventType"])] = event
    return found


def only(datasets: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(datasets) == 1, datasets
    return datasets[0]


def spark_conf(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")


def application_of(command: list[str]) -> str:
    """The file name of the application a spark-submit command line submits (the first ``.py`` argument)."""
    return next(Path(arg).name for arg in command if arg.endswith(".py"))


def columns(dataset: dict[str, Any]) -> list[str]:
    return [f["name"] for f in dataset["facets"]["schema"]["fields"]]


@pytest.mark.spark  # the regeneration is a spark-submit job
def test_every_operator_reports_its_datasets_and_facets(airflow_db: Path, dag_id: str, webhook_server: Any,
                                                        tmp_path: Path) -> None:
    plain = tmp_path / "events"
    write_deltalake(str(plain), pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "region": ["eu", "us", "eu"]}),
                    partition_by=["region"])
    spark_table = tmp_path / "spark_events"
    write_deltalake(str(spark_table), pa.table({"id": [1, 2], "name": ["a", "b"]}))
    catalog_db = tmp_path / "catalog.db"
    catalog = {"type": "sql", "uri": f"sqlite:///{catalog_db}"}
    # Converted here at version 0 and appended to: the regeneration is incremental, so its application stays in
    # the driver (no Spark session, no Spark job): its lineage and its spark-submit's conf are under test, not the
    # executors' manifests (test_regenerate.py, test_regenerate_operator.py).
    convert(str(spark_table), catalog_config=catalog, identifier="db.spark")
    write_deltalake(str(spark_table), pa.table({"id": [3], "name": ["c"]}), mode="append")
    rewrite = tmp_path / "rewrite"  # an int8 column: enabling IcebergWriterCompatV1 rewrites the data with Spark
    write_deltalake(str(rewrite), pa.table({"id": pa.array([1, 2], pa.int64()), "small": pa.array([1, -1], pa.int8())}))
    settings = {
        "dag_id": dag_id, "plain": str(plain), "rewrite": str(rewrite),
        "spark": str(spark_table), "missing": str(tmp_path / "missing"), "commands": str(tmp_path / "commands.json"),
        "result": str(tmp_path / "result.json"),
        "catalog": catalog,
    }
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # this environment's spark-submit
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "http", "url": webhook_server.url}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "deltaberg-tests",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "True",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO": "True",
    }
    process = subprocess.run([sys.executable, str(SCRIPT), json.dumps(settings)], env=env, capture_output=True,
                             text=True, timeout=600, cwd=REPO_ROOT)
    result = tmp_path / "result.json"
    assert process.returncode == 0 and result.exists(), process.stdout[-3000:] + process.stderr[-3000:]
    run = json.loads(result.read_text())
    assert run["states"] == {"validate": "success", "convert": "success", "enable": "success",
                             "regenerate": "success", "broken": "failed"}, process.stdout[-3000:]
    events = events_by_task(webhook_server.requests, dag_id)

    # convert: the Delta table in, the Iceberg table beside it out, versions and schema from the run
    converted = run["xcom"]["convert"]
    event = events[("convert", "COMPLETE")]
    delta, iceberg = only(event["inputs"]), only(event["outputs"])
    assert (delta["namespace"], delta["name"]) == ("file", str(plain))
    assert (iceberg["namespace"], iceberg["name"]) == ("file", f"{plain}/_iceberg")
    assert delta["facets"]["storage"]["storageLayer"] == "delta"
    assert delta["facets"]["version"]["datasetVersion"] == str(converted["delta_version"]) == "0"
    assert iceberg["facets"]["storage"]["storageLayer"] == "iceberg"
    assert iceberg["facets"]["version"]["datasetVersion"] == str(converted["snapshot_id"])
    assert iceberg["facets"]["symlinks"]["identifiers"] == [
        {"namespace": f"sqlite:///{catalog_db}", "name": "db.events", "type": "TABLE"}]
    assert columns(delta) == columns(iceberg) == ["id", "name", "region"]
    lineage = iceberg["facets"]["columnLineage"]["fields"]
    assert sorted(lineage) == ["id", "name", "region"]
    for column, field in lineage.items():
        assert [(f["namespace"], f["name"], f["field"]) for f in field["inputFields"]] == [
            ("file", str(plain), column)]
        assert field["inputFields"][0]["transformations"][0]["subtype"] == "IDENTITY"

    # validate: every rule checked is an assertion; the failed ones are the report's errors
    report = run["report"]
    event = events[("validate", "COMPLETE")]
    checked = only(event["inputs"])
    assert (checked["namespace"], checked["name"]) == ("file", str(plain))
    assertions = checked["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [a["assertion"] for a in assertions] == report["rules_checked"]
    failed = {v["rule_id"] for v in report["violations"] if v["severity"] == "error"}
    assert failed and {a["assertion"] for a in assertions if not a["success"]} == failed
    assert columns(checked) == ["id", "name", "region"]
    assert run["lineage_replays"] == []  # the schemas come from what the operators loaded, not another replay

    # enable: the Delta table in at the version planned on, out at the version its Spark rewrite committed
    enabled = run["xcom"]["enable"]
    assert (enabled["action"], enabled["plan"]["read_version"], enabled["committed_version"]) == ("rewrite", 0, 1)
    event = events[("enable", "COMPLETE")]
    read, written = only(event["inputs"]), only(event["outputs"])
    assert read["name"] == written["name"] == settings["rewrite"]
    assert (read["facets"]["version"]["datasetVersion"], written["facets"]["version"]["datasetVersion"]) == ("0", "1")
    assert columns(written) == ["id", "small"]

    # regenerate: the same datasets as convert, and OpenLineage's settings in the Spark conf of its spark-submit
    regenerated = run["xcom"]["regenerate"]
    assert (regenerated["mode"], regenerated["delta_version"]) == ("incremental", 1)
    event = events[("regenerate", "COMPLETE")]
    assert only(event["inputs"])["name"] == str(spark_table)
    output = only(event["outputs"])
    assert (output["name"], output["facets"]["version"]["datasetVersion"]) == (
        f"{spark_table}/_iceberg", str(regenerated["snapshot_id"]))
    submitted = {application_of(command): spark_conf(command)
                 for command in json.loads(Path(settings["commands"]).read_text())}
    assert set(submitted) == {"regenerate.py", "enable_rewrite.py"}
    for task_id, application in (("regenerate", "regenerate.py"), ("enable", "enable_rewrite.py")):
        conf = submitted[application]
        assert conf["spark.openlineage.parentJobNamespace"] == "deltaberg-tests"
        assert conf["spark.openlineage.parentJobName"] == f"{dag_id}.{task_id}"
        assert conf["spark.openlineage.parentRunId"] == events[(task_id, "COMPLETE")]["run"]["runId"]
        assert (conf["spark.openlineage.transport.type"], conf["spark.openlineage.transport.url"]) == (
            "http", webhook_server.url)

    # a failed conversion names what it was to read and write, without versions
    event = events[("broken", "FAIL")]
    missing, target = only(event["inputs"]), only(event["outputs"])
    assert (missing["name"], target["name"]) == (settings["missing"], f"{settings['missing']}/_iceberg")
    assert "version" not in missing["facets"] and target["facets"]["symlinks"]["identifiers"][0]["name"] == (
        "db.missing")
