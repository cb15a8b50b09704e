"""The one local Spark session of a test run (Delta on Spark, plus Delta Kernel and Iceberg's Spark runtime on its
JVM), and Delta Kernel (Java) through py4j.

The jars come from ``scripts/fetch_jars.sh`` (support.environment.JARS_DIR) and Java is a prerequisite of the
project: when either is missing the tests that need them fail and say so (they never skip: a run that silently
skips the Delta parity checks would prove nothing).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import jvm_archive
from support.environment import JARS_DIR, REPO_ROOT, missing_jars

#: Jars the Spark session cannot do without (Delta on Spark), as glob patterns in JARS_DIR.
REQUIRED_JARS = ("delta-spark_*.jar", "delta-storage-*.jar")
#: Jars of Delta Kernel (Java) and its one dependency missing from pyspark: only the `kernel` fixture needs them.
KERNEL_JARS = ("delta-kernel-api-*.jar", "delta-kernel-defaults-*.jar", "jackson-datatype-jdk8-*.jar")
#: Iceberg's Spark runtime (the Java reference implementation): only the `iceberg_spark` fixture needs it.
ICEBERG_JARS = ("iceberg-spark-runtime-*.jar",)
#: The driver JVM's options in tests: JVMs doing many small queries on a 2-core machine, where C1-only JIT and the
#: serial GC cut the run time by a third to a half (C2 compilations and parallel GC threads compete with the queries).
#: The long-lived session too: test_compat_v3_parity with its start 68 CPU s, 112 with the full tiered JIT. C1 alone
#: gets a 48 MB code cache, which a session fills (47.5 MB used after ~15 min of a run): JDK 17's sweeper then flushes
#: and C1 compiles again, or with flushing off the compiler stops. A 256 MB cache without flushing and a young
#: generation of 300-500 MB (fewer collections) cut the CPU of every JVM (session and spark-submit):
#: test_regenerate 75.4 -> 65.9, test_iceberg_read_parity 159.7 -> 135.1 (flushing off alone) CPU s.
BASE_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m -XX:-UseCodeCacheFlushing "
    "-XX:NewSize=300m -XX:MaxNewSize=500m"
)
#: Spark SQL without generated code, for every Spark JVM of the tests (the session, each submitted job, the
#: cluster's applications): for tables of tens of rows Janino's compiling costs more than it saves (the session:
#: 27% less CPU in test_iceberg_read_parity and test_delta_parity; a submitted enable rewrite 26.7 -> 21.8 CPU s).
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
#: Spark settings for the small local jobs the tests submit (operators, example DAGs): no UI, no generated code, and
#: shuffle and Delta snapshot partitions for 2 cores instead of Spark's 200 and Delta's 50 (each an idle task);
#: submit_conf() adds the JVM options and python_without_zips().
_SUBMIT_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                "spark.databricks.delta.snapshotPartitions": "2", **INTERPRETED}


def spark_home() -> Path:
    """The installed pyspark: the SPARK_HOME of its spark-submit and spark-class."""
    import pyspark

    return Path(pyspark.__file__).parent


@functools.cache
def python_without_zips() -> str:
    """A script that runs this interpreter without pyspark's zips on its PYTHONPATH, written once per interpreter
    under .cache/python/: the Python of every Spark process of the tests (spark-submit's drivers, the session's and
    the jobs' Python workers, the cluster's applications).

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's) first on the PYTHONPATH of a submitted
    application's driver and of each Python worker daemon. The zip holds no .pyc and zipimport writes none, so each
    of those processes compiled pyspark's sources again: ~1 CPU s each (``import pyspark.sql`` 1.2 CPU s from the
    zip, 0.4 from the install). SPARK_HOME is the pyspark install beside this interpreter: the same sources.
    """
    zips = shlex.quote(f"{spark_home() / 'python' / 'lib'}/")
    text = ("#!/bin/sh\n"
            f"PYTHONPATH=$(printf %s \"$PYTHONPATH\" | tr : '\\n' | grep -vF {zips} | paste -sd : -)\n"
            "export PYTHONPATH\n"
            f'exec {shlex.quote(sys.executable)} "$@"\n')
    folder = REPO_ROOT / ".cache" / "python"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / hashlib.sha256(text.encode()).hexdigest()[:16]
    if not path.exists():
        # Written aside and renamed: the pytest-xdist workers may write it at once, and none may run a half.
        partial = folder / f"{path.name}.{os.getpid()}"
        partial.write_text(text)
        partial.chmod(0o755)
        partial.replace(path)
    return str(path)


def jvm_options() -> str:
    """The driver JVM's options: BASE_JVM_OPTIONS and the class-data-sharing archive of support.jvm_archive when
    there is one (waiting first for a build of it that is running)."""
    jvm_archive.wait()
    return f"{BASE_JVM_OPTIONS} {jvm_archive.options(BASE_JVM_OPTIONS)}".strip()


def pyspark_submit_args() -> str:
    """$PYSPARK_SUBMIT_ARGS for a process that starts its own local Spark through pyspark (`deltaberg enable`): the
    jvm_options(), given the way a user gives a driver setting to such a process."""
    interpreted = " ".join(f"--conf {key}={value}" for key, value in INTERPRETED.items())
    return f'--conf "spark.driver.extraJavaOptions={jvm_options()}" {interpreted} pyspark-shell'


def submit_conf() -> dict[str, str]:
    """The Spark settings of the small jobs the tests submit, with the jvm_options() and python_without_zips()."""
    python = python_without_zips()
    return {**_SUBMIT_CONF, "spark.driver.extraJavaOptions": jvm_options(), "spark.pyspark.python": python,
            "spark.pyspark.driver.python": python}


def require_jars(patterns: tuple[str, ...], what: str) -> None:
    """Fail the test when a jar of scripts/fetch_jars.sh is missing."""
    missing = missing_jars(patterns)
    if missing:
        pytest.fail(f"{what}: jars {missing} are not in {JARS_DIR}; run scripts/fetch_jars.sh", pytrace=False)


def java() -> str:
    """The java executable (JAVA_HOME's, else PATH's); fails the test when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        pytest.fail("no Java runtime (java not on PATH, JAVA_HOME unset): Spark and the REST catalog need one",
                    pytrace=False)
    return found


