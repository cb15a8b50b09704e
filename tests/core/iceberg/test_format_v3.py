"""Iceberg format version 3 output: the same rows as Delta through pyiceberg at every converted version, row
lineage as the spec assigns it (snapshot first-row-id / added-rows, manifest first_row_id, ids written out for
the entries of rewritten manifests), deletion vectors as Puffin blobs, upgrades from v2, and refusals.

Iceberg Java's reading of the same tables (rows, deletion vectors and ``_row_id``) is checked in
tests/spark/test_iceberg_deletion_vectors.py. Manifests are read with fastavro here: pyiceberg 0.12 does not expose
the v3 fields of data files.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import fastavro
import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile
from support.oracle import Rows, delta_rows, rows_of

from airflow_deltaberg.core.delta.deletion_vectors.deletion_vectors import read_deletion_vector
from airflow_deltaberg.core.delta.deletion_vectors.roaring import decode_roaring_bitmap_array
from airflow_deltaberg.core.errors import DeltabergError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.deletes.deletion_vector_files import DV_MAGIC, dv_blob, puffin_file
from airflow_deltaberg.core.storage import open_storage


def iceberg_rows(metadata_location: str, snapshot_id: int | None = None) -> Rows:
    return rows_of(StaticTable.from_metadata(metadata_location).scan(snapshot_id=snapshot_id).to_arrow())


def local(location: str) -> str:
    return location.removeprefix("file://")


def avro_records(location: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with open(local(location), "rb") as f:
        reader = fastavro.reader(f)
        return {k: v.decode() if isinstance(v, bytes) else v for k, v in reader.metadata.items()}, list(reader)


def batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "label": [f"p{i % 3}" for i in ids]})


def make_history(path: Path, after_each: Callable[[], None]) -> None:
    """Appends, a delete rewriting files (partition p1 loses rows), an overwrite of everything, an append."""
    write_deltalake(str(path), batch(0, 9), partition_by=["label"])
    after_each()
    write_deltalake(str(path), batch(9, 6), mode="append", partition_by=["label"])
    after_each()
    deltalake.DeltaTable(str(path)).delete("id % 3 = 1 AND id > 4")
    after_each()
    write_deltalake(str(path), batch(100, 4), mode="overwrite", partition_by=["label"])
    after_each()
    write_deltalake(str(path), batch(200, 5), mode="append", partition_by=["label"])
    after_each()


def assert_lineage(metadata_location: str) -> None:
    """Snapshots take consecutive row id ranges; each data manifest a first_row_id inside its snapshot's range
    (delete manifests none); the table's next-row-id follows the last snapshot."""
    metadata = StaticTable.from_metadata(metadata_location).metadata
    assert metadata.format_version == 3
    snapshots = sorted(metadata.snapshots, key=lambda s: s.sequence_number)
    expected_first = 0
    for snapshot in snapshots:
        assert snapshot.first_row_id == expected_first
        expected_first += snapshot.added_rows
        list_metadata, manifests = avro_records(snapshot.manifest_list)
        assert list_metadata["format-version"] == "3"
        assert list_metadata["first-row-id"] == str(snapshot.first_row_id)
        new_rows = 0
        for m in manifests:
            if m["content"] == 1:
                assert m["first_row_id"] is None
            elif m["added_snapshot_id"] == snapshot.snapshot_id:
                assert m["first_row_id"] == snapshot.first_row_id + new_rows
                new_rows += m["added_rows_count"] + m["existing_rows_count"]
            else:
                assert m["first_row_id"] is not None and m["first_row_id"] < snapshot.first_row_id
        assert new_rows == snapshot.added_rows
    assert metadata.next_row_id == expected_first


def test_full_and_incremental_conversions_read_like_delta(tmp_path: Path) -> None:
    path = tmp_path / "table"
    results = []
    make_history(path, lambda: results.append(convert(str(path), format_version=3)))
    assert [r.mode for r in results] == ["full"] + ["incremental"] * 4
    latest = results[-1].metadata_location
    for snapshot in StaticTable.from_metadata(latest).metadata.snapshots:
        version = int(snapshot.summary["delta-version"])
        assert iceberg_rows(latest, snapshot.snapshot_id) == delta_rows(path, version), version
    assert_lineage(latest)
    # A manifest written by this converter is a v3 manifest.
    list_metadata, manifests = avro_records(StaticTable.from_metadata(latest).current_snapshot().manifest_list)
    manifest_metadata, _ = avro_records(manifests[0]["manifest_path"])
    assert manifest_metadata["format-version"] == "3"


