"""Deletion vectors decoded with our numpy code, turned into Iceberg position deletes, and read back by pyiceberg.

Oracles: deltalake's own DV decoding (``DeltaTable.deletion_vectors()``) and its DataFusion reader (which
honours DVs; its pyarrow reader refuses DV tables), pyroaring's bitmap serialization, and the descriptors'
cardinality. The end-to-end tests build Iceberg metadata by hand: a data manifest and a delete manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFileContent, ManifestContent, read_manifest_list
from pyiceberg.table import StaticTable
from pyiceberg.table.snapshots import Operation
from support.deletion_vectors import data_file_entries, dv_location, z85_encode

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import (
    read_deletion_vector,
    read_deletion_vectors,
    relative_dv_key,
)
from airflow_deltaberg.core.delta.deletion_vectors.roaring import (
    NATIVE_MAGIC,
    PORTABLE_MAGIC,
    decode_roaring_bitmap_array,
)
from airflow_deltaberg.core.delta.deletion_vectors.z85 import z85_decode, z85_uuid
from airflow_deltaberg.core.delta.file_checks.file_tables import dv_unique_id
from airflow_deltaberg.core.delta.log.commit import write_commit
from airflow_deltaberg.core.errors import CorruptLogError, DeleteFileMismatchError
from airflow_deltaberg.core.iceberg.deletes.position_deletes import (
    FILE_PATH_ID,
    POS_ID,
    delete_file_key,
    write_position_deletes,
)
from airflow_deltaberg.core.iceberg.manifests.manifest import write_manifest, write_manifest_list
from airflow_deltaberg.core.iceberg.partition import identity_spec
from airflow_deltaberg.core.iceberg.schema import NAME_MAPPING_PROPERTY, convert_schema
from airflow_deltaberg.core.iceberg.table_metadata import SnapshotSpec, build_metadata, snapshot_id_for
from airflow_deltaberg.core.storage import LocalStorage

#: Fixture tables with deletion vectors in some version (the v1-*-struct-stats-only tables only enable the feature).
DV_TABLES = ["table-with-dv-small", "with-short-dv", "cdf-table-with-dv", "compacted-log-files-table",
             "cdf-table-with-cdc-and-dvs"]
FEATURE_ONLY_TABLES = ["v1-single-part-struct-stats-only", "v1-multi-part-struct-stats-only",
                       "v1-multi-part-partitioned-struct-stats-only"]
SPEC_UUID_EXAMPLE = "ab^-aqEH.-t@S}K{vb[*k^"


@pytest.fixture
def roaring() -> Any:
    import pyroaring  # a dependency of the package

    return pyroaring


def _dv_versions(root: Path) -> list[tuple[int, list[str], list[dict[str, Any]]]]:
    """(version, paths, descriptors) of every version whose live files carry DVs."""
    table = DeltaTable(str(root))
    out = []
    for version in range(table.latest_version() + 1):
        files = table.snapshot(version).files
        rows = [(p, d) for p, d in zip(files.column("path").to_pylist(), files.column("deletionVector").to_pylist(),
                                       strict=True) if d]
        if rows:
            out.append((version, [p for p, _ in rows], [d for _, d in rows]))
    return out


def _deltalake_deleted(root: Path, version: int) -> dict[str, list[int]]:
    dvs = pa.table(deltalake.DeltaTable(str(root), version=version).deletion_vectors())
    return {unquote(r["filepath"]).rsplit("/", 1)[-1]: [i for i, keep in enumerate(r["selection_vector"]) if not keep]
            for r in dvs.to_pylist()}


def _portable(roaring: Any, values: list[int]) -> bytes:
    bitmap = roaring.BitMap64(values)
    bitmap.run_optimize()
    return struct.pack("<I", PORTABLE_MAGIC) + bitmap.serialize()


def _dv_file(blobs: list[bytes]) -> tuple[bytes, list[int]]:
    """A DV file (version 1; per DV: big-endian size, data, big-endian CRC-32) and each DV's offset."""
    out, offsets = bytearray(b"\x01"), []
    for blob in blobs:
        offsets.append(len(out))
        out += struct.pack(">i", len(blob)) + blob + struct.pack(">I", zlib.crc32(blob))
    return bytes(out), offsets


# --- Z85 -------------------------------------------------------------------------------------------------------


