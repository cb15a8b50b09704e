"""The regenerate application (airflow_deltaberg/spark/regenerate.py) for several tables in one spark-submit, each
run with the application's manifest group size and checkpoint stats batch size, or with its own (``--sizes``), so
that a table of a few thousand files takes the paths of a big one (several stats batches routed to several spilled
groups):

    spark-submit regenerate_many.py -- [--sizes MANIFEST_ROWS STATS_BATCH_ROWS] ARGS... [-- ...]

Each ``--``-separated argument list is one ``regenerate.main()`` (its own session, stopped at its end: one JVM and
one Python driver start for all). Exits with the first non-zero exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from airflow_deltaberg.core.delta.log import checkpoint_actions
from airflow_deltaberg.core.iceberg.manifests import file_manifests
from airflow_deltaberg.spark import regenerate

#: The application's own sizes: 25k files per data manifest, 64k checkpoint rows per struct-stats batch.
DEFAULT_SIZES = (file_manifests.MANIFEST_ROWS, checkpoint_actions._STRUCT_STATS_BATCH_ROWS)  # noqa: SLF001


def set_sizes(manifest_rows: int, stats_batch_rows: int) -> None:
    """Files per data manifest and checkpoint rows per struct-stats batch."""
    file_manifests.MANIFEST_ROWS = manifest_rows
    checkpoint_actions._STRUCT_STATS_BATCH_ROWS = stats_batch_rows  # noqa: SLF001 - no setting for it


def main(argv: Sequence[str]) -> int:
    runs: list[list[str]] = []
    for argument in argv:
        if argument == "--":
            runs.append([])
        else:
            runs[-1].append(argument)
    codes = []
    for arguments in runs:
        if arguments[:1] == ["--sizes"]:
            set_sizes(int(arguments[1]), int(arguments[2]))
            arguments = arguments[3:]
        else:
            set_sizes(*DEFAULT_SIZES)
        codes.append(regenerate.main(arguments))
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
