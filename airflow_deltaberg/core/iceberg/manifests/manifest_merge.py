"""Merging small manifests of an incremental snapshot, as Iceberg's merge-append does (``ManifestMergeManager``).

Every Delta commit becomes a snapshot that adds at least one manifest; without merging, a table converted commit by
commit lists one manifest per commit, and every conversion state lists them all (quadratic bytes over the table's
life). The rules are Iceberg's, read from the table properties:

- ``commit.manifest-merge.enabled``; ``commit.manifest.target-size-bytes`` (default 8 MB, Iceberg's);
  ``commit.manifest.min-count-to-merge`` (``DEFAULT_MIN_COUNT``, not Iceberg's 100: see there).
- Data and delete manifests merge separately, each grouped by partition spec. A group is packed into bins of at
  most the target size from its oldest manifest on (Iceberg's ``packEnd``, lookback 1), so the newest bin is the
  one left short. A bin of one manifest stays; the bin holding the newest manifest (``first`` in Iceberg) merges
  only once it holds ``min-count`` manifests; any other bin of two or more merges.
- One rule of ours on top: a manifest of ``FULL_ENTRIES`` entries or more (what a full conversion writes:
  ``file_manifests.MANIFEST_ROWS``) is full and stays, and a bin holds no more entries than that. Without it, a
  table whose full conversion wrote manifests under the target size (entries of few stats) would have them all
  rewritten by its next incremental run: 10M entries for a 100-file append.
- Another: the bin holding the newest manifest merges without its oldest manifest while that one holds more than
  ``TIER_RATIO`` times the others' entries (see there).
- A merged manifest is added by the new snapshot with its sequence number. Its entries keep their data and file
  sequence numbers and snapshot ids; those the new snapshot added stay ADDED, the other live ones become EXISTING,
  and DELETED entries are kept only when the new snapshot deleted them (earlier deletes are history).
- The merged manifest's entries copy is written with it (``write_manifest_record``), so the conversion state names
  it like any other manifest and later runs find the entries they remove.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.errors import ConversionStateError
from airflow_deltaberg.core.iceberg.conversion_state import (
    ManifestRecord,
    ManifestTable,
    read_entries,
    with_first_row_ids,
    write_manifest_record,
)
from airflow_deltaberg.core.iceberg.manifests.file_manifests import MANIFEST_ROWS, SnapshotPlan, two_at_a_time
from airflow_deltaberg.core.iceberg.manifests.manifest import STATUS_ADDED, STATUS_DELETED, STATUS_EXISTING
from airflow_deltaberg.core.iceberg.publish import metadata_folder_key
from airflow_deltaberg.core.iceberg.table_properties import (
    MERGE_ENABLED,
    MIN_COUNT_TO_MERGE,
    TARGET_SIZE_BYTES,
    bool_property,
    int_property,
)
from airflow_deltaberg.core.redact import location_text
from airflow_deltaberg.core.storage import Storage

#: Iceberg's default is 100, set for writers that commit a batch of many files now and then. Here every Delta commit
#: is a snapshot adding a manifest of a few files: with 100, the current snapshot would list up to 99 small manifests
#: (a scan planner reads each one) and every conversion state up to 99 rows. With 8, a snapshot lists at most 7
#: small manifests beside the full-sized ones (within "2x a full conversion + 10"); the price is that the short bin
#: (at most the target size) is rewritten every 7 commits: a run costs a seventh of that rewrite on average.
DEFAULT_MIN_COUNT = 8
DEFAULT_TARGET_SIZE_BYTES = 8 << 20  # Iceberg's
FULL_ENTRIES = MANIFEST_ROWS
#: The short bin leaves out its oldest manifest while that one holds more than this many times the entries of the
#: others: they merge among themselves, and the big one is rewritten only once they hold an eighth of its entries.
#: Merging it every ``min-count`` commits rewrote the whole short bin each time (a table converted after each of
#: 10,000 one-file commits rewrote ~10k entries every 7th run); now a run rewrites O(entries / 8 / min-count) on
#: average, and the bin still holds at most ``min-count`` manifests.
TIER_RATIO = 8


@dataclass(frozen=True)
class MergeSettings:
    enabled: bool = True
    min_count: int = DEFAULT_MIN_COUNT
    target_bytes: int = DEFAULT_TARGET_SIZE_BYTES

    @classmethod
    def of(cls, properties: Mapping[str, Any], *, table: str) -> MergeSettings:
        """The settings the table properties give (defaults for those they do not set; TablePropertyError for a
        value that is not one). A min-count below 2 merges as 2 would (Iceberg never merges one manifest)."""
        return cls(bool_property(properties, MERGE_ENABLED, True, table=table),
                   max(2, int_property(properties, MIN_COUNT_TO_MERGE, DEFAULT_MIN_COUNT, minimum=0, table=table)),
                   int_property(properties, TARGET_SIZE_BYTES, DEFAULT_TARGET_SIZE_BYTES, minimum=1, table=table))


def merge_bins(manifests: ManifestTable, settings: MergeSettings, spec_id: int) -> list[list[int]]:
    """The bins (positions in ``manifests``, oldest first) that merge, each into one manifest. Only groups of the
    partition spec ``spec_id`` (the one new manifests are written with) are considered."""
    if not settings.enabled or len(manifests) < 2:
        return []
    content = manifests.ints("content")
    specs = manifests.ints("partition_spec_id")
    lengths = manifests.ints("manifest_length")
    entries = sum(manifests.ints(f"{kind}_files_count") for kind in ("added", "existing", "deleted"))
    out: list[list[int]] = []
    for kind in (0, 1):
        positions = np.flatnonzero(content == kind)
        if len(positions) < 2:
            continue
        first = int(positions[-1])  # the newest manifest of this content (Iceberg's first of the list)
        group = positions[(specs[positions] == spec_id) & (entries[positions] < FULL_ENTRIES)]
        for bin_ in _pack(group.tolist(), lengths, entries, settings.target_bytes):
            if len(bin_) < 2 or (first in bin_ and len(bin_) < settings.min_count):
                continue
            if first in bin_ and len(bin_) > 2 and entries[bin_[0]] > TIER_RATIO * entries[bin_[1:]].sum():
                bin_ = bin_[1:]  # its big oldest manifest waits until the others hold an eighth of its entries
            out.append(bin_)
    return out


def _pack(positions: list[int], lengths: np.ndarray, entries: np.ndarray, target: int) -> list[list[int]]:
    """Greedy bins of at most ``target`` bytes and ``FULL_ENTRIES`` entries, from the oldest manifest on (an
    oversized one is a bin alone)."""
    bins: list[list[int]] = []
    weight = count = 0
    for position in positions:
        size, n = int(lengths[position]), int(entries[position])
        if bins and weight + size <= target and count + n <= FULL_ENTRIES:
            bins[-1].append(position)
            weight, count = weight + size, count + n
        else:
            bins.append([position])
            weight, count = size, n
    return bins


def merge_manifests(storage: Storage, manifests: ManifestTable, plan: SnapshotPlan,
                    settings: MergeSettings) -> ManifestTable:
    """``manifests`` (those of the snapshot ``plan`` builds) with Iceberg's merge rules applied (module docstring)."""
    bins = merge_bins(manifests, settings, plan.spec.spec_id)
    if not bins:
        return manifests
    merged = two_at_a_time(lambda bin_: _merged(storage, manifests.records(bin_), plan), bins)
    kept = [(bin_, record) for bin_, record in zip(bins, merged, strict=True) if record is not None]
    if not kept:
        return manifests
    replaced = {bin_[0]: record for bin_, record in kept}
    dropped = [p for bin_, _ in kept for p in bin_[1:]]
    # The manifests this snapshot wrote and merged at once no snapshot lists: deleted now, else nothing would
    # (expiry deletes the files of the snapshots it drops).
    for record in manifests.records([p for bin_, _ in kept for p in bin_]):
        manifest_key = metadata_folder_key(storage, record.info.manifest_path)
        if record.info.added_snapshot_id == plan.snapshot_id and manifest_key is not None:
            storage.delete(manifest_key)
            storage.delete(record.entries_key)
    return manifests.with_changes(replaced).without_positions(dropped)