def test_z85_matches_the_rfc_example_and_round_trips() -> None:
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw
    data = bytes(range(256)) * 3
    assert z85_decode(z85_encode(data)) == data
    assert z85_decode("") == b""


def test_z85_rejects_bad_text() -> None:
    for bad in ("HelloWorl", 'Hell"', "Hellö", "#####", "####0", "##000HelloWorld"):
        with pytest.raises(ValueError):
            z85_decode(bad)


def test_z85_reads_the_rust_crate_tail_chunk() -> None:
    # cdf-table-with-dv's 34-byte inline DV ends in "##093": two bytes missing, 0x0300 in the last three digits.
    assert z85_decode("HelloWorld##093") == z85_decode("HelloWorld") + b"\x03\x00"
    assert z85_decode("#0000") == b"\0\0\0"
    with pytest.raises(ValueError):
        z85_decode("##%%%")  # 82 * 85**2 + ... does not fit two bytes


def test_uuid_and_relative_path_of_the_protocol_example() -> None:
    assert str(z85_uuid(SPEC_UUID_EXAMPLE[-20:])) == "d2c639aa-8816-431a-aaf6-d3fe2512ff61"
    assert relative_dv_key(SPEC_UUID_EXAMPLE) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    descriptor = {"storageType": "u", "pathOrInlineDv": SPEC_UUID_EXAMPLE, "offset": 4, "sizeInBytes": 40,
                  "cardinality": 6}
    assert dv_location("s3://mytable/", descriptor) == (
        "s3://mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin")
    assert dv_unique_id(descriptor) == f"u{SPEC_UUID_EXAMPLE}@4"
    assert dv_unique_id({"storageType": "i", "pathOrInlineDv": "abcde", "offset": None}) == "iabcde"


# --- roaring bitmaps, against pyroaring ---------------------------------------------------------------------------


def _cases() -> dict[str, list[int]]:
    rng = np.random.default_rng(7)
    dense = sorted(set(rng.integers(0, 65536, 30_000).tolist()))  # > 4096 in one container: a bitmap container
    return {
        "empty": [],
        "one": [0],
        "array": [3, 4, 7, 11, 18, 29],
        "bitmap": dense,
        "runs": list(range(100, 5000)) + list(range(70_000, 140_000)),
        "run-then-array-then-bitmap": list(range(0, 10_000)) + [200_000, 200_007] + [(5 << 16) + v for v in dense],
        "many-containers": [k << 16 | 5 for k in range(40)],  # >= 4 containers: the offset header is present
        "above-2**32": [1, 2, (1 << 32) + 5, (3 << 32) + (1 << 20), (3 << 32) + (1 << 20) + 1],
        "random": sorted(set(rng.integers(0, 1 << 22, 50_000).tolist())),
    }


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("run_optimize", [False, True])
def test_roaring_decoding_matches_pyroaring(roaring: Any, name: str, run_optimize: bool) -> None:
    values = _cases()[name]
    bitmap = roaring.BitMap64(values)
    if run_optimize:
        bitmap.run_optimize()
    decoded = decode_roaring_bitmap_array(struct.pack("<I", PORTABLE_MAGIC) + bitmap.serialize())
    assert decoded.dtype == np.uint64
    assert decoded.tolist() == values


def test_native_layout_as_delta_spark_reads_it(roaring: Any) -> None:
    # delta-spark's native RoaringBitmapArray: LE magic, LE count, then per key 0, 1, ... LE size + 32-bit bitmap.
    bitmaps = [roaring.BitMap([1, 5, 70_000]), roaring.BitMap([]), roaring.BitMap([2])]
    blob = struct.pack("<Ii", NATIVE_MAGIC, len(bitmaps))
    for bitmap in bitmaps:
        data = bitmap.serialize()
        blob += struct.pack("<i", len(data)) + data
    assert decode_roaring_bitmap_array(blob).tolist() == [1, 5, 70_000, (2 << 32) + 2]


def test_bad_bitmaps_are_refused(roaring: Any) -> None:
    good = _portable(roaring, [1, 2, 3])
    with pytest.raises(ValueError, match="magic"):
        decode_roaring_bitmap_array(b"\0\0\0\0" + good[4:])
    with pytest.raises(ValueError, match="truncated"):
        decode_roaring_bitmap_array(good[:-1])