def test_rewritten_manifests_keep_the_row_ids_their_files_inherited(tmp_path: Path) -> None:
    """A removal rewrites the manifest that lists the removed file; the files it keeps (EXISTING) carry the row ids
    they inherited from the old manifest, written out."""
    path = tmp_path / "table"
    write_deltalake(str(path), batch(0, 9), partition_by=["label"])
    write_deltalake(str(path), batch(9, 9), mode="append", partition_by=["label"])
    first = convert(str(path), format_version=3)
    _, before = avro_records(StaticTable.from_metadata(first.metadata_location).current_snapshot().manifest_list)
    (data_manifest,) = [m for m in before if m["content"] == 0]
    _, entries = avro_records(data_manifest["manifest_path"])
    inherited, next_id = {}, data_manifest["first_row_id"]
    for entry in entries:  # every entry ADDED, without a first_row_id: ids by inheritance, in listing order
        assert entry["status"] == 1 and entry["data_file"]["first_row_id"] is None
        inherited[entry["data_file"]["file_path"]] = next_id
        next_id += entry["data_file"]["record_count"]

    deltalake.DeltaTable(str(path)).delete("label = 'p1'")  # removes whole files
    second = convert(str(path))
    assert second.mode == "incremental"
    _, after = avro_records(StaticTable.from_metadata(second.metadata_location).current_snapshot().manifest_list)
    rewritten = [m for m in after if m["content"] == 0 and m["added_snapshot_id"] == second.snapshot_id]
    assert rewritten
    seen = 0
    for manifest in rewritten:
        _, entries = avro_records(manifest["manifest_path"])
        for entry in entries:
            if entry["status"] in (0, 2):  # EXISTING and DELETED: ids written out, as inherited before
                assert entry["data_file"]["first_row_id"] == inherited[entry["data_file"]["file_path"]]
                seen += 1
    assert seen == len(inherited)
    assert iceberg_rows(second.metadata_location) == delta_rows(path)
    assert_lineage(second.metadata_location)


def test_deletion_vectors_are_puffin_blobs(copy_fixture: Callable[[str], Path]) -> None:
    path = copy_fixture("table-with-dv-small")
    result = convert(str(path), format_version=3)
    assert iceberg_rows(result.metadata_location) == delta_rows(path)
    _, manifests = avro_records(StaticTable.from_metadata(result.metadata_location).current_snapshot().manifest_list)
    delete_entries = [e for m in manifests if m["content"] == 1 for e in avro_records(m["manifest_path"])[1]]
    assert delete_entries
    descriptors = _dv_descriptors(path)
    storage = open_storage(str(path))
    for entry in delete_entries:
        data_file = entry["data_file"]
        assert (data_file["content"], data_file["file_format"]) == (1, "PUFFIN")
        with open(local(data_file["file_path"]), "rb") as f:
            payload = f.read()
        assert data_file["file_size_in_bytes"] == len(payload)
        (blob,) = PuffinFile(payload).footer.blobs
        assert (blob.type, blob.snapshot_id, blob.sequence_number, blob.compression_codec) == \
            ("deletion-vector-v1", -1, -1, None)
        assert (data_file["content_offset"], data_file["content_size_in_bytes"]) == (blob.offset, blob.length)
        assert blob.properties["referenced-data-file"] == data_file["referenced_data_file"]
        (vector,) = deletion_vectors_from_puffin_file(PuffinFile(payload))
        name = data_file["referenced_data_file"].rsplit("/", 1)[-1]
        expected = read_deletion_vector(storage, descriptors[name]).tolist()
        assert vector.to_vector().to_pylist() == expected
        assert data_file["record_count"] == int(blob.properties["cardinality"]) == len(expected)
    # A re-run writes the same Puffin files again (same names, same bytes): no mismatch, same rows.
    again = convert(str(path), full=True)
    assert iceberg_rows(again.metadata_location) == delta_rows(path)