def spark_session() -> Iterator[Any]:
    """The body of the ``spark`` fixture of support.plugin: a local[2] SparkSession with the Delta extension and
    catalog, and every jar of JARS_DIR on its classpath; stopped at the end."""
    require_jars(REQUIRED_JARS, "Delta on Spark")
    java()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        pytest.fail("a SparkSession is already active in this process: its classpath lacks the Delta jars",
                    pytrace=False)
    # Python workers (UDFs, mapInArrow) run `python3` from PATH unless told: use this interpreter and its packages.
    os.environ.setdefault("PYSPARK_PYTHON", python_without_zips())
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
        # Tables of tens of rows: one shuffle partition, one Delta snapshot partition and no adaptive re-planning
        # (test_compat_v3_parity then test_stats_cover_data_spark: 68 + 69 CPU s with 2 and AQE, 64 + 57 without).
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.databricks.delta.snapshotPartitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", jvm_options())
        .config("spark.log.level", "ERROR")
        .config(map=INTERPRETED)
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


def delta_spark_jars() -> str:
    """The delta-spark and delta-storage jars, comma-separated for ``--jars``/``spark.jars`` of a spark-submit."""
    require_jars(REQUIRED_JARS, "spark-submit with Delta")
    return ",".join(sorted(str(p) for p in JARS_DIR.glob("delta-*.jar") if "kernel" not in p.name))


def spark_submit_command(application: str, *arguments: str, master: str = "local[2]", jars: str | None = None,
                         conf: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The pyspark install's own spark-submit of ``application`` with ``arguments``, and its environment."""
    submit = spark_home() / "bin" / "spark-submit"
    python = python_without_zips()
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    env.pop("SPARK_HOME", None)  # the pyspark install's own
    settings = {"spark.ui.enabled": "false", **(conf or {})}
    command = [str(submit), "--master", master, *(["--jars", jars] if jars else [])]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, application, *arguments], env


def run_spark_submit(application: str, *arguments: str, master: str = "local[2]", jars: str | None = None,
                     conf: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``application`` with ``arguments`` through spark-submit (its own JVM, with the jvm_options() and INTERPRETED
    unless ``conf`` sets them otherwise)."""
    command, env = spark_submit_command(application, *arguments, master=master, jars=jars,
                                        conf={"spark.driver.extraJavaOptions": jvm_options(), **INTERPRETED,
                                              **(conf or {})})
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
