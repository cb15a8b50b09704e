"""Every real fixture table loads, and agrees with deltalake (delta-rs / delta-kernel) at every version.

Path normalization: both engines report a file's ``path`` exactly as the log stores it, i.e. URI-encoded.
deltalake's ``get_add_actions()["path"]`` is the raw log string (``test%25file%25prefix-...`` in
cdf-table-backtick-column-names, ``tsNtzPartition=2013-07-05%2017%253A01%253A00.123456/...`` in
data-reader-timestamp_ntz), and so is our ``snap.files["path"]``; neither decodes. So the raw strings are
compared as they are: decoding one side only would make ``%25`` and ``%`` collide. deltalake's
``file_uris()`` is the decoded (once) location; it is checked against ``unquote(our path)`` separately,
which pins down that a single URL-decoding of our path gives the file's real relative location.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.log_segment import list_log
from airflow_deltaberg.core.errors import NotADeltaTableError

#: Tables that must not load, with the typed error they give and why.
EXPECTED_ERRORS: dict[str, tuple[type[Exception], str]] = {
    "crc-malformed": (
        NotADeltaTableError,
        "its _delta_log holds only 00000000000000000000.crc (the text 'malformed'): no commit or checkpoint, "
        "so there is no table version to load",
    ),
}

#: Tables whose every version deltalake 1.6.6 refuses to load; the comparison is skipped there (ours is not).
DELTALAKE_KNOWN_FAILURES: dict[str, str] = {
    "table-with-geo": "deltalake 1.6.6 (delta-kernel) cannot parse the column type 'geometry(OGC:CRS84)'",
}

#: Too big to replay at every version and compare in full: loaded once at its latest version, paths only.
BIG_TABLE = "300k-add-files-100-col-partitioned"
COMPACTED_TABLE = "compacted-log-files-table"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_SINGLE_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.[0-9a-fA-F-]{36})?\.(parquet|json)$")
_PART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")


def reconstructable_versions(root: Path) -> list[int]:
    """Versions that the files of ``root/_delta_log`` can rebuild, worked out from the file names alone
    (independently of the engine): a complete checkpoint (or version -1 when commit 0 exists) followed by
    every commit up to the version."""
    names = [p.name for p in (root / "_delta_log").iterdir() if p.is_file()]
    commits = {int(m.group(1)) for n in names if (m := _COMMIT.match(n))}
    starts = {int(m.group(1)) for n in names if (m := _SINGLE_CHECKPOINT.match(n))}
    parts: dict[tuple[int, int], set[int]] = {}
    for n in names:
        if m := _PART.match(n):
            parts.setdefault((int(m.group(1)), int(m.group(3))), set()).add(int(m.group(2)))
    starts |= {v for (v, total), found in parts.items() if found == set(range(1, total + 1))}
    if 0 in commits:
        starts.add(-1)
    candidates = commits | {s for s in starts if s >= 0}
    if not candidates:
        return []
    out = []
    for v in range(max(candidates) + 1):
        for s in (s for s in starts if s <= v):
            if all(c in commits for c in range(s + 1, v + 1)):
                out.append(v)
                break
    return out


def _ours_paths(snap) -> list[str]:
    return snap.files.column("path").to_pylist()


def _features(values) -> frozenset[str] | None:
    # deltalake reports an empty feature list as None (partitioned_with_materialize_feature has
    # "readerFeatures": []), so empty and absent are the same here.
    return frozenset(values) if values else None


def _deltalake(root: Path, version: int):
    """deltalake's table at ``version``, or the reason it cannot load it."""
    try:
        return deltalake.DeltaTable(str(root), version=version), None
    except Exception as exc:  # deltalake raises several unrelated types; any failure skips the comparison
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def _deltalake_relative_uris(d, root: Path) -> set[str]:
    out = set()
    for uri in d.file_uris():
        local = uri.removeprefix("file://")
        assert local.startswith(f"{root}/"), f"deltalake file URI {uri} is outside the table {root}"
        out.add(local[len(str(root)) + 1 :])
    return out


def _deleted_rows(d) -> int:
    """Rows that deltalake's deletion vectors mark deleted (False in a selection vector)."""
    dvs = pa.table(d.deletion_vectors())
    return sum(sv.count(False) for sv in dvs.column("selection_vector").to_pylist())


