"""A conversion's storage options have one source: the storage the Delta table was opened with. The snapshot plan
(which reaches engines whose workers open the table themselves) takes them from there, so a conversion on an
object store whose process has no credentials of its own reaches its files, spilled groups included, with the
options given to ``convert()``; a table given both a storage and options is refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from support.object_store import S3Endpoint, s3_server
from support.oracle import assert_same_rows

from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.manifests import file_manifests
from airflow_deltaberg.core.storage import open_storage


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    yield from s3_server(tmp_path_factory.mktemp("s3"))


class _SpillsInTable:
    """The in-process engine, spilling its groups under the table as an engine with remote workers does; it
    records the storage options each plan carried."""

    spills_in_table = True

    def __init__(self) -> None:
        self.options: list[Any] = []

    def __call__(self, storage: Any, plan: Any, groups: Any) -> list[Any]:
        self.options.append(plan.storage_options)
        return file_manifests.in_process(storage, plan, groups)


def test_a_conversion_on_an_object_store_uses_the_table_storage_options(
        s3: S3Endpoint, copy_fixture: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    uri = s3.upload(copy_fixture("cdf-table-with-cdc-and-dvs"), "one-source")
    engine = _SpillsInTable()

    full = convert(uri, storage_options=s3.storage_options, manifest_engine=engine, format_version=3)
    deltalake.write_deltalake(uri, pa.table({"id": pa.array([7], pa.int32()), "comment": ["appended"]}),
                              mode="append", storage_options=s3.deltalake_options)
    incremental = convert(uri, storage_options=s3.storage_options, manifest_engine=engine)

    assert (full.mode, incremental.mode, incremental.snapshots_written) == ("full", "incremental", 1)
    assert engine.options == [s3.storage_options]
    delta = deltalake.DeltaTable(uri, storage_options=s3.deltalake_options)
    iceberg = StaticTable.from_metadata(incremental.metadata_location, properties=s3.pyiceberg_properties)
    expected = pa.table(deltalake.QueryBuilder().register("t", delta).execute("SELECT * FROM t"))
    assert_same_rows(iceberg.scan().to_arrow(), expected)
    assert not [k for k in s3.filesystem().find(f"{s3.bucket}/one-source/_iceberg") if "spill" in k]


def test_a_table_takes_storage_or_storage_options_not_both(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path), {"deltaberg_timeout_s": 5})
    assert DeltaTable(str(tmp_path), storage=storage).storage.storage_options == {"deltaberg_timeout_s": 5}
    with pytest.raises(TypeError, match="not both"):
        DeltaTable(str(tmp_path), {"deltaberg_timeout_s": 9}, storage=storage)
