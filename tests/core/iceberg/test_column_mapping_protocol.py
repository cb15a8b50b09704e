"""Column mapping is honoured only when the protocol supports it (protocol, Column Mapping: "The table property should
only be honored if the table's protocol has reader and writer versions and/or table features that support the
`columnMapping` table feature").

deltalake 1.6.6 writes such a table: created with delta.columnMapping.mode=name and a timestamp without time zone, its
protocol lists table features (timestampNtz) without columnMapping, and it writes the files and the partition values
by logical names. delta-kernel reads it unmapped; Delta on Spark refuses it (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH).
The converter read it mapped and published a table whose name mapping named physical columns the files do not have
(pyiceberg: "Could not find field with name"); it is refused now, and validate reports it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltalakeTable
from deltalake import QueryBuilder, write_deltalake
from support.delta_log import append_commit
from support.tables import iceberg_files

from airflow_deltaberg.cli import main
from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.iceberg.convert import convert

NTZ = pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us"))
MISMATCH = "delta.columnMapping.mode is 'name' but the protocol .* does not support the columnMapping feature"


def _deltalake_mismatch(root: Path, partition_by: list[str] | None = None) -> Path:
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "ntz": NTZ, "part": pa.array(["a", "b"])})
    write_deltalake(str(root), data, partition_by=partition_by, configuration={"delta.columnMapping.mode": "name"})
    protocol = DeltalakeTable(str(root)).protocol()
    assert "columnMapping" not in (protocol.reader_features or []), "deltalake now lists columnMapping: see docstring"
    return root


def test_deltalake_writes_the_table_unmapped_and_convert_refuses_it(tmp_path: Path) -> None:
    root = _deltalake_mismatch(tmp_path / "t")
    # What delta-kernel reads: the files by logical names.
    rows = QueryBuilder().register("t", DeltalakeTable(str(root))).execute("select id from t order by id").read_all()
    assert pa.table(rows).column("id").to_pylist() == [1, 2]
    with pytest.raises(CorruptLogError, match=MISMATCH) as info:
        convert(str(root))
    assert info.value.version == 0 and info.value.file is not None
    assert info.value.file.endswith("00000000000000000000.json")
    assert main(["convert", str(root), "--format", "json"]) == 2
    assert not (root / "_iceberg").exists()
    assert "protocol.reader-version" in validate(str(root), "compat-v2").failed_rule_ids


def test_a_partitioned_one_names_the_logical_partition_key(tmp_path: Path) -> None:
    """Read mapped, its partition values lack the physical key: the refusal says the file uses the logical one."""
    root = _deltalake_mismatch(tmp_path / "t", ["part"])
    with pytest.raises(CorruptLogError, match="names the column by its logical name, not by its physical name"):
        DeltaTable(str(root)).snapshot()
    assert main(["convert", str(root), "--format", "json"]) == 2
    assert not (root / "_iceberg").exists()


def test_an_incremental_conversion_refuses_a_protocol_without_column_mapping(tmp_path: Path) -> None:
    """A commit that sets a protocol without column mapping under a mapped table: refused before its snapshot is
    written; the Iceberg table stays as it was."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64())}),
                    configuration={"delta.columnMapping.mode": "name"})
    assert DeltaTable(str(root)).snapshot().protocol.min_reader_version == 2
    assert convert(str(root)).delta_version == 0
    before = iceberg_files(root)
    append_commit(root, [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}])
    downgraded = MISMATCH.replace("protocol .*", r"protocol \(reader version 1\)")
    with pytest.raises(CorruptLogError, match=downgraded) as info:
        convert(str(root))
    assert info.value.version == 1
    assert iceberg_files(root) == before


def test_a_reader_feature_missing_from_the_writer_features_is_refused(tmp_path: Path) -> None:
    """columnMapping in readerFeatures only (fuzz seed 13 cases 1405 and 7811, a garbled writerFeatures): the protocol
    does not allow it, delta-kernel and Delta on Spark refuse the table; convert refuses it too, in full and when a
    commit sets such a protocol after a conversion. validate still reports it, rule by rule."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64())}),
                    configuration={"delta.columnMapping.mode": "name"})
    assert convert(str(root)).delta_version == 0
    before = iceberg_files(root)
    garbled = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
               "writerFeatures": ["appendOnly", "invariants"]}
    append_commit(root, [{"protocol": garbled}])
    refused = "lists columnMapping in readerFeatures but not in writerFeatures"
    with pytest.raises(CorruptLogError, match=refused) as info:
        convert(str(root))
    assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(f"{1:020d}.json")
    assert iceberg_files(root) == before
    with pytest.raises(CorruptLogError, match=refused):
        convert(str(root), full=True)
    assert iceberg_files(root) == before
    assert "protocol.feature.column-mapping" in validate(str(root), "compat-v2").failed_rule_ids


def test_a_reader_feature_missing_from_the_writer_features_names_the_protocols_file(tmp_path: Path) -> None:
    """The protocol set at version 1, a metaData at version 2: the full conversion's refusal names version 1, where
    the protocol breaks the rule, not the later file that defined the metaData."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2], pa.int64())}),
                    configuration={"delta.columnMapping.mode": "name"})
    garbled = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
               "writerFeatures": ["appendOnly", "invariants"]}
    append_commit(root, [{"protocol": garbled}])
    metadata = DeltaTable(str(root)).snapshot().metadata.to_action()
    metadata["configuration"] = {**metadata["configuration"], "delta.appendOnly": "false"}
    append_commit(root, [{"metaData": metadata}])
    refused = "lists columnMapping in readerFeatures but not in writerFeatures"
    with pytest.raises(CorruptLogError, match=refused) as info:
        convert(str(root))
    assert info.value.version == 1 and info.value.file is not None and info.value.file.endswith(f"{1:020d}.json")
    assert not (root / "_iceberg").exists()
