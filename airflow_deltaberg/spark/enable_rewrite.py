"""PySpark application: rewrite every live data file of a Delta table so that IcebergWriterCompatV1 (or the
``--level`` given: compat-v2, writer-compat-v3) can be enabled, and commit the switch in one commit.

    spark-submit --jars delta-spark.jar,delta-storage.jar enable_rewrite.py --table LOCATION --read-version N
        [--level LEVEL] [--storage-options-json JSON|@FILE] [--result-file PATH]

Steps: plan the enable at ``read_version`` (refused when the plan has blockers); read the table at that version
with Delta on Spark (deletion vectors applied, column mapping resolved); write every row again from the
executors with pyarrow (``mapInArrow``; see core.enable.rewrite for the layout and the stats); then one commit
through the conflict-checked commit writer (core.enable.commit): the plan's protocol and metaData, a ``remove``
for every old live file and an ``add`` for every new one, all with dataChange=false. If another writer committed
meanwhile, the commit is refused (CommitConflictError) and the files written are deleted again; the old data
files are never deleted (a later VACUUM may). A crash before the commit leaves the log as it was.

Spark reads the table through its own Hadoop configuration (for object stores: credentials in the Spark conf);
``storage_options`` serve this project's log access and the executors' file writes. The executors import
airflow_deltaberg: install the package on them (or ship it with ``--py-files``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.enable.commit import commit_rewrite
from airflow_deltaberg.core.enable.levels import DEFAULT_LEVEL, ENABLE_LEVELS, enable_level
from airflow_deltaberg.core.enable.plan import plan_enable
from airflow_deltaberg.core.enable.rewrite.files import (
    WRITTEN_FILES_DDL,
    RewriteSpec,
    WrittenFile,
    written_file_from_row,
    written_files_batch,
)
from airflow_deltaberg.core.enable.rewrite.result import RewriteResult
from airflow_deltaberg.core.enable.rewrite.stats import DEFAULT_STRING_PREFIX
from airflow_deltaberg.core.enable.rewrite.writer import write_files
from airflow_deltaberg.core.errors import EnableBlockedError
from airflow_deltaberg.spark.protocol import add_protocol_arguments, json_object_argument, run_application

log = logging.getLogger(__name__)

STRING_PREFIX_PROPERTY = "delta.dataSkippingStringPrefixLength"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: Spark's Hadoop filesystems name some stores differently from fsspec.
_SPARK_SCHEMES = {"s3": "s3a"}


def spark_location(location: str) -> str:
    """The table location as Spark's Hadoop filesystems name it (``s3://`` is ``s3a://`` there)."""
    scheme, sep, rest = location.partition("://")
    return f"{_SPARK_SCHEMES.get(scheme, scheme)}{sep}{rest}" if sep else location


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _writer(spec: RewriteSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of one task: write its rows, return one row per file written."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for written in write_files(batches, spec):
            yield written_files_batch([written])

    return run


def write_rewritten_files(spark: Any, table: DeltaTable, spec: RewriteSpec, read_version: int) -> list[WrittenFile]:
    """Read the table at ``read_version`` with Delta on Spark and write its rows as new files (executors)."""
    from pyspark.sql import functions as F

    from airflow_deltaberg.core.delta.schema import parse_schema

    names = [f.name for f in parse_schema(spec.schema_string).fields]
    df = (spark.read.format("delta").option("versionAsOf", read_version).load(spark_location(table.location))
          .select(*[F.col(_quoted(n)) for n in names]))
    if spec.partition_columns:
        # One file per partition value and task, as Spark's own writer does: sort each task's rows, no shuffle.
        df = df.sortWithinPartitions(*[F.col(_quoted(n)) for n in spec.partition_columns])
    rows = df.mapInArrow(_writer(spec), WRITTEN_FILES_DDL).collect()
    return [written_file_from_row(r.asDict()) for r in rows]


def run_rewrite(
    spark: Any,
    location: str,
    read_version: int,
    storage_options: Mapping[str, Any] | None = None,
    *,
    level: str = DEFAULT_LEVEL,
    before_commit: Callable[[Sequence[Mapping[str, Any]]], None] | None = None,
) -> RewriteResult:
    """Rewrite the live files of the table at ``location`` as of ``read_version`` and commit the enable.

    ``before_commit`` is called with the actions just before the commit (an exception there aborts: nothing
    is committed and the new files are deleted). Raises EnableBlockedError when the plan has blockers,
    CommitConflictError when the table changed since ``read_version`` in a way that conflicts.
    """
    started = time.monotonic()
    table = DeltaTable(location, storage_options)
    snapshot = table.snapshot(read_version)
    # The footers need not be read: every file is rewritten whatever they hold.
    target = enable_level(level)
    plan = plan_enable(snapshot, level=target, storage=table.storage, footer_checks=False)
    if plan.blockers:
        raise EnableBlockedError(f"{target.title} cannot be enabled: {'; '.join(plan.blockers)}", plan)
    spec = RewriteSpec(
        location=table.location,
        schema_string=plan.metadata["schemaString"],
        partition_columns=tuple(plan.metadata.get("partitionColumns") or ()),
        storage_options=dict(table.storage.storage_options) or None,
        string_prefix=_string_prefix(plan.metadata.get("configuration") or {}),
    )
    written = write_rewritten_files(spark, table, spec, read_version)
    version = commit_rewrite(table, snapshot, plan, written, before_commit=before_commit)
    result = RewriteResult(
        table=table.location,
        read_version=read_version,
        version=version,
        files_removed=snapshot.num_files,
        files_added=len(written),
        rows_written=sum(f.num_records for f in written),
        bytes_written=sum(f.size for f in written),
    )
    log.info("Rewrote %s at version %s in %.1f s and committed version %s: %s", table.location, read_version,
             time.monotonic() - started, version, result.to_dict())
    return result


def _string_prefix(configuration: Mapping[str, str]) -> int:
    """The table's stats prefix length for strings (Delta's default when unset or malformed)."""
    try:
        return max(int(configuration.get(STRING_PREFIX_PROPERTY, DEFAULT_STRING_PREFIX)), 1)
    except ValueError:
        return DEFAULT_STRING_PREFIX


# -- the command line -----------------------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="enable_rewrite.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help="table location (path or URI)")
    parser.add_argument("--read-version", required=True, type=int, help="the version the enable was planned at")
    parser.add_argument("--level", choices=tuple(ENABLE_LEVELS), default=DEFAULT_LEVEL,
                        help="the level to enable (default %(default)s)")
    add_protocol_arguments(parser)
    return parser.parse_args(argv)


def _session() -> Any:
    """The SparkSession, with Delta's extension and catalog added unless spark-submit configured them."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    SparkContext._ensure_initialized()  # so that SparkConf() sees the --conf values of spark-submit
    conf = SparkConf()
    builder = SparkSession.builder.appName("deltaberg-enable-rewrite")
    extensions = [e for e in conf.get("spark.sql.extensions", "").split(",") if e]
    if DELTA_EXTENSION not in extensions:
        # The extension is not optional: Delta on Spark applies deletion vectors through its planner rules.
        builder = builder.config("spark.sql.extensions", ",".join([*extensions, DELTA_EXTENSION]))
    if not conf.contains("spark.sql.catalog.spark_catalog"):
        builder = builder.config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    return builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rewrite; exit 0 when committed, 2 on a failure (described in --result-file and stderr; the result
    protocol of airflow_deltaberg.spark.protocol)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per JVM call otherwise
    args = _arguments(argv)
    storage_options = json_object_argument(args.storage_options_json, "--storage-options-json")
    spark = _session()
    try:
        return run_application(
            "enable rewrite", args.result_file,
            lambda: run_rewrite(spark, args.table, args.read_version, storage_options, level=args.level).to_dict(),
            storage_options,
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
