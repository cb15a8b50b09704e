"""The mutations of the fuzzer: each a small, named function of (a table copy, a random generator).

A mutation changes one thing in a writable copy of a fixture table and returns what it did (its arguments,
JSON-able, so a failure report shows them). Four keys of that dict are read by the harness and removed:

* ``neutral``: the mutated table holds the same rows as the original and is still valid by the protocol
  (e.g. `_last_checkpoint` deleted, an equivalent percent-encoding of a path). A typed refusal of such a table
  is a failure, and when deltalake refuses it our rows are compared with the original table's.
* ``same_rows``: the change cannot change the rows (a field no reader needs for them: modificationTime, tags,
  stats, size, commitInfo, txn...), though the table may now break the protocol. Refusing is fine; a success
  must return the original table's rows (also when deltalake refuses).
* ``ambiguous``: the protocol leaves the outcome open (e.g. a log compaction file that disagrees with its
  commits: readers may use either). Different rows are reported for review, not as a failure.
* ``must_refuse``: why a conversion must refuse this table (an unsupported reader version or feature, a data
  path that leaves the table, two adds of one path in one commit); a success is a failure.

Mutations of commits honour ``ctx.versions`` (the versions an incremental case may touch: the newest only).
``NotApplicable`` means the copy has nothing this mutation can change (the harness then reports the case as
not applicable; the planner avoids that using the fixture tags of fuzz_fixtures).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fuzz_fixtures import CHECKPOINT, COMMIT, COMPACTION, CRC
from support.parquet_footer import set_null_count


class NotApplicable(Exception):
    """The table copy has nothing this mutation can change."""


@dataclass
class FuzzContext:
    root: Path  # the table copy
    rng: random.Random
    outside: Path  # a writable folder outside the table (for absolute paths elsewhere)
    versions: tuple[int, ...] | None = None  # commits a mutation may touch (None: any log file)

    @property
    def log(self) -> Path:
        return self.root / "_delta_log"

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


@dataclass(frozen=True)
class Mutation:
    name: str
    fn: Callable[[FuzzContext], dict[str, Any]]
    needs: frozenset[str]  # fixture tags required
    scope: str  # "commit": touches only commit files (can run incrementally); "table": anything
    weight: float


MUTATIONS: dict[str, Mutation] = {}


def mutation(*needs: str, scope: str = "table", weight: float = 1.0):
    def register(fn: Callable[[FuzzContext], dict[str, Any]]) -> Callable[[FuzzContext], dict[str, Any]]:
        MUTATIONS[fn.__name__] = Mutation(fn.__name__, fn, frozenset(needs), scope, weight)
        return fn

    return register


# ------------------------------------------------------------------------------------------ value pools

#: Action fields (and checkpoint columns, dotted) that rows do not depend on: a reader that accepts any value
#: there must return the same rows. (Sizes and stats feed Iceberg metrics, checked separately from the rows.)
ROW_NEUTRAL_FIELDS = frozenset({
    "add.size", "add.modificationTime", "add.dataChange", "add.tags", "add.stats", "add.stats_parsed",
    "add.clusteringProvider", "remove.deletionTimestamp", "remove.size", "remove.dataChange",
    "remove.extendedFileMetadata", "remove.partitionValues", "remove.tags", "remove.stats", "metaData.name",
    "metaData.description", "metaData.createdTime", "metaData.id", "protocol.minWriterVersion",
    "protocol.writerFeatures", "txn", "commitInfo", "domainMetadata", "cdc", "checkpointMetadata",
})


def row_neutral(dotted: str) -> bool:
    return any(dotted == f or dotted.startswith(f + ".") for f in ROW_NEUTRAL_FIELDS)



class Raw(str):
    """A JSON token written verbatim (NaN, 1e400, leading zeros...): not valid JSON, as a broken writer would."""


HUGE_INTS = [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 + 1, 10**30, -(2**63) - 1, -(10**30)]
RAW_NUMBERS = [Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e400"), Raw("-0"), Raw("007"), Raw("1.0e2")]
WRONG_TYPES: list[Any] = [None, True, False, "", "abc", "12", 1.5, {}, [], {"a": 1}, [1, "x"], {"nested": {"x": [1]}}]


def weird_number(rng: random.Random) -> Any:
    pool = [0, -1, -2, 1, 2**31 - 1, -(2**31)] + HUGE_INTS + RAW_NUMBERS + WRONG_TYPES
    return rng.choice(pool)


def weird_string(rng: random.Random) -> Any:
    pool = ["", " ", "\u0000", "null", "{}", "é\u00ff\u4e2d", "a" * 5000, "\ud800", "%", "../", 0, -1, 2**64,
            1.5, None, True, {}, [], {"a": "b"}, ["a"]]
    return rng.choice(pool)


def weird_any(rng: random.Random) -> Any:
    return rng.choice([weird_number, weird_string])(rng)


def dumps(obj: Any) -> str:
    """Compact JSON as Delta writes it; ``Raw`` values verbatim."""
    raws: list[str] = []

    def walk(x: Any) -> Any:
        if isinstance(x, Decimal):  # parsed from the log with parse_float=Decimal: written back digit for digit
            x = Raw(str(x))
        if isinstance(x, Raw):
            raws.append(str(x))
            return f"\u0001RAW{len(raws) - 1}\u0001"
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    text = json.dumps(walk(obj), separators=(",", ":"), ensure_ascii=False)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\u0001RAW{i}\u0001"), raw)
    return text


def describe(value: Any) -> Any:
    """A short JSON-able form of a value for the report."""
    if isinstance(value, Raw):
        return f"raw:{value}"
    if isinstance(value, str) and len(value) > 40:
        return f"{value[:20]!r}...({len(value)} chars)"
    return value


# ----------------------------------------------------------------------------------------- log files


def commit_files(ctx: FuzzContext) -> list[Path]:
    files = sorted(p for p in ctx.log.iterdir() if COMMIT.match(p.name))
    if ctx.versions is not None:
        files = [p for p in files if int(p.name[:20]) in ctx.versions]
    return files


def json_checkpoint_files(ctx: FuzzContext) -> list[Path]:
    found = [p for p in ctx.log.iterdir() if CHECKPOINT.match(p.name) and p.suffix == ".json"]
    sidecars = ctx.log / "_sidecars"
    if sidecars.is_dir():
        found += [p for p in sidecars.iterdir() if p.suffix == ".json"]
    return sorted(found)


def compaction_files(ctx: FuzzContext) -> list[Path]:
    return sorted(p for p in ctx.log.iterdir() if COMPACTION.match(p.name))


def line_files(ctx: FuzzContext) -> list[Path]:
    """The JSON-lines files a line mutation may touch: commits (of ctx.versions), and in a full case also JSON
    checkpoints, JSON sidecars and log compaction files."""
    files = commit_files(ctx)
    if ctx.versions is None:
        files += json_checkpoint_files(ctx) + compaction_files(ctx)
    return files


def parquet_checkpoint_files(ctx: FuzzContext) -> list[Path]:
    found = [p for p in ctx.log.iterdir() if CHECKPOINT.match(p.name) and p.suffix == ".parquet"]
    sidecars = ctx.log / "_sidecars"
    if sidecars.is_dir():
        found += [p for p in sidecars.iterdir() if p.suffix == ".parquet"]
    return sorted(found)


def checkpoint_files(ctx: FuzzContext) -> list[Path]:
    """Every checkpoint file: top-level checkpoints (all kinds) and sidecars."""
    return sorted(set(parquet_checkpoint_files(ctx) + json_checkpoint_files(ctx)))


def loads(text: str | bytes) -> Any:
    """JSON with its numbers kept exact (a float would round a decimal bound and change what the mutation did)."""
    return json.loads(text, parse_float=Decimal)


def read_lines(path: Path) -> tuple[list[str], bool]:
    text = path.read_text(encoding="utf-8")
    ends_with_newline = text.endswith("\n")
    lines = text.split("\n")
    if ends_with_newline:
        lines.pop()
    return lines, ends_with_newline


def write_lines(path: Path, lines: list[str], ends_with_newline: bool = True) -> None:
    # surrogatepass: a lone surrogate in a value is written as the invalid UTF-8 a broken writer would produce
    path.write_text("\n".join(lines) + ("\n" if ends_with_newline and lines else ""), encoding="utf-8",
                    errors="surrogatepass")


@dataclass
class ActionRef:
    path: Path
    lines: list[str]
    newline: bool
    index: int
    action: dict[str, Any]

    @property
    def kind(self) -> str:
        return next(iter(self.action))

    @property
    def body(self) -> dict[str, Any]:
        return self.action[self.kind]

    def save(self) -> None:
        self.lines[self.index] = dumps(self.action)
        write_lines(self.path, self.lines, self.newline)


def pick_action(ctx: FuzzContext, kind: str | None = None,
                where: Callable[[dict[str, Any]], bool] | None = None, files: list[Path] | None = None) -> ActionRef:
    """A random action line (of ``kind``, whose body satisfies ``where``) among ``files`` (default: line_files)."""
    candidates: list[tuple[Path, int]] = []
    parsed: dict[Path, tuple[list[str], bool, dict[int, dict[str, Any]]]] = {}
    for path in files if files is not None else line_files(ctx):
        lines, newline = read_lines(path)
        actions = {}
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            action = loads(line)
            if not isinstance(action, dict) or len(action) != 1:
                continue
            k, body = next(iter(action.items()))
            if kind is not None and k != kind:
                continue
            if where is not None and not (isinstance(body, dict) and where(body)):
                continue
            actions[i] = action
            candidates.append((path, i))
        parsed[path] = (lines, newline, actions)
    if not candidates:
        raise NotApplicable(f"no {kind or 'action'} line")
    path, index = ctx.rng.choice(candidates)
    lines, newline, actions = parsed[path]
    return ActionRef(path, lines, newline, index, actions[index])


def pick_line(ctx: FuzzContext) -> tuple[Path, list[str], bool, int]:
    files = [p for p in line_files(ctx) if p.stat().st_size]
    if not files:
        raise NotApplicable("no log line")
    path = ctx.rng.choice(files)
    lines, newline = read_lines(path)
    return path, lines, newline, ctx.rng.randrange(len(lines))


@mutation(scope="table", weight=0)
def no_change(ctx: FuzzContext) -> dict[str, Any]:
    """The unmutated table (the baseline: run with run_fuzz.py --baseline; never drawn at random)."""
    return {"neutral": True}


# ------------------------------------------------------------------------------------ line mutations


@mutation(scope="commit", weight=2)
def truncate_line(ctx: FuzzContext) -> dict[str, Any]:
    """Cut one line of a log file short (a torn write)."""
    path, lines, newline, i = pick_line(ctx)
    cut = ctx.rng.randrange(1, max(2, len(lines[i])))
    lines[i] = lines[i][:cut]
    keep = ctx.rng.random() < 0.5 or i < len(lines) - 1
    write_lines(path, lines, newline and keep)
    return {"file": ctx.rel(path), "line": i + 1, "cut_at": cut, "newline_after": keep}


@mutation(scope="commit", weight=2)
def garble_line(ctx: FuzzContext) -> dict[str, Any]:
    """Overwrite a few bytes of a line with random bytes (JSON syntax, quotes, non-UTF-8)."""
    path, lines, newline, i = pick_line(ctx)
    data = bytearray(lines[i].encode("utf-8"))
    pool = b'{}[]":,\\\x00\xff\xfe\x80 0-eE.tnu'
    changes = []
    for _ in range(ctx.rng.randint(1, 3)):
        at = ctx.rng.randrange(len(data) or 1)
        byte = ctx.rng.choice(pool)
        if data:
            data[at] = byte
        else:
            data.append(byte)
        changes.append((at, byte))
    raw = [line.encode("utf-8") for line in lines]
    raw[i] = bytes(data)
    path.write_bytes(b"\n".join(raw) + (b"\n" if newline else b""))
    return {"file": ctx.rel(path), "line": i + 1, "bytes": changes}


@mutation(scope="commit")
def truncate_file(ctx: FuzzContext) -> dict[str, Any]:
    """Truncate a log file at a random byte (0 included)."""
    files = [p for p in line_files(ctx) if p.stat().st_size]
    if not files:
        raise NotApplicable("no log file")
    path = ctx.rng.choice(files)
    size = path.stat().st_size
    cut = ctx.rng.choice([0, ctx.rng.randrange(size)])
    with open(path, "r+b") as f:
        f.truncate(cut)
    return {"file": ctx.rel(path), "size": size, "cut_to": cut}


def kinds_present(ctx: FuzzContext) -> list[str]:
    """The action kinds of the line files, sorted (for a reproducible choice)."""
    kinds: set[str] = set()
    for path in line_files(ctx):
        for line in read_lines(path)[0]:
            if line.strip():
                action = json.loads(line)
                if isinstance(action, dict):
                    kinds.update(action)
    return sorted(kinds)


def pick_kind(ctx: FuzzContext) -> str:
    """An action kind present in the log, file actions twice as likely as each other kind."""
    kinds = kinds_present(ctx)
    if not kinds:
        raise NotApplicable("no action")
    return ctx.rng.choices(kinds, weights=[2 if k in ("add", "remove") else 1 for k in kinds])[0]


@mutation(scope="commit", weight=3)
def drop_action(ctx: FuzzContext) -> dict[str, Any]:
    """Remove one action line (add, remove, metaData, protocol, commitInfo, txn, sidecar...)."""
    kind = pick_kind(ctx)
    ref = pick_action(ctx, kind)
    del ref.lines[ref.index]
    write_lines(ref.path, ref.lines, ref.newline)
    return {"file": ctx.rel(ref.path), "line": ref.index + 1, "kind": kind,
            "neutral": kind == "commitInfo" and "inCommitTimestamp" not in ref.body}


@mutation(scope="commit", weight=3)
def duplicate_action(ctx: FuzzContext) -> dict[str, Any]:
    """Write one action line twice (same file), or copy it into another commit. An add or a remove twice in a
    commit a reader reads must be refused."""
    kind = pick_kind(ctx)
    ref = pick_action(ctx, kind)
    others = [p for p in commit_files(ctx) if p != ref.path]
    if others and ref.path in commit_files(ctx) and ctx.rng.random() < 0.3:
        target = ctx.rng.choice(others)
        lines, newline = read_lines(target)
        lines.insert(ctx.rng.randrange(len(lines) + 1), ref.lines[ref.index])
        write_lines(target, lines, True)
        return {"file": ctx.rel(ref.path), "line": ref.index + 1, "kind": kind, "copied_into": ctx.rel(target)}
    ref.lines.insert(ctx.rng.randrange(len(ref.lines) + 1), ref.lines[ref.index])
    write_lines(ref.path, ref.lines, True)
    result = {"file": ctx.rel(ref.path), "line": ref.index + 1, "kind": kind}
    if (kind in ("add", "remove") and COMMIT.match(ref.path.name) and _effective(ctx, ref.path)
            and not _compacted(ctx, ref.path)):
        # Protocol: a valid version holds at most one file action of each type (add/remove) per path.
        result["must_refuse"] = f"two {kind} actions for one path in one commit"
    return result


def _compacted(ctx: FuzzContext, commit: Path) -> bool:
    """Whether a log compaction file also holds this commit (a reader may use it instead of the commit)."""
    version = int(commit.name[:20])
    return any(int(m.group(1)) <= version <= int(m.group(2))
               for p in compaction_files(ctx) if (m := COMPACTION.match(p.name)))


@mutation(scope="commit")
def shuffle_lines(ctx: FuzzContext) -> dict[str, Any]:
    """Reorder the actions of a commit (an action set has no order): same table."""
    files = [p for p in commit_files(ctx) if len(read_lines(p)[0]) > 1]
    if not files:
        raise NotApplicable("no commit with two lines")
    path = ctx.rng.choice(files)
    lines, newline = read_lines(path)
    order = list(range(len(lines)))
    while order == sorted(order):
        ctx.rng.shuffle(order)
    write_lines(path, [lines[i] for i in order], newline)
    return {"file": ctx.rel(path), "order": order, "neutral": True}


@mutation(scope="commit")
def whitespace_lines(ctx: FuzzContext) -> dict[str, Any]:
    """Blank lines, CRLF line ends or spaces around the JSON of a commit."""
    path = ctx.rng.choice(commit_files(ctx))
    lines, newline = read_lines(path)
    how = ctx.rng.choice(["blank_line", "crlf", "spaces", "no_final_newline"])
    if how == "blank_line":
        lines.insert(ctx.rng.randrange(len(lines) + 1), ctx.rng.choice(["", " ", "\t"]))
    elif how == "crlf":
        lines = [line + "\r" for line in lines]
    elif how == "spaces":
        i = ctx.rng.randrange(len(lines))
        lines[i] = "  " + lines[i] + " \t"
    else:
        newline = False
    write_lines(path, lines, newline)
    # JSON allows whitespace around a value; a blank line between JSON lines holds no action.
    return {"file": ctx.rel(path), "how": how, "neutral": how != "blank_line"}


@mutation(scope="commit")
def unknown_action(ctx: FuzzContext) -> dict[str, Any]:
    """An action kind no reader knows (readers ignore unknown actions)."""
    path = ctx.rng.choice(commit_files(ctx))
    lines, newline = read_lines(path)
    body = ctx.rng.choice([{"x": 1}, {}, {"path": "part-0.parquet", "size": 1}, {"nested": {"a": [1, 2]}}])
    lines.insert(ctx.rng.randrange(len(lines) + 1), dumps({"futureAction": body}))
    write_lines(path, lines, True)
    return {"file": ctx.rel(path), "body": body, "neutral": True}


@mutation(scope="commit")
def unknown_field(ctx: FuzzContext) -> dict[str, Any]:
    """An extra field in an action (readers ignore unknown fields)."""
    ref = pick_action(ctx, where=lambda body: True)
    name = ctx.rng.choice(["futureField", "Path", "stats_parsed", "x-custom"])
    value = ctx.rng.choice([1, "v", None, {"a": 1}, [1]])
    if name in ref.body:
        raise NotApplicable(f"{name} already present")
    ref.body[name] = value
    ref.save()
    # `stats_parsed` in a JSON action is not a field of the protocol's JSON actions: ignored too.
    return {"file": ctx.rel(ref.path), "line": ref.index + 1, "kind": ref.kind, "field": name, "value": value,
            "neutral": True}


# ---------------------------------------------------------------------------------- field mutations


def _set_field(ctx: FuzzContext, kind: str, field: str, value_of: Callable[[random.Random, Any], Any],
               where: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    ref = pick_action(ctx, kind, where=where or (lambda body: field in body))
    old = ref.body.get(field, "<absent>")
    value = value_of(ctx.rng, old)
    if value == "<delete>":
        ref.body.pop(field, None)
    else:
        ref.body[field] = value
    ref.save()
    return {"file": ctx.rel(ref.path), "line": ref.index + 1, "field": f"{kind}.{field}", "old": describe(old),
            "new": describe(value), "same_rows": row_neutral(f"{kind}.{field}")}


def _number_or_wrong(rng: random.Random, old: Any) -> Any:
    return rng.choice([weird_number(rng), "<delete>"]) if rng.random() < 0.2 else weird_number(rng)


def _string_or_wrong(rng: random.Random, old: Any) -> Any:
    return "<delete>" if rng.random() < 0.15 else weird_string(rng)


def _any_or_wrong(rng: random.Random, old: Any) -> Any:
    return "<delete>" if rng.random() < 0.15 else weird_any(rng)


@mutation("add", scope="commit", weight=2)
def add_size(ctx: FuzzContext) -> dict[str, Any]:
    return _set_field(ctx, "add", "size", _number_or_wrong)


@mutation("add", scope="commit")
def add_modification_time(ctx: FuzzContext) -> dict[str, Any]:
    return _set_field(ctx, "add", "modificationTime", _number_or_wrong)


@mutation("add", scope="commit")
def add_data_change(ctx: FuzzContext) -> dict[str, Any]:
    return _set_field(ctx, "add", "dataChange", _any_or_wrong)


@mutation("add", scope="commit")
def add_tags(ctx: FuzzContext) -> dict[str, Any]:
    return _set_field(ctx, "add", "tags", _any_or_wrong, where=lambda body: True)


@mutation("add", scope="commit", weight=2)
def add_path_wrong_type(ctx: FuzzContext) -> dict[str, Any]:
    result = _set_field(ctx, "add", "path", _string_or_wrong)
    if result["new"] in ("", "../") and _effective(ctx, ctx.root / result["file"]):
        result["must_refuse"] = "an empty data file path" if result["new"] == "" else "a path that leaves the table"
    return result


@mutation("add", scope="commit", weight=2)
def add_partition_values(ctx: FuzzContext) -> dict[str, Any]:
    """partitionValues of the wrong JSON type, a key missing or unknown, a value of the wrong type or null."""

    def value(rng: random.Random, old: Any) -> Any:
        if isinstance(old, dict) and old and rng.random() < 0.6:
            new = dict(old)
            key = rng.choice(sorted(new))
            how = rng.choice(["drop_key", "null", "number", "unparsable", "object", "extra_key", "empty"])
            if how == "drop_key":
                del new[key]
            elif how == "extra_key":
                new["not_a_column"] = "x"
            else:
                new[key] = {"null": None, "number": 7, "unparsable": "not-a-value-\u00e9", "object": {"a": 1},
                            "empty": ""}[how]
            return new
        return rng.choice(WRONG_TYPES + ["<delete>"])

    result = _set_field(ctx, "add", "partitionValues", value, where=lambda body: True)
    # No partition column: a reader has no use for the values.
    result["same_rows"] = result["old"] == {} and not _partition_columns(ctx)
    # An empty string partition value: Delta on Spark reads it as null, deltalake as ''.
    result["ambiguous"] = isinstance(result["new"], dict) and "" in result["new"].values()
    return result


@mutation("add", "partitioned", scope="commit")
def add_partition_value_changed(ctx: FuzzContext) -> dict[str, Any]:
    """A partition value changed to another plausible one: both readers must see the new value."""

    def value(rng: random.Random, old: Any) -> Any:
        if not isinstance(old, dict) or not old:
            raise NotApplicable("no partition values")
        new = dict(old)
        key = rng.choice(sorted(new))
        current = new[key]
        if current is None:
            new[key] = rng.choice(["1", "a", "2021-01-01"])
        elif current.lstrip("-").isdigit():
            new[key] = str(int(current) + rng.choice([1, -1, 1000]))
        else:
            new[key] = rng.choice([None, current + "x", current[:-1] if len(current) > 1 else "z"])
        return new

    return _set_field(ctx, "add", "partitionValues", value, where=lambda body: bool(body.get("partitionValues")))


@mutation("remove", scope="commit")
def remove_field(ctx: FuzzContext) -> dict[str, Any]:
    field = ctx.rng.choice(["path", "path", "deletionTimestamp", "size", "dataChange", "partitionValues",
                            "extendedFileMetadata"])
    value = _string_or_wrong if field == "path" else _any_or_wrong
    return _set_field(ctx, "remove", field, value, where=lambda body: True)


@mutation("metaData", scope="commit", weight=2)
def metadata_field(ctx: FuzzContext) -> dict[str, Any]:
    field = ctx.rng.choice(["schemaString", "schemaString", "partitionColumns", "configuration", "format", "id",
                            "createdTime", "name"])
    return _set_field(ctx, "metaData", field, _any_or_wrong, where=lambda body: True)


@mutation("metaData", scope="commit")
def metadata_configuration(ctx: FuzzContext) -> dict[str, Any]:
    """A table property with a strange value."""

    def value(rng: random.Random, old: Any) -> Any:
        new = dict(old) if isinstance(old, dict) else {}
        key = rng.choice(["delta.columnMapping.mode", "delta.checkpointInterval", "delta.enableDeletionVectors",
                          "delta.checkpointPolicy", "delta.columnMapping.maxColumnId", "delta.appendOnly",
                          "delta.enableInCommitTimestamps", "delta.dataSkippingNumIndexedCols",
                          "delta.logRetentionDuration", "delta.checkpoint.writeStatsAsStruct"])
        new[key] = rng.choice(["", "bogus", "-1", "0", "true", "name", "id", "none", "v2", "99999999999999999999",
                               "interval -1 days", None, 3])
        return new

    return _set_field(ctx, "metaData", "configuration", value, where=lambda body: True)


@mutation("metaData", scope="commit")
def metadata_partition_columns(ctx: FuzzContext) -> dict[str, Any]:
    """partitionColumns naming a missing column, a data column, a duplicate, or none."""

    def value(rng: random.Random, old: Any) -> Any:
        old = old if isinstance(old, list) else []
        return rng.choice([[], ["no_such_column"], old + old, old[:-1], old + ["no_such_column"],
                           [c.upper() for c in old if isinstance(c, str)] or ["X"], [None], [1]])

    return _set_field(ctx, "metaData", "partitionColumns", value, where=lambda body: True)


@mutation("protocol", scope="commit", weight=2)
def protocol_field(ctx: FuzzContext) -> dict[str, Any]:
    """Reader/writer versions out of range or of the wrong type; unknown or malformed features."""
    field = ctx.rng.choice(["minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures"])

    def value(rng: random.Random, old: Any) -> Any:
        if field.endswith("Version"):
            return rng.choice([0, -1, 4, 8, 99, 2**63, "3", 1.5, None, "<delete>"])
        base = old if isinstance(old, list) else []
        return rng.choice([base + ["fancyNewFeature"], base + [None], base + [3], "deletionVectors", {}, None, [],
                           "<delete>", base + ["deletionVectors", "columnMapping", "v2Checkpoint"]])

    result = _set_field(ctx, "protocol", field, value, where=lambda body: True)
    new = result["new"]
    if _effective(ctx, ctx.root / result["file"]) and not _later_action(ctx, ctx.root / result["file"], "protocol"):
        if field == "minReaderVersion" and isinstance(new, int) and not isinstance(new, bool) and new > 3:
            result["must_refuse"] = f"reader version {new}: no reader implements it"
        elif (field == "readerFeatures" and isinstance(new, list) and "fancyNewFeature" in new
              and _action_at(ctx, result).get("minReaderVersion") == 3):
            result["must_refuse"] = "an unknown reader feature"
    return result


@mutation("commitInfo", scope="commit")
def commit_info_field(ctx: FuzzContext) -> dict[str, Any]:
    """commitInfo is informational (unless in-commit timestamps are on): any content must be accepted."""
    field = ctx.rng.choice(["timestamp", "operation", "operationParameters", "readVersion", "isBlindAppend",
                            "engineInfo", "txnId"])
    result = _set_field(ctx, "commitInfo", field, _any_or_wrong,
                        where=lambda body: "inCommitTimestamp" not in body)
    # Any JSON value keeps the table valid; a raw token (NaN, 007...) makes the line invalid JSON, and a lone
    # surrogate is written as bytes that are not UTF-8 (readers refuse the commit).
    new = result["new"]
    result["neutral"] = not (isinstance(new, str) and (new.startswith("raw:") or _has_surrogate(new)))
    return result


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _partition_columns(ctx: FuzzContext) -> list[Any]:
    """The partition columns of the newest metaData action among the line files (empty when none is found)."""
    found: list[Any] = []
    for path in line_files(ctx):
        for line in read_lines(path)[0]:
            if '"metaData"' in line:
                try:
                    found = json.loads(line)["metaData"].get("partitionColumns") or []
                except (ValueError, KeyError, AttributeError):
                    pass
    return found


def _version_of(path: Path) -> int | None:
    name = path.name
    return int(name[:20]) if name[:20].isdigit() else None


def _action_at(ctx: FuzzContext, result: dict[str, Any]) -> dict[str, Any]:
    """The body of the action a _set_field result changed (read back from the file)."""
    lines = read_lines(ctx.root / result["file"])[0]
    action = json.loads(lines[result["line"] - 1])
    return next(iter(action.values())) if isinstance(action, dict) and action else {}


def _later_action(ctx: FuzzContext, path: Path, kind: str) -> bool:
    """Whether a commit after ``path`` holds a ``kind`` action (which then supersedes the one in ``path``)."""
    version = _version_of(path)
    for commit in commit_files(ctx):
        v = _version_of(commit)
        if version is not None and v is not None and v > version and f'"{kind}"' in commit.read_text(
                errors="replace"):
            return True
    return False


def _effective(ctx: FuzzContext, path: Path) -> bool:
    """Whether a reader of the newest version reads ``path``: a commit after the newest checkpoint (or any commit
    an incremental case touches), or a file of the newest checkpoint."""
    if ctx.versions is not None:
        return True
    checkpoints = [v for p in checkpoint_files(ctx) if p.parent == ctx.log and (v := _version_of(p)) is not None]
    newest = max(checkpoints, default=-1)
    version = _version_of(path)
    if COMMIT.match(path.name):
        return version is not None and version > newest
    if path.parent.name == "_sidecars":
        return True  # the fixtures keep the sidecars of their newest checkpoint only
    return version == newest


@mutation("txn", scope="commit")
def txn_field(ctx: FuzzContext) -> dict[str, Any]:
    field = ctx.rng.choice(["appId", "version", "lastUpdated"])
    return _set_field(ctx, "txn", field, _any_or_wrong, where=lambda body: True)


# ---------------------------------------------------------------------------------------- paths


def _data_file_path(ctx: FuzzContext, path: str) -> Path:
    return ctx.root / urllib.parse.unquote(path)


@mutation("add", scope="commit", weight=3)
def add_path(ctx: FuzzContext) -> dict[str, Any]:
    """add.path with `..`, absolute, percent-encoded, empty, foreign-scheme or dangling forms."""
    ref = pick_action(ctx, "add", where=lambda body: isinstance(body.get("path"), str))
    old = ref.body["path"]
    how = ctx.rng.choice(["dotdot", "dotdot_inside", "dot_slash", "leading_slash", "abs_same_file", "abs_outside",
                          "percent_equivalent", "percent_invalid", "percent_double", "empty", "dir", "foreign_scheme",
                          "missing_file", "query_fragment", "backslash"])
    neutral = ambiguous = False
    if how == "dotdot":
        new = "../" + old
    elif how == "dotdot_inside":  # still inside the table after normalization
        new = f"_delta_log/../{old}"
    elif how == "dot_slash":
        new = "./" + old
    elif how == "leading_slash":
        new = "/" + old
    elif how == "abs_same_file":  # an absolute URI naming the same file (allowed by the protocol)
        new = _data_file_path(ctx, old).resolve().as_uri()
        # Readers disagree on whether a later remove spelled the old way removes it (deltalake and Delta on Spark
        # compare the strings and read the file twice; we refuse a file live twice): open.
        ambiguous = True
    elif how == "abs_outside":  # the same bytes copied outside the table, named by absolute URI (allowed)
        target = ctx.outside / f"copy-{ctx.rng.randrange(10**6)}-{Path(urllib.parse.unquote(old)).name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_data_file_path(ctx, old), target)
        new = target.resolve().as_uri()
        neutral = True
    elif how == "percent_equivalent":  # an unreserved character percent-encoded: the same URI (RFC 3986)
        positions = [i for i, c in enumerate(old) if c.isalnum() or c in "-._~"]
        i = ctx.rng.choice(positions)
        new = old[:i] + f"%{ord(old[i]):02X}" + old[i + 1:]
        ambiguous = True  # as abs_same_file: the same file under two spellings
    elif how == "percent_invalid":
        new = old + ctx.rng.choice(["%", "%zz", "%2", "%00", "%C3%28"])
    elif how == "percent_double":
        new = old.replace("%", "%25") if "%" in old else "%2525" + old
    elif how == "empty":
        new = ""
    elif how == "dir":
        new = ctx.rng.choice([".", "_delta_log", "/", old.rsplit("/", 1)[0] if "/" in old else "."])
    elif how == "foreign_scheme":  # an unknown scheme: no reader may reach the network for it
        new = f"nosuchscheme://bucket/{old}"
    elif how == "missing_file":
        new = "part-00000-does-not-exist.snappy.parquet"
    elif how == "query_fragment":
        new = old + ctx.rng.choice(["?x=1", "#frag"])
    else:
        new = old.replace("-", "\\", 1)
    ref.body["path"] = new
    ref.save()
    result = {"file": ctx.rel(ref.path), "line": ref.index + 1, "how": how, "old": old, "new": describe(new),
              "neutral": neutral, "ambiguous": ambiguous}
    if how in ("dotdot", "empty") and _effective(ctx, ref.path):
        result["must_refuse"] = ("a relative data file path that leaves the table" if how == "dotdot"
                                 else "an empty data file path")
    return result


@mutation("dv", scope="commit", weight=2)
def add_deletion_vector(ctx: FuzzContext) -> dict[str, Any]:
    """The deletion vector descriptor of an add: wrong types, storage types, offsets, sizes, cardinalities,
    paths outside the table; or removed (the deleted rows come back: a different, valid table)."""
    ref = pick_action(ctx, "add", where=lambda body: isinstance(body.get("deletionVector"), dict))
    dv = ref.body["deletionVector"]
    old = dict(dv)
    field = ctx.rng.choice(["storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality", "maxRowIndex",
                            "<whole>", "<remove>"])
    if field == "<remove>":
        del ref.body["deletionVector"]
        new: Any = "<removed>"
    elif field == "<whole>":
        new = ctx.rng.choice(WRONG_TYPES)
        ref.body["deletionVector"] = new
    elif field == "storageType":
        new = ctx.rng.choice(["x", "U", "", "p" if dv.get("storageType") != "p" else "u", "i" if
                              dv.get("storageType") != "i" else "u", None, 1])
        dv[field] = new
    elif field == "pathOrInlineDv":
        kind = dv.get("storageType")
        choices: list[Any] = ["", "!!!!", "a" * 21, None, 5, "../../etc/passwd", "/etc/passwd",
                              "file:///etc/passwd"]
        if kind == "u" and isinstance(dv.get("pathOrInlineDv"), str) and len(dv["pathOrInlineDv"]) >= 20:
            choices += ["../" + dv["pathOrInlineDv"], "ab" + dv["pathOrInlineDv"][2:],
                        dv["pathOrInlineDv"][:-1]]
        new = ctx.rng.choice(choices)
        dv[field] = new
    else:
        new = ctx.rng.choice([0, -1, 1, 2**31, 2**63 - 1, 2**64, None, "1", 1.5,
                              (dv.get(field) or 0) + 1 if isinstance(dv.get(field), int) else 3])
        dv[field] = new
    ref.save()
    # Without its DV, an add may share (path, no DV) with a remove of the same commit: Delta on Spark applies the
    # actions in order (the add wins), deltalake lets the remove win. The protocol does not say.
    return {"file": ctx.rel(ref.path), "line": ref.index + 1, "field": field, "old": old, "new": describe(new),
            "ambiguous": field in ("<remove>", "<whole>")}


# -------------------------------------------------------------------------------------------- stats


def _stats_of(body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        stats = loads(body["stats"])
    except (KeyError, TypeError, ValueError):
        return None
    return stats if isinstance(stats, dict) else None


@mutation("stats", scope="commit", weight=2)
def stats_shape(ctx: FuzzContext) -> dict[str, Any]:
    """add.stats that is not a JSON object: invalid JSON, an array, a number, null, an object (not a string)."""

    def value(rng: random.Random, old: Any) -> Any:
        return rng.choice(["", "{", "[]", "1", "null", '"x"', "{}", '{"numRecords":}', {"numRecords": 1},
                           [1], 7, None, "<delete>", old[:-1] if isinstance(old, str) and old else "}"])

    return _set_field(ctx, "add", "stats", value, where=lambda body: "stats" in body)


@mutation("stats", scope="commit", weight=3)
def stats_num_records(ctx: FuzzContext) -> dict[str, Any]:
    """numRecords negative, zero, huge, fractional, of the wrong type, or missing."""
    ref = pick_action(ctx, "add", where=lambda body: _stats_of(body) is not None)
    stats = _stats_of(ref.body)
    assert stats is not None
    old = stats.get("numRecords", "<absent>")
    new = ctx.rng.choice([-1, 0, 1, 2**31, 2**63 - 1, 2**63, 10**30, 1.5, "10", None, "<delete>", Raw("1e400"),
                          old + 1 if isinstance(old, int) else 2, old - 1 if isinstance(old, int) else 0])
    if new == "<delete>":
        stats.pop("numRecords", None)
    else:
        stats["numRecords"] = new
    ref.body["stats"] = dumps(stats)
    ref.save()
    return {"file": ctx.rel(ref.path), "line": ref.index + 1, "old": old, "new": describe(new), "same_rows": True}


def _shift(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([-1000, -1, 1, 1000])
    if isinstance(value, (float, Decimal)):
        return value + type(value)(rng.choice(["-100.5", "100.5"]))
    if isinstance(value, str):
        return rng.choice(["", "~~~~", value + "zz", "0000", "2999-01-01T00:00:00.000Z", "1900-01-01"])
    return rng.choice([1, "x", None])


@mutation("stats", scope="commit", weight=3)
def stats_values(ctx: FuzzContext) -> dict[str, Any]:
    """minValues/maxValues/nullCount: lying bounds, wrong types, unknown columns, nulls, nested junk."""
    ref = pick_action(ctx, "add", where=lambda body: _stats_of(body) is not None)
    stats = _stats_of(ref.body)
    assert stats is not None
    part = ctx.rng.choice(["minValues", "maxValues", "nullCount", "tightBounds"])
    section = stats.get(part)
    how = ctx.rng.choice(["shift", "wrong_type", "unknown_column", "null", "whole"])
    if part == "tightBounds" or how == "whole" or not isinstance(section, dict) or not section:
        new: Any = ctx.rng.choice(WRONG_TYPES + [Raw("NaN")])
        stats[part] = new
        detail: dict[str, Any] = {"part": part, "new": describe(new)}
    else:
        column = ctx.rng.choice(sorted(section))
        old = section[column]
        if how == "shift":
            new = _shift(old, ctx.rng) if part != "nullCount" else ctx.rng.choice([-1, 10**6, 2**63, 0])
        elif how == "wrong_type":
            new = ctx.rng.choice(WRONG_TYPES + [Raw("NaN"), Raw("1e400"), 2**64])
        elif how == "unknown_column":
            column, old, new = "no_such_column", "<absent>", ctx.rng.choice([1, "x", {"a": 1}])
        else:
            new = None
        section[column] = new
        detail = {"part": part, "column": column, "how": how, "old": describe(old), "new": describe(new)}
    ref.body["stats"] = dumps(stats)
    ref.save()
    return {"file": ctx.rel(ref.path), "line": ref.index + 1, **detail, "same_rows": True}


# ------------------------------------------------------------------------------------------- schema


def _schema_ref(ctx: FuzzContext) -> tuple[ActionRef, dict[str, Any]]:
    ref = pick_action(ctx, "metaData", where=lambda body: isinstance(body.get("schemaString"), str))
    return ref, json.loads(ref.body["schemaString"])


def _save_schema(ref: ActionRef, schema: Any) -> None:
    ref.body["schemaString"] = schema if isinstance(schema, str) else dumps(schema)
    ref.save()


def _primitive_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in schema.get("fields", []) if isinstance(f.get("type"), str)]


BAD_TYPES = ["decimal(39,2)", "decimal(0,0)", "decimal(5,6)", "decimal(-1,0)", "decimal(38,38)", "decimal(10)",
             "decimal(a,b)", "decimal( 10 , 2 )", "decimal(2147483648,0)", "int128", "varchar(10)", "char(3)",
             "timestamp_ns", "interval", "", "STRING", "struct", "array", {"type": "struct"},
             {"type": "array", "elementType": "string"}, {"type": "map", "keyType": "string"}, 7, None]
OTHER_TYPES = ["string", "long", "integer", "short", "byte", "double", "float", "boolean", "binary", "date",
               "timestamp", "timestamp_ntz", "decimal(10,2)", "decimal(38,0)"]


@mutation("metaData", scope="commit", weight=2)
def schema_field_type(ctx: FuzzContext) -> dict[str, Any]:
    """A column's type changed to another type, a malformed decimal, or an unknown or malformed type."""
    ref, schema = _schema_ref(ctx)
    fields = _primitive_fields(schema)
    if not fields:
        raise NotApplicable("no primitive top-level field")
    field = ctx.rng.choice(fields)
    old = field["type"]
    field["type"] = ctx.rng.choice(BAD_TYPES + [t for t in OTHER_TYPES if t != old])
    _save_schema(ref, schema)
    return {"file": ctx.rel(ref.path), "column": field["name"], "old": old, "new": field["type"]}


