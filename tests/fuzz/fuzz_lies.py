"""Tables whose log lies about their data files (stats, sizes, column types), and what the fuzzer expects of them.

Policy (issue 11): the converter copies what Delta says (Delta's own readers are misled the same way), so an
Iceberg finding that only such a lie explains is no failure when ``validate --data-checks --sample-files all``
reported the lying data file under a matching rule; it is one when the rule missed the lie. And wherever that
validate found such a lie and the plain conversion succeeded, ``convert --verify-stats`` must refuse the table
(typed, nothing written).

Rules and the Iceberg findings they account for:

* ``data.stats-cover-data`` (numRecords, nullCount, min/max vs the footer; a column absent from a file while its
  stats claim non-nulls or bounds; add.size vs the file's size): ``wrong-record-count``, ``wrong-file-size``,
  ``filter-loses-rows``;
* ``data.file-types-match-schema`` (the files' column types vs the Delta schema, a NOT NULL column missing from a
  file): ``iceberg-unreadable`` (pyiceberg cannot project a file onto the schema), ``filter-loses-rows``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

STATS_RULE = "data.stats-cover-data"
TYPES_RULE = "data.file-types-match-schema"
LIE_RULES = (STATS_RULE, TYPES_RULE)

#: Iceberg finding kind -> the validate rules that account for it (when they name the data file at fault).
EXCUSING_RULES: dict[str, frozenset[str]] = {
    "wrong-record-count": frozenset({STATS_RULE}),
    "wrong-file-size": frozenset({STATS_RULE}),
    "filter-loses-rows": frozenset({STATS_RULE, TYPES_RULE}),
    "iceberg-unreadable": frozenset({TYPES_RULE}),
}
FLAGGED_PREFIX = "flagged-"


def local_path(path: str, root: Path) -> str:
    """A data file path as the log or an Iceberg manifest names it -> a normalized local path ("" if foreign)."""
    parts = urlsplit(path)
    if parts.scheme == "file":
        local = unquote(parts.path)
    elif parts.scheme and len(parts.scheme) > 1:
        return ""
    elif path.startswith("/"):
        local = unquote(path)
    else:
        local = os.path.join(root, unquote(path))
    return os.path.normpath(local)


def iceberg_local_path(path: str) -> str:
    """An Iceberg data file path -> a normalized local path (Iceberg paths are literal: no unescaping)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    _scheme, _netloc, local = PyArrowFileIO.parse_location(path)
    return os.path.normpath(local)


def flagged_files(validate_stdout: str, root: Path) -> list[dict[str, str]]:
    """The files validate's JSON report names under a lie rule: ``{"rule", "path" (as in the log), "local"}``."""
    try:
        report = json.loads(validate_stdout)
    except ValueError:
        return []
    out = []
    for violation in report.get("violations", []) if isinstance(report, dict) else []:
        rule, location = violation.get("rule_id"), violation.get("location") or {}
        if rule in LIE_RULES and location.get("kind") == "file" and isinstance(location.get("path"), str):
            out.append({"rule": rule, "path": location["path"], "local": local_path(location["path"], root)})
    return out


def excuse_flagged(findings: list[Any], flagged: list[dict[str, str]], other_copy: str = "") -> None:
    """Turn each problem finding a reported lie accounts for (every data file at fault named by a matching rule)
    into a review note; say in the others which file the rules missed. ``other_copy``: an incremental case's
    mutated commit is also held by this (a checkpoint...), which validate reads instead: the lie the incremental
    conversion copied from the commit is not in the snapshot validate checks, and a miss is for review."""
    by_file: dict[str, set[str]] = {}
    for lie in flagged:
        by_file.setdefault(lie["local"], set()).add(lie["rule"])
    for f in findings:
        rules = EXCUSING_RULES.get(f.kind)
        if f.severity != "problem" or rules is None:
            continue
        if not f.files:
            f.detail += " (no data file at fault singled out: no validate rule can account for it)"
            continue
        missed = [p for p in f.files if not by_file.get(p, set()) & rules]
        if missed:
            f.detail += (f" (validate --data-checks --sample-files all did not report {' or '.join(sorted(rules))} "
                         f"for {missed[0]}" + (f" and {len(missed) - 1} more" if len(missed) > 1 else "") + ")")
            if other_copy:
                f.severity = "review"
                f.detail += (f" (validate reads {other_copy}, which also holds the mutated commit the incremental "
                             "conversion read)")
            continue
        f.severity, f.kind = "review", FLAGGED_PREFIX + f.kind
        shown = sorted(by_file[f.files[0]] & rules)
        f.detail += f" (a lie of the log: validate reported {', '.join(shown)} for this file)"


def added_in(commit: Path) -> set[str]:
    """The add paths (as written) of one commit file, reading what parses."""
    paths: set[str] = set()
    try:
        text = commit.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return paths
    for line in text.splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            continue
        add = action.get("add") if isinstance(action, dict) else None
        if isinstance(add, dict) and isinstance(add.get("path"), str):
            paths.add(add["path"])
    return paths


def files_filtered_wrongly(static: Any, expr: Any, expected: Any) -> list[str]:
    """The data files (local paths) whose rows the filtered scan returns otherwise than Arrow's filter ``expected``
    of the file's rows: pruned by planning although they hold matching rows (their metrics or partition values
    exclude rows they have), or kept and filtered to other rows (e.g. nulls of a column the schema says is never
    null, which a reader's not-null filter lets through)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    kept = {t.file.file_path for t in static.scan(row_filter=expr).plan_files()}
    filtered = ArrowScan(static.metadata, static.io, static.schema(), expr)
    whole = ArrowScan(static.metadata, static.io, static.schema(), AlwaysTrue())
    wrong = []
    for task in static.scan().plan_files():
        try:
            want = whole.to_table([task]).filter(expected).num_rows
            got = filtered.to_table([task]).num_rows if task.file.file_path in kept else 0
        except Exception:  # noqa: BLE001 - an unreadable file is a finding of its own
            continue
        if got != want:
            wrong.append(iceberg_local_path(task.file.file_path))
    return wrong


def unreadable_files(static: Any) -> list[str]:
    """The data files (local paths) pyiceberg cannot read on their own (each with its deletes)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    scan = ArrowScan(static.metadata, static.io, static.schema(), AlwaysTrue())
    failing = []
    for task in static.scan().plan_files():
        try:
            scan.to_table([task])
        except Exception:  # noqa: BLE001 - any failure singles the file out
            failing.append(iceberg_local_path(task.file.file_path))
    return failing
