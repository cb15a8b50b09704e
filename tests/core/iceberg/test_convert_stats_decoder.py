"""A full conversion with the compiled stats decoder writes the very manifests it writes with pyarrow's JSON reader:
on stats in JSON commits and in a checkpoint deltalake wrote (stats as JSON only), with rows the template does not
take (another key set, an escape) among those it does."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from support.delta_log import write_commit
from support.manifests import assert_same_manifests, written_manifests

from airflow_deltaberg.core.delta.stats import stats, stats_template
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.storage import FileEntry, LocalStorage

pytestmark = pytest.mark.skipif(not stats_template.available(), reason="numba (the `fast` extra) is not installed")

FILES = 2 * stats_template.MIN_ROWS + 500
SCHEMA = {"type": "struct", "fields": [
    {"name": name, "type": t, "nullable": True, "metadata": {}}
    for name, t in (("part", "string"), ("id", "long"), ("x", "double"), ("name", "string"), ("ts", "timestamp"),
                    ("n", "integer"))]}


def _stats(rng: random.Random, i: int) -> str:
    low, high = rng.randrange(-10**12, 10**12), rng.randrange(10**12, 10**13)
    bounds = {"id": [low, high], "x": [rng.uniform(-1e3, 0), rng.uniform(0, 1e3)],
              "name": [f"a{i:07d}", f"z{i:07d}"], "ts": ["2024-01-02T03:04:05.678Z", "2024-12-31T23:59:59Z"],
              "n": [rng.randrange(-2**31, 0), rng.randrange(0, 2**31)]}
    odd = rng.random()
    if odd < 0.003:
        bounds["name"][1] = 'q"uote'  # an escape
    elif odd < 0.006:
        del bounds["x"]  # another key set
    stats = {"numRecords": rng.randrange(1, 10**6),
             "minValues": {k: v[0] for k, v in bounds.items()}, "maxValues": {k: v[1] for k, v in bounds.items()},
             "nullCount": {k: rng.randrange(0, 10) for k in ("id", "x", "name", "ts", "n")}}
    return json.dumps(stats, separators=(",", ":"))


def _table(root: Path, checkpoint: bool) -> Path:
    rng = random.Random(5)
    metadata = {"id": "00000000-0000-0000-0000-000000000200", "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(SCHEMA), "partitionColumns": ["part"], "configuration": {},
                "createdTime": 1_700_000_000_000}
    write_commit(root, [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": metadata}],
                 read_version=None)
    adds = [{"add": {"path": f"part={i % 7}/f-{i:06d}.parquet", "partitionValues": {"part": str(i % 7)},
                     "size": 1000 + i, "modificationTime": 1_700_000_000_000, "dataChange": True,
                     "stats": _stats(rng, i)}} for i in range(FILES)]
    write_commit(root, adds, read_version=0)
    if checkpoint:
        deltalake.DeltaTable(str(root)).create_checkpoint()
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The two tables of ``_table`` (~1 s of CPU each), made once for the module; tests convert copies."""
    root = tmp_path_factory.mktemp("stats-decoder")
    tables = {False: _table(root / "json-commits", checkpoint=False)}
    shutil.copytree(tables[False], root / "checkpoint")
    deltalake.DeltaTable(str(root / "checkpoint")).create_checkpoint()
    tables[True] = root / "checkpoint"
    return tables


@pytest.fixture
def table_copy(built: dict[bool, Path], tmp_path: Path) -> Callable[[bool], Path]:
    """``table_copy(checkpoint)``: a copy of the module's table in tmp_path, the test's to convert."""
    return lambda checkpoint: Path(shutil.copytree(built[checkpoint], tmp_path / "t"))


@pytest.mark.parametrize("checkpoint", [False, True], ids=["json-commits", "deltalake-checkpoint"])
def test_the_decoder_writes_the_readers_manifests(table_copy: Callable[[bool], Path], checkpoint: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    table = table_copy(checkpoint)
    taken: list[int] = []
    decode = stats_template.decode

    def spy(strings: pa.StringArray, parse_type: pa.StructType) -> object:
        result = decode(strings, parse_type)
        taken.append(0 if result is None else len(result[1]))
        return result

    def no_row_parser(*args: object) -> None:
        raise AssertionError("the row-by-row parser ran: the batch's decoded rows were dropped")

    with monkeypatch.context() as m:
        m.setattr(stats_template, "WORTH_LOG_BYTES", 0)  # the log of a big table: the conversion warms it up
        m.setattr(stats_template, "decode", spy)
        m.setattr(stats, "_sanitize_stats", no_row_parser)
        fast = convert(str(table), full=True)
    assert FILES * 0.9 < sum(taken) < FILES  # the decoder did most rows, the reader the odd ones
    decoded = written_manifests(fast.metadata_location, table)
    shutil.rmtree(table / "_iceberg")
    with monkeypatch.context() as m:
        m.setattr(stats_template, "NUMBA", False)
        slow = convert(str(table), full=True)
    assert fast.records == slow.records
    assert_same_manifests(written_manifests(slow.metadata_location, table), decoded)


@pytest.mark.parametrize(("log_bytes", "loaded"), [(None, False), (0, True)])
def test_numba_is_loaded_only_for_a_log_worth_it(table_copy: Callable[[bool], Path], log_bytes: int | None,
                                                 loaded: bool) -> None:
    """A full conversion of a small table parses its stats with the reader and never imports numba (~0.7 s of a
    core); a log of WORTH_LOG_BYTES or more warms the decoder up, and its batches are decoded."""
    table = table_copy(True)
    code = "\n".join([
        "import sys",
        "from airflow_deltaberg.core.delta.stats import stats_template",
        f"if {log_bytes!r} is not None: stats_template.WORTH_LOG_BYTES = {log_bytes!r}",
        "from airflow_deltaberg.core.iceberg.convert import convert",
        f"print(convert({str(table)!r}, full=True).files_added, 'numba' in sys.modules)",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split() == [str(FILES), str(loaded)]


@pytest.mark.parametrize("version", [None, 1], ids=["latest", "given-version"])
def test_a_full_conversion_lists_the_log_once(table_copy: Callable[[bool], Path], version: int | None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The log segment that sizes the stats text is the one the snapshot replays (on an object store every listing
    is a LIST request, and a _last_checkpoint GET before it)."""
    table = table_copy(True)
    listed: list[str] = []
    lister = LocalStorage.lister  # list_from goes through it too

    def counting(self: LocalStorage, directory: str) -> Callable[[str | None], list[FileEntry]]:
        listing = lister(self, directory)

        def counted(start_after: str | None) -> list[FileEntry]:
            listed.append(directory)
            return listing(start_after)

        return counted

    monkeypatch.setattr(LocalStorage, "lister", counting)
    result = convert(str(table), full=True, version=version)
    assert result.delta_version == 1 and result.files_added == FILES
    assert listed.count("_delta_log") == 1, listed
