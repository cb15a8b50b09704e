"""One fuzz case, end to end, in the process that calls it (a worker of fuzz_pool).

Copy the fixture, (convert the previous version first for an incremental case), apply the mutation, then run
`deltaberg inspect`, `validate --data-checks` and `convert` in-process through ``airflow_deltaberg.cli.main``
and judge each outcome:

* exit 2 must be a typed DeltabergError: one stderr line ``deltaberg <command>: <TypeName>: <message>`` naming
  the table (the CLI prints ``unexpected <TypeName>`` for anything else), no traceback, and nothing written
  (the table's file list, sizes and mtimes unchanged, `_iceberg` included);
* inspect exits 0, validate 0 or 1, convert 0 otherwise; inspect and validate never write;
* a conversion that succeeds changes only `_iceberg`, and the Iceberg table (pyiceberg ``StaticTable`` on the
  metadata file the CLI printed) returns the rows deltalake's kernel reader (``QueryBuilder``) returns from the
  mutated table, compared as multisets by logical column name; its data files' record counts and sizes are
  the files' own; and a few filtered scans (pruning by partition values and column bounds) return exactly the
  filtered rows of the full scan;
* when deltalake refuses the mutated table: a typed refusal from us is expected; a success is compared with the
  unmutated table's rows when the mutation keeps them (``neutral`` or ``same_rows``), else reported for review
  (no oracle can judge it);
* a conversion of a table the mutation says must be refused (``must_refuse``) fails the case;
* a log that lies about its data files (fuzz_lies): a wrong record count or size, a filtered scan that loses rows
  of a file its bounds exclude, or a file pyiceberg cannot read with the table's schema is no failure when
  ``validate --data-checks --sample-files all`` reported that file under the matching rule (``flagged-<kind>``,
  for review), and one when it did not; wherever validate reported such a lie and the conversion succeeded,
  ``convert --verify-stats`` on a copy of the table must refuse it (typed, nothing written);
* a neutral mutation must not be refused (the table is valid), by any command;
* different rows are for review when the protocol leaves the outcome open (``ambiguous``) or when one reader
  returns the unmutated rows because it used the copy the mutation left alone (``also_held_by``);
* the storage option's secret given to every command shows in no output and no file under `_iceberg`;
* nothing runs longer than ``CALL_TIMEOUT_S`` (signal.alarm; the pool's hard deadline catches the rest).

The verdict is a list of findings (``problem`` fails the case, ``review`` does not), each with a signature that
groups findings of one root cause: kind, command, exception type, and the innermost airflow_deltaberg frame.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fuzz_cases import SELF_INCONSISTENT, CasePlan
from fuzz_fixtures import COMMIT, COMPACTION, FixtureInfo, fixture_info
from fuzz_lies import added_in, excuse_flagged, files_filtered_wrongly, flagged_files, unreadable_files
from fuzz_mutations import MUTATIONS, FuzzContext, NotApplicable, file_tree
from support.environment import make_writable

CALL_TIMEOUT_S = 60
#: Passed to every command as a storage option: it must show in no output and no file the conversion writes.
SECRET = "fuzz-s3cr3t-9d41c7"
SECRET_OPTION = ["--storage-option", f"token={SECRET}"]
ORACLE_TIMEOUT_S = 60
PACKAGE_DIR = os.sep + "airflow_deltaberg" + os.sep
FILTERS_PER_CASE = 3


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so the CLI's `except Exception` cannot swallow it."""


@dataclass
class Finding:
    severity: str  # "problem" fails the case; "review" is reported only
    kind: str
    command: str
    detail: str
    error_type: str = ""
    where: str = ""  # innermost airflow_deltaberg frame "file.py:line in function"
    files: list[str] = field(default_factory=list)  # the data files at fault (local paths), when known

    @property
    def signature(self) -> str:
        where = re.sub(r":\d+ in ", ":", self.where)  # line numbers move with every edit
        return " | ".join(x for x in (self.kind, self.command, self.error_type, where) if x)


