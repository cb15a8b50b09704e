"""Publishing one Iceberg snapshot of a conversion: the conversion state, manifest list and metadata file written
after its manifests (``commit_snapshot``), and the cleanup of an attempt that fails before its metadata file is
published (``discarded_unless_published``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
from pyiceberg.table.snapshots import Operation

from airflow_deltaberg.core.errors import CorruptLogError, StorageTimeoutError
from airflow_deltaberg.core.iceberg.attempt_cleanup import attempt_age_ms
from airflow_deltaberg.core.iceberg.conversion_state import ConversionState, ManifestTable, attempt_keys, write_state
from airflow_deltaberg.core.iceberg.convert_plan import IcebergBase, converted_mapping_mode, resets_history
from airflow_deltaberg.core.iceberg.earlier_histories import START_MARKERS, earlier_histories_gone, stamped_start
from airflow_deltaberg.core.iceberg.manifests.file_manifests import SnapshotPlan
from airflow_deltaberg.core.iceberg.manifests.manifest import (
    assign_first_row_ids,
    assign_sequence_numbers,
    encode_manifest_list_rows,
    manifest_list_columns,
    write_manifest_list_rows,
)
from airflow_deltaberg.core.iceberg.publish import ICEBERG_DIR, METADATA_DIR, metadata_key, publish_metadata
from airflow_deltaberg.core.iceberg.schema import NAME_MAPPING_PROPERTY
from airflow_deltaberg.core.iceberg.schema_history import history_name_mapping
from airflow_deltaberg.core.iceberg.table_identity import FINGERPRINT, commit_fingerprint
from airflow_deltaberg.core.iceberg.table_metadata import (
    DELTA_COLUMN_MAPPING_MODE,
    RowLineage,
    SnapshotSpec,
    build_metadata,
    next_row_id,
)
from airflow_deltaberg.core.iceberg.table_properties import (
    DEFAULT_DELETE_AFTER_COMMIT,
    DEFAULT_PREVIOUS_VERSIONS,
    DELETE_AFTER_COMMIT,
    PREVIOUS_VERSIONS_MAX,
)
from airflow_deltaberg.core.storage import Storage

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1

#: The metadata-file properties a table gets when it has none (``table_properties``): kept ones are honoured.
#: Older metadata files are deleted once every pointer has moved on, by this converter for its own files and by the
#: catalogs for theirs.
METADATA_FILE_DEFAULTS = {PREVIOUS_VERSIONS_MAX: str(DEFAULT_PREVIOUS_VERSIONS),
                          DELETE_AFTER_COMMIT: str(DEFAULT_DELETE_AFTER_COMMIT).lower()}


def commit_snapshot(storage: Storage, base: IcebergBase, plan: SnapshotPlan, manifests: ManifestTable,
                     operation: Operation, summary: dict[str, str]) -> IcebergBase:
    """Write the state, manifest list and metadata of one new Iceberg snapshot, then publish it. Only the
    manifest-list rows of the manifests new in it are encoded; the others are copied as they are."""
    too_big = sorted(name for name, value in summary.items() if int(value) > LONG_MAX)
    if too_big:
        # Each file's numRecords fits a long, their sum does not: some numRecords is wrong (Iceberg keeps the totals
        # in longs). The attempt's manifests are taken back by discarded_unless_published.
        raise CorruptLogError(f"the live files' numRecords add up to more than a long holds ({', '.join(too_big)}); "
                              "the numRecords of some data file is wrong", table=plan.table,
                              version=plan.delta_version)
    prev = base.published.metadata if base.published else None
    positions = manifests.unencoded(plan.format_version)
    records = manifests.records(positions)
    infos = [assign_sequence_numbers(r.info, plan.snapshot_id, plan.sequence_number) for r in records]
    lineage = None
    if plan.format_version >= 3:
        # Row lineage: the data manifests new in this snapshot take row ids from the table's next-row-id on (the
        # manifests it keeps have theirs).
        first_row_id = next_row_id(prev)
        infos, next_id = assign_first_row_ids(infos, first_row_id)
        lineage = RowLineage(first_row_id, next_id)
    rows = encode_manifest_list_rows(manifest_list_columns(infos, plan.format_version), len(infos),
                                     plan.format_version)
    manifests = manifests.encoded({p: replace(r, info=info) for p, r, info in zip(positions, records, infos,
                                                                                  strict=True)},
                                  rows, plan.format_version)
    state = ConversionState(plan.delta_version, plan.metadata, manifests, plan.protocol)
    list_key = f"{METADATA_DIR}/snap-{plan.snapshot_id}-1-{plan.attempt}.avro"
    write_state(storage, list_key, state)
    fs, list_path = storage.arrow_path(list_key)
    with storage.typed_errors("write", list_key):
        write_manifest_list_rows(list_path, manifests.list_rows, plan.snapshot_id,
                                 prev.current_snapshot_id if prev else None, plan.sequence_number, filesystem=fs,
                                 format_version=plan.format_version,
                                 first_row_id=lineage.first_row_id if lineage else None)
    mode = plan.metadata.column_mapping_mode
    reset = resets_history(base, plan.metadata)
    # Earlier snapshots read their own schemas' columns by name too (schema_history).
    name_mapping = history_name_mapping(plan.converted.name_mapping, None if reset else prev, plan.converted.schema)
    kept = prev.properties if prev else {}
    metadata_properties = {**{k: v for k, v in METADATA_FILE_DEFAULTS.items() if k not in kept},
                           NAME_MAPPING_PROPERTY: name_mapping.model_dump_json(),
                           DELTA_COLUMN_MAPPING_MODE: mode,
                           FINGERPRINT: commit_fingerprint(storage, plan.delta_version),
                           **plan.converted.properties, **plan.table_properties}
    now_ms = int(time.time() * 1000)
    metadata_properties.update(stamped_start(plan.table_properties, now_ms))  # a new history's start: now
    # Once the earlier histories' files are gone, nothing more marks them: later runs do not look for them.
    gone = base.published is not None and earlier_histories_gone(
        storage, base.published, now_ms - attempt_age_ms(base.published), table=plan.table)
    if reset:
        log.info("%s: column mapping mode %s -> %s at Delta version %s: the Iceberg schemas, partition specs and "
                 "snapshots start afresh (column ids change)", plan.table, converted_mapping_mode(base), mode,
                 plan.delta_version)
    metadata = build_metadata(
        previous=prev,
        previous_location=base.published.location if base.published else None,
        location=storage.uri(ICEBERG_DIR),
        delta_table_id=plan.metadata.id,
        schema=plan.converted.schema,
        last_column_id=plan.converted.last_column_id,
        spec=plan.spec,
        properties=metadata_properties,
        snapshot=SnapshotSpec(plan.snapshot_id, plan.delta_version, plan.timestamp_ms, operation,
                              storage.uri(list_key), summary),
        now_ms=now_ms,
        reset_history=reset,
        format_version=plan.format_version,
        lineage=lineage,
        dropped_properties=START_MARKERS if gone else (),
    )
    published = publish_metadata(storage, base.next_version, metadata)
    return IcebergBase(published, state)


def snapshot_summary(manifests: ManifestTable, snapshot_id: int) -> dict[str, str]:
    """Snapshot summary counts from the manifest list rows (Iceberg spec, "Snapshot Summary")."""
    content = manifests.ints("content")
    new = manifests.ints("added_snapshot_id") == snapshot_id

    def count(name: str, rows: np.ndarray) -> int:
        return sum(manifests.ints(name)[rows].tolist())  # Python ints: a sum beyond a long is caught, not wrapped

    def total(of: int, what: str) -> int:
        return count(f"added_{what}_count", content == of) + count(f"existing_{what}_count", content == of)

    def changed(of: int, kind: str, what: str) -> int:
        return count(f"{kind}_{what}_count", (content == of) & new)

    return {
        "added-data-files": str(changed(0, "added", "files")),
        "added-records": str(changed(0, "added", "rows")),
        "deleted-data-files": str(changed(0, "deleted", "files")),
        "deleted-records": str(changed(0, "deleted", "rows")),
        "added-delete-files": str(changed(1, "added", "files")),
        "added-position-deletes": str(changed(1, "added", "rows")),
        "removed-delete-files": str(changed(1, "deleted", "files")),
        "removed-position-deletes": str(changed(1, "deleted", "rows")),
        "total-data-files": str(total(0, "files")),
        "total-records": str(total(0, "rows")),
        "total-delete-files": str(total(1, "files")),
        "total-position-deletes": str(total(1, "rows")),
        "total-equality-deletes": "0",
    }


@contextmanager
def discarded_unless_published(storage: Storage, base: IcebergBase, plan: SnapshotPlan) -> Iterator[None]:
    """Run one attempt at the snapshot of ``plan`` on top of ``base``: when it fails before its metadata file is
    published, the files it wrote (manifests, entry copies, manifest list, state) are deleted, so that a refused
    or failed conversion leaves nothing behind. Once the metadata file names them they stay, whatever fails next.
    So do they after a storage call given up on at its bound: that write may still land (a metadata file naming
    them); ``attempt_cleanup`` removes them later if it never does."""
    try:
        yield
    except StorageTimeoutError:
        log.warning("%s: a storage call of conversion attempt %s did not end within its bound; its files stay (a "
                    "write given up on may still land)", plan.table, plan.attempt)
        raise
    except BaseException:
        if not _published_by(storage, base.next_version, plan.attempt):
            try:
                for key in attempt_keys(storage, plan.attempt):
                    storage.delete(key)
            except Exception as cleanup:  # noqa: BLE001 - the attempt's own error is the one to report
                log.warning("%s: could not delete the files of a failed conversion attempt %s: %s", plan.table,
                            plan.attempt, cleanup)
        raise


def _published_by(storage: Storage, version: int, attempt: str) -> bool:
    """Whether metadata file ``version`` exists and is this attempt's (it names the attempt's manifest list)."""
    try:
        return attempt.encode() in storage.read(metadata_key(version))
    except FileNotFoundError:
        return False