@mutation("metaData", scope="commit", weight=2)
def schema_shape(ctx: FuzzContext) -> dict[str, Any]:
    """Columns dropped, added, renamed, duplicated, made required; field keys missing or of the wrong type;
    the whole schemaString not a struct or not JSON."""
    ref, schema = _schema_ref(ctx)
    fields = schema.get("fields", [])
    how = ctx.rng.choice(["drop", "add_nullable", "add_required", "rename", "duplicate", "duplicate_case",
                          "required", "empty_name", "missing_key", "fields_wrong_type", "not_struct", "not_json",
                          "empty_struct", "nested_nulls"])
    detail: dict[str, Any] = {"how": how}
    if how == "not_json":
        _save_schema(ref, ctx.rng.choice(["", "{", "[]", "null", "not json", '{"type":"struct"'] ))
        return {"file": ctx.rel(ref.path), **detail}
    if how == "not_struct":
        schema = ctx.rng.choice([{"type": "array", "elementType": "string", "containsNull": True}, "string",
                                 {"type": "struct"}, {"fields": fields}, [fields]])
    elif how == "empty_struct":
        schema["fields"] = []
    elif how == "fields_wrong_type":
        schema["fields"] = ctx.rng.choice([None, {}, "a", [1], [None]])
    elif how in ("add_nullable", "add_required"):
        name = ctx.rng.choice(["fuzz_extra", "Fuzz Extra", "a.b", "`x`"])
        fields.append({"name": name, "type": ctx.rng.choice(OTHER_TYPES), "nullable": how == "add_nullable",
                       "metadata": {}})
        detail["name"] = name
    elif not fields:
        raise NotApplicable("no field")
    else:
        field = ctx.rng.choice(fields)
        detail["column"] = field.get("name")
        if how == "drop":
            fields.remove(field)
        elif how == "rename":
            field["name"] = field.get("name", "") + "_renamed"
        elif how == "duplicate":
            fields.append(json.loads(json.dumps(field)))
        elif how == "duplicate_case":
            copy = json.loads(json.dumps(field))
            copy["name"] = str(copy.get("name", "")).swapcase()
            fields.append(copy)
        elif how == "required":
            field["nullable"] = False
        elif how == "empty_name":
            field["name"] = ""
        elif how == "missing_key":
            key = ctx.rng.choice(["name", "type", "nullable", "metadata"])
            field.pop(key, None)
            detail["key"] = key
        elif how == "nested_nulls":
            field["type"] = {"type": "struct", "fields": [{"name": "x", "type": None, "nullable": True,
                                                           "metadata": {}}]}
    _save_schema(ref, schema)
    return {"file": ctx.rel(ref.path), **detail}