def test_the_protocols_own_inline_example_is_refused_as_delta_spark_refuses_it() -> None:
    # Its bytes are the native layout written big-endian; delta-spark's little-endian reader throws on it.
    descriptor = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                  "offset": None, "sizeInBytes": 40, "cardinality": 6}
    with pytest.raises(CorruptLogError, match="magic number"):
        read_deletion_vector("/nonexistent-table", descriptor)


# --- deletion vectors of the fixture tables ------------------------------------------------------------------------


@pytest.mark.parametrize("name", DV_TABLES)
def test_fixture_dvs_match_deltalake_and_their_cardinality(fixtures_dir: Path, name: str) -> None:
    root = fixtures_dir / name
    versions = _dv_versions(root)
    assert versions, f"{name} has no deletion vectors"
    for version, paths, descriptors in versions:
        decoded = read_deletion_vectors(str(root), descriptors)
        theirs = _deltalake_deleted(root, version)
        for path, descriptor, positions in zip(paths, descriptors, decoded, strict=True):
            rows = pq.ParquetFile(root / unquote(path)).metadata.num_rows
            assert positions.dtype == np.uint64
            assert len(positions) == descriptor["cardinality"]
            assert np.all(np.diff(positions.astype(np.int64)) > 0)
            assert int(positions.max()) < rows
            assert positions.tolist() == theirs[path], f"{name} v{version} {path}"


def test_fixtures_have_inline_and_on_disk_dvs_and_a_file_with_two(fixtures_dir: Path) -> None:
    kinds, offsets = set(), set()
    for name in DV_TABLES:
        for _, _, descriptors in _dv_versions(fixtures_dir / name):
            kinds.update(d["storageType"] for d in descriptors)
            offsets.update(d["offset"] for d in descriptors if d["offset"])
    assert kinds == {"u", "i"}
    assert offsets - {1}, "no DV after the first one of its file"


@pytest.mark.parametrize("name", FEATURE_ONLY_TABLES)
def test_tables_that_only_enable_the_feature_have_no_dvs(fixtures_dir: Path, name: str) -> None:
    assert _dv_versions(fixtures_dir / name) == []


def test_inline_and_on_disk_dvs_of_every_storage_type(roaring: Any, tmp_path: Path) -> None:
    first, second = [0, 3, 5, 1 << 20], list(range(10, 5000)) + [(1 << 32) + 1]
    blobs = [_portable(roaring, first), _portable(roaring, second)]
    content, offsets = _dv_file(blobs)
    dv_id = uuid.uuid4()
    (tmp_path / "table" / "xy").mkdir(parents=True)
    (tmp_path / "table" / "xy" / f"deletion_vector_{dv_id}.bin").write_bytes(content)
    (tmp_path / "elsewhere dir").mkdir()
    (tmp_path / "elsewhere dir" / "dv.bin").write_bytes(content)
    relative = "xy" + z85_encode(dv_id.bytes)
    storage = LocalStorage(str(tmp_path / "table"))
    outside = f"file://{tmp_path}/elsewhere%20dir/dv.bin"
    descriptors = [
        {"storageType": "u", "pathOrInlineDv": relative, "offset": offsets[0], "sizeInBytes": len(blobs[0]),
         "cardinality": len(first)},
        {"storageType": "u", "pathOrInlineDv": relative, "offset": offsets[1], "sizeInBytes": len(blobs[1]),
         "cardinality": len(second)},
        {"storageType": "p", "pathOrInlineDv": outside, "offset": offsets[1], "sizeInBytes": len(blobs[1]),
         "cardinality": len(second)},
        {"storageType": "p", "pathOrInlineDv": f"{tmp_path}/table/xy/deletion_vector_{dv_id}.bin",
         "offset": offsets[0], "sizeInBytes": len(blobs[0]), "cardinality": len(first)},
        {"storageType": "i", "pathOrInlineDv": z85_encode(blobs[1]), "offset": None, "sizeInBytes": len(blobs[1]),
         "cardinality": len(second)},
    ]
    expected = [first, second, second, first, second]
    assert [v.tolist() for v in read_deletion_vectors(storage, descriptors)] == expected
    assert [read_deletion_vector(str(tmp_path / "table"), d).tolist() for d in descriptors] == expected


# --- corruption ------------------------------------------------------------------------------------------------------


def _small_dv(copy_fixture: Any) -> tuple[Path, Path, dict[str, Any]]:
    root = copy_fixture("table-with-dv-small")
    descriptor = DeltaTable(str(root)).snapshot().files.column("deletionVector").to_pylist()[0]
    return root, root / relative_dv_key(descriptor["pathOrInlineDv"]), descriptor


