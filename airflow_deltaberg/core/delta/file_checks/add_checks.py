"""Where a live file's add action does not describe the file: the checks validate's data.stats-cover-data makes on a
sample and ``convert --verify-stats`` on every file, written once for both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import read_deletion_vector
from airflow_deltaberg.core.delta.file_checks.file_footer import FileFooter
from airflow_deltaberg.core.delta.file_checks.footer_stats import StatsColumn, size_mismatch, stats_mismatches
from airflow_deltaberg.core.delta.file_checks.partition_file_values import partition_value_mismatches
from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.storage import Storage


def add_mismatches(storage: Storage, row: Mapping[str, Any], footer: FileFooter, metadata: Metadata,
                   columns: Sequence[StatsColumn], string_prefix: int) -> list[str]:
    """One message per way the add ``row`` (size, stats_parsed, deletionVector, partitionValues, as ``to_pylist``
    gives them; of the table at ``storage``) does not describe the file whose ``footer`` is given: its size, its stats
    (of the rows its deletion vector keeps), the partition values the file materializes."""
    wrong_size = size_mismatch(row.get("size"), footer)
    problems = [wrong_size] if wrong_size else []
    dv = row.get("deletionVector")
    problems += stats_mismatches(row.get("stats_parsed"), footer.metadata, columns, string_prefix=string_prefix,
                                 has_deletion_vector=dv is not None, read_columns=footer.read_columns,
                                 deleted_rows=None if dv is None else partial(read_deletion_vector, storage, dv))
    return problems + partition_value_mismatches(row.get("partitionValues"), footer.metadata, metadata,
                                                 footer.read_columns)