def _deep_type_json(depth: int, kind: str) -> str:
    """The JSON text of a type nested ``depth`` levels (built as text: too deep for json.dumps' recursion)."""
    t = '"long"'
    for i in range(depth):
        if kind == "struct":
            t = f'{{"type":"struct","fields":[{{"name":"n{i}","type":{t},"nullable":true,"metadata":{{}}}}]}}'
        elif kind == "array":
            t = f'{{"type":"array","elementType":{t},"containsNull":true}}'
        else:
            t = f'{{"type":"map","keyType":"string","valueType":{t},"valueContainsNull":true}}'
    return t


@mutation("metaData", scope="commit")
def schema_deep(ctx: FuzzContext) -> dict[str, Any]:
    """An extra column nested very deep (structs, arrays or maps), beyond any reasonable limit."""
    ref, schema = _schema_ref(ctx)
    depth = ctx.rng.choice([50, 200, 400, 1000, 5000])
    kind = ctx.rng.choice(["struct", "array", "map"])
    placeholder = "\u0001DEEP\u0001"
    schema.setdefault("fields", []).append({"name": "deep", "type": placeholder, "nullable": True, "metadata": {}})
    text = json.dumps(schema, separators=(",", ":")).replace(json.dumps(placeholder), _deep_type_json(depth, kind))
    _save_schema(ref, text)
    return {"file": ctx.rel(ref.path), "depth": depth, "kind": kind}