def test_a_checksum_mismatch_names_the_dv_file_and_the_table(copy_fixture: Any) -> None:
    root, dv_file, descriptor = _small_dv(copy_fixture)
    data = bytearray(dv_file.read_bytes())
    data[descriptor["offset"] + 4 + 20] ^= 0x01  # one bit of the bitmap
    dv_file.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="CRC-32") as caught:
        read_deletion_vector(str(root), descriptor)
    assert caught.value.file == str(dv_file) and caught.value.table == str(root)
    assert str(dv_file) in str(caught.value) and str(root) in str(caught.value)


@pytest.mark.parametrize("keep", [0, 1, 3, 30, -1])
def test_a_truncated_dv_file_is_corrupt(copy_fixture: Any, keep: int) -> None:
    root, dv_file, descriptor = _small_dv(copy_fixture)
    dv_file.write_bytes(dv_file.read_bytes()[:keep])
    with pytest.raises(CorruptLogError, match="truncated") as caught:
        read_deletion_vector(str(root), descriptor)
    assert caught.value.file == str(dv_file)


def test_wrong_version_size_cardinality_and_missing_file(copy_fixture: Any) -> None:
    root, dv_file, descriptor = _small_dv(copy_fixture)
    original = dv_file.read_bytes()
    dv_file.write_bytes(b"\x02" + original[1:])
    with pytest.raises(CorruptLogError, match=r"is not a deletion vector file \(bad version byte\)"):
        read_deletion_vector(str(root), descriptor)
    dv_file.write_bytes(original)
    with pytest.raises(CorruptLogError, match="its descriptor says 35"):
        read_deletion_vector(str(root), {**descriptor, "sizeInBytes": 35})
    with pytest.raises(CorruptLogError, match="holds 2 rows, its descriptor says 3"):
        read_deletion_vector(str(root), {**descriptor, "cardinality": 3})
    with pytest.raises(CorruptLogError, match="storage type"):
        read_deletion_vector(str(root), {**descriptor, "storageType": "x"})
    dv_file.unlink()
    with pytest.raises(CorruptLogError, match="missing") as caught:
        read_deletion_vector(str(root), descriptor)
    assert caught.value.file == str(dv_file)


def test_a_corrupt_inline_dv(roaring: Any) -> None:
    blob = _portable(roaring, [1, 2, 3])
    descriptor = {"storageType": "i", "pathOrInlineDv": z85_encode(blob), "offset": None,
                  "sizeInBytes": len(blob), "cardinality": 3}
    assert read_deletion_vector("/t", descriptor).tolist() == [1, 2, 3]
    with pytest.raises(CorruptLogError, match="not Z85"):
        read_deletion_vector("/t", {**descriptor, "pathOrInlineDv": "~" * 5})
    with pytest.raises(CorruptLogError, match="descriptor says"):
        read_deletion_vector("/t", {**descriptor, "sizeInBytes": len(blob) + 8})


# --- position delete files -------------------------------------------------------------------------------------------


def _files_for(root: Path, version: int | None = None) -> tuple[Any, Any, Any, pa.Table, pa.Table]:
    table = DeltaTable(str(root))
    snap = table.snapshot(version)
    converted = convert_schema(snap.schema, snap.column_mapping_mode, table=snap.table)
    spec = identity_spec(converted.schema, snap.partition_columns)
    snapshot_id = snapshot_id_for(snap.metadata.id, snap.version)
    data = data_file_entries(snap, converted, spec, table.storage, snapshot_id=snapshot_id, sequence_number=1)
    files = pa.table({"file_path": data.column("file_path"), "deletionVector": snap.files.column("deletionVector"),
                      "partition": data.column("partition"), "record_count": data.column("record_count")})
    return table, snap, (converted, spec, snapshot_id), data, files