@dataclass
class CaseResult:
    plan: dict[str, Any]
    status: str = "ok"  # ok | failed | not-applicable | harness-error
    mutation_args: dict[str, Any] = field(default_factory=dict)
    neutral: bool = False
    same_rows: bool = False
    ambiguous: bool = False
    must_refuse: str = ""
    #: another copy of the state the mutation changed (a checkpoint holding a changed commit...), if any
    also_held_by: str = ""
    #: files validate reported under a rule for logs that lie about their data (fuzz_lies.flagged_files)
    lies_flagged: list[dict[str, str]] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)  # command -> "exit 0" / "TypeName: message"
    findings: list[Finding] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    kept_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        data = dict(data)
        data["findings"] = [Finding(**f) for f in data.get("findings", [])]
        return cls(**data)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "problem"]

    @property
    def reviews(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "review"]

    def render(self) -> str:
        plan = CasePlan(**self.plan)
        lines = [f"fuzz case {plan.id}: seed {plan.seed}, index {plan.index}, fixture {plan.fixture}, "
                 f"mutation {plan.mutation} ({'incremental' if plan.incremental else 'full'} conversion)",
                 f"  mutation args: {json.dumps(self.mutation_args, default=str)[:600]}"
                 + "".join(f"  [{flag}]" for flag, on in (("neutral", self.neutral), ("same rows", self.same_rows),
                                                            ("ambiguous", self.ambiguous)) if on)
                 + (f"  [must refuse: {self.must_refuse}]" if self.must_refuse else "")
                 + (f"  [also held by {self.also_held_by}]" if self.also_held_by else "")]
        for command, outcome in self.outcomes.items():
            lines.append(f"  {command}: {outcome[:300]}")
        if self.lies_flagged:
            shown = "; ".join(f"{lie['rule']} {lie['path']}" for lie in self.lies_flagged[:4])
            more = f" (and {len(self.lies_flagged) - 4} more)" if len(self.lies_flagged) > 4 else ""
            lines.append(f"  validate reported lies of the log: {shown[:600]}{more}")
        for f in self.findings:
            lines.append(f"  {f.severity.upper()} {f.kind} ({f.command}): {f.detail[:1500]}")
            if f.where:
                lines.append(f"      at {f.where}")
        lines.append(f"  reproduce: {plan.reproduce()}")
        if self.kept_at:
            lines.append(f"  mutated table kept at {self.kept_at}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------- helpers


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


@contextlib.contextmanager
def deadline(seconds: int):
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def innermost_package_frame(tb: Any) -> str:
    frames = traceback.extract_tb(tb)
    ours = [f for f in frames if PACKAGE_DIR in f.filename]
    if not ours:
        return f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    f = ours[-1]
    rel = f.filename[f.filename.rindex(PACKAGE_DIR) + 1:]
    return f"{rel}:{f.lineno} in {f.name}"


def copy_table(source: Path, target: Path) -> None:
    shutil.copytree(source, target)
    make_writable(target)


def tree_diff(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
              keep: Callable[[str], bool] = lambda p: True) -> list[str]:
    changed = []
    for path in sorted(set(before) | set(after)):
        if not keep(path):
            continue
        if path not in after:
            changed.append(f"deleted {path}")
        elif path not in before:
            changed.append(f"created {path}")
        elif before[path] != after[path]:
            changed.append(f"changed {path}")
    return changed


def _is_iceberg(path: str) -> bool:
    return path.split(os.sep, 1)[0] == "_iceberg"


# ------------------------------------------------------------------------------------------- the CLI


@dataclass
class CliRun:
    code: int | None
    stdout: str
    stderr: str
    exception: BaseException | None  # what the command raised (the CLI catches and prints it)
    where: str
    timed_out: bool = False


_LAST_EXCEPTION: list[tuple[BaseException, str]] = []


def _install_recorder() -> None:
    """Make every `deltaberg` subcommand record what it raised (with its innermost frame) before the CLI turns
    it into exit 2, so a report can say where an untyped error comes from."""
    from airflow_deltaberg import cli

    if getattr(cli.build_parser, "_fuzz_recording", False):
        return
    original = cli.build_parser
    built: list[Any] = []

    def build_parser() -> Any:
        # Built once per worker: argparse parses with one parser any number of times, and building it costs
        # ~4 ms of CPU a command, three or four commands a case.
        if built:
            return built[0]
        parser = original()
        for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse keeps subparsers here
            for sub in action.choices.values():
                run = sub.get_default("run")

                def recording(args: Any, run: Any = run) -> int:
                    try:
                        return run(args)
                    except BaseException as exc:
                        _LAST_EXCEPTION.append((exc, innermost_package_frame(exc.__traceback__)))
                        raise

                sub.set_defaults(run=recording)
        built.append(parser)
        return parser

    build_parser._fuzz_recording = True  # type: ignore[attr-defined]
    cli.build_parser = build_parser


def run_cli(argv: list[str], timeout: int = CALL_TIMEOUT_S) -> CliRun:
    from airflow_deltaberg import cli

    _LAST_EXCEPTION.clear()
    argv = [*argv, *SECRET_OPTION]
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    timed_out = False
    where = ""
    try:
        with deadline(timeout), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
    except CaseTimeout as exc:
        timed_out = True
        where = innermost_package_frame(exc.__traceback__)
    except SystemExit as exc:  # argparse, or a SystemExit leaking from a command
        code = exc.code if isinstance(exc.code, int) else 2
        err.write(f"{exc.code}\n" if not isinstance(exc.code, int) else "")
    except BaseException as exc:  # noqa: BLE001 - escaping the CLI at all is the finding
        err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc)))
        code = None
        where = innermost_package_frame(exc.__traceback__)
    exception, raised_at = _LAST_EXCEPTION[-1] if _LAST_EXCEPTION else (None, "")
    return CliRun(code, out.getvalue(), err.getvalue(), exception, raised_at or where, timed_out)