@mutation("column_mapping", "metaData", scope="commit", weight=2)
def schema_column_mapping(ctx: FuzzContext) -> dict[str, Any]:
    """Column mapping metadata of a column: id or physical name wrong, missing, duplicated, of the wrong type."""
    ref, schema = _schema_ref(ctx)
    fields = [f for f in schema.get("fields", []) if isinstance(f.get("metadata"), dict)
              and "delta.columnMapping.id" in f["metadata"]]
    if not fields:
        raise NotApplicable("no column mapping metadata")
    field = ctx.rng.choice(fields)
    meta = field["metadata"]
    key = ctx.rng.choice(["delta.columnMapping.id", "delta.columnMapping.physicalName"])
    old = meta.get(key)
    others = [f for f in fields if f is not field]
    how = ctx.rng.choice(["delete", "wrong_type", "duplicate", "other", "huge"])
    if how == "delete":
        del meta[key]
        new: Any = "<deleted>"
    elif how == "wrong_type":
        new = ctx.rng.choice(["1", 1.5, None, {}, [], -1, 0, ""])
        meta[key] = new
    elif how == "duplicate" and others:
        new = others[0]["metadata"].get(key)
        meta[key] = new
    elif how == "huge":
        new = ctx.rng.choice([2**31, 2**63, "col-" + "x" * 300])
        meta[key] = new
    else:
        new = ctx.rng.choice([old + 100, "renamed-physical"]) if isinstance(old, int) else "col-fuzz-other"
        meta[key] = new
    _save_schema(ref, schema)
    return {"file": ctx.rel(ref.path), "column": field["name"], "key": key, "how": how, "old": old,
            "new": describe(new)}