def test_delete_files_hold_sorted_positions_with_field_ids(copy_fixture: Any) -> None:
    root = copy_fixture("compacted-log-files-table")
    table, snap, (_, _, snapshot_id), data, files = _files_for(root, 16)
    entries = write_position_deletes(table.storage, files, sequence_number=7, snapshot_id=snapshot_id)
    dvs = snap.files.column("deletionVector").to_pylist()
    with_dv = [i for i, d in enumerate(dvs) if d]
    assert entries.num_rows == len(with_dv) == 2
    for row, i in enumerate(with_dv):
        entry = {name: entries.column(name)[row].as_py() for name in entries.column_names}
        data_path = files.column("file_path")[i].as_py()
        positions = read_deletion_vector(table.storage, dvs[i]).tolist()
        key = delete_file_key(data_path, dvs[i])
        assert entry["file_path"] == table.storage.uri(key) and key.startswith("_iceberg/metadata/")
        assert (entry["status"], entry["content"], entry["file_format"]) == (1, 1, "PARQUET")
        assert (entry["snapshot_id"], entry["sequence_number"], entry["file_sequence_number"]) == (snapshot_id, 7, 7)
        assert entry["record_count"] == len(positions) == dvs[i]["cardinality"]
        assert entry["file_size_in_bytes"] == os.path.getsize(entry["file_path"])
        assert entry["referenced_data_file"] == data_path
        assert entry["sort_order_id"] is None
        lower, upper = dict((kv["key"], kv["value"]) for kv in entry["lower_bounds"]), dict(
            (kv["key"], kv["value"]) for kv in entry["upper_bounds"])
        assert lower[FILE_PATH_ID] == upper[FILE_PATH_ID] == data_path.encode()
        assert struct.unpack("<q", lower[POS_ID])[0] == positions[0]
        assert struct.unpack("<q", upper[POS_ID])[0] == positions[-1]
        written = pq.read_table(entry["file_path"])
        assert [f.metadata[b"PARQUET:field_id"] for f in pq.read_schema(entry["file_path"])] == [
            str(FILE_PATH_ID).encode(), str(POS_ID).encode()]
        assert written.column("file_path").to_pylist() == [data_path] * len(positions)
        assert written.column("pos").to_pylist() == positions
        parquet_schema = pq.ParquetFile(entry["file_path"]).schema
        assert [parquet_schema.column(c).max_definition_level for c in range(2)] == [0, 0]  # required


def test_rerunning_converges_on_the_same_files(copy_fixture: Any) -> None:
    root = copy_fixture("with-short-dv")
    table, _, (_, _, snapshot_id), _, files = _files_for(root)
    first = write_position_deletes(table.storage, files, sequence_number=1, snapshot_id=snapshot_id)
    path = first.column("file_path")[0].as_py()
    mtime = os.stat(path).st_mtime_ns
    again = write_position_deletes(table.storage, files, sequence_number=1, snapshot_id=snapshot_id)
    assert again.equals(first)
    assert os.stat(path).st_mtime_ns == mtime  # reused, not rewritten
    later = write_position_deletes(table.storage, files, sequence_number=5, snapshot_id=snapshot_id + 1)
    assert later.column("file_path").equals(first.column("file_path"))
    assert later.column("sequence_number").to_pylist() == [5]
    assert len(list((root / "_iceberg" / "metadata").iterdir())) == 1


def test_a_foreign_file_at_the_deterministic_name_is_refused(copy_fixture: Any) -> None:
    root = copy_fixture("table-with-dv-small")
    table, snap, (_, _, snapshot_id), _, files = _files_for(root)
    key = delete_file_key(files.column("file_path")[0].as_py(), snap.files.column("deletionVector")[0].as_py())
    (root / key).parent.mkdir(parents=True)
    pq.write_table(pa.table({"file_path": ["x"], "pos": [0]}), root / key)
    with pytest.raises(DeleteFileMismatchError, match="holds 1 deletes"):
        write_position_deletes(table.storage, files, sequence_number=1, snapshot_id=snapshot_id)


def test_positions_past_the_end_of_the_data_file_are_corrupt(copy_fixture: Any) -> None:
    root = copy_fixture("table-with-dv-small")
    table, _, (_, _, snapshot_id), _, files = _files_for(root)
    short = files.set_column(3, "record_count", pa.array([9], pa.int64()))  # the DV deletes row 9
    with pytest.raises(CorruptLogError, match="deletes row 9 .* which has 9 rows"):
        write_position_deletes(table.storage, short, sequence_number=1, snapshot_id=snapshot_id)


def test_no_dvs_give_no_entries(copy_fixture: Any) -> None:
    root = copy_fixture("table-with-dv-small")
    table, _, (converted, spec, snapshot_id), _, files = _files_for(root, 0)
    entries = write_position_deletes(table.storage, files, sequence_number=1, snapshot_id=snapshot_id)
    assert entries.num_rows == 0
    summary = write_manifest(pa.BufferOutputStream(), entries, schema=converted.schema, spec=spec,
                             snapshot_id=snapshot_id, content="deletes")
    assert summary.added_files_count == 0


