"""The enable rewrite in this process, with a local SparkSession: the rewrite runner `deltaberg enable` gives
core's ``enable`` (Airflow submits the same application through SparkSubmit instead).

The session puts Delta on Spark's jars on its classpath from files, never through Spark's Ivy resolution (which
depends on ~/.m2 and ~/.ivy2 and the network): the jars given (``--jars``, ``$DELTABERG_SPARK_JARS``), else those
``scripts/fetch_jars.sh`` fetched (``$DELTABERG_JARS_DIR``, else ``.jars`` of a source checkout). Maven coordinates
are resolved by Spark only when ``$DELTABERG_SPARK_PACKAGES`` asks for it. When the jars or Java are missing, or
the JVM does not start, SparkStartError says which jars and which Java were needed, in one line.

A local session gets settings sized for one machine (``local_defaults``): Spark's and Delta's defaults are sized for
a cluster (200 shuffle partitions, 50 partitions for Delta's log replay), which costs seconds of task scheduling on a
local master. A value the user set through Spark's own configuration (``spark-defaults.conf``, or ``--conf`` in
``$PYSPARK_SUBMIT_ARGS``) is kept.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import sys
from collections.abc import Mapping
from functools import partial
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from airflow_deltaberg.core.enable.levels import DEFAULT_LEVEL
from airflow_deltaberg.core.errors import DeltabergError, SparkStartError

#: Jars for the local session: comma-separated jar files and/or folders holding them.
SPARK_JARS_ENV = "DELTABERG_SPARK_JARS"
#: The folder scripts/fetch_jars.sh fills (relative paths are taken from the source checkout's root).
JARS_DIR_ENV = "DELTABERG_JARS_DIR"
#: Maven coordinates for Spark's own resolution (Ivy): only when set.
SPARK_PACKAGES_ENV = "DELTABERG_SPARK_PACKAGES"
#: The jars Delta on Spark needs, as file name patterns (matching the pinned pyspark 4.1).
DELTA_JARS = ("delta-spark_*.jar", "delta-storage-*.jar")
DELTA_JAR_NAMES = "delta-spark_4.1_2.13-4.4.0.jar and delta-storage-4.4.0.jar"
_CHECKOUT_ROOT = Path(__file__).resolve().parents[2]
_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)(?:,\d+)?\])?")


def jvm_pyspark_installed() -> bool:
    """PySpark with its JVM is importable (the ``spark`` extra). Not the ``pyspark`` package alone: pyspark-client,
    which the Airflow Spark provider requires, installs one too, a Spark Connect client that cannot start Spark."""
    try:
        return find_spec("pyspark.core") is not None  # pyspark.core is pyspark's, not pyspark-client's (Spark 4)
    except ImportError:  # no pyspark package at all
        return False


def run_rewrite_locally(location: str, read_version: int, storage_options: Mapping[str, Any] | None,
                        level: str = DEFAULT_LEVEL, *, jars: str | None = None) -> tuple[int, dict[str, Any]]:
    """The rewrite in this process with a local SparkSession: a ``core.enable.run.RewriteRunner`` (``jars``:
    comma-separated jar files or folders for a new session; see the module docstring)."""
    if not jvm_pyspark_installed():
        raise DeltabergError("the data rewrite starts Spark in this process and needs PySpark with its JVM: install "
                             f"airflow-deltaberg[spark]; table {location}, version {read_version}")
    # Lazy: pyspark and a JVM are only needed for the rewrite path.
    from airflow_deltaberg.spark.enable_rewrite import run_rewrite

    result = run_rewrite(local_spark_session(jars), location, read_version, storage_options=storage_options,
                         level=level)
    return int(result.version), result.to_dict()


def rewrite_runner(jars: str | None = None) -> Any:
    """``run_rewrite_locally`` with its jars fixed (what the CLI passes to ``enable``)."""
    return partial(run_rewrite_locally, jars=jars)


def _default_jars_dir() -> Path:
    configured = os.environ.get(JARS_DIR_ENV)
    if configured:
        return (_CHECKOUT_ROOT / configured).resolve()  # an absolute path stays as it is
    return _CHECKOUT_ROOT / ".jars"


def delta_jars(jars: str | None = None) -> list[str]:
    """The jar files of the local session: from ``jars`` or $DELTABERG_SPARK_JARS (comma-separated files or
    folders; every jar of a file list, the Delta jars of a folder), else the Delta jars in the fetched jars folder.
    SparkStartError when a file is missing or the Delta jars are not among them."""
    spec = jars or os.environ.get(SPARK_JARS_ENV)
    entries = [e.strip() for e in spec.split(",") if e.strip()] if spec else [str(_default_jars_dir())]
    where = ", ".join(entries)
    found: list[str] = []
    for entry in entries:
        path = Path(entry).expanduser()
        if path.is_dir():
            found += sorted(str(p) for p in path.glob("*.jar") if any(fnmatch.fnmatch(p.name, d) for d in DELTA_JARS))
        elif path.is_file():
            found.append(str(path))
        else:
            raise SparkStartError(f"the local Spark of the enable rewrite needs {DELTA_JAR_NAMES}: {entry} does not "
                                  "exist (pass --jars with their files or folder, or run scripts/fetch_jars.sh)")
    missing = [d for d in DELTA_JARS if not any(fnmatch.fnmatch(Path(f).name, d) for f in found)]
    if missing:
        raise SparkStartError(f"the local Spark of the enable rewrite needs {DELTA_JAR_NAMES}: no "
                              f"{' or '.join(missing)} in {where} (pass --jars with their files or folder, or run "
                              "scripts/fetch_jars.sh)")
    return found


def java_executable() -> str:
    """The java Spark will start ($JAVA_HOME's, else PATH's); SparkStartError naming what was looked at."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if not candidate.is_file():
            raise SparkStartError(f"the local Spark of the enable rewrite needs Java 17 or later: JAVA_HOME={home} "
                                  "has no bin/java (set JAVA_HOME to a JDK or unset it to use java from PATH)")
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise SparkStartError("the local Spark of the enable rewrite needs Java 17 or later: JAVA_HOME is unset and "
                              "no java is on PATH")
    return found


