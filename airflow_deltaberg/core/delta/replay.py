"""Action reconciliation: a log segment folded into the table state, as the protocol says."""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.delta.actions import (
    ActionBatch,
    partition_columns_of,
    read_checkpoint_stats,
    read_json_actions,
    read_parquet_checkpoint_part,
)
from airflow_deltaberg.core.delta.log_segment import LOG_DIR, LogSegment, commit_key
from airflow_deltaberg.core.delta.models import DomainMetadata, Metadata, Protocol, Transaction
from airflow_deltaberg.core.errors import CorruptLogError
from airflow_deltaberg.core.storage import FileEntry, Storage

log = logging.getLogger(__name__)

SIDECAR_DIR = f"{LOG_DIR}/_sidecars"


@dataclass
class CheckpointStats:
    """Reads, on demand, the stats of the checkpoint's add actions (the bulk of a checkpoint's bytes).

    ``parts`` are the checkpoint's sources in read order, with how many adds each holds; JSON sources
    already carry their stats in the file table and contribute nulls here.
    """

    storage: Storage
    table: str
    version: int
    parts: list[tuple[FileEntry | None, int, bool]]  # (parquet file or None for JSON, adds, is_sidecar)

    def load(self) -> tuple[list[pa.Array], list[pa.Array] | None]:
        raw: list[pa.Array] = []
        parsed: list[pa.Array] = []
        any_parsed = False
        for entry, n_adds, sidecar in self.parts:
            if entry is None:
                raw.append(pa.nulls(n_adds, pa.string()))
                parsed.append(None)  # type: ignore[arg-type]
                continue
            part_raw, part_parsed = read_checkpoint_stats(self.storage, self.table, self.version, entry,
                                                          sidecar=sidecar)
            if sum(len(c) for c in part_raw) != n_adds:
                raise CorruptLogError("the checkpoint changed while it was read", table=self.table,
                                      version=self.version, file=self.storage.uri(entry.key))
            raw.extend(part_raw)
            if part_parsed is None:
                parsed.extend([None] * len(part_raw))  # type: ignore[list-item]
            else:
                any_parsed = True
                parsed.extend(part_parsed)
        return raw, (parsed if any_parsed else None)


@dataclass
class TableState:
    """The reconciled state of a table at one version."""

    protocol: Protocol
    metadata: Metadata
    adds: pa.Table  # FILE_ACTIONS_SCHEMA rows that are live files, in log order
    removes: pa.Table  # tombstones
    transactions: dict[str, Transaction] = field(default_factory=dict)
    domain_metadata: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_info: dict[str, Any] | None = None  # commitInfo of the segment's last commit, when read
    # Stats of adds that come from a Parquet checkpoint are read lazily: ``checkpoint_stats`` reads them
    # for every checkpoint add, ``checkpoint_add_index`` says which one each row of ``adds`` is (-1: none).
    checkpoint_stats: CheckpointStats | None = None
    checkpoint_add_index: np.ndarray | None = None


def read_checkpoint(storage: Storage, table: str, segment: LogSegment) -> tuple[ActionBatch, CheckpointStats]:
    """All actions of the segment's checkpoint, sidecars included, with their stats left to read later."""
    cp = segment.checkpoint
    assert cp is not None
    sources: list[tuple[FileEntry | None, int, bool]] = []
    if cp.is_json:
        batch = read_json_actions(storage, table, [(cp.version, cp.files[0])])
        sources.append((None, _count_adds(batch), False))
    else:
        parts = []
        for entry in cp.files:
            part = read_parquet_checkpoint_part(storage, table, cp.version, entry)
            sources.append((entry, _count_adds(part), False))
            parts.append(part)
        batch = _concat_batches(parts)
    sidecars = [body for _, name, body in batch.other_actions if name == "sidecar"]
    if sidecars:
        parts = [batch]
        for body in sidecars:
            entry = _sidecar_entry(body)
            part = read_parquet_checkpoint_part(storage, table, cp.version, entry, sidecar=True)
            sources.append((entry, _count_adds(part), True))
            parts.append(part)
        batch = _concat_batches(parts)
    return batch, CheckpointStats(storage, table, cp.version, sources)


def _count_adds(batch: ActionBatch) -> int:
    return int(pc.sum(batch.file_actions.column("is_add")).as_py() or 0)


