"""The conversion state beside each manifest list: the Arrow copies of manifest entries it names are Arrow IPC
files; copies written as Parquet by earlier versions of the converter are still read, so an incremental run
on a table converted by them rewrites the manifests a removal touches as before."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable

from airflow_deltaberg.core.iceberg.conversion_state import read_entries, read_state, state_key
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.publish import latest_metadata
from airflow_deltaberg.core.storage import open_storage


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": [f"p{i % 2}" for i in range(n)]})


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _as_earlier_versions_wrote_it(path: Path) -> int:
    """Turn the current snapshot's entry copies into Parquet files (without the partition column when it has no
    fields) and point the state at them; returns how many were rewritten."""
    storage = open_storage(str(path))
    published = latest_metadata(storage)
    assert published is not None
    manifest_list = published.metadata.snapshot_by_id(published.metadata.current_snapshot_id).manifest_list
    state = read_state(storage, manifest_list)
    assert state is not None
    key = state_key(manifest_list[len(storage.root) + 1:])
    document = json.loads(storage.read(key))
    for record, manifest in zip(state.manifests, document["manifests"], strict=True):
        assert record.entries_key.endswith(".entries.arrow")
        entries = read_entries(storage, record)
        if entries.schema.field("partition").type.num_fields == 0:
            entries = entries.drop_columns(["partition"])
        old_key = record.entries_key.removesuffix(".arrow") + ".parquet"
        pq.write_table(entries, path / old_key)
        (path / record.entries_key).unlink()
        manifest["entries"] = old_key
    (path / key).write_text(json.dumps(document))
    return len(state.manifests)


@pytest.mark.parametrize("partitioned", [True, False])
def test_a_removal_on_a_table_with_parquet_entry_copies(tmp_path: Path, partitioned: bool) -> None:
    path = tmp_path / "t"
    partition_by = ["p"] if partitioned else None
    write_deltalake(str(path), _rows(0, 6), partition_by=partition_by)
    write_deltalake(str(path), _rows(10, 6), mode="append", partition_by=partition_by)
    convert(str(path))
    assert _as_earlier_versions_wrote_it(path) >= 1

    deltalake.DeltaTable(str(path)).delete("id % 3 = 0")
    result = convert(str(path))

    assert result.mode == "incremental" and result.files_removed > 0
    table = StaticTable.from_metadata(result.metadata_location)
    assert _ids(table.scan().to_arrow()) == _ids(deltalake.DeltaTable(str(path)).to_pyarrow_table())
    # The rewritten manifests got Arrow IPC copies again.
    storage = open_storage(str(path))
    state = read_state(storage, table.current_snapshot().manifest_list)
    assert state is not None
    assert all(m.entries_key.endswith((".entries.arrow", ".entries.parquet")) for m in state.manifests)
    assert any(m.entries_key.endswith(".entries.arrow") for m in state.manifests)