def _merged(storage: Storage, records: list[ManifestRecord], plan: SnapshotPlan) -> ManifestRecord | None:
    """One manifest holding the entries of ``records`` as Iceberg's merge keeps them; None when their entry copies
    cannot be joined: then they stay as they are."""
    content = records[0].info.content
    tables = []
    for record in records:
        entries = read_entries(storage, record)
        if plan.format_version >= 3 and content == 0:
            entries = with_first_row_ids(entries, record.info.first_row_id)  # each file keeps its row ids
        tables.append(_inherited(entries, record))
    try:
        # One chunk: the writer encodes (and compresses) a chunk at a time, and a bin's manifests are mostly of one
        # entry each.
        entries = pa.concat_tables(tables, promote_options="default").combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    status = np.asarray(entries.column("status").combine_chunks(), np.int32)
    snapshot = np.asarray(entries.column("snapshot_id").combine_chunks(), np.int64)
    ours = snapshot == plan.snapshot_id
    keep = (status != STATUS_DELETED) | ours
    status = np.where((status == STATUS_ADDED) & ~ours, STATUS_EXISTING, status)
    entries = entries.set_column(entries.schema.get_field_index("status"), "status",
                                 pa.array(status, pa.int32())).filter(pa.array(keep))
    return write_manifest_record(storage, entries, plan.converted.schema, plan.spec, plan.snapshot_id,
                                 plan.sequence_number, content="deletes" if content else "data",
                                 format_version=plan.format_version, attempt=plan.attempt)


def _inherited(entries: pa.Table, record: ManifestRecord) -> pa.Table:
    """``entries`` with the snapshot id and sequence numbers they inherit from their manifest written out (Iceberg's
    inheritance: a null there is the manifest's), as an EXISTING entry must carry them."""
    inherited = {"snapshot_id": record.info.added_snapshot_id, "sequence_number": record.info.sequence_number,
                 "file_sequence_number": record.info.sequence_number}
    for name, value in inherited.items():
        column = entries.column(name) if name in entries.column_names else pa.nulls(entries.num_rows, pa.int64())
        if column.null_count:
            if value is None:
                raise ConversionStateError(f"the manifest {location_text(record.info.manifest_path)} has no {name} "
                                           "for its entries to inherit")
            column = pc.fill_null(column, pa.scalar(value, pa.int64()))
        if name in entries.column_names:
            entries = entries.set_column(entries.schema.get_field_index(name), name, column)
        else:
            entries = entries.append_column(name, column)
    return entries