def _sidecar_entry(body: dict[str, Any]) -> FileEntry:
    # Sidecars always live in _delta_log/_sidecars; writers are encouraged to store only the name.
    name = posixpath.basename(unquote(body["path"]))
    return FileEntry(f"{SIDECAR_DIR}/{name}", int(body.get("sizeInBytes") or 0), int(body.get("modificationTime") or 0))


def _concat_batches(batches: list[ActionBatch]) -> ActionBatch:
    tables = [b.file_actions for b in batches]
    stats = [t.column("stats_parsed") if "stats_parsed" in t.column_names else None for t in tables]
    plain = [t.drop_columns(["stats_parsed"]) if "stats_parsed" in t.column_names else t for t in tables]
    merged = pa.concat_tables(plain)
    if any(s is not None for s in stats):
        typ = next(s.type for s in stats if s is not None)
        cols = []
        for t, s in zip(tables, stats, strict=True):
            if s is None or s.type != typ:
                s = pa.nulls(t.num_rows, typ)
            cols.append(s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s)
        merged = merged.append_column("stats_parsed", pa.concat_arrays(cols) if cols else pa.nulls(0, typ))
    other = [a for b in batches for a in b.other_actions]
    return ActionBatch(merged, other)


def replay(storage: Storage, table: str, segment: LogSegment) -> TableState:
    """Fold the checkpoint and commits of ``segment`` into a TableState."""
    batches: list[ActionBatch] = []
    n_checkpoint_rows = 0
    checkpoint_stats: CheckpointStats | None = None
    if segment.checkpoint is not None:
        cp_batch, checkpoint_stats = read_checkpoint(storage, table, segment)
        files = cp_batch.file_actions
        if "stats_parsed" in files.column_names:
            files = files.drop_columns(["stats_parsed"])
        n_checkpoint_rows = files.num_rows
        batches.append(ActionBatch(files, cp_batch.other_actions))
    known = partition_columns_of(batches[0].other_actions) if batches else None
    for files, is_compaction in _commit_file_runs(segment):
        batch = read_json_actions(storage, table, files, partition_columns=known)
        if is_compaction:
            # Log compactions written by Delta may list a logical file more than once (e.g. a remove and
            # then the add it cancels); the first occurrence is the reconciled one (delta-kernel-rs
            # keeps the first as well, and only that matches the replay of the commits themselves).
            reverse = from_numpy(np.arange(batch.file_actions.num_rows - 1, -1, -1, dtype=np.int64))
            batch = ActionBatch(batch.file_actions.take(reverse), batch.other_actions)
        batches.append(batch)

    other = [a for b in batches for a in b.other_actions]
    protocol, metadata, txns, domains, commit_info = _reconcile_other(storage, table, other, segment)
    if protocol is None or metadata is None:
        missing = "protocol" if protocol is None else "metaData"
        raise CorruptLogError(
            f"no {missing} action in the log up to this version", table=table, version=segment.version,
            file=storage.uri(segment.checkpoint.files[0].key if segment.checkpoint else LOG_DIR),
        )
    all_files = pa.concat_tables([b.file_actions for b in batches])
    if all_files.num_rows > n_checkpoint_rows:
        keep = _newest_per_logical_file(all_files)
        # keep is ascending: a mask filter gives the same rows in the same order, chunk by chunk (no
        # concatenation of multi-GB string columns as take would do).
        mask = np.zeros(all_files.num_rows, dtype=bool)
        mask[to_numpy(keep)] = True
        all_files = all_files.filter(from_numpy(mask))
        source_rows = keep
    else:
        # A checkpoint alone is already reconciled: one row per logical file.
        source_rows = None
    is_add = all_files.column("is_add")
    adds = all_files.filter(is_add)
    removes = all_files.filter(pc.invert(is_add))
    add_index = None
    if checkpoint_stats is not None:
        # Which checkpoint add each live file is: the checkpoint rows are the first rows of all_files.
        cp_is_add = to_numpy(batches[0].file_actions.column("is_add"))
        ordinal = np.cumsum(cp_is_add) - 1
        if source_rows is None:
            add_index = np.arange(int(cp_is_add.sum()))
        else:
            add_rows = to_numpy(source_rows)[to_numpy(is_add)]
            from_cp = add_rows < n_checkpoint_rows
            add_index = np.where(from_cp, ordinal[np.where(from_cp, add_rows, 0)], -1)
    return TableState(protocol, metadata, adds, removes, txns, domains, commit_info, checkpoint_stats, add_index)


