"""PySpark application: regenerate the Iceberg metadata of a Delta table, the manifests of a full conversion
written by Spark executors.

    spark-submit regenerate.py --table LOCATION [--version N] [--full] [--format-version 2|3]
        [--catalog-config-json JSON] [--catalog-name NAME] [--identifier NS.TABLE] [--storage-options-json JSON]
        [--result-file PATH]

It runs the core conversion (``core.iceberg.convert``). Incremental runs (one Iceberg snapshot per new Delta
commit, typically a few commits) stay in the driver. A full conversion (the first run, ``--full``, or the
fallback when the commits since the last run are gone) hands the groups of its manifests to
``SparkManifestEngine`` (``spark.manifest_engine``): the driver runs the core's replay, stats reading, pruning
order and grouping, and Spark tasks write the groups' manifests and delete files with the core's ``write_group``;
the driver then writes the delete manifests, state, manifest list, metadata.json and catalog pointer. The Spark
session is only started for a full conversion.

Prints the ConversionResult JSON (as ``deltaberg convert --format json``) and writes ``{"result": ...}`` to
``--result-file``; on failure the file holds the error and the exit code is 2 (the result protocol of
``airflow_deltaberg.spark.protocol``, which also reads a JSON argument given as ``@PATH``).

``--storage-options-json`` serves the core's reads and the executors' reads and writes (through the core's
Storage). The driver and executors import airflow_deltaberg: install the package in their Python
(``spark.pyspark.python``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_deltaberg.core.iceberg.convert import ConversionResult, convert
from airflow_deltaberg.spark.manifest_engine import SparkManifestEngine
from airflow_deltaberg.spark.protocol import add_protocol_arguments, json_object_argument, run_application

log = logging.getLogger(__name__)


def session() -> Any:
    """The application's SparkSession (master and conf as spark-submit set them)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.appName("deltaberg-regenerate").getOrCreate()


def regenerate(
    location: str,
    engine: SparkManifestEngine,
    *,
    version: int | None = None,
    full: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    catalog_config: Mapping[str, Any] | None = None,
    catalog_name: str = "deltaberg",
    identifier: str | None = None,
    format_version: int | None = None,
) -> ConversionResult:
    """The core conversion, with ``engine`` for the manifests of a full conversion."""
    return convert(location, storage_options=storage_options, catalog_config=catalog_config,
                   catalog_name=catalog_name, identifier=identifier, version=version, full=full,
                   manifest_engine=engine, format_version=format_version)


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
    engine = SparkManifestEngine(session)

    storage_options = json_object_argument(args.storage_options_json, "--storage-options-json")

    def work() -> dict[str, Any]:
        return regenerate(
            args.table, engine, version=args.version, full=args.full, storage_options=storage_options,
            catalog_config=json_object_argument(args.catalog_config_json, "--catalog-config-json"),
            catalog_name=args.catalog_name, identifier=args.identifier, format_version=args.format_version,
        ).to_dict()

    try:
        return run_application("regenerate", args.result_file, work, storage_options)
    finally:
        engine.stop()


if __name__ == "__main__":
    sys.exit(main())
