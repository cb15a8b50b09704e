"""The columns of a data file that store timestamps in milliseconds (INT64 Timestamp, ``TIMESTAMP_MILLIS``).

Delta allows them (timestamp and timestamp_ntz: INT96, or INT64 in milliseconds or microseconds); Iceberg's spec
stores timestamps in microseconds. Iceberg readers read a millisecond file's values right, but Iceberg Java's
Parquet row-group filter (1.12) compares the file's statistics, in milliseconds, with microsecond literals and skips
row groups that hold matching rows. ``validate --data-checks`` (data.timestamp-micros) and ``convert`` (a warning,
a refusal under ``strict``) use this module; it reads only the footer.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from airflow_deltaberg.core.delta.file_checks.file_types import logical_type

#: Why a millisecond column matters, for messages.
WHY = ("Iceberg stores timestamps in microseconds, and Iceberg Java's Parquet row-group filter compares this "
       "file's millisecond statistics with microsecond values: filters on the column may skip rows")


def millis_columns(footer: pq.FileMetaData) -> list[str]:
    """The dotted parquet paths of the columns that store INT64 timestamps in milliseconds."""
    schema = footer.schema
    found = []
    for i in range(footer.num_columns):
        column = schema.column(i)
        if column.physical_type != "INT64":
            continue
        logical = logical_type(column)
        if logical.get("Type") == "Timestamp" and logical.get("timeUnit") == "milliseconds":
            found.append(column.path)
    return found