TYPED_LINE = re.compile(r"^deltaberg (\w+): (\w+): (.+)$")
WARNING_LINE = re.compile(r"^deltaberg \w+: (warning|info|debug): ")


def judge_cli(command: str, run: CliRun, table: str, ok_codes: tuple[int, ...], result: CaseResult) -> bool:
    """Record findings for one CLI run; True when the command succeeded (an exit code in ``ok_codes``)."""
    error_type = type(run.exception).__name__ if run.exception is not None else ""
    if run.timed_out:
        result.outcomes[command] = "timed out"
        result.findings.append(Finding("problem", "hang", command, f"no answer within {CALL_TIMEOUT_S} s",
                                       where=run.where))
        return False
    if SECRET in run.stdout or SECRET in run.stderr:
        result.findings.append(Finding("problem", "secret-in-output", command,
                                       "the storage option's secret value is printed", error_type, run.where))
    if "Traceback (most recent call last)" in run.stderr or "Traceback (most recent call last)" in run.stdout:
        result.findings.append(Finding("problem", "traceback", command, run.stderr[-1500:], error_type, run.where))
    if run.code in ok_codes:
        result.outcomes[command] = f"exit {run.code}"
        return True
    # Warnings logged on the way are lines of their own ("deltaberg <command>: warning: ..."); the error is one line.
    lines = [line for line in run.stderr.splitlines() if line.strip() and not WARNING_LINE.match(line)]
    result.outcomes[command] = f"exit {run.code}: " + (lines[-1] if lines else "(no stderr)")
    if run.code != 2:
        result.findings.append(Finding("problem", "exit-code", command, f"exit {run.code}, stderr {run.stderr[-500:]}",
                                       error_type, run.where))
        return False
    from airflow_deltaberg.core.errors import DeltabergError

    if run.exception is not None and not isinstance(run.exception, DeltabergError):
        message = str(run.exception).splitlines()[0][:400] if str(run.exception) else ""
        result.findings.append(Finding("problem", "untyped-error", command, f"{error_type}: {message}",
                                       error_type, run.where))
        return False
    if len(lines) != 1:
        result.findings.append(Finding("problem", "stderr-not-one-line", command,
                                       f"{len(lines)} lines: {run.stderr[-800:]}", error_type, run.where))
        if isinstance(run.exception, DeltabergError):
            # A typed error whose message spans lines: judged on the whole message, not on its last line.
            lines = [" ".join(lines)]
    m = TYPED_LINE.match(lines[-1]) if lines else None
    if m is None or m.group(2) == "unexpected":
        result.findings.append(Finding("problem", "untyped-error", command, lines[-1] if lines else "(no stderr)",
                                       error_type, run.where))
    elif table not in m.group(3):
        result.findings.append(Finding("problem", "message-without-table", command, lines[-1][:400], error_type,
                                       run.where))
    return False