def _dv_descriptors(path: Path) -> dict[str, dict[str, Any]]:
    """Data file name -> its current deletion vector descriptor, from the Delta log."""
    out: dict[str, dict[str, Any]] = {}
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                name = action["add"]["path"].rsplit("/", 1)[-1]
                if action["add"].get("deletionVector"):
                    out[name] = action["add"]["deletionVector"]
                else:
                    out.pop(name, None)
    return out


def test_upgrade_from_v2_is_a_full_conversion_and_v3_stays(tmp_path: Path) -> None:
    path = tmp_path / "table"
    write_deltalake(str(path), batch(0, 6), partition_by=["label"])
    v2 = convert(str(path))
    assert StaticTable.from_metadata(v2.metadata_location).metadata.format_version == 2
    upgraded = convert(str(path), format_version=3)
    assert upgraded.mode == "full"
    metadata = StaticTable.from_metadata(upgraded.metadata_location).metadata
    assert metadata.format_version == 3 and "format-version" not in metadata.properties
    assert {s.snapshot_id for s in metadata.snapshots} > {v2.snapshot_id}  # the v2 history stays
    assert metadata.snapshot_by_id(v2.snapshot_id).first_row_id is None
    write_deltalake(str(path), batch(6, 3), mode="append", partition_by=["label"])
    later = convert(str(path))  # no format version asked: the table's
    assert later.mode == "incremental"
    assert StaticTable.from_metadata(later.metadata_location).metadata.format_version == 3
    assert iceberg_rows(later.metadata_location) == delta_rows(path)


def test_a_v3_table_does_not_go_back_to_v2(tmp_path: Path) -> None:
    path = tmp_path / "table"
    write_deltalake(str(path), batch(0, 6), partition_by=["label"])
    first = convert(str(path), format_version=3)
    before = sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir())
    with pytest.raises(DeltabergError, match="format version 3, which cannot go back to 2"):
        convert(str(path), format_version=2, full=True)
    assert sorted(p.name for p in (path / "_iceberg" / "metadata").iterdir()) == before
    assert convert(str(path)).metadata_location == first.metadata_location  # up to date, still v3


@pytest.mark.parametrize("version", [1, 4])
def test_unknown_format_versions_are_refused(version: int, tmp_path: Path) -> None:
    path = tmp_path / "table"
    write_deltalake(str(path), batch(0, 3))
    with pytest.raises(ValueError, match="format version must be one of"):
        convert(str(path), format_version=version)
    assert not (path / "_iceberg").exists()


def test_expiry_keeps_a_v3_table_v3(tmp_path: Path) -> None:
    path = tmp_path / "table"
    make_history(path, lambda: convert(str(path), format_version=3))
    expired = convert(str(path), full=True, retain_snapshots=1)
    metadata = StaticTable.from_metadata(expired.metadata_location).metadata
    assert metadata.format_version == 3 and len(metadata.snapshots) == 1
    assert iceberg_rows(expired.metadata_location) == delta_rows(path)
    shutil.rmtree(path / "_iceberg")  # and a fresh v3 conversion of the same table reads the same
    assert iceberg_rows(convert(str(path), format_version=3).metadata_location) == delta_rows(path)


@pytest.mark.parametrize("positions", [
    [0],
    [1, 2, 3, 1000, 65535, 65536, 70000],
    list(range(10_000, 20_000)),  # a run: a run container after run_optimize
    [5, (1 << 32) + 1, (1 << 32) + 2, (7 << 32) + 9],  # several 32-bit keys
], ids=["one", "sparse", "run", "high-keys"])
def test_dv_blob_is_the_delta_bitmap_framed_as_iceberg_says(positions: list[int]) -> None:
    """The blob: big-endian length of magic + vector, the magic, the vector, big-endian CRC-32 of magic + vector;
    the vector is Delta's RoaringBitmapArray format (read back by this project's Delta decoder) and pyiceberg's."""
    blob = dv_blob(np.array(positions, np.uint64))
    (length,) = struct.unpack(">I", blob[:4])
    body, (crc,) = blob[4:4 + length], struct.unpack(">I", blob[4 + length:])
    assert len(blob) == length + 8 and body[:4] == DV_MAGIC and crc == zlib.crc32(body)
    assert decode_roaring_bitmap_array(body).tolist() == positions
    (vector,) = deletion_vectors_from_puffin_file(PuffinFile(puffin_file(blob, "s3://b/f.parquet", len(positions))))
    assert vector.to_vector().to_pylist() == positions
