"""PySpark application: regenerate the Iceberg metadata of a Delta table, the manifests of a full conversion
written by Spark executors.

    spark-submit regenerate.py --table LOCATION [--version N] [--full] [--format-version 2|3]
        [--catalog-config-json JSON] [--catalog-name NAME] [--identifier NS.TABLE] [--storage-options-json JSON]
        [--result-file PATH]

It runs the core conversion (``core.iceberg.convert``). Incremental runs (one Iceberg snapshot per new Delta
commit, typically a few commits) stay in the driver. A full conversion (the first run, ``--full``, or the
fallback when the commits since the last run are gone) hands its manifests to ``SparkManifestWriter``: Spark
reads the log segment's checkpoint, sidecars and commits and reconciles the actions (``delta_log_frames``),
range-partitions the live files by partition values and path, and each task computes the Iceberg entries and
metrics of its files and writes their manifests (``write_file_manifests`` in ``mapInArrow``); the driver then
writes the state, manifest list, metadata.json and catalog pointer. The Spark session is only started for a
full conversion.

Prints the ConversionResult JSON (as ``deltaberg convert --format json``) and writes ``{"result": ...}`` to
``--result-file``; on failure the file holds the error and the exit code is 2 (the result protocol of
``airflow_deltaberg.spark.protocol``, which also reads a JSON argument given as ``@PATH``).

Spark reads the log through its own Hadoop configuration (object stores: credentials in the Spark conf);
``--storage-options-json`` serves the core's reads and the executors' writes. The driver and executors import
airflow_deltaberg: install the package in their Python (``spark.pyspark.python``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.delta.actions import DV_TYPE, STRING_MAP
from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.delta.stats import conform, parse_stats, stats_type
from airflow_deltaberg.core.errors import DeltaError
from airflow_deltaberg.core.iceberg.conversion_state import ManifestRecord, _info_from_json, _info_to_json
from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.core.iceberg.file_manifests import MANIFEST_ROWS, SnapshotPlan, write_file_manifests
from airflow_deltaberg.core.storage import Storage
from airflow_deltaberg.spark.protocol import add_protocol_arguments, json_object_argument, run_application

log = logging.getLogger(__name__)

#: Files per Spark task: two manifests' worth. A Python worker holds its task's files, parsed stats and entries at
#: once (about 300 MB for 50k files with stats for 20 columns).
ROWS_PER_TASK = 2 * MANIFEST_ROWS
_RECORD_DDL = "record string"


# -- manifest records across the executor/driver boundary (the conversion state's JSON form) ------------------


def record_to_json(record: ManifestRecord) -> dict[str, Any]:
    return {"info": _info_to_json(record.info), "entries": record.entries_key, "min_path": record.min_path,
            "max_path": record.max_path}


def record_from_json(data: Mapping[str, Any]) -> ManifestRecord:
    return ManifestRecord(_info_from_json(dict(data["info"])), data["entries"], data["min_path"], data["max_path"])


# -- executor side --------------------------------------------------------------------------------------------


def core_files(rows: pa.Table, metadata: Metadata) -> pa.Table:
    """Spark's Arrow rows of ``live_files`` as the file table ``write_file_manifests`` takes, with stats parsed:
    the JSON stats where a file has them, else the checkpoint's parsed struct (as the core's Snapshot does)."""
    stats = rows.column("stats").combine_chunks().cast(pa.string())
    parsed = parse_stats(stats, metadata.schema)
    if "stats_parsed" in rows.column_names:
        struct = conform(rows.column("stats_parsed").combine_chunks(), stats_type(metadata.schema))
        parsed = pc.if_else(stats.is_null(), struct, parsed)
    return pa.table({
        "path": rows.column("path").cast(pa.string()),
        "partitionValues": rows.column("partitionValues").cast(STRING_MAP),
        "size": rows.column("size").cast(pa.int64()),
        "stats_parsed": parsed,
        "deletionVector": conform(rows.column("deletionVector").combine_chunks(), DV_TYPE),
    })


def task_writer(plan: SnapshotPlan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function: write the manifests of the task's files, yield one JSON record per manifest."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [b for b in batches if b.num_rows]
        if not received:
            return
        files = core_files(pa.Table.from_batches(received), plan.metadata)
        # Manifests of even size: a range task rarely gets a round number of files, and a tail manifest of a few
        # entries per task would double the manifests a reader opens.
        per_manifest = math.ceil(files.num_rows / math.ceil(files.num_rows / MANIFEST_ROWS))
        records = write_file_manifests(plan.open_storage(), plan, files, rows_per_manifest=per_manifest)
        yield pa.RecordBatch.from_pydict({"record": [json.dumps(record_to_json(r)) for r in records]})

    return run


# -- driver side ----------------------------------------------------------------------------------------------


class SparkManifestWriter:
    """A ``manifest_writer`` for core ``convert()``: Spark writes the manifests of a full conversion.

    :param spark: a SparkSession, or a function that starts one (called on the first full conversion only).
    :param rows_per_task: about how many files each Spark task converts.
    """

    def __init__(self, spark: Any | Callable[[], Any], *, rows_per_task: int = ROWS_PER_TASK) -> None:
        self._spark = spark
        self._started = False
        self.rows_per_task = rows_per_task
        self.calls = 0

    @property
    def spark(self) -> Any:
        if callable(self._spark):
            self._spark = self._spark()
            self._started = True
        return self._spark

    def stop(self) -> None:
        """Stop the session if this writer started it."""
        if self._started:
            self._spark.stop()
            self._started = False

    def __call__(self, storage: Storage, plan: SnapshotPlan, snapshot: Snapshot) -> list[ManifestRecord]:
        from airflow_deltaberg.spark.delta_log_frames import live_files, partition_sort_columns

        self.calls += 1
        expected = snapshot.num_files  # the driver's replay counted them; their stats stay unread there
        if expected == 0:
            return []
        tasks = max(1, math.ceil(expected / self.rows_per_task))
        log.info("%s: writing the manifests of %d files at version %d in %d Spark task(s)", plan.table, expected,
                 plan.delta_version, tasks)
        files = live_files(self.spark, storage, snapshot.segment)
        files = files.repartitionByRange(tasks, *partition_sort_columns(plan.metadata))
        rows = files.mapInArrow(task_writer(plan), _RECORD_DDL).collect()
        records = [record_from_json(json.loads(row.record)) for row in rows]
        # Data manifests first, then delete manifests, each in range order (as write_file_manifests returns them).
        records.sort(key=lambda r: r.info.content)
        _check_files(records, expected, plan)
        return records


def _check_files(records: Sequence[ManifestRecord], expected: int, plan: SnapshotPlan) -> None:
    """Refuse a result whose data files differ in number from the driver's replay of the same log segment."""
    written = sum(r.info.added_files_count for r in records if r.info.content == 0)
    if written != expected:
        raise DeltaError(
            f"Spark's reconciliation of the log found {written} live files where the driver's replay found "
            f"{expected}; no Iceberg metadata was published", table=plan.table, version=plan.delta_version,
        )