# --- end to end: pyiceberg reads Delta's rows ----------------------------------------------------------------------


def _iceberg_table(root: Path, version: int | None = None) -> StaticTable:
    """Iceberg metadata for the Delta table at ``version``: one data manifest and one delete manifest."""
    table, snap, (converted, spec, snapshot_id), data, files = _files_for(root, version)
    deletes = write_position_deletes(table.storage, files, sequence_number=1, snapshot_id=snapshot_id)
    meta = root / "_iceberg" / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    manifests = []
    for name, entries, content in (("data", data, "data"), ("deletes", deletes, "deletes")):
        summary = write_manifest(str(meta / f"{name}-m0.avro"), entries, schema=converted.schema, spec=spec,
                                 snapshot_id=snapshot_id, content=content)
        manifests.append(summary.manifest_file())
    write_manifest_list(str(meta / "snap.avro"), manifests, snapshot_id, None, 1)
    deleted = int(pc.sum(deletes.column("record_count")).as_py() or 0)
    metadata = build_metadata(
        previous=None, previous_location=None, location=str(root), delta_table_id=snap.metadata.id,
        schema=converted.schema, last_column_id=converted.last_column_id, spec=spec,
        properties={NAME_MAPPING_PROPERTY: converted.name_mapping_json()},
        snapshot=SnapshotSpec(
            snapshot_id=snapshot_id, delta_version=snap.version, delta_timestamp_ms=snap.timestamp,
            operation=Operation.APPEND, manifest_list=str(meta / "snap.avro"),
            summary={"added-data-files": str(data.num_rows), "added-delete-files": str(deletes.num_rows),
                     "added-position-deletes": str(deleted), "total-position-deletes": str(deleted)},
        ),
        now_ms=snap.timestamp,
    )
    (meta / "v1.metadata.json").write_text(metadata.model_dump_json())
    return StaticTable.from_metadata(str(meta / "v1.metadata.json"))


def _delta_rows(root: Path, version: int | None, columns: list[str]) -> pa.Table:
    """Every parquet file of the snapshot minus the rows its DV deletes (decoded by us), partition values added."""
    table = DeltaTable(str(root))
    snap = table.snapshot(version)
    types = {f.name: f for f in snap.schema.fields}
    parts = []
    for path, dv, values in zip(snap.files.column("path").to_pylist(), snap.files.column("deletionVector").to_pylist(),
                                snap.files.column("partitionValues").to_pylist(), strict=True):
        data = pq.read_table(root / unquote(path))
        if dv:
            keep = np.ones(data.num_rows, bool)
            keep[read_deletion_vector(table.storage, dv).astype(np.int64)] = False
            data = data.filter(pa.array(keep))
        for name, value in dict(values or {}).items():
            if name in data.column_names:
                continue
            target = pa.int64() if types[name].type.name == "long" else pa.string()
            data = data.append_column(name, pa.array([value] * data.num_rows, pa.string()).cast(target))
        parts.append(data.select(columns))
    return pa.concat_tables(parts, promote_options="permissive")


def _sorted(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _check_same_rows(root: Path, version: int | None, iceberg: StaticTable) -> int:
    scanned = iceberg.scan().to_arrow()
    columns = [f.name for f in iceberg.schema().fields]
    scanned = scanned.select(columns)
    # parquet files written by Spark hold naive (INT96 / ns) timestamps that Iceberg reads as timestamptz in us
    ours = _delta_rows(root, version, columns).cast(scanned.schema, safe=False)
    assert _sorted(scanned) == _sorted(ours)
    # deltalake's DataFusion reader applies DVs itself (its pyarrow reader refuses DV tables)
    theirs = pa.table(deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(root), version=version))
                      .execute("select * from t").read_all())
    assert _sorted(theirs.select(columns).cast(scanned.schema, safe=False)) == _sorted(ours)
    return scanned.num_rows


E2E_CASES = [
    ("table-with-dv-small", 1),
    ("with-short-dv", 0),
    ("cdf-table-with-dv", 3),  # inline DVs
    ("cdf-table-with-dv", 5),  # inline DV with the z85 crate's tail chunk
    ("compacted-log-files-table", 16),  # two data files with DVs, one DV file holding both
    ("compacted-log-files-table", 25),
]