# ------------------------------------------------------------------------------------------- oracle


_ORIGINAL_ROWS: dict[str, Any] = {}


def _normalizer() -> Callable[[Any, list[str]], list[tuple[Any, ...]]]:
    """support.oracle's normalization (one rule for both oracle suites)."""
    from support.oracle import normalized_rows

    return normalized_rows


def delta_rows(path: Path) -> Any:
    """The table as deltalake's kernel-based reader returns it (a pyarrow Table)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    reader = QueryBuilder().register("t", DeltaTable(str(path))).execute("select * from t")
    return pa.table(reader.read_all())


def original_rows(fixtures_root: Path, name: str) -> Any:
    if name not in _ORIGINAL_ROWS:
        _ORIGINAL_ROWS[name] = delta_rows(fixtures_root / name)
    return _ORIGINAL_ROWS[name]


def compare_rows(iceberg: Any, delta: Any) -> str | None:
    """None when equal as multisets by logical column name, else what differs."""
    normalized = _normalizer()
    columns = delta.column_names
    if sorted(iceberg.column_names) != sorted(columns):
        return f"columns differ: iceberg {sorted(iceberg.column_names)} vs delta {sorted(columns)}"
    a, b = normalized(iceberg, columns), normalized(delta, columns)
    if a == b:
        return None
    from collections import Counter

    ca, cb = Counter(map(repr, a)), Counter(map(repr, b))
    only_iceberg, only_delta = list((ca - cb).elements()), list((cb - ca).elements())
    return (f"{len(a)} iceberg rows vs {len(b)} delta rows; only in iceberg ({len(only_iceberg)}): "
            f"{only_iceberg[:3]}; only in delta ({len(only_delta)}): {only_delta[:3]}")


def _oracle_call(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        quiet = io.StringIO()  # pyiceberg's warnings (ns timestamps downcast) are not findings
        with deadline(ORACLE_TIMEOUT_S), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            return fn(), None
    except CaseTimeout as exc:
        return None, exc
    except BaseException as exc:  # noqa: BLE001 - deltalake panics are BaseExceptions (pyo3 PanicException)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, exc


def data_file_checks(static: Any, result: CaseResult) -> None:
    """Each Iceberg data file's record_count and file_size_in_bytes equal the file's own (Iceberg readers answer
    count(*) from record_count, skip a file whose record_count is 0, and find the footer from the size). Every
    manifest entry is checked (a scan's planning would already skip the files with a record count of 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import PyArrowFileIO

    try:
        files = static.inspect.files().select(["content", "file_path", "record_count", "file_size_in_bytes"])
    except pa.ArrowInvalid as exc:
        if "Must pass at least one table" in str(exc):
            return  # pyiceberg 0.12 cannot list the files of a table without any: nothing to check
        raise
    for entry in files.to_pylist():
        if entry["content"] != 0:
            continue  # delete files: written by the converter, read back through the scan
        path, record_count, size_in_bytes = entry["file_path"], entry["record_count"], entry["file_size_in_bytes"]
        _scheme, _netloc, local = PyArrowFileIO.parse_location(path)
        try:
            size = os.path.getsize(local)
            rows = pq.read_metadata(local).num_rows
        except (OSError, ValueError) as exc:
            result.findings.append(Finding("review", "data-file-unreadable", "iceberg", f"{path}: {exc}"))
            continue
        if record_count != rows:
            result.findings.append(Finding("problem", "wrong-record-count", "iceberg",
                                           f"{path}: record_count {record_count}, the file holds {rows} rows",
                                           files=[os.path.normpath(local)]))
        if size_in_bytes != size:
            result.findings.append(Finding("problem", "wrong-file-size", "iceberg",
                                           f"{path}: file_size_in_bytes {size_in_bytes}, the file has {size} bytes",
                                           files=[os.path.normpath(local)]))


#: pyiceberg errors that mean "this data file path cannot be opened" (missing, a directory, an impossible name).
UNOPENABLE = ("FileNotFoundError", "No such file or directory", "is a directory", "File name too long",
              "Embedded NUL", "Unrecognized filesystem type")

_FILTER_TYPES = ("int", "long", "string", "date", "timestamp", "timestamptz", "boolean")


def filter_checks(static: Any, full: Any, rng: Any, result: CaseResult) -> None:
    """A few filtered scans (pruned by partition values and column bounds) against the full scan filtered."""
    import datetime as dt
    import decimal

    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg import expressions as ex

    normalized = _normalizer()
    columns = full.column_names
    schema = static.schema()
    candidates = [f for f in schema.fields
                  if (str(f.field_type) in _FILTER_TYPES or str(f.field_type).startswith("decimal"))
                  and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", f.name) and f.name in columns]
    if not candidates or full.num_rows == 0:
        return
    for _ in range(FILTERS_PER_CASE):
        f = rng.choice(candidates)
        column = full.column(f.name)
        values = [v for v in column.to_pylist() if v is not None and not (isinstance(v, float) and math.isnan(v))]
        op = rng.choice(["eq", "lt", "gt_eq", "is_null", "not_null"] if values else ["is_null", "not_null"])
        arrow_field = pc.field(f.name)
        if op == "is_null":
            expr, expected = ex.IsNull(f.name), arrow_field.is_null()
        elif op == "not_null":
            expr, expected = ex.NotNull(f.name), arrow_field.is_valid()
        else:
            v = rng.choice(values)
            literal: Any = v
            if isinstance(v, (dt.datetime, dt.date)):
                literal = v.isoformat()
            elif isinstance(v, decimal.Decimal):
                literal = v
            scalar = pa.scalar(v, column.type)
            iceberg_op = {"eq": ex.EqualTo, "lt": ex.LessThan, "gt_eq": ex.GreaterThanOrEqual}[op]
            arrow_op = {"eq": pc.equal, "lt": pc.less, "gt_eq": pc.greater_equal}[op]
            expr, expected = iceberg_op(f.name, literal), arrow_op(arrow_field, scalar)
        try:
            got = static.scan(row_filter=expr).to_arrow()
        except Exception as exc:  # noqa: BLE001 - an unreadable filtered scan is the finding
            result.findings.append(Finding("problem", "filtered-scan-fails", "iceberg",
                                           f"{expr}: {type(exc).__name__}: {str(exc)[:300]}", type(exc).__name__))
            continue
        want = full.filter(expected)
        if normalized(got, columns) != normalized(want, columns):
            try:
                at_fault = files_filtered_wrongly(static, expr, expected)
            except Exception:  # noqa: BLE001 - then no file is singled out
                at_fault = []
            result.findings.append(Finding("problem", "filter-loses-rows", "iceberg",
                                           f"{expr}: {got.num_rows} rows from the filtered scan, {want.num_rows} "
                                           f"from the full scan filtered" + (f"; files whose rows it filters otherwise "
                                           f"than Arrow: {at_fault[:3]}" if at_fault else ""), files=at_fault))


# ------------------------------------------------------------------------------------------ the case


def apply_expectations(result: CaseResult, args: dict[str, Any], info: FixtureInfo | None = None,
                       root: Path | None = None) -> None:
    """Move the mutation's expectation flags (fuzz_mutations' docstring) from its arguments to the result, and
    note when the changed file's content is also held elsewhere (see ``also_held_by``)."""
    args = dict(args)
    result.neutral = bool(args.pop("neutral", False))
    result.same_rows = result.neutral or bool(args.pop("same_rows", False))
    result.ambiguous = bool(args.pop("ambiguous", False))
    result.must_refuse = str(args.pop("must_refuse", "") or "")
    if info is not None and info.name in SELF_INCONSISTENT:
        result.ambiguous = True
    changed = args.get("file")
    if info is not None and root is not None and isinstance(changed, str) and (root / changed).exists():
        result.also_held_by = also_held_by(info, changed)
    result.mutation_args = args


def also_held_by(info: FixtureInfo, changed: str) -> str:
    """Where else the state in a changed log file is kept: a changed commit may also be in a checkpoint or a log
    compaction, a changed compaction or checkpoint also in the commits. Readers may use either copy; when one
    reader returns the unmutated rows it used the other copy, and a difference is ambiguous, not a defect."""
    path = Path(changed)
    name = path.name
    if COMPACTION.match(name):
        return "the commits the compaction covers"
    if COMMIT.match(name):
        return info.covered(int(name[:20])) or ""
    version = int(name[:20]) if name[:20].isdigit() else None
    if path.parent.name == "_sidecars" and info.checkpoint_versions:
        version = max(info.checkpoint_versions)
    if version is not None and set(range(version + 1)) <= set(info.commits):
        return f"commits 0..{version}"
    return ""


def run_case(plan: CasePlan, fixtures_root: Path, workdir: Path, keep: bool = False,
             progress: Callable[..., None] = lambda phase, detail=None: None) -> CaseResult:
    _install_recorder()
    result = CaseResult(plan.to_dict())
    case_dir = workdir / f"case-{plan.seed}-{plan.index}"
    if case_dir.exists():
        shutil.rmtree(case_dir)
    root = case_dir / "table"
    started = time.perf_counter()
    try:
        progress("copy")
        copy_table(fixtures_root / plan.fixture, root)
        table = str(root)
        info = fixture_info(fixtures_root, plan.fixture)
        if plan.incremental:
            progress("pre-convert")
            run = run_cli(["convert", table, "--version", str(info.latest - 1), "--format", "json"])
            if run.code != 0:
                result.status = "harness-error"
                result.findings.append(Finding("problem", "pre-convert-failed", "convert",
                                               f"converting the unmutated version {info.latest - 1} failed: "
                                               f"{run.stderr[-500:]}", where=run.where))
                return result
        progress("mutate")
        ctx = FuzzContext(root, plan.rng(), case_dir / "outside",
                          versions=(info.latest,) if plan.incremental else None)
        try:
            args = MUTATIONS[plan.mutation].fn(ctx)
        except NotApplicable as exc:
            result.status = "not-applicable"
            result.mutation_args = {"reason": str(exc)}
            return result
        progress("mutated", dict(args))
        apply_expectations(result, args, info, root)
        result.seconds["prepare"] = time.perf_counter() - started
        _judge(plan, root, fixtures_root, result, progress)
    except Exception as exc:  # noqa: BLE001 - a harness bug must show as such, not as a product finding
        result.status = "harness-error"
        result.findings.append(Finding("problem", "harness-error", "harness",
                                       "".join(traceback.format_exception(exc))[-2000:], type(exc).__name__))
    finally:
        if keep:
            result.kept_at = str(root)
        else:
            shutil.rmtree(case_dir, ignore_errors=True)
    if result.status == "ok" and result.problems:
        result.status = "failed"
    result.seconds["total"] = time.perf_counter() - started
    return result


def _judge(plan: CasePlan, root: Path, fixtures_root: Path, result: CaseResult,
           progress: Callable[..., None]) -> None:
    table = str(root)
    refused: list[str] = []
    for command, argv, ok in (
        ("inspect", ["inspect", table, "--format", "json"], (0,)),
        ("validate", ["validate", table, "--data-checks", "--sample-files", "all", "--format", "json"], (0, 1)),
    ):
        progress(command)
        before = file_tree(root)
        t0 = time.perf_counter()
        run = run_cli(argv)
        result.seconds[command] = time.perf_counter() - t0
        if judge_cli(command, run, table, ok, result):
            if command == "validate":
                result.lies_flagged = flagged_files(run.stdout, root)
        elif not run.timed_out:
            refused.append(command)
        changed = tree_diff(before, file_tree(root))
        if changed:
            result.findings.append(Finding("problem", "read-only-command-wrote", command, "; ".join(changed[:10])))

    verify_copy = _copy_for_verify_stats(plan, root, result) if result.lies_flagged else None
    progress("convert")
    before = file_tree(root)
    t0 = time.perf_counter()
    run = run_cli(["convert", table, "--format", "json"])
    result.seconds["convert"] = time.perf_counter() - t0
    converted = judge_cli("convert", run, table, (0,), result)
    after = file_tree(root)
    if not converted:
        if not run.timed_out:
            refused.append("convert")
        changed = tree_diff(before, after)
        if changed:
            result.findings.append(Finding("problem", "refused-conversion-wrote", "convert", "; ".join(changed[:10]),
                                           type(run.exception).__name__ if run.exception else "", run.where))
    else:
        changed = tree_diff(before, after, keep=lambda p: not _is_iceberg(p))
        if changed:
            result.findings.append(Finding("problem", "conversion-changed-delta-files", "convert",
                                           "; ".join(changed[:10])))
        holding = [p for p in after if _is_iceberg(p) and SECRET.encode() in (root / p).read_bytes()]
        if holding:
            result.findings.append(Finding("problem", "secret-in-metadata", "convert",
                                           f"the storage option's secret is written to {holding[:3]}"))
    if result.neutral and refused:
        for command in refused:
            outcome = result.outcomes.get(command, "")
            m = re.search(r"deltaberg \w+: (?:unexpected )?(\w+):", outcome)
            error_type = m.group(1) if m else ""
            result.findings.append(Finding("problem", "refused-valid-table", command,
                                           f"the mutation keeps the table valid with the same rows, yet: {outcome}",
                                           error_type))
    if not converted:
        return
    if result.must_refuse:
        result.findings.append(Finding("problem", "accepted-invalid-table", "convert",
                                       f"converted, but must refuse: {result.must_refuse}"))
    _check_conversion(plan, root, fixtures_root, run, result, progress)
    excuse_flagged(result.findings, result.lies_flagged, result.also_held_by if plan.incremental else "")
    if verify_copy is not None:
        _check_verify_stats(verify_copy, result, progress)


def _copy_for_verify_stats(plan: CasePlan, root: Path, result: CaseResult) -> Path:
    """A copy of the mutated table, as the plain conversion finds it, for ``convert --verify-stats``. An
    incremental case keeps the conversion of the previous version only when a reported file is added by the
    newest commit (an incremental conversion verifies the files it adds); otherwise the copy converts in full."""
    copy = root.parent / "verify-stats" / root.name
    copy_table(root, copy)
    commits = sorted(p for p in (root / "_delta_log").iterdir() if COMMIT.match(p.name))
    added = added_in(commits[-1]) if commits else set()
    if plan.incremental and not {lie["path"] for lie in result.lies_flagged} & added:
        shutil.rmtree(copy / "_iceberg", ignore_errors=True)
    return copy


def _check_verify_stats(copy: Path, result: CaseResult, progress: Callable[..., None]) -> None:
    """validate reported a lie of the log and the plain conversion succeeded: ``convert --verify-stats`` must
    refuse the table (typed, nothing written)."""
    progress("verify-stats")
    command = "convert --verify-stats"
    before = file_tree(copy)
    t0 = time.perf_counter()
    run = run_cli(["convert", str(copy), "--verify-stats", "--format", "json"])
    result.seconds["verify-stats"] = time.perf_counter() - t0
    if judge_cli(command, run, str(copy), (0,), result):
        lie = result.lies_flagged[0]
        result.findings.append(Finding("problem", "verify-stats-accepted-lie", command,
                                       f"validate reported {lie['rule']} for {lie['path']} "
                                       f"({len(result.lies_flagged)} report(s) in all), yet the conversion "
                                       "with --verify-stats succeeded", files=[lie["local"]]))
        return
    changed = tree_diff(before, file_tree(copy))
    if changed and not run.timed_out:
        result.findings.append(Finding("problem", "refused-conversion-wrote", command, "; ".join(changed[:10]),
                                       type(run.exception).__name__ if run.exception else "", run.where))


def _check_conversion(plan: CasePlan, root: Path, fixtures_root: Path, run: CliRun, result: CaseResult,
                      progress: Callable[..., None]) -> None:
    from pyiceberg.table import StaticTable

    progress("iceberg-read")
    t0 = time.perf_counter()
    location = json.loads(run.stdout)["metadata_location"]

    def read() -> tuple[Any, Any]:
        static = StaticTable.from_metadata(location)
        return static, static.scan().to_arrow()

    iceberg, iceberg_error = _oracle_call(read)
    result.seconds["iceberg"] = time.perf_counter() - t0
    progress("oracle")
    t0 = time.perf_counter()
    delta, delta_error = _oracle_call(lambda: delta_rows(root))
    result.seconds["oracle"] = time.perf_counter() - t0
    result.outcomes["deltalake"] = ("reads the table" if delta_error is None
                                    else f"refuses: {type(delta_error).__name__}: {str(delta_error)[:200]}")
    if iceberg_error is not None:
        # Unreadable is a failure, except (review) where the log names a data file that cannot be opened and
        # deltalake fails too (the converter does not open every data file), and where pyiceberg itself is at
        # fault: it refuses a file column the name mapping does not name (the spec says such columns are not read).
        text = f"{type(iceberg_error).__name__}: {iceberg_error}"
        unopenable = any(s in text for s in UNOPENABLE)
        pyiceberg_limit = "Could not find field with name" in text
        both_fail = delta_error is not None or bool(result.also_held_by)
        severity = ("review" if pyiceberg_limit or (unopenable and both_fail and not result.same_rows)
                    else "problem")
        at_fault: list[str] = []
        if severity == "problem":
            files, _error = _oracle_call(lambda: unreadable_files(StaticTable.from_metadata(location)))
            at_fault = files or []
        result.findings.append(Finding(severity, "iceberg-unreadable", "iceberg",
                                       f"{type(iceberg_error).__name__}: {str(iceberg_error)[:500]} (deltalake: "
                                       f"{result.outcomes['deltalake']})", type(iceberg_error).__name__,
                                       files=at_fault))
        return
    static, rows = iceberg
    expected, against = delta, "the mutated table read by deltalake"
    if delta_error is not None:
        if result.same_rows:
            expected, against = original_rows(fixtures_root, plan.fixture), "the unmutated table (deltalake refuses " \
                "the mutated one; the mutation keeps the rows)"
        else:
            result.findings.append(Finding("review", "unverified-success", "convert",
                                           f"we convert, deltalake refuses ({type(delta_error).__name__}: "
                                           f"{str(delta_error)[:300]}); no oracle for a mutation that may change rows",
                                           type(delta_error).__name__))
            expected = None
    if expected is not None:
        diff = compare_rows(rows, expected)
        if diff is not None:
            severity = "review" if result.ambiguous else "problem"
            if severity == "problem" and result.also_held_by and expected is delta:
                # One reader used the changed file, the other the copy the mutation left alone.
                original = original_rows(fixtures_root, plan.fixture)
                if compare_rows(rows, original) is None or compare_rows(delta, original) is None:
                    severity = "review"
                    diff += f" (one reader returns the unmutated rows: it used {result.also_held_by} instead)"
            result.findings.append(Finding(severity, "different-rows", "convert", f"vs {against}: {diff}"))
    progress("iceberg-checks")
    try:
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            data_file_checks(static, result)
            filter_checks(static, rows, plan.rng("filters"), result)
    except Exception as exc:  # noqa: BLE001 - planning the scan of the converted table failed
        result.findings.append(Finding("problem", "iceberg-unreadable", "iceberg",
                                       f"planning a scan: {type(exc).__name__}: {str(exc)[:500]}", type(exc).__name__))
