"""`deltaberg`: the core operations from a shell.

Exit codes: 0 success, 1 violations found (validate) or enabling blocked/refused (enable), 2 error (a one-line
message on stderr, no traceback; with ``--format json``, also the error document on stdout:
``{"error": {"type", "message", "table", "version", "file", "retryable"}}``, the Spark result protocol's fields).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, suppress
from typing import Any, NoReturn

from airflow_deltaberg.core import display
from airflow_deltaberg.core.compat import Level, validate
from airflow_deltaberg.core.delta import DeltaTable, Snapshot
from airflow_deltaberg.core.delta.schema import ArrayType, DataType, MapType, StructType
from airflow_deltaberg.core.enable.levels import DEFAULT_LEVEL, ENABLE_LEVELS, enable_level
from airflow_deltaberg.core.enable.plan import EnablePlan
from airflow_deltaberg.core.enable.run import MODES, EnableResult, enable
from airflow_deltaberg.core.errors import DeltabergError, EnableBlockedError
from airflow_deltaberg.core.redact import Redactor, location_text, redacting_logs, redactor_for, url_secrets
from airflow_deltaberg.spark.local_rewrite import rewrite_runner
from airflow_deltaberg.spark.protocol import error_document

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_ERROR = 2


def describe(snapshot: Snapshot) -> dict[str, Any]:
    """What `deltaberg inspect` reports, as plain data."""
    protocol = snapshot.protocol
    return {
        "table": snapshot.table,
        "version": snapshot.version,
        "timestamp_ms": snapshot.timestamp,
        "protocol": {
            "min_reader_version": protocol.min_reader_version,
            "min_writer_version": protocol.min_writer_version,
            "reader_features": sorted(protocol.effective_reader_features),
            "writer_features": sorted(protocol.effective_writer_features),
        },
        "column_mapping_mode": snapshot.column_mapping_mode,
        "schema": snapshot.schema.to_json(),
        "partition_columns": list(snapshot.partition_columns),
        "properties": dict(snapshot.metadata.configuration),
        "num_files": snapshot.num_files,
        "total_bytes": snapshot.total_bytes,
        "num_records": snapshot.num_records,
    }


def _type_text(t: DataType) -> str:
    if isinstance(t, StructType):
        return "struct<" + ", ".join(f"{display.text(f.name)}: {_type_text(f.type)}" for f in t.fields) + ">"
    if isinstance(t, ArrayType):
        return f"array<{_type_text(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{_type_text(t.key_type)}, {_type_text(t.value_type)}>"
    return display.text(t)


def _names(names: Sequence[str]) -> str:
    return ", ".join(display.text(n) for n in names) or "-"


def render_text(snapshot: Snapshot) -> str:
    """`deltaberg inspect` as text; every name from the log shown escaped (core.display.text)."""
    info = describe(snapshot)
    p = info["protocol"]
    lines = [
        f"table:            {display.text(info['table'])}",
        f"version:          {info['version']}",
        f"protocol:         reader {p['min_reader_version']}, writer {p['min_writer_version']}",
        f"reader features:  {_names(p['reader_features'])}",
        f"writer features:  {_names(p['writer_features'])}",
        f"column mapping:   {display.text(info['column_mapping_mode'])}",
        f"partition by:     {_names(info['partition_columns'])}",
        f"files:            {info['num_files']}",
        f"total bytes:      {info['total_bytes']}",
        f"records:          {info['num_records'] if info['num_records'] is not None else 'unknown (stats missing)'}",
        "schema:",
    ]
    for field in snapshot.schema.fields:
        extra = []
        if field.column_mapping_id is not None:
            extra.append(f"id={field.column_mapping_id}")
        if field.physical_name != field.name:
            extra.append(f"physical={display.text(field.physical_name)}")
        null = "" if field.nullable else " not null"
        suffix = f"  [{', '.join(extra)}]" if extra else ""
        lines.append(f"  {display.text(field.name)}: {_type_text(field.type)}{null}{suffix}")
    return "\n".join(lines)


def _inspect(args: argparse.Namespace) -> int:
    snapshot = DeltaTable(args.table, _options(args)).snapshot(args.version)
    if args.format == "json":
        _print(args, json.dumps(describe(snapshot), indent=2, sort_keys=True))
    else:
        _print(args, render_text(snapshot))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    report = validate(
        args.table,
        args.level,
        version=args.version,
        data_checks=args.data_checks,
        sample_size=args.sample_files,
        storage_options=_options(args),
    )
    _print(args, report.render(args.format))
    return EXIT_OK if report.compliant else EXIT_VIOLATIONS


def _convert(args: argparse.Namespace) -> int:
    catalog = _catalog_properties(args)
    if args.catalog_uri:
        catalog["uri"] = args.catalog_uri
    from airflow_deltaberg.core.iceberg.convert import convert  # pyiceberg: only the convert command pays for it

    result = convert(
        args.table,
        storage_options=_options(args),
        catalog_config=catalog,
        identifier=args.identifier,
        version=args.version,
        full=args.full,
        format_version=args.format_version,
        verify_stats=args.verify_stats,
        strict=args.strict,
        retain_snapshots=args.retain_snapshots,
        table_properties=dict(args.table_property or []),
        max_snapshot_age_ms=None if args.max_snapshot_age_hours is None
        else int(args.max_snapshot_age_hours * 3600 * 1000),
    )
    if args.format == "json":
        _print(args, json.dumps(result.to_dict(), indent=2))
    else:
        lines = [f"{result.mode}: Delta version {result.delta_version} -> Iceberg snapshot {result.snapshot_id} "
                 f"({result.snapshots_written} snapshot(s) written)",
                 f"metadata: {display.text(result.metadata_location)}",
                 f"files added: {result.files_added}, records: {result.records}, {result.seconds:.2f} s"]
        if result.fall_back:
            lines.append(f"full conversion because {display.text(result.fall_back)}")
        lines += [f"warning: {display.text(w)}" for w in result.warnings]
        if result.files_outside_table:
            lines.append(f"files outside the table root: {result.files_outside_table} (see deltaberg validate)")
        if result.snapshots_expired:
            lines.append(f"snapshots expired: {result.snapshots_expired}")
        if result.identifier:
            lines.append(f"registered as {result.identifier}")
        _print(args, "\n".join(lines))
    return EXIT_OK


def render_enable(result: EnableResult) -> str:
    """`deltaberg enable` as text: the plan, then what was done."""
    plan: EnablePlan = result.plan
    title = enable_level(plan.level).title
    lines = [f"table:    {display.text(plan.table)}", f"level:    {plan.level} ({title})",
             f"version:  {plan.read_version} ({plan.num_files} live files)"]
    if plan.already_enabled:
        lines.append(f"state:    {title} is already enabled and the table passes the validator")
    lines += [f"rewrite:  {'needed' if plan.needs_rewrite else 'not needed'}"]
    lines += [f"  - {display.text(r)}" for r in plan.reasons]
    if plan.changes:
        lines.append("changes:")
        lines += [f"  - {display.text(c)}" for c in plan.changes]
    if plan.blockers:
        lines.append("blocked by:")
        lines += [f"  - {display.text(b)}" for b in plan.blockers]
    lines.append(f"writers after enabling {plan.level}:")
    lines += [f"  {line}" for line in plan.writers.lines()]
    done = {
        "dry-run": "dry run: nothing was written",
        "already-enabled": "nothing to do",
        "metadata-only": f"enabled in version {result.committed_version} (one metadata commit, no data rewritten)",
        "rewrite": f"enabled in version {result.committed_version} (every live file rewritten)",
    }[result.action]
    lines.append(f"result:   {done}")
    return "\n".join(lines)


def _enable(args: argparse.Namespace) -> int:
    try:
        result = enable(args.table, storage_options=_options(args), mode=args.mode, level=args.level,
                        dry_run=args.dry_run, rewrite_runner=rewrite_runner(args.jars))
    except EnableBlockedError as exc:
        if args.format == "json":
            _print(args, json.dumps({"action": "refused", "error": str(exc), "plan": exc.plan.to_dict()}, indent=2))
        else:
            _print(args, render_enable(EnableResult(exc.plan, "dry-run")).rsplit("\n", 1)[0])
        _print(args, f"deltaberg enable: refused: {exc}", error=True)
        return EXIT_VIOLATIONS
    if args.format == "json":
        _print(args, json.dumps(result.to_dict(), indent=2))
    else:
        _print(args, render_enable(result))
    plan = result.plan
    # A dry run reports 1 when the same command without --dry-run would be refused.
    refused = plan.blockers or (args.mode == "metadata_only" and plan.needs_rewrite)
    return EXIT_VIOLATIONS if result.action == "dry-run" and refused else EXIT_OK


def _options(args: argparse.Namespace) -> dict[str, str]:
    return dict(args.storage_option or [])


def _catalog_properties(args: argparse.Namespace) -> dict[str, str]:
    return dict(getattr(args, "catalog_property", None) or [])


def _print(args: argparse.Namespace, text: str, *, error: bool = False) -> None:
    """Print command output without secrets (storage option values, URL credentials)."""
    redact: Redactor = getattr(args, "redact", None) or Redactor()
    print(redact(text), file=sys.stderr if error else sys.stdout)


# -- argument types: a bad value is a usage error (exit 2), and its text is never echoed (it may be a secret) --


def key_value(text: str) -> tuple[str, str]:
    """KEY=VALUE, with a non-empty KEY."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("expects KEY=VALUE with a non-empty KEY (the value given is not shown: "
                                         "it may be a secret)")
    return key.strip(), value