def compare_with_deltalake(table: str, root: Path, version: int, snap, d) -> list[str]:
    """Differences between our snapshot and deltalake's table at one version, as readable lines."""
    where = f"{table} v{version}"
    problems: list[str] = []

    # Live files: raw log paths on both sides (see the module docstring), plus size, mtime and numRecords.
    adds = pa.table(d.get_add_actions(flatten=True))
    theirs_paths = set(adds.column("path").to_pylist())
    ours_paths = _ours_paths(snap)
    if len(ours_paths) != len(set(ours_paths)):
        problems.append(f"{where}: a live path is listed twice by us")
    if set(ours_paths) != theirs_paths:
        problems.append(
            f"{where}: live files differ: only ours {sorted(set(ours_paths) - theirs_paths)[:5]}, "
            f"only deltalake {sorted(theirs_paths - set(ours_paths))[:5]}"
        )
        return problems  # the per-file and count checks below would only repeat this
    decoded = {unquote(p) for p in ours_paths}
    uris = _deltalake_relative_uris(d, root)
    if decoded != uris:
        problems.append(f"{where}: unquote(our paths) != deltalake file_uris(): {sorted(decoded ^ uris)[:5]}")

    has_counts = "num_records" in adds.column_names
    files = snap.files
    ours_counts = files.column("stats_parsed").combine_chunks().field("numRecords").to_pylist()
    ours_rows = {
        p: (size, mtime, n if has_counts else None)
        for p, size, mtime, n in zip(
            ours_paths,
            files.column("size").to_pylist(),
            files.column("modificationTime").to_pylist(),
            ours_counts,
            strict=True,
        )
    }
    theirs_rows = {
        row["path"]: (row["size_bytes"], row["modification_time"], row.get("num_records"))
        for row in adds.to_pylist()
    }
    for path in sorted(p for p in ours_rows if ours_rows[p] != theirs_rows[p]):
        problems.append(
            f"{where}: {path}: ours (size, modificationTime, numRecords) {ours_rows[path]} "
            f"!= deltalake {theirs_rows[path]}"
        )

    # Table row count: deltalake's stats count rows before deletion vectors; ours subtracts DV cardinality.
    if has_counts and all(r[2] is not None for r in theirs_rows.values()):
        dv = files.column("deletionVector").combine_chunks()
        if dv.null_count == len(dv):
            deleted = 0
        else:
            try:
                deleted = _deleted_rows(d)
            except Exception as exc:  # deltalake refuses the DVs of some tables
                warnings.warn(f"{where}: deltalake cannot read deletion vectors ({exc}); row count not compared",
                              stacklevel=2)
                deleted = None
        expected = sum(r[2] for r in theirs_rows.values())
        if deleted is not None and snap.num_records != expected - deleted:
            problems.append(
                f"{where}: num_records {snap.num_records} != deltalake's {expected} - {deleted} deleted by DVs"
            )

    p = d.protocol()
    ours_p = snap.protocol
    theirs_protocol = (
        p.min_reader_version, p.min_writer_version, _features(p.reader_features), _features(p.writer_features)
    )
    ours_protocol = (
        ours_p.min_reader_version,
        ours_p.min_writer_version,
        _features(ours_p.reader_features),
        _features(ours_p.writer_features),
    )
    if ours_protocol != theirs_protocol:
        problems.append(f"{where}: protocol {ours_protocol} != deltalake {theirs_protocol}")

    m = d.metadata()
    ours_m = snap.metadata
    theirs_meta = (m.id, m.name, m.description, list(m.partition_columns), m.created_time, dict(m.configuration))
    ours_meta = (
        ours_m.id,
        ours_m.name,
        ours_m.description,
        list(ours_m.partition_columns),
        ours_m.created_time,
        ours_m.configuration,
    )
    if ours_meta != theirs_meta:
        problems.append(f"{where}: metadata {ours_meta} != deltalake {theirs_meta}")

    theirs_schema = json.loads(d.schema().to_json())
    if snap.schema.to_json() != theirs_schema:
        problems.append(f"{where}: parsed schema {snap.schema.to_json()} != deltalake {theirs_schema}")
    if json.loads(ours_m.schema_string) != theirs_schema:
        problems.append(f"{where}: schemaString differs from deltalake's schema JSON")
    return problems


# -- ours alone: every table loads (never skipped) ------------------------------------------------------


def test_fixture_tables_are_discovered(fixture_tables):
    names = {p.name for p in fixture_tables}
    # Nested tables count too.
    assert {"id", "name", "none", "delta"} <= names
    assert len(fixture_tables) >= 50
    assert all((p / "_delta_log").is_dir() for p in fixture_tables)


# The big table is loaded once, by test_big_table_latest_paths_match_deltalake.
@pytest.mark.fixture_tables(exclude=[BIG_TABLE])
def test_loads_at_latest_or_gives_documented_error(fixture_table, fixtures_dir):
    root = fixtures_dir / fixture_table
    table = DeltaTable(str(root))
    if fixture_table in EXPECTED_ERRORS:
        error, _reason = EXPECTED_ERRORS[fixture_table]
        with pytest.raises(error) as info:
            table.snapshot()
        assert str(root) in str(info.value)
        with pytest.raises(error):
            table.latest_version()
        return
    versions = reconstructable_versions(root)
    snap = table.snapshot()
    assert snap.version == table.latest_version() == versions[-1]
    assert snap.num_files == snap.files.num_rows
    assert snap.metadata.id and snap.protocol.min_reader_version >= 1
    assert [f.name for f in snap.schema.fields], "the schema has no columns"
    paths = _ours_paths(snap)
    assert len(paths) == len(set(paths)), "a live path is listed twice"


