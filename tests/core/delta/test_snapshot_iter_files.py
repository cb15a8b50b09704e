"""``Snapshot.iter_files`` gives ``Snapshot.files`` a chunk at a time: the same rows, the same stats, the same order,
on every fixture table (classic, multi-part and V2 checkpoints, JSON and Parquet sidecars, stats as JSON or typed,
deletion vectors, column mapping)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.environment import FIXTURES_DIR

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.errors import DeltabergError


@pytest.mark.fixture_tables(exclude=("300k-add-files-100-col-partitioned",))
def test_iter_files_is_files_in_chunks(fixture_table: str) -> None:
    try:
        snapshot = DeltaTable(str(FIXTURES_DIR / fixture_table)).snapshot()
        whole = snapshot.files
    except DeltabergError as refused:
        # A table refused whole is refused chunk by chunk too, with the same error.
        with pytest.raises(type(refused)) as streamed_refusal:
            list(DeltaTable(str(FIXTURES_DIR / fixture_table)).snapshot().iter_files())
        assert str(streamed_refusal.value) == str(refused)
        return
    # A snapshot of its own: iter_files must not read the cached table of every file.
    fresh = DeltaTable(str(FIXTURES_DIR / fixture_table)).snapshot()
    chunks = list(fresh.iter_files())

    assert "files" not in fresh.__dict__
    streamed = pa.concat_tables(chunks) if chunks else whole.slice(0, 0)
    assert streamed.schema == whole.schema
    assert streamed.equals(whole)


def test_iter_files_reads_one_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stats of a chunk are parsed when the chunk is reached, not before the first one is given."""
    snapshot = DeltaTable(str(FIXTURES_DIR / "v2-checkpoints-parquet-with-sidecars")).snapshot()
    parsed: list[int] = []
    chunks = Snapshot._stats_chunks

    def counting(self: Snapshot, columns: object) -> object:
        for chunk in chunks(self, columns):
            parsed.append(len(chunk))
            yield chunk

    monkeypatch.setattr(Snapshot, "_stats_chunks", counting)
    files = snapshot.iter_files()
    first = next(files)
    assert len(parsed) == 1 and first.num_rows == parsed[0]
    assert sum(c.num_rows for c in files) + first.num_rows == snapshot.num_files
