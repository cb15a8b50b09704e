"""Optional data checks: stats of every live file, and the parquet footers of a sample of files."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from airflow_deltaberg.core.arrow_util import FIELD_ID
from airflow_deltaberg.core.compat.model import ALL_LEVELS, V2, V3, WV1, CheckContext, Finding, Location, Rule
from airflow_deltaberg.core.delta.file_checks.add_checks import add_mismatches
from airflow_deltaberg.core.delta.file_checks.file_footer import FileFooter, data_file_location, read_file_footer
from airflow_deltaberg.core.delta.file_checks.file_types import type_mismatches
from airflow_deltaberg.core.delta.file_checks.footer_stats import (
    stats_columns,
    string_prefix_length,
)
from airflow_deltaberg.core.delta.file_checks.timestamp_units import WHY, millis_columns
from airflow_deltaberg.core.delta.schema import ArrayType, DataType, MapType, StructField, StructType

# Columns Delta itself writes into data files, without a column mapping id: the change type of change data
# feed (data files of UPDATE/MERGE may carry it, readers drop it) and the row tracking columns named by
# these properties.
CDC_TYPE_COLUMN = "_change_type"
INTERNAL_COLUMN_PROPERTIES = (
    "delta.rowTracking.materializedRowIdColumnName",
    "delta.rowTracking.materializedRowCommitVersionColumnName",
)


def sample_rows(ctx: CheckContext) -> np.ndarray:
    """Rows (in the order of the live files) of up to ``sample_size`` live files, spread evenly over the file
    list; every file when ``sample_size`` is None."""
    n = ctx.adds.num_rows
    if ctx.sample_size is None:
        return np.arange(n, dtype=np.int64)
    if n == 0 or ctx.sample_size <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, num=min(n, ctx.sample_size)).astype(np.int64))


def sample_paths(ctx: CheckContext) -> list[str]:
    """Paths (as in the log) of the sampled live files (``sample_rows``)."""
    rows = sample_rows(ctx)
    return ctx.adds.column("path").take(pa.array(rows)).to_pylist() if len(rows) else []


def read_footer(ctx: CheckContext, path: str) -> FileFooter:
    """The parquet footer and size of a data file (only the footer is read), by its path in the log."""
    if path not in ctx._footers:
        location = data_file_location(ctx.storage, path)
        ctx._footers[path] = read_file_footer(ctx.storage, location, table=ctx.snapshot.table)
    return ctx._footers[path]  # type: ignore[return-value]


def _file(path: str) -> Location:
    return Location("file", path)


def num_records(ctx: CheckContext) -> Iterator[Finding]:
    counts = ctx.snapshot.files.column("stats_parsed").combine_chunks().field("numRecords")
    missing = counts.null_count
    if missing:
        first = ctx.snapshot.files.column("path").filter(counts.is_null())[0].as_py()
        yield Finding(f"{missing} live file(s) have no numRecords statistic (first: {first})", _file(first))


def _physical(field: StructField, mode: str) -> str:
    return field.physical_name if mode != "none" else field.name


def partition_values_materialized(ctx: CheckContext) -> Iterator[Finding]:
    if not ctx.metadata.partition_columns:
        return
    mode = ctx.metadata.column_mapping_mode
    unknown = [c for c in ctx.metadata.partition_columns if c not in ctx.schema.names]
    if unknown:  # a ValueError: validate reports the table as unreadable rather than crash on a KeyError
        raise ValueError(f"partition column(s) {', '.join(unknown)} are not in the table schema")
    wanted = [_physical(ctx.schema.field(c), mode) for c in ctx.metadata.partition_columns]
    for path in sample_paths(ctx):
        names = set(read_footer(ctx, path).schema_arrow.names)
        missing = [c for c in wanted if c not in names]
        if missing:
            yield Finding(f"partition column(s) {', '.join(missing)} are not materialized in the file", _file(path))


def timestamps_int64(ctx: CheckContext) -> Iterator[Finding]:
    for path in sample_paths(ctx):
        schema = read_footer(ctx, path).schema
        for i in range(len(schema)):
            column = schema.column(i)
            if column.physical_type == "INT96":
                yield Finding(f"column {column.path} stores timestamps as INT96; int64 is required", _file(path))


def timestamps_micros(ctx: CheckContext) -> Iterator[Finding]:
    for path in sample_paths(ctx):
        columns = millis_columns(read_footer(ctx, path).metadata)
        if columns:
            yield Finding(f"column(s) {', '.join(columns)} store timestamps as INT64 TIMESTAMP_MILLIS; {WHY}",
                          _file(path))


def _expected_ids(fields: tuple[StructField, ...], mode: str) -> dict[str, tuple[int | None, DataType, StructField]]:
    return {_physical(f, mode): (f.column_mapping_id, f.type, f) for f in fields}


def _unmatched(arrow_field: pa.Field, where: str) -> Iterator[str]:
    """A file column that matches no physical name can only be resolved by its field id: it must have one."""
    if FIELD_ID not in (arrow_field.metadata or {}):
        yield f"{where}: no parquet field id, and no column of the schema has this physical name"


def _check_ids(arrow_field: pa.Field, expected: int | None, delta_type: DataType, owner: StructField,
               slot: str, where: str) -> Iterator[str]:
    meta = arrow_field.metadata or {}
    actual = int(meta[FIELD_ID]) if FIELD_ID in meta else None
    if expected is not None and actual != expected:
        yield f"{where}: parquet field id {actual} but the Delta id is {expected}"
    t = arrow_field.type
    if isinstance(delta_type, StructType) and pa.types.is_struct(t):
        ids = _expected_ids(delta_type.fields, "id")
        for child in t:
            if child.name in ids:
                cid, ctype, cfield = ids[child.name]
                yield from _check_ids(child, cid, ctype, cfield, "", f"{where}.{child.name}")
            else:
                yield from _unmatched(child, f"{where}.{child.name}")
    elif isinstance(delta_type, ArrayType) and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        key = f"{slot}.element"
        yield from _check_ids(t.value_field, owner.nested_id(key), delta_type.element_type, owner, key,
                              f"{where}.element")
    elif isinstance(delta_type, MapType) and pa.types.is_map(t):
        for part, child, ctype in (("key", t.key_field, delta_type.key_type),
                                   ("value", t.item_field, delta_type.value_type)):
            key = f"{slot}.{part}"
            yield from _check_ids(child, owner.nested_id(key), ctype, owner, key, f"{where}.{part}")


# IcebergCompatV3: the materialized row tracking columns carry Iceberg's reserved field ids of _row_id and
# _last_updated_sequence_number.
ROW_TRACKING_FIELD_IDS = {
    "delta.rowTracking.materializedRowIdColumnName": 2147483540,
    "delta.rowTracking.materializedRowCommitVersionColumnName": 2147483539,
}


def row_tracking_field_ids(ctx: CheckContext) -> Iterator[Finding]:
    wanted = {ctx.config[k]: fid for k, fid in ROW_TRACKING_FIELD_IDS.items() if ctx.config.get(k)}
    if not wanted:
        return
    for path in sample_paths(ctx):
        problems = []
        for arrow_field in read_footer(ctx, path).schema_arrow:
            if arrow_field.name in wanted:
                meta = arrow_field.metadata or {}
                actual = meta.get(FIELD_ID, b"").decode() or None
                if actual != str(wanted[arrow_field.name]):
                    problems.append(f"{arrow_field.name}: parquet field id {actual}, IcebergCompatV3 requires "
                                    f"{wanted[arrow_field.name]}")
        if problems:
            yield Finding("; ".join(problems), _file(path))


def parquet_field_ids(ctx: CheckContext) -> Iterator[Finding]:
    mode = ctx.metadata.column_mapping_mode
    if mode == "none":
        return  # no ids to compare with; the column mapping rules report it
    expected = _expected_ids(ctx.schema.fields, mode)
    internal = {CDC_TYPE_COLUMN} | {ctx.config[k] for k in INTERNAL_COLUMN_PROPERTIES if k in ctx.config}
    for path in sample_paths(ctx):
        schema = read_footer(ctx, path).schema_arrow
        problems: list[str] = []
        for arrow_field in schema:
            if arrow_field.name in expected:
                cid, dtype, dfield = expected[arrow_field.name]
                problems.extend(_check_ids(arrow_field, cid, dtype, dfield, "", arrow_field.name))
            elif arrow_field.name not in internal:
                problems.extend(_unmatched(arrow_field, arrow_field.name))
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            yield Finding("; ".join(problems[:3]) + more, _file(path))


def stats_cover_data(ctx: CheckContext) -> Iterator[Finding]:
    """The sampled files whose add action does not describe them: Delta stats that do not cover the data (the
    parquet footer's statistics, or the column's values where the footer has none), a size that is not the
    file's, or partition values other than those the file materializes. Delta readers, and Iceberg readers of a
    conversion, skip rows of such a file, read other values or cannot read it (``add_checks``)."""
    rows = sample_rows(ctx)
    if not len(rows):
        return
    metadata = ctx.metadata
    columns = stats_columns(ctx.schema, metadata.column_mapping_mode, metadata.partition_columns)
    prefix = string_prefix_length(ctx.config)
    files = ctx.snapshot.files.select(["path", "size", "stats_parsed", "deletionVector", "partitionValues"]).take(
        pa.array(rows))
    for row in files.to_pylist():
        problems = add_mismatches(ctx.storage, row, read_footer(ctx, row["path"]), metadata, columns, prefix)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            yield Finding("the add action does not match the file: "
                          + "; ".join(problems[:3]) + more, _file(row["path"]))


def file_types_match_schema(ctx: CheckContext) -> Iterator[Finding]:
    """The sampled files with a column of a type Delta could not have written for the schema's type, or without
    a column (or with nulls in a column) the schema declares NOT NULL (``file_types``)."""
    metadata = ctx.metadata
    for path in sample_paths(ctx):
        problems = type_mismatches(ctx.schema, metadata.column_mapping_mode, metadata.partition_columns,
                                   read_footer(ctx, path).metadata)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            yield Finding("the file does not match the schema: " + "; ".join(problems[:3]) + more, _file(path))


DATA_RULES = [
    Rule("data.num-records", "Every live file has numRecords", ALL_LEVELS, num_records,
         "recompute stats (deltaberg enable --mode rewrite writes full stats)",
         "protocol: IcebergCompatV1/V2 numRecords requirement", data=True),
    Rule("data.partition-values-materialized", "Partition values are materialized in the files", ALL_LEVELS,
         partition_values_materialized, "rewrite the files with the partition columns (deltaberg enable)",
         "protocol: IcebergCompatV1/V2 partition values materialized", data=True),
    Rule("data.timestamp-int64", "Timestamps are stored as int64", frozenset({V2, WV1, V3}), timestamps_int64,
         "rewrite the files with int64 timestamps (spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS)",
         "protocol: IcebergCompatV2 (and RFC IcebergCompatV3) timestamps as int64", data=True),
    Rule("data.timestamp-micros", "Timestamps are stored in microseconds", ALL_LEVELS, timestamps_micros,
         "rewrite the files named with microsecond timestamps (Spark: spark.sql.parquet.outputTimestampType="
         "TIMESTAMP_MICROS; pyarrow: coerce_timestamps='us'); until then Iceberg Java may skip their rows",
         "Iceberg spec: Parquet timestamp and timestamptz are INT64 TIMESTAMP(MICROS); Delta protocol allows "
         "milliseconds", data=True),
    Rule("data.parquet-field-ids", "Parquet field ids equal the column ids", frozenset({V2, WV1, V3}),
         parquet_field_ids, "rewrite the files with field ids (deltaberg enable --mode rewrite)",
         "protocol: IcebergCompatV2 nested ids written as parquet field_id; column mapping id mode", data=True),
    Rule("data.row-tracking-field-ids", "Materialized row tracking columns have Iceberg's reserved field ids",
         frozenset({V3}), row_tracking_field_ids,
         "rewrite the files named (their materialized row ids would not be read as Iceberg's _row_id)",
         "RFC IcebergCompatV3: materialized Row ID field id 2147483540, Row Commit Version 2147483539", data=True),
    Rule("data.stats-cover-data", "Delta stats cover the data of each file, and its size is the file's", ALL_LEVELS,
         stats_cover_data,
         "recompute the stats and sizes of the files named (e.g. deltaberg enable --mode rewrite writes them from "
         "the data); until then Delta readers, and Iceberg readers of a conversion, skip rows of these files or "
         "cannot read them",
         "protocol: Per-file Statistics (numRecords, minValues, maxValues, nullCount); Add File size", data=True),
    Rule("data.file-types-match-schema", "The columns of each file have the schema's types", ALL_LEVELS,
         file_types_match_schema,
         "rewrite the files named with the schema's types, or restore the schema they were written with; until "
         "then Iceberg readers of a conversion refuse these files and Delta readers cast their values",
         "protocol: Consistency Between Table Metadata and Data Files; Type Widening (delta.typeChanges)",
         data=True),
]