def local_cores(master: str) -> int | None:
    """The task slots of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master; None for any other."""
    match = _LOCAL_MASTER.fullmatch(master.strip())
    if match is None:
        return None
    cores = match.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else max(1, int(cores))


def local_defaults(master: str) -> dict[str, str]:
    """SQL settings for a session on ``master`` when it is local: as many shuffle partitions, and partitions for
    Delta's snapshot state (its log replay), as the master has task slots (at least 2), instead of the 200 and 50
    sized for a cluster. Empty for any other master."""
    cores = local_cores(master)
    if cores is None:
        return {}
    partitions = str(max(2, cores))
    return {"spark.sql.shuffle.partitions": partitions, "spark.databricks.delta.snapshotPartitions": partitions}


def apply_defaults(session: Any, defaults: Mapping[str, str]) -> dict[str, str]:
    """Set each of ``defaults`` the session's configuration does not hold yet (the user's spark-defaults.conf and
    ``--conf`` values reach it at start); returns those set."""
    given = session.sparkContext.getConf()
    applied = {key: value for key, value in defaults.items() if not given.contains(key)}
    for key, value in applied.items():
        session.conf.set(key, value)
    return applied


def local_spark_session(jars: str | None = None) -> Any:
    """The active SparkSession, or a new local one with Delta on Spark (see the module docstring)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    packages = None if jars or os.environ.get(SPARK_JARS_ENV) else os.environ.get(SPARK_PACKAGES_ENV)
    jar_files = [] if packages else delta_jars(jars)
    java = java_executable()
    # Local Python workers (the rewrite writes files from them) must run this interpreter and its packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = os.environ.get("DELTABERG_SPARK_MASTER", "local[*]")
    builder = SparkSession.builder.master(master).appName("deltaberg-enable")
    builder = (builder.config("spark.jars.packages", packages) if packages
               else builder.config("spark.jars", ",".join(jar_files)))
    try:
        session = (
            builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
    except Exception as exc:  # noqa: BLE001 - pyspark raises PySparkRuntimeError, py4j errors, OSError...
        condition = getattr(exc, "getCondition", lambda: None)() or type(exc).__name__
        needed = f"packages {packages}" if packages else f"jars {', '.join(jar_files)}"
        raise SparkStartError(f"the local Spark of the enable rewrite did not start ({condition}); it needed Java "
                              f"{java} and the {needed}") from exc
    apply_defaults(session, local_defaults(master))
    return session