# ---------------------------------------------------------------------------------------- log files


@mutation(scope="table")
def delete_commit(ctx: FuzzContext) -> dict[str, Any]:
    """Delete one commit file. Neutral when a checkpoint at or after it covers it (the log stays complete)."""
    commits = commit_files(ctx)
    path = ctx.rng.choice(commits)
    version = int(path.name[:20])
    covered = any(int(p.name[:20]) >= version for p in checkpoint_files(ctx) if CHECKPOINT.match(p.name))
    path.unlink()
    # A checkpoint at or after the deleted version still holds its state (log cleanup deletes such commits).
    return {"file": ctx.rel(path), "covered_by_checkpoint": covered, "neutral": covered}


@mutation(scope="table")
def next_commit(ctx: FuzzContext) -> dict[str, Any]:
    """A new newest commit: empty, whitespace, commitInfo only (a valid commit, same rows), or junk."""
    latest = max(int(p.name[:20]) for p in ctx.log.iterdir() if COMMIT.match(p.name))
    skip = ctx.rng.choice([1, 1, 1, 2])  # 2: a gap before it
    path = ctx.log / f"{latest + skip:020d}.json"
    how = ctx.rng.choice(["empty", "whitespace", "commit_info_only", "junk", "json_array", "only_newline"])
    content = {"empty": "", "whitespace": "   \n", "only_newline": "\n",
               "commit_info_only": dumps({"commitInfo": {"timestamp": 1_900_000_000_000, "operation": "FUZZ"}})
               + "\n",
               "junk": "\x00\x01garbage", "json_array": "[]\n"}[how]
    path.write_text(content, encoding="utf-8")
    return {"file": ctx.rel(path), "how": how, "gap": skip > 1, "neutral": how == "commit_info_only" and skip == 1}


