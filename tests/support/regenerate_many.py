"""The regenerate application (airflow_deltaberg/spark/regenerate.py) for several tables in one spark-submit, with
the manifest group size and the checkpoint stats batch size set on the command line, so that a table of a few
thousand files takes the paths of a big one (several stats batches routed to several spilled groups):

    spark-submit regenerate_many.py MANIFEST_ROWS STATS_BATCH_ROWS -- ARGS... [-- ARGS...]

Each ``--``-separated argument list is one ``regenerate.main()`` (its own session, stopped at its end: one JVM and
one Python driver start for all). Exits with the first non-zero exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from airflow_deltaberg.core.delta.log import checkpoint_actions
from airflow_deltaberg.core.iceberg.manifests import file_manifests
from airflow_deltaberg.spark import regenerate


def set_sizes(manifest_rows: int, stats_batch_rows: int) -> None:
    """Files per data manifest (25k by default) and checkpoint rows per struct-stats batch (64k by default)."""
    file_manifests.MANIFEST_ROWS = manifest_rows
    checkpoint_actions._STRUCT_STATS_BATCH_ROWS = stats_batch_rows  # noqa: SLF001 - no setting for it


def main(argv: Sequence[str]) -> int:
    manifest_rows, stats_batch_rows, *rest = argv
    set_sizes(int(manifest_rows), int(stats_batch_rows))
    runs: list[list[str]] = []
    for argument in rest:
        if argument == "--":
            runs.append([])
        else:
            runs[-1].append(argument)
    codes = [regenerate.main(arguments) for arguments in runs]
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