@pytest.mark.parametrize(("name", "version"), E2E_CASES)
def test_pyiceberg_returns_the_rows_delta_returns(copy_fixture: Any, name: str, version: int) -> None:
    root = copy_fixture(name)
    iceberg = _iceberg_table(root, version)
    manifests = read_manifest_list(PyArrowFileIO().new_input(iceberg.current_snapshot().manifest_list))
    assert [m.content for m in manifests] == [ManifestContent.DATA, ManifestContent.DELETES]
    tasks = list(iceberg.scan().plan_files())
    dvs = {d["pathOrInlineDv"] for d in DeltaTable(str(root)).snapshot(version).files.column("deletionVector")
           .to_pylist() if d}
    assert sum(len(t.delete_files) for t in tasks) == sum(1 for t in tasks if t.delete_files) >= len(dvs) > 0
    assert all(f.content == DataFileContent.POSITION_DELETES for t in tasks for f in t.delete_files)
    rows = _check_same_rows(root, version, iceberg)
    total = sum(pq.ParquetFile(t.file.file_path).metadata.num_rows for t in tasks)
    assert rows < total


def _add_dvs(root: Path, roaring: Any, column: str, deleted: dict[str, list[int]]) -> None:
    """Commit DVs for the files whose partition ``column`` is a key of ``deleted``: two in one file below a
    random prefix, the rest inline."""
    table = DeltaTable(str(root))
    snap = table.snapshot()
    adds = {r["path"]: r for r in snap.files.select(["path", "partitionValues", "size", "modificationTime",
                                                      "stats"]).to_pylist()}
    targets = sorted(p for p, add in adds.items() if dict(add["partitionValues"])[column] in deleted)
    blobs = {p: _portable(roaring, deleted[dict(adds[p]["partitionValues"])[column]]) for p in targets}
    on_disk = targets[:2]
    content, offsets = _dv_file([blobs[p] for p in on_disk])
    dv_id = uuid.uuid4()
    (root / "q7").mkdir()
    (root / "q7" / f"deletion_vector_{dv_id}.bin").write_bytes(content)
    actions: list[dict[str, Any]] = [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                                   "readerFeatures": ["deletionVectors"],
                                                   "writerFeatures": ["deletionVectors"]}}]
    for path in targets:
        add = adds[path]
        blob = blobs[path]
        if path in on_disk:
            dv = {"storageType": "u", "pathOrInlineDv": "q7" + z85_encode(dv_id.bytes),
                  "offset": offsets[on_disk.index(path)], "sizeInBytes": len(blob)}
        else:
            dv = {"storageType": "i", "pathOrInlineDv": z85_encode(blob), "sizeInBytes": len(blob)}
        dv["cardinality"] = len(decode_roaring_bitmap_array(blob))
        partition_values = dict(add["partitionValues"])
        actions.append({"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True,
                                   "partitionValues": partition_values, "size": add["size"]}})
        actions.append({"add": {"path": path, "partitionValues": partition_values, "size": add["size"],
                                "modificationTime": add["modificationTime"], "dataChange": True,
                                "stats": add["stats"], "deletionVector": dv}})
    write_commit(table, actions, read_version=snap.version, operation="DELETE")


def test_partitioned_table_with_dvs_in_several_partitions(roaring: Any, tmp_path: Path) -> None:
    root = tmp_path / "partitioned"
    n = 3000
    deltalake.write_deltalake(str(root), pa.table({
        "part": pa.array(["a b", "c", "d/e"] * (n // 3)),
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "value": pa.array([f"v{i}" for i in range(n)]),
    }), partition_by=["part"])
    # Each partition directory holds one file of 1000 rows; delete runs, scattered rows and single rows.
    _add_dvs(root, roaring, "part", {
        "a b": list(range(0, 300)) + [999],
        "c": list(range(1, 1000, 7)),
        "d/e": [500],
    })
    iceberg = _iceberg_table(root)
    tasks = list(iceberg.scan().plan_files())
    assert len(tasks) == 3 and all(len(t.delete_files) == 1 for t in tasks)
    for task in tasks:
        (delete,) = task.delete_files
        assert delete.partition == task.file.partition
    assert _check_same_rows(root, None, iceberg) == n - 301 - len(range(1, 1000, 7)) - 1
    shutil.rmtree(root / "_iceberg" / "metadata")