def session() -> Any:
    """The application's SparkSession (master and conf as spark-submit set them)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.appName("deltaberg-regenerate").getOrCreate()


def regenerate(
    location: str,
    writer: SparkManifestWriter,
    *,
    version: int | None = None,
    full: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    catalog_config: Mapping[str, Any] | None = None,
    catalog_name: str = "deltaberg",
    identifier: str | None = None,
    format_version: int | None = None,
) -> ConversionResult:
    """The core conversion, with ``writer`` for the manifests of a full conversion."""
    return convert(location, storage_options=storage_options, catalog_config=catalog_config,
                   catalog_name=catalog_name, identifier=identifier, version=version, full=full,
                   manifest_writer=writer, format_version=format_version)


# -- command line ---------------------------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="regenerate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, help="Delta table location (path or URI)")
    parser.add_argument("--version", type=int, default=None, help="convert up to this version (default: latest)")
    parser.add_argument("--full", action="store_true", help="one snapshot of the whole table")
    parser.add_argument("--format-version", type=int, choices=(2, 3), default=None,
                        help="Iceberg format version (default: the converted table's, 2 for a new one)")
    parser.add_argument("--catalog-config-json", default=None, help="pyiceberg catalog properties (JSON or @FILE)")
    parser.add_argument("--catalog-name", default="deltaberg", help="pyiceberg catalog name")
    parser.add_argument("--identifier", default=None, help="register the table as NAMESPACE.TABLE")
    add_protocol_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the conversion; exit 0 on success, 2 on a failure (described in --result-file and stderr)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = _arguments(argv)
    writer = SparkManifestWriter(session)

    def work() -> dict[str, Any]:
        return regenerate(
            args.table, writer, version=args.version, full=args.full,
            storage_options=json_object_argument(args.storage_options_json, "--storage-options-json"),
            catalog_config=json_object_argument(args.catalog_config_json, "--catalog-config-json"),
            catalog_name=args.catalog_name, identifier=args.identifier, format_version=args.format_version,
        ).to_dict()

    try:
        return run_application("regenerate", args.result_file, work)
    finally:
        writer.stop()


if __name__ == "__main__":
    # Run from the package module, not __main__: the executors unpickle task_writer by module name.
    from airflow_deltaberg.spark.regenerate import main as _main

    sys.exit(_main())
