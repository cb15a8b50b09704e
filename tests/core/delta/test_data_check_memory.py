"""The data checks read values in bounded slices under a memory budget (issue 26 §5): a Parquet decompression bomb
(a column of one repeated value, no statistics: small on disk, huge in Arrow) made ``validate --data-checks`` use
3.7 GB and ``convert --verify-stats`` 3.3 GB. Each check runs in a fresh process that prints Arrow's pool peak."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta.file_checks.bounded_read import BUDGET_ENV, DEFAULT_BUDGET
from airflow_deltaberg.core.errors import DataCheckMemoryError, StatsMismatchError
from airflow_deltaberg.core.iceberg.convert import convert

ROWS_PER_GROUP, GROUPS = 2_000_000, 25  # 50M int64 values: 0.4 GB in Arrow, twice that combined


def _table(root: Path, values: pa.Array, groups: int = 1, low: int | None = 7, high: int | None = 7,
           delta_type: str = "long") -> Path:
    """A Delta table of one data file: ``values`` written ``groups`` times (a row group each), no statistics; its
    add's stats give ``low`` and ``high`` (when not None) and no nulls."""
    (root / "_delta_log").mkdir(parents=True)
    chunk = pa.table({"v": values})
    with pq.ParquetWriter(root / "part-0.parquet", chunk.schema, compression="zstd", write_statistics=False) as w:
        for _ in range(groups):
            w.write_table(chunk, row_group_size=len(values))
    rows = len(values) * groups
    schema = {"type": "struct", "fields": [{"name": "v", "type": delta_type, "nullable": True, "metadata": {}}]}
    stats: dict = {"numRecords": rows, "nullCount": {"v": 0}}
    if low is not None and high is not None:
        stats.update(minValues={"v": low}, maxValues={"v": high})
    actions = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "bomb", "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                      "createdTime": 1}},
        {"add": {"path": "part-0.parquet", "partitionValues": {}, "size": (root / "part-0.parquet").stat().st_size,
                 "modificationTime": 1, "dataChange": True, "stats": json.dumps(stats)}},
    ]
    (root / "_delta_log" / "00000000000000000000.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return root


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _table(tmp_path_factory.mktemp("bomb") / "t", pa.array(np.full(ROWS_PER_GROUP, 7, np.int64)), GROUPS)
    assert (root / "part-0.parquet").stat().st_size < 1 << 20
    return root


_RUN = """
import json, sys
import pyarrow as pa
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.iceberg.convert import convert
if sys.argv[1] == "validate":
    report = validate(sys.argv[2], data_checks=True, sample_size=None)
    outcome = [v.rule_id for v in report.violations if v.rule_id.startswith("data.")]
else:
    outcome = convert(sys.argv[2], verify_stats=True).records
pools = [pa.default_memory_pool(), pa.system_memory_pool()]
for name in ("jemalloc_memory_pool", "mimalloc_memory_pool"):  # convert reads under jemalloc (core.memory_pool)
    try:
        pools.append(getattr(pa, name)())
    except NotImplementedError:
        pass
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a process started by a big pytest worker reports
# at least the worker's peak; VmHWM is this process's own address space's.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "pool_peak": max(p.max_memory() for p in pools), "maxrss": hwm * 1024}))
"""


@pytest.mark.parametrize("command", ["validate", "convert"])
def test_a_bomb_is_checked_within_the_budget(bomb: Path, command: str, tmp_path: Path) -> None:
    """Both checks read the bomb's values (its footer has no statistics) and pass (its stats are right), with
    Arrow's pool peaks (every pool: convert reads under jemalloc) under the budget; reading the column whole took
    twice 0.4 GB."""
    table = bomb
    if command == "convert":  # it writes: a copy
        table = tmp_path / "t"
        _copy(bomb, table)
    result = _run(command, table)
    assert result["outcome"] == ([] if command == "validate" else ROWS_PER_GROUP * GROUPS)
    assert result["pool_peak"] < DEFAULT_BUDGET // 4, result
    assert result["maxrss"] < DEFAULT_BUDGET, result  # the interpreter and its imports included (was 1.1 GB)


def _run(command: str, table: Path) -> dict:
    """``validate --data-checks`` or ``convert --verify-stats`` in a fresh process: its outcome and peaks."""
    done = subprocess.run([sys.executable, "-c", _RUN, command, str(table)], capture_output=True, text=True,
                          check=True, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _copy(source: Path, target: Path) -> None:
    (target / "_delta_log").mkdir(parents=True)
    for path in source.rglob("*"):
        if path.is_file():
            (target / path.relative_to(source)).write_bytes(path.read_bytes())


def test_beyond_the_budget_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column chunk that decompresses to more than the budget: DataCheckMemoryError naming the budget and the
    file, from both checks; nothing written."""
    rng = np.random.default_rng(1)
    table = _table(tmp_path / "t", pa.array(rng.integers(0, 1 << 60, 300_000)), low=0, high=1 << 60)
    monkeypatch.setenv(BUDGET_ENV, "1")
    with pytest.raises(DataCheckMemoryError, match="memory budget of 1 MB") as info:
        validate(str(table), data_checks=True, sample_size=None)
    assert info.value.file is not None and info.value.file.endswith("part-0.parquet")
    assert BUDGET_ENV in str(info.value)
    with pytest.raises(DataCheckMemoryError):
        convert(str(table), verify_stats=True)
    assert not (table / "_iceberg").exists()


def test_slices_find_what_the_whole_column_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lie in the last slice of the last row group is still found (values read slice by slice, merged)."""
    values = np.full(200_000, 7, np.int64)
    values[-1] = 9
    table = _table(tmp_path / "t", pa.array(values), groups=3)
    monkeypatch.setenv(BUDGET_ENV, "2")  # small slices
    report = validate(str(table), data_checks=True, sample_size=None)
    (lie,) = [v for v in report.violations if v.rule_id == "data.stats-cover-data"]
    assert "9" in lie.message
    with pytest.raises(StatsMismatchError):
        convert(str(table), verify_stats=True)


def test_a_string_bomb_is_read_dictionary_encoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2M rows of one 1,000-character string (2 GB decoded, a few KB on disk): its null count is checked from the
    dictionary-encoded slices, within a 16 MB budget; a null among them is still found."""
    indices = np.zeros(2_000_000, np.int32)
    table = _table(tmp_path / "t", pa.DictionaryArray.from_arrays(indices, ["x" * 1000]), low=None, high=None,
                   delta_type="string")
    monkeypatch.setenv(BUDGET_ENV, "16")
    result = _run("validate", table)
    assert result["outcome"] == [] and result["pool_peak"] < 16 << 20, result  # read whole: 2 GB
    lying = _table(tmp_path / "u", pa.DictionaryArray.from_arrays(pa.array(indices, mask=indices.astype(bool) | (
        np.arange(len(indices)) == len(indices) - 1)), ["x" * 1000]), low=None, high=None, delta_type="string")
    (lie,) = [v for v in validate(str(lying), data_checks=True, sample_size=None).violations
              if v.rule_id == "data.stats-cover-data"]
    assert "null" in lie.message


def test_running_out_of_memory_is_the_budget_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An allocation that fails while values are read (the process's own limit came before the budget) is a
    DataCheckMemoryError naming the file, not a CorruptDataFileError (what it was under a 3 GB limit)."""
    table = _table(tmp_path / "t", pa.array(np.full(1000, 7, np.int64)))

    def out_of_memory(*args: object, **kwargs: object) -> Iterator[pa.RecordBatch]:
        raise pa.ArrowMemoryError("malloc of size 3221225472 failed")
        yield  # a generator, as pyarrow's

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", out_of_memory)
    with pytest.raises(DataCheckMemoryError, match="ran out of memory") as info:
        convert(str(table), verify_stats=True)
    assert info.value.file is not None and info.value.file.endswith("part-0.parquet")
