"""The fixtures of every test folder, registered once (tests/conftest.py loads this module with
``pytest_plugins``): fixture tables and writable copies, the Airflow metadata DB and ``dag.test()`` runs, the one
Spark session of the run, loopback servers, and small Delta tables."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

from support import (
    environment,  # first: it sets the Airflow environment
    jvm_archive,
    rest_catalog,
    servers,
    spark_session,
    tables,
)
from support import spark_cluster as cluster_support
from support.airflow_dags import DagRunResult, dag_id_for, migrate_airflow_db, share_migrated_db
from support.airflow_dags import run_dag as run_dag_now
from support.environment import FIXTURE_TABLES, FIXTURES_DIR, FIXTURES_MISSING_REASON
from support.secrets import STORAGE_SECRET


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: starts Spark (a local session or spark-submit jobs); slow")
    config.addinivalue_line(
        "markers",
        "fixture_tables(exclude=()): parametrize the `fixture_table` argument with the name of every "
        "fixture table root (a directory holding _delta_log) except those in `exclude`",
    )
    # The JVM archive (.cache/jvm), made while the first tests run, by the process that starts the workers or the
    # only process; the Spark JVMs wait for it (spark_session.jvm_options). Not for runs that deselect the spark tests.
    if not hasattr(config, "workerinput") and "not spark" not in (config.option.markexpr or ""):
        jvm_archive.start_build(spark_session.BASE_JVM_OPTIONS)
    if not hasattr(config, "workerinput"):
        share_migrated_db()  # one `airflow db migrate` a run: its workers copy the DB the first one migrated


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A build still running is finished (the next run has the archive), unless the run was interrupted.
    jvm_archive.finish(kill=exitstatus == pytest.ExitCode.INTERRUPTED)


def pytest_unconfigure(config: pytest.Config) -> None:
    jvm_archive.finish(kill=True)  # a run that ended before its session did (a usage error)


#: The modules that took longest in a measured two-worker run (tests/README.md, "How long the suite takes"),
#: longest first, after two long ones that start no JVM before their end (the table life, fuzz): they run while the
#: JVM archive is made (support.jvm_archive), which the Spark modules wait for. A module is one unit of work, so one
#: of these handed out last would run alone on one core at the end while the other worker has nothing left.
LONGEST_MODULES = (
    "core/iceberg/test_table_life.py",
    "fuzz/test_fuzz.py",
    "deployment/test_example_dags_deployed.py",
    "operators/test_cluster_s3.py",
    "spark/test_iceberg_read_parity.py",
    "spark/test_delta_parity.py",
    "example_dags/test_example_dags.py",
    "spark/test_enable_rewrite.py",
    "spark/test_engine_parity.py",
    "spark/test_stats_cover_data_spark.py",
    "core/test_fault_trials.py",
    "spark/test_compat_v3_parity.py",
    "spark/test_iceberg_deletion_vectors.py",
    "spark/test_regenerate.py",
    "operators/test_enable_operator.py",
    "spark/test_manifest_merge_iceberg_java.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker (scripts/test.sh: ``--dist loadfile --no-loadscope-reorder``, a module is one unit
    of work, handed out in collection order): LONGEST_MODULES first in their order, then the other modules with
    Spark tests, then the rest, so that the long units start first and the short ones fill in at the end. A plain
    run keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    tests = Path(__file__).resolve().parent.parent
    rank = {tests / name: index for index, name in enumerate(LONGEST_MODULES)}
    spark_modules = {item.path for item in items if item.get_closest_marker("spark")}
    # stable: the order within each group (and within each module) is kept
    items.sort(key=lambda item: rank.get(item.path, len(rank) + (item.path not in spark_modules)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize any test that takes a ``fixture_table`` argument with every fixture table name
    (minus the ``exclude`` of its ``fixture_tables`` mark)."""
    if "fixture_table" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("fixture_tables")
    exclude = set(marker.kwargs.get("exclude", ())) if marker else set()
    unknown = exclude - set(FIXTURE_TABLES)
    if FIXTURE_TABLES and unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: excluded tables do not exist: {sorted(unknown)}")
    names = [name for name in FIXTURE_TABLES if name not in exclude]
    if names:
        metafunc.parametrize("fixture_table", names)
    else:
        metafunc.parametrize(
            "fixture_table", [pytest.param(None, marks=pytest.mark.skip(reason=FIXTURES_MISSING_REASON))]
        )


# -- fixture tables ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The directory of the real Delta fixture tables (skips the test when it is absent)."""
    if not FIXTURES_DIR.is_dir():
        pytest.skip(FIXTURES_MISSING_REASON)
    return FIXTURES_DIR


@pytest.fixture(scope="session")
def fixture_tables(fixtures_dir: Path) -> list[Path]:
    """The roots (directories holding `_delta_log`) of every fixture table."""
    return [fixtures_dir / name for name in FIXTURE_TABLES]


