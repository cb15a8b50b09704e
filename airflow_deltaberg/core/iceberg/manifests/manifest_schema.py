"""Iceberg v2 and v3 manifest_entry and manifest_file structs, with the field ids of the table spec.

References: spec sections "Manifests" (data_file ids 100-145, map key/value ids 117-130, 137-139) and
"Manifest Lists" (ids 500-520). Field order follows the reference implementation's writers. v3 adds
first_row_id (142, row lineage), content_offset and content_size_in_bytes (144, 145: where a deletion
vector sits in its Puffin file) to data_file, and first_row_id (520) to manifest_file.
"""

from __future__ import annotations

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)


def _counts(field_id: int, name: str, key_id: int, value_id: int) -> NestedField:
    return NestedField(field_id, name, MapType(key_id, IntegerType(), value_id, LongType()), required=False)


def _bounds(field_id: int, name: str, key_id: int, value_id: int) -> NestedField:
    return NestedField(field_id, name, MapType(key_id, IntegerType(), value_id, BinaryType()), required=False)


def data_file_type(partition_type: StructType, format_version: int = 2) -> StructType:
    """The data_file struct (field id 2) for a partition struct of the manifest's spec."""
    fields = [
        NestedField(134, "content", IntegerType(), required=True),
        NestedField(100, "file_path", StringType(), required=True),
        NestedField(101, "file_format", StringType(), required=True),
        NestedField(102, "partition", partition_type, required=True),
        NestedField(103, "record_count", LongType(), required=True),
        NestedField(104, "file_size_in_bytes", LongType(), required=True),
        _counts(108, "column_sizes", 117, 118),
        _counts(109, "value_counts", 119, 120),
        _counts(110, "null_value_counts", 121, 122),
        _counts(137, "nan_value_counts", 138, 139),
        _bounds(125, "lower_bounds", 126, 127),
        _bounds(128, "upper_bounds", 129, 130),
        NestedField(131, "key_metadata", BinaryType(), required=False),
        NestedField(132, "split_offsets", ListType(133, LongType(), element_required=True), required=False),
        NestedField(135, "equality_ids", ListType(136, IntegerType(), element_required=True), required=False),
        NestedField(140, "sort_order_id", IntegerType(), required=False),
    ]
    if format_version >= 3:
        fields.append(NestedField(142, "first_row_id", LongType(), required=False))
    fields.append(NestedField(143, "referenced_data_file", StringType(), required=False))
    if format_version >= 3:
        fields += [NestedField(144, "content_offset", LongType(), required=False),
                   NestedField(145, "content_size_in_bytes", LongType(), required=False)]
    return StructType(*fields)


def manifest_entry_type(partition_type: StructType, format_version: int = 2) -> StructType:
    """The manifest_entry struct."""
    return StructType(
        NestedField(0, "status", IntegerType(), required=True),
        NestedField(1, "snapshot_id", LongType(), required=False),
        NestedField(3, "sequence_number", LongType(), required=False),
        NestedField(4, "file_sequence_number", LongType(), required=False),
        NestedField(2, "data_file", data_file_type(partition_type, format_version), required=True),
    )


FIELD_SUMMARY_TYPE = StructType(
    NestedField(509, "contains_null", BooleanType(), required=True),
    NestedField(518, "contains_nan", BooleanType(), required=False),
    NestedField(510, "lower_bound", BinaryType(), required=False),
    NestedField(511, "upper_bound", BinaryType(), required=False),
)

MANIFEST_FILE_TYPE = StructType(
    NestedField(500, "manifest_path", StringType(), required=True),
    NestedField(501, "manifest_length", LongType(), required=True),
    NestedField(502, "partition_spec_id", IntegerType(), required=True),
    NestedField(517, "content", IntegerType(), required=True),
    NestedField(515, "sequence_number", LongType(), required=True),
    NestedField(516, "min_sequence_number", LongType(), required=True),
    NestedField(503, "added_snapshot_id", LongType(), required=True),
    NestedField(504, "added_files_count", IntegerType(), required=True),
    NestedField(505, "existing_files_count", IntegerType(), required=True),
    NestedField(506, "deleted_files_count", IntegerType(), required=True),
    NestedField(512, "added_rows_count", LongType(), required=True),
    NestedField(513, "existing_rows_count", LongType(), required=True),
    NestedField(514, "deleted_rows_count", LongType(), required=True),
    NestedField(507, "partitions", ListType(508, FIELD_SUMMARY_TYPE, element_required=True), required=False),
    NestedField(519, "key_metadata", BinaryType(), required=False),
)
MANIFEST_FILE_TYPE_V3 = StructType(
    *MANIFEST_FILE_TYPE.fields,
    NestedField(520, "first_row_id", LongType(), required=False),
)


def manifest_file_type(format_version: int = 2) -> StructType:
    return MANIFEST_FILE_TYPE_V3 if format_version >= 3 else MANIFEST_FILE_TYPE