def _commit_file_runs(segment: LogSegment) -> list[tuple[list[tuple[int, FileEntry]], bool]]:
    """Commits of the segment in order, grouped into runs of plain commits, with each log compaction
    standing alone in place of the commits it covers."""
    runs: list[tuple[list[tuple[int, FileEntry]], bool]] = []
    plain: list[tuple[int, FileEntry]] = []
    compactions = {c.start: c for c in segment.compactions}
    skip_until = -1
    for version, entry in segment.commits:
        if version <= skip_until:
            continue
        c = compactions.get(version)
        if c is None:
            plain.append((version, entry))
            continue
        if plain:
            runs.append((plain, False))
            plain = []
        runs.append(([(c.end, c.file)], True))
        skip_until = c.end
    if plain or not runs:
        runs.append((plain, False))
    return runs


def _newest_per_logical_file(files: pa.Table) -> pa.Array:
    """Row indices of the newest action for each (path, deletionVector.uniqueId), in log order."""
    path = files.column("path").combine_chunks()
    dv = files.column("deletionVector").combine_chunks()
    if dv.null_count == len(dv):
        key = path
    else:
        offset = dv.field("offset")
        offset_str = pc.if_else(
            offset.is_valid(), pc.binary_join_element_wise("@", offset.cast(pa.string()), ""), ""
        )
        uid = pc.binary_join_element_wise(dv.field("storageType"), dv.field("pathOrInlineDv"), offset_str, "")
        uid = pc.if_else(dv.is_valid(), uid, "")
        key = pc.binary_join_element_wise(path, uid, "\x00")
    # Hash the keys to group ids, then keep the last row of each group. (No group_by: it pulls in
    # pyarrow.dataset, whose import costs more than the whole replay of a mid-size log.)
    group = to_numpy(pc.index_in(key, value_set=pc.unique(key)))
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    last = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
    return from_numpy(np.sort(order[last]).astype(np.int64))


def _source_file(storage: Storage, segment: LogSegment, version: int) -> str:
    """The log file an action of ``version`` was read from, for messages."""
    if segment.checkpoint is not None and version == segment.checkpoint.version:
        return storage.uri(segment.checkpoint.files[0].key)
    for c in segment.compactions:
        if c.end == version:
            return storage.uri(c.file.key)
    return storage.uri(commit_key(version))


def _reconcile_other(
    storage: Storage, table: str, actions: list[tuple[int, str, dict[str, Any]]], segment: LogSegment
) -> tuple[
    Protocol | None, Metadata | None, dict[str, Transaction], dict[str, DomainMetadata], dict[str, Any] | None
]:
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, Transaction] = {}
    domains: dict[str, DomainMetadata] = {}
    commit_info: dict[str, Any] | None = None
    for version, name, body in actions:
        try:
            if name == "protocol":
                protocol = Protocol.from_action(body)
            elif name == "metaData":
                metadata = Metadata.from_action(body)
                names = set(metadata.schema.names)  # parse now, so that a bad schemaString names its file
                unknown = [c for c in metadata.partition_columns if c not in names]
                if unknown:
                    raise ValueError(f"partition column(s) {', '.join(unknown)} are not in the schema")
            elif name == "txn":
                txns[body["appId"]] = Transaction(body["appId"], int(body["version"]), body.get("lastUpdated"))
            elif name == "domainMetadata":
                if body.get("removed"):
                    domains.pop(body["domain"], None)
                else:
                    domains[body["domain"]] = DomainMetadata(body["domain"], body.get("configuration", ""), False)
            elif name == "commitInfo" and version == segment.version:
                commit_info = body
        except (KeyError, ValueError, TypeError) as exc:
            detail = f"lacks the field {exc.args[0]!r}" if isinstance(exc, KeyError) else f"is invalid: {exc}"
            raise CorruptLogError(
                f"the {name} action {detail}", table=table, version=version,
                file=_source_file(storage, segment, version),
            ) from exc
    return protocol, metadata, txns, domains, commit_info
