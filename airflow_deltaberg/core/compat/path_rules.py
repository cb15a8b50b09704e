"""Rules on where the table's files are: data and deletion vector files outside the table root."""

from __future__ import annotations

from collections.abc import Iterator

from airflow_deltaberg.core.compat.model import ALL_LEVELS, CheckContext, Finding, Location, Rule, Severity
from airflow_deltaberg.core.delta.paths import files_outside_table


def files_inside_table(ctx: CheckContext) -> Iterator[Finding]:
    outside = files_outside_table(ctx.adds, ctx.storage.root)
    if not outside.count:
        return
    yield Finding(
        f"{outside.data_files} data file(s) and {outside.deletion_vectors} deletion vector file(s) are outside the "
        f"table root {ctx.storage.root} (first: {', '.join(outside.examples)})",
        Location("file", outside.examples[0]),
    )


PATH_RULES = [
    Rule("paths.files-outside-table", "Data and deletion vector files are inside the table root", ALL_LEVELS,
         files_inside_table,
         "allowed (e.g. a shallow clone), but the Iceberg metadata then points readers outside the table: they need "
         "access there, and the files are not the table's to vacuum or move",
         "protocol: add/remove path and deletion vector absolutePath (absolute URIs)", severity=Severity.WARNING),
]