@mutation(scope="table")
def stray_log_files(ctx: FuzzContext) -> dict[str, Any]:
    """Files in _delta_log that are not log files by name (temp files, hidden files, odd names): ignored."""
    latest = max(int(p.name[:20]) for p in ctx.log.iterdir() if COMMIT.match(p.name))
    name = ctx.rng.choice([f".{latest + 1:020d}.json.crc", f"{latest + 1:020d}.json.tmp", f"{latest + 1}.json",
                           f"_{latest + 1:020d}.json", f"{latest + 1:020d}.JSON", f"{latest + 1:021d}.json",
                           f"{latest + 1:020d}.checkpoint.parquet.tmp", "_commits", "random.txt",
                           f"{latest + 1:020d}.checkpoint.0000000001.0000000002.parquet.crc"])
    path = ctx.log / name
    if name == "_commits":
        path.mkdir()
        (path / f"{latest + 1:020d}.00000000-0000-0000-0000-000000000000.json").write_text("{}\n")
    else:
        path.write_bytes(b"\x00garbage\n")
    return {"name": name, "neutral": True}


@mutation("crc", scope="table")
def damage_crc(ctx: FuzzContext) -> dict[str, Any]:
    """A version checksum file deleted or garbled (optional files; readers need not trust them)."""
    crcs = sorted(p for p in ctx.log.iterdir() if CRC.match(p.name))
    path = ctx.rng.choice(crcs)
    how = ctx.rng.choice(["delete", "zero", "garbage", "wrong_numbers"])
    if how == "delete":
        path.unlink()
    elif how == "zero":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"{\"tableSizeBytes\": oops")
    else:
        data = json.loads(path.read_text())
        data["numFiles"] = -5
        data["tableSizeBytes"] = 2**70
        path.write_text(json.dumps(data))
    return {"file": ctx.rel(path), "how": how, "neutral": True}


@mutation("compaction", scope="table")
def damage_compaction(ctx: FuzzContext) -> dict[str, Any]:
    """A log compaction file deleted (neutral), or disagreeing with the commits it covers (readers may use
    either the compaction or the commits: ambiguous)."""
    path = ctx.rng.choice(compaction_files(ctx))
    how = ctx.rng.choice(["delete", "delete", "truncate", "drop_line", "zero", "garble"])
    if how == "delete":
        path.unlink()
    elif how == "zero":
        path.write_bytes(b"")
    elif how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: ctx.rng.randrange(1, len(data))])
    elif how == "drop_line":
        lines, newline = read_lines(path)
        del lines[ctx.rng.randrange(len(lines))]
        write_lines(path, lines, newline)
    else:
        data = bytearray(path.read_bytes())
        data[ctx.rng.randrange(len(data))] = ord("{")
        path.write_bytes(bytes(data))
    return {"file": ctx.rel(path), "how": how, "neutral": how == "delete", "ambiguous": how == "drop_line"}