def _whole_number(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return value


def at_least_one(text: str) -> int:
    """An integer >= 1."""
    return _whole_number(text, 1, "must be at least 1 (the current snapshot is always kept)")


def hours(text: str) -> float:
    """A finite number of hours >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a number of hours, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of hours >= 0, got {text!r}")
    return value


def _sample_files(text: str) -> int | None:
    """--sample-files: a number of files (0 or more), or ``all`` (None: every live file)."""
    if text.strip().lower() == "all":
        return None
    return _whole_number(text, 0, "expects 0 or more files, or 'all'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltaberg",
        description="Delta Lake tables as Apache Iceberg tables: inspect a Delta table, validate it against the "
        "Iceberg-compatibility features of the Delta protocol, convert its log to Iceberg metadata, enable a level.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    inspect_help = "show a Delta table's version, protocol, schema and live files"
    inspect = sub.add_parser("inspect", help=inspect_help, description=inspect_help)
    inspect.add_argument("table", help="table location: a path or a URI (file://, s3://, gs://, abfss://, memory://)")
    inspect.add_argument("--version", type=int, default=None, help="time travel to this version")
    inspect.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    inspect.set_defaults(run=_inspect)

    check_help = (
        "check a Delta table against one level of IcebergCompatV1/V2/V3 or IcebergWriterCompatV1/V3, every "
        "requirement a named rule (exit 0 compliant, 1 violations, 2 error)"
    )
    check = sub.add_parser("validate", help=check_help, description=check_help)
    check.add_argument("table", help="table location: a path or a URI")
    check.add_argument("--level", choices=[lv.value for lv in Level], default=Level.WRITER_COMPAT_V1.value,
                       help="compat-v1, compat-v2, compat-v3: IcebergCompatV1/V2/V3; writer-compat-v1: "
                       "IcebergWriterCompatV1 (checks compat-v2 too); writer-compat-v3: IcebergWriterCompatV3 "
                       "(checks compat-v3 too); default: writer-compat-v1")
    check.add_argument("--version", type=int, default=None, help="validate this version instead of the latest")
    check.add_argument("--data-checks", action="store_true",
                       help="also check every file's stats, and the parquet footers (and values where a footer has "
                       "no statistics) of a sample: stats, sizes, types, field ids, timestamps (data.* rules)")
    check.add_argument("--sample-files", type=_sample_files, default=20, metavar="N|all",
                       help="files whose footers the data checks read: a number (spread over the table) or all")
    check.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                       help="report format (default: text)")
    check.set_defaults(run=_validate)

    conv_help = (
        "write Iceberg metadata (v2 or v3) under <table>/_iceberg: in full the first time, then one Iceberg snapshot "
        "per new Delta commit; expire snapshots Delta can no longer serve; register in a catalog if asked "
        "(exit 0 done, 2 error or refused: nothing written)"
    )
    conv = sub.add_parser("convert", help=conv_help, description=conv_help)
    conv.add_argument("table", help="table location: a path or a URI")
    conv.add_argument("--version", type=int, default=None, help="convert up to this Delta version (default: latest)")
    conv.add_argument("--full", action="store_true",
                      help="one snapshot of the whole table instead of one per new commit")
    conv.add_argument("--format-version", type=int, choices=(2, 3), default=None,
                      help="Iceberg format version: 2 (position delete files) or 3 (deletion vectors in Puffin "
                           "files, row lineage); default: the converted table's, 2 for a new one")
    conv.add_argument("--identifier", default=None,
                      help="catalog identifier, e.g. db.sales (not registered if absent)")
    conv.add_argument("--catalog-uri", default=None,
                      help="SQL catalog URI, e.g. sqlite:///catalog.db (default type sql)")
    conv.add_argument("--catalog-property", action="append", metavar="KEY=VALUE", type=key_value,
                      help="a pyiceberg catalog property (repeatable), e.g. type=rest")
    conv.add_argument("--table-property", action="append", metavar="KEY=VALUE", type=key_value,
                      help="an Iceberg table property the converter follows, kept by the table (repeatable): "
                           "commit.manifest-merge.enabled, commit.manifest.min-count-to-merge (default 8), "
                           "commit.manifest.target-size-bytes, write.metadata.previous-versions-max (default 10), "
                           "write.metadata.delete-after-commit.enabled (docs/METADATA.md)")
    conv.add_argument("--retain-snapshots", type=at_least_one, default=None, metavar="N",
                      help="expire Iceberg snapshots beyond the newest N (default: the table property "
                           "deltaberg.history.max-snapshots, 100); snapshots that no longer read as Delta (files "
                           "removed by VACUUM, versions out of the log) expire always (docs/HISTORY.md)")
    conv.add_argument("--max-snapshot-age-hours", type=hours, default=None, metavar="H",
                      help="expire Iceberg snapshots older than H hours (the newest is always kept)")
    conv.add_argument("--verify-stats", action="store_true",
                      help="check every file converted against its parquet footer first (the Delta stats cover its "
                           "data, add.size is its size, its column types fit the schema, its parquet field ids are "
                           "the schema's) and refuse (exit 2, nothing written) when one does not")
    conv.add_argument("--strict", action="store_true",
                      help="refuse (exit 2, nothing written) data files Iceberg readers misread, which are otherwise "
                           "a warning: timestamps stored as INT64 TIMESTAMP_MILLIS (reads every converted file's "
                           "footer when the schema has a timestamp)")
    conv.add_argument("--format", choices=("text", "json"), default="text", help="summary format (default: text)")
    conv.set_defaults(run=_convert)

    en_help = (
        "enable IcebergWriterCompatV1 (or IcebergCompatV2 or IcebergWriterCompatV3: --level) on a Delta table: one "
        "metadata commit when the data allows it, else a rewrite of every live file with a local Spark (exit 0 done, "
        "1 blocked/refused, 2 error); the plan lists the known writers that can still write the table afterwards"
    )
    en = sub.add_parser("enable", help=en_help, description=en_help)
    en.add_argument("table", help="table location: a path or a URI")
    en.add_argument("--mode", choices=MODES, default="auto",
                    help="auto: metadata-only when possible, else rewrite; metadata_only: refuse when the data must "
                    "be rewritten; rewrite: always rewrite every live file")
    en.add_argument("--level", choices=tuple(ENABLE_LEVELS), default=DEFAULT_LEVEL,
                    help="writer-compat-v1: IcebergWriterCompatV1 (Delta Kernel and Databricks write it, Delta on "
                    "Spark does not); compat-v2: IcebergCompatV2 with column mapping (Delta on Spark 3.1+ writes it); "
                    "writer-compat-v3: IcebergWriterCompatV3 with row tracking (Delta Kernel 4.4 writes it)")
    en.add_argument("--jars", default=None, metavar="JARS",
                    help="comma-separated jar files or folders for the local Spark of the rewrite: delta-spark and "
                    "delta-storage (default: $DELTABERG_SPARK_JARS, else the jars scripts/fetch_jars.sh fetched into "
                    "$DELTABERG_JARS_DIR or .jars); never resolved through Maven/Ivy unless "
                    "$DELTABERG_SPARK_PACKAGES is set")
    en.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    en.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    en.set_defaults(run=_enable)

    for command in (inspect, check, conv, en):
        command.add_argument("--storage-option", action="append", metavar="KEY=VALUE", type=key_value,
                             help="an fsspec storage option (repeatable)")
    return parser


def _redactor(args: argparse.Namespace) -> Redactor:
    """Every secret the command line holds: storage option and catalog property values under secret names, and
    the credentials of the table location and catalog URI."""
    catalog = _catalog_properties(args)
    extra = url_secrets(getattr(args, "catalog_uri", None) or "") + url_secrets(" ".join(catalog.values()))
    return redactor_for(args.table, {**_options(args), **{f"catalog.{k}": v for k, v in catalog.items()}}, extra)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(build_parser(), argv)
    args.redact = _redactor(args)
    with warnings_to_stderr(args.command), redacting_logs(args.redact):
        try:
            return args.run(args)
        except BrokenPipeError:  # the reader of the output went away (| head): nothing more can reach it
            return EXIT_ERROR
        except Exception as exc:  # noqa: BLE001 - any failure is "error", never "violations"
            report_error(args, exc)
            return EXIT_ERROR


def run() -> NoReturn:
    """The ``deltaberg`` command: ``main``, then the process ends once its output is out, without the interpreter's
    teardown of every module (~0.3-0.6 s with pyiceberg, pandas and numba loaded; nothing is left to clean up: the
    command's files are closed and its temporary folders removed when main returns)."""
    code = main()
    with suppress(BrokenPipeError):  # a reader that went away (| head) needs no more output
        sys.stdout.flush()
        sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def report_error(args: argparse.Namespace, error: BaseException) -> None:
    """An error in one line on stderr and, with ``--format json``, its document on stdout (the Spark result
    protocol's fields: type, message, table, version, file, retryable), so a script that parses the output gets
    the failure. Both without secrets."""
    if getattr(args, "format", None) == "json":
        document = error_document(error)
        fields = document["error"]
        fields["message"] = one_line(error)
        if fields["table"] is None:
            fields["table"] = location_text(args.table)
        _print(args, json.dumps(document, indent=2))
    # The stderr line is text: escaped (a name quoted in the message cannot act on the terminal); JSON stays exact.
    if isinstance(error, DeltabergError):
        _print(args, f"deltaberg {args.command}: {type(error).__name__}: {display.text(one_line(error))}",
               error=True)
    else:
        _print(args, f"deltaberg {args.command}: unexpected {type(error).__name__}: {display.text(one_line(error))} "
                     f"({display.text(location_text(args.table))})", error=True)


def _asks_for_json(argv: Sequence[str]) -> bool:
    return "--format=json" in argv or any(a == "--format" and b == "json" for a, b in zip(argv, argv[1:], strict=False))


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed arguments; a usage error exits 2 with argparse's text on stderr and, when the command line asks
    for ``--format json``, its error document on stdout too."""
    if not _asks_for_json(argv):
        return parser.parse_args(argv)
    usage = io.StringIO()
    try:
        with redirect_stderr(usage):
            return parser.parse_args(argv)
    except SystemExit as exc:
        sys.stderr.write(usage.getvalue())
        if exc.code == EXIT_ERROR:
            lines = usage.getvalue().strip().splitlines()
            message = lines[-1].split(": error: ", 1)[-1] if lines else "invalid arguments"
            print(json.dumps({"error": {"type": "UsageError", "message": message, "table": None, "version": None,
                                        "file": None, "retryable": False}}, indent=2))
        raise


@contextmanager
def warnings_to_stderr(command: str) -> Iterator[None]:
    """Log warnings on stderr as ``deltaberg <command>: warning: <message>`` lines (unless the process has logging
    set up already), so that they read apart from the error line."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_OneLineFormatter(command))
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


class _OneLineFormatter(logging.Formatter):
    """``deltaberg <command>: <level>: <message>``, on one line."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.prefix = f"deltaberg {command}"

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.prefix}: {record.levelname.lower()}: {' '.join(record.getMessage().split())}"


def one_line(error: BaseException) -> str:
    """The error's message on one line: text from other libraries (pyarrow, a feature name in the log) may hold
    line breaks, and scripts read the first stderr line."""
    return " ".join(str(error).split())


if __name__ == "__main__":
    sys.exit(main())
