"""One local Spark session (Delta on Spark, plus Delta Kernel and Iceberg's Spark runtime on its JVM) for every
test under tests/spark.

The jars come from ``scripts/fetch_jars.sh`` (cached in ``<repo>/.jars``, or ``$DELTABERG_JARS_DIR``). When they
are missing the tests are skipped locally, but fail under CI (``$CI`` set): a CI run that silently skips the
Delta parity checks would prove nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
JARS_DIR = (REPO_ROOT / os.environ.get("DELTABERG_JARS_DIR", ".jars")).resolve()

#: Jars the Spark session cannot do without (Delta on Spark), as glob patterns in JARS_DIR.
REQUIRED_JARS = ("delta-spark_*.jar", "delta-storage-*.jar")
#: Jars of Delta Kernel (Java) and its one dependency missing from pyspark: only the `kernel` fixture needs them.
KERNEL_JARS = ("delta-kernel-api-*.jar", "delta-kernel-defaults-*.jar", "jackson-datatype-jdk8-*.jar")
#: Iceberg's Spark runtime (the Java reference implementation): only the `iceberg_spark` fixture needs it.
ICEBERG_JARS = ("iceberg-spark-runtime-*.jar",)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs the local Spark session with Delta (tests/spark)")


def _unavailable(reason: str) -> None:
    """Skip, or fail when running under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is an error rather than a skip)", pytrace=False)
    pytest.skip(reason)


def _missing(patterns: tuple[str, ...]) -> list[str]:
    return [p for p in patterns if not list(JARS_DIR.glob(p))]


#: Set on the session built here, so that a second directory sharing it (tests/enable) reuses rather than refuses it.
TEST_SESSION_MARK = "spark.deltaberg.testSession"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the Delta extension and catalog, and every jar of JARS_DIR on its classpath.

    Started once per test run (it takes ~15 s); stopped at the end of the session.
    """
    yield from spark_session()


def spark_session() -> Iterator[Any]:
    """The body of the ``spark`` fixture; tests/enable/conftest.py builds its own ``spark`` fixture on it, and
    whichever runs second reuses the session the first built (one JVM, one session per test run)."""
    missing = _missing(REQUIRED_JARS)
    if missing:
        _unavailable(f"Spark jars {missing} are not in {JARS_DIR}; run scripts/fetch_jars.sh")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        _unavailable("no Java runtime (java not on PATH, JAVA_HOME unset): Spark cannot start")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and active.conf.get(TEST_SESSION_MARK, "false") == "true":
        yield active  # built by the other fixture on this function, which also stops it
        return
    if active is not None:
        pytest.fail("a SparkSession is already active in this process: its classpath lacks the Delta jars",
                    pytrace=False)
    # Python workers (UDFs, mapInArrow) run `python3` from PATH unless told: use this interpreter and its packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
    warehouse = REPO_ROOT / ".cache" / "spark-warehouse"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("deltaberg-tests")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.catalogImplementation", "in-memory")  # no derby metastore_db in the cwd
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        # Short-lived JVM doing many small queries: C1-only JIT and the serial GC cut the run time by a third to
        # a half on a 2-core machine (C2 compilations and parallel GC threads compete with the queries).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.log.level", "ERROR")
        .config(TEST_SESSION_MARK, "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        # py4j logs "closing" from finalizers after pytest closed its streams: keep the end of the run clean.
        logging.getLogger("py4j").setLevel(logging.CRITICAL)


class Kernel:
    """Delta Kernel (Java) on the Spark driver's JVM, through py4j: ``k.api`` is the ``io.delta.kernel``
    package, ``k.engine`` a DefaultEngine on the session's Hadoop configuration."""

    def __init__(self, spark: Any):
        self.jvm = spark._jvm
        self.api = self.jvm.io.delta.kernel
        self.types = self.api.types
        self.engine = self.api.defaults.engine.DefaultEngine.create(spark._jsc.hadoopConfiguration())

    def java_map(self, values: dict[str, Any]) -> Any:
        out = self.jvm.java.util.HashMap()
        for key, value in values.items():
            out.put(key, value)
        return out

    def java_list(self, values: list[Any]) -> Any:
        out = self.jvm.java.util.ArrayList()
        for value in values:
            out.add(value)
        return out


@pytest.fixture(scope="session")
def kernel(spark: Any) -> Kernel:
    """Delta Kernel 4.4.0 in the Spark session's JVM (skips, or fails under CI, when its jars are missing)."""
    missing = _missing(KERNEL_JARS)
    if missing:
        _unavailable(f"Delta Kernel jars {missing} are not in {JARS_DIR}; run scripts/fetch_jars.sh")
    return Kernel(spark)


@pytest.fixture(scope="session")
def iceberg_spark(spark: Any) -> Any:
    """The session above, checked to carry Iceberg 1.12.0's Spark runtime (skips, or fails under CI, without it).

    No Spark configuration is needed for it: ``spark.read.format("iceberg").load(<vN.metadata.json>)`` reads a
    table from its metadata file (Iceberg's own ``default_iceberg`` catalog, set up on first use, loads paths with
    HadoopTables), ``<location>#files`` and the like are its metadata tables, and ``versionAsOf`` takes a
    snapshot id. ``spark_catalog`` stays Delta's.
    """
    missing = _missing(ICEBERG_JARS)
    if missing:
        _unavailable(f"Iceberg jars {missing} are not in {JARS_DIR}; run scripts/fetch_jars.sh")
    return spark
