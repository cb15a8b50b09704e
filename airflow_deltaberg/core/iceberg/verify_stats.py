"""``convert(verify_stats=True)``: the add action of every file a conversion lists, checked against the file
before anything is written: its stats against the file's data (``core.delta.file_checks.footer_stats``: the footer's
statistics, or the column's values where the footer has none), its size against the file's size, and the
schema's types against the file's columns (``core.delta.file_checks.file_types``), and its field ids against the
converted schema (``file_field_ids``). A file that does not match stops the
conversion with StatsMismatchError: converted, its Iceberg bounds would make readers skip rows, its size or its
types would make them fail. The checks are the ones ``validate --data-checks`` makes (data.stats-cover-data,
data.file-types-match-schema), on every file instead of a sample.

Off by default: it reads the footer of every file (a full conversion) or of every added file (incremental), and
the values of the columns whose footer statistics are missing. It also returns the files whose footers say they
store timestamps in milliseconds (``core.iceberg.misread``: a warning, or a refusal under ``strict``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table.name_mapping import NameMapping

from airflow_deltaberg.core.delta import Snapshot
from airflow_deltaberg.core.delta.file_checks.add_checks import add_mismatches
from airflow_deltaberg.core.delta.file_checks.file_footer import read_file_footer
from airflow_deltaberg.core.delta.file_checks.file_types import type_mismatches
from airflow_deltaberg.core.delta.file_checks.footer_stats import (
    stats_columns,
    string_prefix_length,
)
from airflow_deltaberg.core.delta.file_checks.timestamp_units import millis_columns
from airflow_deltaberg.core.delta.log.actions import ActionBatch
from airflow_deltaberg.core.delta.log.log_segment import commit_key
from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.errors import CorruptLogError, StatsMismatchError, StatsParseError
from airflow_deltaberg.core.iceberg.data_files import data_file_locations
from airflow_deltaberg.core.iceberg.file_field_ids import field_id_conflicts
from airflow_deltaberg.core.iceberg.manifests.file_manifests import with_parsed_stats
from airflow_deltaberg.core.iceberg.misread import MillisFile
from airflow_deltaberg.core.storage import Storage

#: Files whose footers are read (eight at a time) before the next slice's stats are turned into Python objects.
SLICE_ROWS = 4096
READERS = 8


def verify_snapshot_stats(storage: Storage, snapshot: Snapshot,
                          mapping: NameMapping | None = None) -> list[MillisFile]:
    """Check every live file of ``snapshot`` (a full conversion); with ``mapping`` (the converted schema's name
    mapping), also that the files' field ids give the columns their names do. Returns the files storing
    millisecond timestamps."""
    return verify_file_stats(storage, snapshot.files, snapshot.metadata, snapshot.table, mapping)


def verify_commit_stats(storage: Storage, table: str, actions: ActionBatch, metadata: Metadata, start: int,
                        end: int, mapping_of: Callable[[Metadata], NameMapping] | None = None) -> list[MillisFile]:
    """Check the files added by commits ``start``..``end`` (an incremental conversion), each commit's with the
    metadata in force at its version (``metadata`` is the one before ``start``) and, with ``mapping_of``, the name
    mapping of the schema converted from it. Returns the files storing millisecond timestamps."""
    millis: list[MillisFile] = []
    changes = {v: body for v, name, body in actions.other_actions if name == "metaData"}
    file_actions = actions.file_actions
    for version in range(start, end + 1):
        if version in changes:
            metadata = Metadata.from_action(changes[version])
        rows = file_actions.filter(pc.and_(pc.equal(file_actions.column("version"), version),
                                           file_actions.column("is_add")))
        if not rows.num_rows:
            continue
        try:
            rows = with_parsed_stats(rows, metadata)
        except StatsParseError as exc:
            raise CorruptLogError(exc.describe(), table=table, version=version,
                                  file=storage.uri(commit_key(version))) from exc
        millis += verify_file_stats(storage, rows, metadata, table, mapping_of(metadata) if mapping_of else None)
    return millis


def verify_file_stats(storage: Storage, files: pa.Table, metadata: Metadata, table: str,
                      mapping: NameMapping | None = None) -> list[MillisFile]:
    """Check ``files`` (path, size, stats_parsed, version, deletionVector when there) against the files: raise
    StatsMismatchError naming the first file whose add action does not match it (stats that do not cover its
    data, a size that is not its size, field ids that ``mapping`` resolves to other columns), and how many more
    there are in the slice of files read with it. Returns the files storing millisecond timestamps."""
    mode, partition_columns = metadata.column_mapping_mode, metadata.partition_columns
    columns = stats_columns(metadata.schema, mode, partition_columns)
    prefix = string_prefix_length(metadata.configuration)
    wanted = [c for c in ("path", "size", "stats_parsed", "deletionVector", "version", "partitionValues")
              if c in files.column_names]

    millis: list[MillisFile] = []

    def check(row: dict[str, Any], location: str) -> list[str]:
        footer = read_file_footer(storage, location, table=table, context="; nothing was converted")
        millis_in_file = millis_columns(footer.metadata)
        if millis_in_file:
            millis.append(MillisFile(location, tuple(millis_in_file), row.get("version")))
        problems = type_mismatches(metadata.schema, mode, partition_columns, footer.metadata)
        problems += add_mismatches(storage, row, footer, metadata, columns, prefix)
        if mapping is not None:
            problems += field_id_conflicts(footer.schema.to_arrow_schema(), mapping)
        return problems

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for part in _slices(files.select(wanted)):
            locations = data_file_locations(storage, part.column("path").combine_chunks()).to_pylist()
            rows = part.to_pylist()
            found = [(i, problems) for i, problems in enumerate(pool.map(check, rows, locations)) if problems]
            if found:
                i, problems = found[0]
                more = f"; {len(found) - 1} more file(s) among the {len(rows)} read with it" if len(found) > 1 else ""
                raise StatsMismatchError(
                    f"the add action of data file {locations[i]} does not match the file: "
                    f"{'; '.join(problems[:3])}{more}. Delta readers, and Iceberg readers of this conversion, "
                    "would skip its rows, read other columns or fail to read it: recompute its stats and size, or "
                    "rewrite it with the schema's types and ids; nothing was converted",
                    table=table, version=rows[i].get("version"), file=locations[i])
    return sorted(millis, key=lambda f: f.location)  # read on threads: in a stable order


def _slices(files: pa.Table) -> Iterator[pa.Table]:
    for offset in range(0, files.num_rows, SLICE_ROWS):
        yield files.slice(offset, SLICE_ROWS)

