"""The enable rewrite in this process, with a local SparkSession: the rewrite runner `deltaberg enable` gives
core's ``enable`` (Airflow submits the same application through SparkSubmit instead)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

from airflow_deltaberg.core.errors import DeltabergError


def jvm_pyspark_installed() -> bool:
    """PySpark with its JVM is importable (the ``spark`` extra). Not the ``pyspark`` package alone: pyspark-client,
    which the Airflow Spark provider requires, installs one too, a Spark Connect client that cannot start Spark."""
    try:
        return find_spec("pyspark.core") is not None  # pyspark.core is pyspark's, not pyspark-client's (Spark 4)
    except ImportError:  # no pyspark package at all
        return False


def run_rewrite_locally(location: str, read_version: int, storage_options: Mapping[str, Any] | None
                        ) -> tuple[int, dict[str, Any]]:
    """The rewrite in this process with a local SparkSession: a ``core.enable.run.RewriteRunner``."""
    if not jvm_pyspark_installed():
        raise DeltabergError("the data rewrite starts Spark in this process and needs PySpark with its JVM: install "
                             f"airflow-deltaberg[spark]; table {location}, version {read_version}")
    # Lazy: pyspark and a JVM are only needed for the rewrite path.
    from airflow_deltaberg.spark.enable_rewrite import run_rewrite

    result = run_rewrite(local_spark_session(), location, read_version, storage_options=storage_options)
    return int(result.version), result.to_dict()


#: Jars for the local session: a comma-separated list of jar paths, else Maven coordinates resolved by Spark.
SPARK_JARS_ENV = "DELTABERG_SPARK_JARS"
SPARK_PACKAGES_ENV = "DELTABERG_SPARK_PACKAGES"
DEFAULT_SPARK_PACKAGES = "io.delta:delta-spark_4.1_2.13:4.4.0"  # matches the pinned pyspark 4.1


def local_spark_session() -> Any:
    """The active SparkSession, or a new local one with Delta on Spark (jars from $DELTABERG_SPARK_JARS, else
    packages from $DELTABERG_SPARK_PACKAGES or Maven Central)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Local Python workers (the rewrite writes files from them) must run this interpreter and its packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(os.environ.get("DELTABERG_SPARK_MASTER", "local[*]")).appName(
        "deltaberg-enable")
    jars = os.environ.get(SPARK_JARS_ENV)
    if jars:
        builder = builder.config("spark.jars", jars)
    else:
        builder = builder.config("spark.jars.packages", os.environ.get(SPARK_PACKAGES_ENV, DEFAULT_SPARK_PACKAGES))
    return (
        builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