@pytest.fixture
def copy_fixture(fixtures_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """``copy_fixture(name)`` copies fixture table ``name`` (e.g. ``"partition_cm/id"``) into tmp_path and
    returns the writable copy's root. File modification times are preserved (copytree uses copy2).

    Those times are the commit times Delta reads, as old as the fixtures: the test's conversions get years of
    default log retention, so that snapshots of a fixture's earlier versions do not expire by
    ``delta.logRetentionDuration`` (30 days) once the fixtures are a month old (docs/HISTORY.md)."""
    from airflow_deltaberg.core.delta.log.retention import DAY_MS
    from airflow_deltaberg.core.iceberg import history

    monkeypatch.setattr(history, "DEFAULT_LOG_RETENTION_MS", 100 * 365 * DAY_MS)

    def _copy(name: str) -> Path:
        target = tmp_path / "copies" / name
        if target.exists():
            raise ValueError(f"{name} was already copied to {target} in this test")
        return environment.copy_fixture_table(name, target, fixtures_dir)

    return _copy


# -- Airflow -------------------------------------------------------------------------------------------------


@pytest.fixture
def airflow_home() -> Path:
    return Path(os.environ["AIRFLOW_HOME"])


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The migrated SQLite metadata DB of the throwaway AIRFLOW_HOME (migrated once per run)."""
    return migrate_airflow_db()


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[..., DagRunResult]:
    """``run_dag(dag, **test_kwargs)`` registers ``dag`` and runs ``dag.test()``."""
    return run_dag_now


@pytest.fixture
def dag_id(request: pytest.FixtureRequest) -> str:
    """A DAG id unique to the test."""
    return dag_id_for(request.node.name)


@pytest.fixture
def secret_storage_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    """A deltaberg connection whose storage options hold ``STORAGE_SECRET`` (local paths ignore them)."""
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_WITH_SECRET",
                       json.dumps({"conn_type": "deltaberg", "extra": {"token": STORAGE_SECRET}}))
    return "delta_with_secret"


@pytest.fixture
def spark_submit_commands(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The spark-submit command lines SparkSubmitHook builds during the test (the submission itself goes on),
    each with the files its ``@FILE`` arguments name: their permission bits and text, read while they exist."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    built: list[dict[str, object]] = []
    build = SparkSubmitHook._build_spark_submit_command

    def recording(self: SparkSubmitHook, application: str) -> list[str]:
        command = build(self, application)
        files = {arg[1:]: (stat.S_IMODE(os.stat(arg[1:]).st_mode), Path(arg[1:]).read_text(encoding="utf-8"))
                 for arg in command if arg.startswith("@") and os.path.isfile(arg[1:])}
        built.append({"command": command, "files": files})
        return command

    monkeypatch.setattr(SparkSubmitHook, "_build_spark_submit_command", recording)
    return built


# -- Spark -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local[2] SparkSession of the run (Delta, Kernel and Iceberg jars on its classpath; ~15 s to start)."""
    yield from spark_session.spark_session()


@pytest.fixture(scope="session")
def kernel(spark: Any) -> spark_session.Kernel:
    """Delta Kernel (Java) in the Spark session's JVM."""
    spark_session.require_jars(spark_session.KERNEL_JARS, "Delta Kernel")
    return spark_session.Kernel(spark)


@pytest.fixture(scope="session")
def iceberg_spark(spark: Any) -> Any:
    """The session above, checked to carry Iceberg's Spark runtime.

    No Spark configuration is needed for it: ``spark.read.format("iceberg").load(<vN.metadata.json>)`` reads a
    table from its metadata file (Iceberg's own ``default_iceberg`` catalog, set up on first use, loads paths with
    HadoopTables), ``<location>#files`` and the like are its metadata tables, and ``versionAsOf`` takes a
    snapshot id. ``spark_catalog`` stays Delta's.
    """
    spark_session.require_jars(spark_session.ICEBERG_JARS, "Iceberg on Spark")
    return spark


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster_support.SparkCluster]:
    """A Spark standalone cluster on loopback: one master, two workers (separate JVMs; ~15 s to start)."""
    yield from cluster_support.spark_cluster(tmp_path_factory.mktemp("spark-cluster"))


# -- loopback servers --------------------------------------------------------------------------------------


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    return servers.free_port()


@pytest.fixture
def smtp_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[servers.SmtpServer]:
    yield from servers.smtp_server(monkeypatch)


@pytest.fixture
def webhook_server() -> Iterator[servers.WebhookServer]:
    yield from servers.webhook_server()


@pytest.fixture(scope="session")
def rest_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rest_catalog.RestServer]:
    """A running Iceberg REST catalog server (one per test run; tests keep apart by namespace)."""
    yield from rest_catalog.rest_catalog_server(tmp_path_factory.mktemp("rest-catalog"))


# -- small tables ---------------------------------------------------------------------------------------------


@pytest.fixture
def table_helpers() -> ModuleType:
    """support.tables (write_compliant_table, write_plain_table, disable_writer_compat, ...)."""
    return tables


@pytest.fixture
def compliant_table(tmp_path: Path) -> Path:
    return tables.write_compliant_table(tmp_path / "compliant")


@pytest.fixture
def plain_table(tmp_path: Path) -> Path:
    return tables.write_plain_table(tmp_path / "plain")


@pytest.fixture
def plain_failed_rules() -> frozenset[str]:
    return tables.PLAIN_TABLE_FAILED_RULES


@pytest.fixture
def rows() -> pa.Table:
    return tables.sample_rows()


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
