"""A timestamp_ntz column needs the timestampNtz table feature (protocol, Timestamp without timezone: "the table
must have Reader Version 3 and Writer Version 7. A feature name timestampNtz must exist in the table's
readerFeatures and writerFeatures"). Delta on Spark (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH) and delta-kernel
refuse a table without it (fuzz seed 1 cases 382 and 8646); convert refuses it too."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.delta_log import append_commit, edit_commit
from support.tables import iceberg_files

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import convert

LEGACY = {"minReaderVersion": 1, "minWriterVersion": 2}
REFUSED = "timestamp_ntz column but the protocol .* does not support the timestampNtz feature"


def test_a_timestamp_ntz_column_without_the_feature_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    root = tmp_path / "t"
    ntz = pa.array([[dt.datetime(2024, 1, 1)], None], pa.list_(pa.timestamp("us")))  # nested: an array element
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64()), "at": ntz}))
    assert "timestampNtz" in (deltalake.DeltaTable(str(root)).protocol().reader_features or [])
    path = edit_commit(root, 0, lambda actions: next(a for a in actions if "protocol" in a).update(protocol=LEGACY))
    DeltaTable(str(root)).snapshot()  # the log itself reads
    with pytest.raises(CorruptLogError, match=REFUSED) as info:
        convert(str(root))
    assert info.value.version == 0 and info.value.file == str(path)
    assert main(["convert", str(root)]) == 2
    assert "CorruptLogError" in capsys.readouterr().err
    assert not (root / "_iceberg").exists()


def _add_column(root: Path, name: str, typ: str, protocol: dict[str, int] | None = None) -> None:
    """A commit holding a metaData whose schema has one more column, after ``protocol`` when given (else the
    protocol stays as it is)."""
    metadata = DeltaTable(str(root)).snapshot().metadata.to_action()
    schema = json.loads(metadata["schemaString"])
    schema["fields"].append({"name": name, "type": typ, "nullable": True, "metadata": {}})
    metadata["schemaString"] = json.dumps(schema)
    append_commit(root, [*([{"protocol": protocol}] if protocol else []), {"metaData": metadata}])


def test_an_incremental_conversion_refuses_a_commit_that_adds_one_without_the_feature(tmp_path: Path) -> None:
    """A commit that sets a legacy protocol and a schema with a timestamp_ntz column: refused before its snapshot is
    written; the Iceberg table stays as it was."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert convert(str(root)).delta_version == 0
    before = iceberg_files(root)
    _add_column(root, "at", "timestamp_ntz", protocol=LEGACY)
    with pytest.raises(CorruptLogError, match=REFUSED) as info:
        convert(str(root))
    assert info.value.version == 1
    assert iceberg_files(root) == before


def test_an_incremental_conversion_checks_a_new_schema_against_the_protocol_in_force(tmp_path: Path) -> None:
    """The commit sets no protocol: the one in force (kept in the conversion state) is the one the new timestamp_ntz
    column is checked against."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert DeltaTable(str(root)).snapshot().protocol.min_reader_version == 1
    assert convert(str(root)).delta_version == 0
    before = iceberg_files(root)
    _add_column(root, "at", "timestamp_ntz")
    with pytest.raises(CorruptLogError, match=REFUSED) as info:
        convert(str(root))
    assert info.value.version == 1 and info.value.file == str(root / "_delta_log" / f"{1:020d}.json")
    assert iceberg_files(root) == before