# -------------------------------------------------------------------------------------- checkpoints


def _commits_complete(ctx: FuzzContext) -> bool:
    """Every commit from 0 to the newest is present (a checkpoint is then only an optimization)."""
    versions = sorted(int(p.name[:20]) for p in ctx.log.iterdir() if COMMIT.match(p.name))
    return bool(versions) and versions == list(range(versions[-1] + 1))


@mutation("checkpoint", scope="table", weight=2)
def delete_checkpoint(ctx: FuzzContext) -> dict[str, Any]:
    """Delete a checkpoint file (a multi-part part, a V2 top-level file, or a sidecar). Neutral when the commits
    are all there and the whole checkpoint goes (an incomplete multi-part checkpoint is ignored as well)."""
    path = ctx.rng.choice(checkpoint_files(ctx))
    sidecar = path.parent.name == "_sidecars"
    path.unlink()
    multipart = CHECKPOINT.match(path.name) is not None and (CHECKPOINT.match(path.name).group(2) or "").count(
        ".") == 2
    return {"file": ctx.rel(path), "sidecar": sidecar, "neutral": _commits_complete(ctx) and not sidecar,
            "multipart_part": multipart}


@mutation("checkpoint", scope="table", weight=3)
def damage_checkpoint_bytes(ctx: FuzzContext) -> dict[str, Any]:
    """A checkpoint file (or sidecar) truncated, emptied, or with bytes flipped."""
    path = ctx.rng.choice(checkpoint_files(ctx))
    data = bytearray(path.read_bytes())
    how = ctx.rng.choice(["truncate", "zero", "flip", "flip", "tail_cut"])
    if how == "truncate":
        data = data[: ctx.rng.randrange(len(data))]
        detail: Any = len(data)
    elif how == "tail_cut":  # the footer of a parquet file
        data = data[: -ctx.rng.randint(1, 16)]
        detail = len(data)
    elif how == "zero":
        data = bytearray()
        detail = 0
    else:
        detail = []
        for _ in range(ctx.rng.randint(1, 4)):
            at = ctx.rng.randrange(len(data))
            data[at] ^= 1 << ctx.rng.randrange(8)
            detail.append(at)
    path.write_bytes(bytes(data))
    return {"file": ctx.rel(path), "how": how, "detail": detail}


def _leaf_paths(t: pa.DataType, prefix: str, depth: int) -> list[str]:
    out = []
    if pa.types.is_struct(t) and depth > 0:
        for f in t:
            name = f"{prefix}.{f.name}" if prefix else f.name
            out.append(name)
            out += _leaf_paths(f.type, name, depth - 1)
    return out


def _field_paths(schema: pa.Schema, depth: int = 3) -> list[str]:
    out = []
    for f in schema:
        out.append(f.name)
        out += _leaf_paths(f.type, f.name, depth - 1)
    return out


def _field_type(schema: pa.Schema, dotted: str) -> pa.DataType:
    parts = dotted.split(".")
    t: pa.DataType = schema.field(parts[0]).type
    for p in parts[1:]:
        t = t.field(p).type
    return t


def _replace_in_struct(t: pa.StructType, parts: list[str], new: pa.DataType | None) -> pa.StructType:
    fields = []
    for f in t:
        if f.name != parts[0]:
            fields.append(f)
        elif len(parts) > 1:
            fields.append(f.with_type(_replace_in_struct(f.type, parts[1:], new)))
        elif new is not None:
            fields.append(f.with_type(new))
    return pa.struct(fields)


def _replace_field(schema: pa.Schema, dotted: str, new: pa.DataType | None) -> pa.Schema:
    """``schema`` with the field at ``dotted`` retyped to ``new`` (dropped when None)."""
    parts = dotted.split(".")
    top = pa.struct(list(schema))
    return pa.schema(list(_replace_in_struct(top, parts, new)), metadata=schema.metadata)


def _apply_to_rows(rows: list[dict[str, Any]], dotted: str, fn: Callable[[dict[str, Any], str], None]) -> None:
    parts = dotted.split(".")
    for row in rows:
        node: Any = row
        for p in parts[:-1]:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            fn(node, parts[-1])


def _rewrite(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path)


def _pick_parquet_field(ctx: FuzzContext, with_values: bool = False) -> tuple[Path, pa.Table, str]:
    """A checkpoint file and one of its fields (with a non-null value somewhere when ``with_values``)."""
    files = parquet_checkpoint_files(ctx)
    if not files:
        raise NotApplicable("no parquet checkpoint")
    path = ctx.rng.choice(files)
    table = pq.read_table(path)
    # Favour the fields readers depend on; any other field of the file stays possible.
    preferred = ["add", "add.path", "add.size", "add.partitionValues", "add.stats", "add.stats_parsed",
                 "add.deletionVector", "add.modificationTime", "add.dataChange", "add.partitionValues_parsed",
                 "remove", "remove.path", "remove.deletionVector", "metaData", "metaData.schemaString",
                 "metaData.partitionColumns", "metaData.configuration", "metaData.id", "protocol",
                 "protocol.minReaderVersion", "protocol.readerFeatures", "txn", "sidecar", "sidecar.path",
                 "checkpointMetadata", "add.stats_parsed.numRecords", "add.deletionVector.pathOrInlineDv"]
    paths = _field_paths(table.schema)
    if with_values:
        paths = [p for p in paths if _non_null_rows(table, p)]
        if not paths:
            raise NotApplicable("no value in the checkpoint")
    present = [p for p in preferred if p in paths]
    choice = ctx.rng.choice(present) if present and ctx.rng.random() < 0.8 else ctx.rng.choice(paths)
    return path, table, choice


def _non_null_rows(table: pa.Table, dotted: str) -> list[int]:
    parts = dotted.split(".")
    col: Any = table.column(parts[0]).combine_chunks()
    valid = col.is_valid()
    for p in parts[1:]:
        col = col.field(p)
        valid = pa.compute.and_(valid, col.is_valid())
    return [i for i, v in enumerate(valid.to_pylist()) if v]


@mutation("checkpoint_parquet", scope="table", weight=2)
def checkpoint_drop_column(ctx: FuzzContext) -> dict[str, Any]:
    """A checkpoint part rewritten without one column (top-level or nested), as a broken writer would."""
    path, table, dotted = _pick_parquet_field(ctx)
    schema = _replace_field(table.schema, dotted, None)
    if "." in dotted and _field_type(schema, dotted.rsplit(".", 1)[0]).num_fields == 0:
        # Parquet cannot hold a struct without fields (seed 112701 case 7805: partitionValues_parsed of one column).
        raise NotApplicable(f"dropping {dotted} leaves its struct without fields")
    rows = table.to_pylist()
    _apply_to_rows(rows, dotted, lambda node, key: node.pop(key, None))
    _rewrite(path, pa.Table.from_pylist(rows, schema=schema))
    return {"file": ctx.rel(path), "column": dotted, "same_rows": row_neutral(dotted)}


def _field_type(schema: pa.Schema, dotted: str) -> pa.DataType:
    parts = dotted.split(".")
    t = schema.field(parts[0]).type
    for part in parts[1:]:
        t = t.field(part).type
    return t


def _retyped(t: pa.DataType, rng: random.Random) -> tuple[pa.DataType, Callable[[Any], Any]]:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return rng.choice([(pa.int64(), lambda v: len(v)), (pa.binary(), lambda v: v.encode())])
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return rng.choice([(pa.string(), str), (pa.float64(), float), (pa.int8(), lambda v: int(v) % 100)])
    return pa.string(), lambda v: json.dumps(v, default=str)


@mutation("checkpoint_parquet", scope="table", weight=2)
def checkpoint_retype_column(ctx: FuzzContext) -> dict[str, Any]:
    """A checkpoint column rewritten with another type (size as string, path as int64, a map as a string...)."""
    path, table, dotted = _pick_parquet_field(ctx)
    old = _field_type(table.schema, dotted)
    new, convert = _retyped(old, ctx.rng)
    rows = table.to_pylist()

    def change(node: dict[str, Any], key: str) -> None:
        if node.get(key) is not None:
            node[key] = convert(node[key])

    _apply_to_rows(rows, dotted, change)
    _rewrite(path, pa.Table.from_pylist(rows, schema=_replace_field(table.schema, dotted, new)))
    return {"file": ctx.rel(path), "column": dotted, "old_type": str(old), "new_type": str(new),
            "same_rows": row_neutral(dotted)}