@pytest.mark.fixture_tables(exclude=[BIG_TABLE, *EXPECTED_ERRORS])
def test_loads_at_every_version(fixture_table, fixtures_dir):
    root = fixtures_dir / fixture_table
    table = DeltaTable(str(root))
    versions = reconstructable_versions(root)
    assert versions, f"{root} has no reconstructable version"
    for v in versions:
        snap = table.snapshot(v)
        assert snap.version == v
        paths = _ours_paths(snap)
        assert len(paths) == len(set(paths)), f"v{v}: a live path is listed twice"
        assert snap.num_files == len(paths)


# -- parity with deltalake -------------------------------------------------------------------------


@pytest.mark.fixture_tables(exclude=[BIG_TABLE, *EXPECTED_ERRORS])
def test_matches_deltalake_at_every_version(fixture_table, fixtures_dir):
    root = fixtures_dir / fixture_table
    table = DeltaTable(str(root))
    problems: list[str] = []
    skipped: dict[int, str] = {}
    compared = 0
    for v in reconstructable_versions(root):
        snap = table.snapshot(v)  # ours is never skipped: a failure here fails the test
        d, reason = _deltalake(root, v)
        if d is None:
            skipped[v] = reason
            continue
        compared += 1
        problems.extend(compare_with_deltalake(fixture_table, root, v, snap, d))
    assert not problems, "\n".join(problems)
    if skipped:
        known = DELTALAKE_KNOWN_FAILURES.get(fixture_table, "not documented in DELTALAKE_KNOWN_FAILURES")
        detail = "; ".join(f"v{v}: {r}" for v, r in sorted(skipped.items()))
        if not compared:
            pytest.skip(f"deltalake cannot load {fixture_table} ({known}): {detail}")
        warnings.warn(f"deltalake skipped {fixture_table} at some versions ({known}): {detail}", stacklevel=1)
    else:
        assert fixture_table not in DELTALAKE_KNOWN_FAILURES, "deltalake now reads this table: update the dict"


def test_big_table_latest_paths_match_deltalake(fixtures_dir):
    root = fixtures_dir / BIG_TABLE
    table = DeltaTable(str(root))
    snap = table.snapshot()
    assert snap.version == reconstructable_versions(root)[-1]
    ours = _ours_paths(snap)
    assert len(ours) == len(set(ours)) == snap.num_files
    theirs = pa.table(deltalake.DeltaTable(str(root)).get_add_actions(flatten=False)).column("path")
    assert set(ours) == set(theirs.to_pylist())
    assert len(ours) == 300_000


def test_paths_are_kept_as_written_in_the_log(fixtures_dir):
    """The URL-encoding claim of the module docstring, pinned on the tables with escaped paths."""
    root = fixtures_dir / "cdf-table-backtick-column-names"
    ours = _ours_paths(DeltaTable(str(root)).snapshot())
    assert ours and all(p.startswith("test%25file%25prefix-") for p in ours)
    assert all((root / unquote(p)).is_file() for p in ours)  # decoded once: the real file name has '%'
    theirs = pa.table(deltalake.DeltaTable(str(root)).get_add_actions(flatten=True)).column("path").to_pylist()
    assert set(theirs) == set(ours)

    root = fixtures_dir / "data-reader-timestamp_ntz"
    ours = _ours_paths(DeltaTable(str(root)).snapshot())
    assert any("%2017%253A01%253A00" in p for p in ours)
    assert all((root / unquote(p)).is_file() for p in ours)


# -- log compaction -----------------------------------------------------------------------------


def test_compaction_files_are_listed_but_not_read(fixtures_dir):
    """The fixture's `<x>.<y>.compacted.json` are not reconciled (0.5 holds a remove and then a later add of
    the same logical file): read in place of their commits they would change the state. They are listed, and
    the snapshot comes from the commits they cover."""
    root = fixtures_dir / COMPACTED_TABLE
    table = DeltaTable(str(root))
    versions = reconstructable_versions(root)
    assert versions == list(range(26))
    assert list_log(table.storage).compactions, "the fixture has log compaction files"
    for v in versions:
        segment = table.snapshot(v).segment
        assert [c for c, _ in segment.commits] == list(range(segment.start_version, v + 1)), f"v{v}"


def test_compacted_table_matches_deltalake(fixtures_dir):
    root = fixtures_dir / COMPACTED_TABLE
    table = DeltaTable(str(root))
    for v in reconstructable_versions(root):
        ours = set(_ours_paths(table.snapshot(v)))
        theirs = pa.table(deltalake.DeltaTable(str(root), version=v).get_add_actions(flatten=True))
        assert ours == set(theirs.column("path").to_pylist()), f"v{v}"
