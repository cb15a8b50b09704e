"""The fixture tables the fuzzer mutates, and what each holds (read once from the read-only originals).

A mutation applies to a fixture when the fixture has what it needs (``tags``): the action kinds of its commits
(``add``, ``remove``, ``metaData`` ...), ``dv`` (an add with a deletion vector), ``stats``, ``partitioned``,
checkpoint shapes (``checkpoint``, ``checkpoint_parquet``, ``checkpoint_json``, ``multipart``, ``sidecar``),
``last_checkpoint`` (``last_checkpoint_v2``: with nonFileActions), ``compaction``, ``crc``, ``dv_file`` (a deletion
vector file on disk), ``column_mapping``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

#: Small tables that convert today (tests/core/iceberg/test_convert_oracle.py), chosen to cover classic, multi-part,
#: V2 (JSON/Parquet, with and without sidecars) checkpoints, log compaction, column mapping (id and name),
#: deletion vectors (inline and on disk), partitions (strings, timestamps, materialized), decimals, txn actions.
#: Left out: tables without data files (300k-add-files-100-col-partitioned and two others), tables that are
#: refused by design (void, variant, geo, type widening, nested lists under column mapping, crc-malformed), and
#: the two 100-file sidecar tables (slow; their smaller sidecar siblings are here).
FUZZ_FIXTURES: tuple[str, ...] = (
    "app-txn-checkpoint",
    "app-txn-no-checkpoint",
    "basic-decimal-table",
    "basic_partitioned",
    "cdf-column-mapping-id-mode",
    "cdf-column-mapping-name-mode",
    "cdf-table-partitioned",
    "cdf-table-update-ops",
    "cdf-table-with-dv",
    "compacted-log-files-table",
    "data-reader-timestamp_ntz",
    "external-table-different-nullability",
    "mixed-nulls",
    "parquet_row_group_skipping",
    "parsed-stats",
    "partition_cm/id",
    "partition_cm/name",
    "partitioned_with_materialize_feature",
    "table-with-dv-small",
    "timestamp-partitioned-table",
    "timestamp-truncation-stats",
    "v1-multi-part-partitioned-struct-stats-only",
    "v2-checkpoints-json-with-last-checkpoint",
    "v2-checkpoints-json-without-sidecars",
    "v2-checkpoints-parquet-with-last-checkpoint",
    "v2-checkpoints-parquet-without-sidecars",
    "v2-classic-checkpoint-json",
    "v2-json-sidecars-struct-stats-only",
    "v2-parquet-sidecars-struct-stats-only",
    "with-short-dv",
)

COMMIT = re.compile(r"^(\d{20})\.json$")
CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d{10}\.\d{10}|\.[0-9a-fA-F-]{36})?\.(parquet|json)$")
COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
CRC = re.compile(r"^\d{20}\.crc$")


@dataclass(frozen=True)
class FixtureInfo:
    """What a fixture table holds: enough to tell which mutations apply, without reading it through the code
    under test."""

    name: str
    root: Path
    commits: tuple[int, ...]
    #: tags of each commit's actions (``add``, ``remove``, ``dv``, ``stats`` ...)
    commit_tags: dict[int, frozenset[str]] = field(default_factory=dict)
    #: tags of the whole table (the union of the commits' plus checkpoint, file and schema tags)
    tags: frozenset[str] = frozenset()
    checkpoint_versions: tuple[int, ...] = ()
    compactions: tuple[tuple[int, int], ...] = ()

    @property
    def latest(self) -> int:
        return self.commits[-1]

    def covered(self, version: int) -> str | None:
        """What else holds commit ``version``'s actions (a checkpoint at or after it, a log compaction), if any:
        a reader may use that instead of the commit."""
        at = [v for v in self.checkpoint_versions if v >= version]
        if at:
            return f"checkpoint {min(at)}"
        for start, end in self.compactions:
            if start <= version <= end:
                return f"compaction {start}-{end}"
        return None

    def tags_of(self, versions: tuple[int, ...] | None) -> frozenset[str]:
        """The tags of ``versions`` (None: the whole table)."""
        if versions is None:
            return self.tags
        found: set[str] = set()
        for v in versions:
            found |= self.commit_tags.get(v, frozenset())
        return frozenset(found)


def action_tags(action: dict) -> set[str]:
    """The tags one parsed log line contributes."""
    tags: set[str] = set()
    for kind, body in action.items():
        tags.add(kind)
        if not isinstance(body, dict):
            continue
        if kind == "add":
            if body.get("deletionVector"):
                tags.add("dv")
            if body.get("stats"):
                tags.add("stats")
            if body.get("partitionValues"):
                tags.add("partitioned")
        if kind == "remove" and body.get("deletionVector"):
            tags.add("remove_dv")
        if kind == "metaData":
            if body.get("partitionColumns"):
                tags.add("partitioned")
            if (body.get("configuration") or {}).get("delta.columnMapping.mode", "none") != "none":
                tags.add("column_mapping")
    return tags


def json_lines_tags(path: Path) -> set[str]:
    tags: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            tags |= action_tags(json.loads(line))
    return tags


@cache
def fixture_info(root: Path, name: str) -> FixtureInfo:
    log = root / name / "_delta_log"
    commits: dict[int, frozenset[str]] = {}
    tags: set[str] = set()
    checkpoint_versions: dict[int, list[str]] = {}
    compactions: list[tuple[int, int]] = []
    for path in sorted(log.iterdir()):
        if m := COMMIT.match(path.name):
            commits[int(m.group(1))] = frozenset(json_lines_tags(path))
        elif m := CHECKPOINT.match(path.name):
            checkpoint_versions.setdefault(int(m.group(1)), []).append(path.name)
            tags.add("checkpoint")
            tags.add(f"checkpoint_{m.group(3)}")
            if m.group(2) and m.group(2).count(".") == 2:
                tags.add("multipart")
            if m.group(3) == "json":
                tags |= json_lines_tags(path)
        elif m := COMPACTION.match(path.name):
            tags.add("compaction")
            compactions.append((int(m.group(1)), int(m.group(2))))
        elif path.name == "_last_checkpoint":
            tags.add("last_checkpoint")
            if (json.loads(path.read_text()).get("v2Checkpoint") or {}).get("nonFileActions"):
                tags.add("last_checkpoint_v2")
        elif CRC.match(path.name):
            tags.add("crc")
        elif path.name == "_sidecars" and any(path.iterdir()):
            tags.add("sidecar")
    if any(p.suffix == ".bin" for p in (root / name).rglob("*") if "_delta_log" not in p.parts):
        tags.add("dv_file")
    for t in commits.values():
        tags |= t
    if len(commits) >= 2:
        tags.add("commits2")
    return FixtureInfo(name, root / name, tuple(sorted(commits)), commits, frozenset(tags),
                       tuple(sorted(checkpoint_versions)), tuple(sorted(compactions)))