def _value_for(t: pa.DataType, rng: random.Random, old: Any) -> Any:
    if pa.types.is_integer(t):
        bits = t.bit_width
        top = 2 ** (bits - 1) - 1
        return rng.choice([None, -1, 0, top, -top - 1, (old or 0) + 1 if isinstance(old, int) and old < top else 0])
    if pa.types.is_floating(t):
        return rng.choice([None, float("nan"), float("inf"), -1.0])
    if pa.types.is_boolean(t):
        return rng.choice([None, not old if isinstance(old, bool) else True])
    if pa.types.is_string(t):
        base = old if isinstance(old, str) else ""
        return rng.choice([None, "", "../" + base, "/" + base, base[:-1], base + "%zz", "{", "[]", "1",
                           '{"numRecords":-5}', "\u0000", "x" * 1000])
    if pa.types.is_map(t):
        return rng.choice([None, [], [("no_such_column", "x")], [(k, None) for k, _ in old or []]])
    if pa.types.is_list(t):
        return rng.choice([None, [], [None], ["fancyNewFeature"]])
    return None


@mutation("checkpoint_parquet", scope="table", weight=2)
def checkpoint_set_value(ctx: FuzzContext) -> dict[str, Any]:
    """One value of a checkpoint rewritten in place (a null, a negative size, a `..` path, broken stats JSON...)."""
    path, table, dotted = _pick_parquet_field(ctx, with_values=True)
    row = ctx.rng.choice(_non_null_rows(table, dotted))
    rows = table.to_pylist()
    t = _field_type(table.schema, dotted)
    holder: dict[str, Any] = {}

    def change(node: dict[str, Any], key: str) -> None:
        holder["old"] = node.get(key)
        holder["new"] = _value_for(t, ctx.rng, node.get(key))
        node[key] = holder["new"]

    _apply_to_rows(rows[row:row + 1], dotted, change)
    _rewrite(path, pa.Table.from_pylist(rows, schema=table.schema))
    return {"file": ctx.rel(path), "column": dotted, "row": row, "old": describe(holder.get("old")),
            "new": describe(holder.get("new")), "same_rows": row_neutral(dotted)}


#: A column that every action of a kind fills: where it holds only nulls, a row group holds no such action.
_ACTION_KEY_COLUMNS = ("add.path", "remove.path", "metaData.id", "protocol.minReaderVersion", "txn.appId",
                       "domainMetadata.domain", "sidecar.path", "checkpointMetadata.version")


@mutation("checkpoint_parquet", scope="table")
def checkpoint_footer_null_count(ctx: FuzzContext) -> dict[str, Any]:
    """A checkpoint part rewritten in row groups of a few actions, its footer then saying that a row group which
    holds actions of a kind holds none (the null count of the kind's key column set to the row count; the data
    pages unchanged). Readers disagree on such a file (deltalake skips the row group, Delta on Spark reads it)."""
    files = parquet_checkpoint_files(ctx)
    if not files:
        raise NotApplicable("no parquet checkpoint")
    path = ctx.rng.choice(files)
    table = pq.read_table(path)
    pq.write_table(table, path, row_group_size=max(1, table.num_rows // 3))
    metadata = pq.ParquetFile(path).metadata
    candidates = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for i in range(group.num_columns):
            chunk = group.column(i)
            stats = chunk.statistics
            if (chunk.path_in_schema in _ACTION_KEY_COLUMNS and stats is not None and stats.has_null_count
                    and stats.null_count < chunk.num_values):
                candidates.append((g, chunk.path_in_schema, chunk.num_values))
    if not candidates:
        raise NotApplicable("no row group with statistics holds an action")
    group, column, values = ctx.rng.choice(candidates)
    set_null_count(path, group, column, values)
    return {"file": ctx.rel(path), "column": column, "row_group": group,
            "must_refuse": "a checkpoint footer whose statistics deny actions its row group holds"}


@mutation("last_checkpoint", scope="table", weight=2)
def damage_last_checkpoint(ctx: FuzzContext) -> dict[str, Any]:
    """_last_checkpoint deleted, emptied, truncated, garbled, or naming the wrong version/parts/size: a hint only,
    so the table is the same (readers fall back to listing)."""
    path = ctx.log / "_last_checkpoint"
    data = json.loads(path.read_text())
    how = ctx.rng.choice(["delete", "zero", "truncate", "garbage", "version", "parts", "size", "checksum",
                          "wrong_type", "extra_field", "v2_path"])
    detail: Any = None
    if how == "delete":
        path.unlink()
    elif how == "zero":
        path.write_bytes(b"")
    elif how == "truncate":
        text = path.read_bytes()
        path.write_bytes(text[: ctx.rng.randrange(1, len(text))])
    elif how == "garbage":
        path.write_bytes(ctx.rng.choice([b"\x00\xff", b"[]", b"null", b"{\"version\":", b"1"]))
    else:
        if how == "version":
            detail = ctx.rng.choice([-1, 0, data["version"] - 1, data["version"] + 1, data["version"] + 100, 2**63,
                                     "5", None])
            data["version"] = detail
        elif how == "parts":
            detail = ctx.rng.choice([0, -1, 1, 2, 99, "3", None])
            data["parts"] = detail
        elif how == "size":
            detail = ctx.rng.choice([0, -1, 2**63, "7", None])
            data["size"] = detail
        elif how == "checksum":
            data["checksum"] = detail = "0" * 32
        elif how == "wrong_type":
            key = ctx.rng.choice(sorted(data))
            data[key] = detail = ctx.rng.choice(WRONG_TYPES)
            detail = {key: detail}
        elif how == "extra_field":
            data["futureField"] = detail = {"x": 1}
        else:
            v2 = data.get("v2Checkpoint")
            if not isinstance(v2, dict):
                data["version"] = detail = data["version"] + 1
            else:
                v2["path"] = detail = ctx.rng.choice(["missing.checkpoint.json", "", "../x"])
        path.write_text(json.dumps(data))
    return {"how": how, "detail": describe(detail), "neutral": True}


@mutation("last_checkpoint_v2", scope="table")
def last_checkpoint_non_file_actions(ctx: FuzzContext) -> dict[str, Any]:
    """The protocol/metaData a V2 `_last_checkpoint` carries (nonFileActions) changed: readers may use them
    instead of the checkpoint's own, so the outcome is open (ambiguous)."""
    path = ctx.log / "_last_checkpoint"
    data = json.loads(path.read_text())
    actions = (data.get("v2Checkpoint") or {}).get("nonFileActions")
    if not actions:
        raise NotApplicable("no nonFileActions")
    i = ctx.rng.randrange(len(actions))
    kind = next(iter(actions[i]))
    how = ctx.rng.choice(["drop", "wrong_type", "schema"])
    if how == "drop":
        del actions[i]
    elif how == "wrong_type" or kind != "metaData":
        actions[i] = {kind: ctx.rng.choice(WRONG_TYPES)}
    else:
        actions[i]["metaData"]["schemaString"] = dumps({"type": "struct", "fields": []})
    path.write_text(json.dumps(data))
    return {"kind": kind, "how": how, "ambiguous": True}


# ----------------------------------------------------------------------------------- deletion vectors


@mutation("dv_file", scope="table", weight=2)
def damage_dv_file(ctx: FuzzContext) -> dict[str, Any]:
    """A deletion vector file deleted, truncated, emptied or with bytes flipped (its checksum then disagrees)."""
    files = sorted(p for p in ctx.root.rglob("*.bin") if "_delta_log" not in p.parts)
    path = ctx.rng.choice(files)
    data = bytearray(path.read_bytes())
    how = ctx.rng.choice(["delete", "truncate", "zero", "flip", "flip"])
    detail: Any = None
    if how == "delete":
        path.unlink()
    else:
        if how == "truncate":
            data = data[: ctx.rng.randrange(1, len(data))]
            detail = len(data)
        elif how == "zero":
            data = bytearray()
        else:
            detail = ctx.rng.randrange(len(data))
            data[detail] ^= 1 << ctx.rng.randrange(8)
        path.write_bytes(bytes(data))
    return {"file": ctx.rel(path), "how": how, "detail": detail}


# ------------------------------------------------------------------------------------------- choice


def applicable(info_tags: frozenset[str], scope_versions: bool) -> list[Mutation]:
    """The mutations whose needs the tags meet (only commit-scoped ones when a case is incremental)."""
    return [m for m in MUTATIONS.values()
            if m.weight > 0 and m.needs <= info_tags and (m.scope == "commit" or not scope_versions)]


def choose(rng: random.Random, candidates: list[Mutation]) -> Mutation:
    return rng.choices(candidates, weights=[m.weight for m in candidates])[0]


def file_tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: relative path -> (size, mtime_ns)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out
