"""Action reconciliation: a log segment folded into the table state, as the protocol says."""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_deltaberg.core.arrow_util import from_numpy, to_numpy
from airflow_deltaberg.core.delta.file_checks.file_tables import dv_unique_ids, logical_keys
from airflow_deltaberg.core.delta.log.actions import ActionBatch, check_one_protocol_and_metadata, partition_columns_of
from airflow_deltaberg.core.delta.log.checkpoint_actions import iter_checkpoint_stats, read_parquet_checkpoint_part
from airflow_deltaberg.core.delta.log.commit_actions import read_json_actions
from airflow_deltaberg.core.delta.log.log_segment import LOG_DIR, LogSegment, commit_key
from airflow_deltaberg.core.delta.models import DomainMetadata, Metadata, Protocol, Transaction, is_int
from airflow_deltaberg.core.delta.partition_codec import partition_keys_and_rows, rows_without_key
from airflow_deltaberg.core.delta.paths import PathScan, data_file_identities, refuse_invalid_paths, scan_paths
from airflow_deltaberg.core.delta.schema import changed_column_id, holds_type, unmapped_column
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

    def iter_chunks(self, target: pa.StructType, parse_json: Callable[[pa.Array], pa.Array]) -> Iterator[pa.Array]:
        """The stats of every checkpoint add as ``target``, in order, a chunk at a time (see
        iter_checkpoint_stats)."""
        for entry, n_adds, sidecar in self.parts:
            if entry is None:
                yield pa.nulls(n_adds, target)
                continue
            seen = 0
            for chunk in iter_checkpoint_stats(self.storage, self.table, self.version, entry, target, parse_json,
                                               sidecar=sidecar):
                seen += len(chunk)
                yield chunk
            if seen != n_adds:
                raise CorruptLogError("the checkpoint changed while it was read", table=self.table,
                                      version=self.version, file=self.storage.uri(entry.key))


@dataclass
class TableState:
    """The reconciled state of a table at one version."""

    protocol: Protocol
    metadata: Metadata
    adds: pa.Table  # FILE_CHANGES_SCHEMA rows that are live files, in log order
    removes: pa.Table  # tombstones
    transactions: dict[str, Transaction] = field(default_factory=dict)
    domain_metadata: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_info: dict[str, Any] | None = None  # commitInfo of the segment's last commit, when read
    # Stats of adds that come from a Parquet checkpoint are read lazily: ``checkpoint_stats`` reads them
    # for every checkpoint add, ``checkpoint_add_index`` says which one each row of ``adds`` is (-1: none).
    checkpoint_stats: CheckpointStats | None = None
    checkpoint_add_index: np.ndarray | None = None
    # (version, log file) of the protocol and of the metaData in force.
    protocol_defined_in: tuple[int, str] | None = None
    metadata_defined_in: tuple[int, str] | None = None

    @property
    def defined_in(self) -> tuple[int, str] | None:
        """(version, log file) of the later of the protocol and metaData in force: where the table was last
        defined."""
        found = [d for d in (self.protocol_defined_in, self.metadata_defined_in) if d is not None]
        return max(found, key=lambda d: d[0]) if found else None


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
            entry = _sidecar_entry(storage, table, segment, body)
            part = read_parquet_checkpoint_part(storage, table, cp.version, entry, sidecar=True)
            sources.append((entry, _count_adds(part), True))
            parts.append(part)
        batch = _concat_batches(parts)
    return batch, CheckpointStats(storage, table, cp.version, sources)


def _count_adds(batch: ActionBatch) -> int:
    return int(pc.sum(batch.file_actions.column("is_add")).as_py() or 0)


def _sidecar_entry(storage: Storage, table: str, segment: LogSegment, body: dict[str, Any]) -> FileEntry:
    path, size, mtime = body.get("path"), body.get("sizeInBytes") or 0, body.get("modificationTime") or 0
    if not isinstance(path, str) or not path or not is_int(size) or not is_int(mtime):
        checkpoint = segment.checkpoint
        assert checkpoint is not None
        raise CorruptLogError(
            f"a sidecar action needs a path, and integers for sizeInBytes and modificationTime: {body}"[:300],
            table=table, version=checkpoint.version, file=storage.uri(checkpoint.files[0].key),
        )
    # Sidecars always live in _delta_log/_sidecars; writers are encouraged to store only the name.
    return FileEntry(f"{SIDECAR_DIR}/{posixpath.basename(unquote(path))}", size, mtime)


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
    # Log compactions are not read: the segment always has every commit they cover, and a compaction that
    # disagrees with its commits (Delta's own may hold a remove and then the add it cancels) would change the
    # state, while the commits cost little more to read.
    batches.append(read_json_actions(storage, table, list(segment.commits), partition_columns=known))

    other = [a for b in batches for a in b.other_actions]
    protocol, metadata, txns, domains, commit_info, protocol_in, metadata_in = _reconcile_other(storage, table, other,
                                                                                               segment)
    if protocol is None or metadata is None:
        missing = "protocol" if protocol is None else "metaData"
        raise CorruptLogError(
            f"no {missing} action in the log up to this version", table=table, version=segment.version,
            file=storage.uri(segment.checkpoint.files[0].key if segment.checkpoint else LOG_DIR),
        )
    all_files = pa.concat_tables([b.file_actions for b in batches])
    source_file = partial(_source_file, storage, segment)
    commit_rows = all_files.slice(n_checkpoint_rows)
    # The paths as logged are the reconciliation key (see file_tables.logical_keys).
    # A checkpoint is already reconciled (one row per logical file): only keys the commits touch can repeat.
    keep = None
    if commit_rows.num_rows:
        commit_paths = pc.dictionary_encode(_combined(commit_rows.column("path")))
        refuse_repeated_file_actions(commit_rows, table, source_file, commit_paths)
        keep = _newest_per_logical_file(all_files, n_checkpoint_rows, commit_paths)
    if keep is not None:
        # keep is ascending: a mask filter gives the same rows in the same order, chunk by chunk (no
        # concatenation of multi-GB string columns as take would do).
        mask = np.zeros(all_files.num_rows, dtype=bool)
        mask[keep] = True
        all_files = all_files.filter(from_numpy(mask))
    scan = scan_paths(all_files.column("path"))
    refuse_invalid_paths(all_files, table, source_file, scan)
    is_add = all_files.column("is_add")
    is_add_np = to_numpy(is_add)
    if is_add_np.all():
        adds, removes = all_files, all_files.slice(0, 0)
    else:
        adds = all_files.filter(is_add)
        removes = all_files.filter(pc.invert(is_add))
        scan = scan.of_rows(is_add_np)
    refuse_file_live_twice(adds, table, source_file, scan)
    refuse_missing_partition_values(adds, metadata, table, source_file)
    add_index = None
    if checkpoint_stats is not None:
        # Which checkpoint add each live file is: the checkpoint rows are the first rows of all_files.
        cp_is_add = to_numpy(batches[0].file_actions.column("is_add"))
        ordinal = np.cumsum(cp_is_add) - 1
        if keep is None and all_files.num_rows == n_checkpoint_rows:
            add_index = np.arange(int(cp_is_add.sum()))
        else:
            rows = keep if keep is not None else np.arange(all_files.num_rows)
            add_rows = rows[is_add_np]
            from_cp = add_rows < n_checkpoint_rows  # none when the checkpoint has no file actions
            add_index = np.full(len(add_rows), -1, dtype=np.int64)
            add_index[from_cp] = ordinal[add_rows[from_cp]]
    return TableState(protocol, metadata, adds, removes, txns, domains, commit_info, checkpoint_stats, add_index,
                      protocol_in, metadata_in)


def _newest_per_logical_file(files: pa.Table, n_reconciled: int,
                             commit_paths: pa.DictionaryArray) -> np.ndarray | None:
    """Row indices (ascending) of the newest action for each (path, deletionVector.uniqueId), or None when
    that is every row. The first ``n_reconciled`` rows (a checkpoint) hold each key at most once;
    ``commit_paths`` are the dictionary-encoded path keys of the other rows."""
    head_files, tail_files = files.slice(0, n_reconciled), files.slice(n_reconciled)
    # The keys of the checkpoint and of the commits are built alike: with the deletion vector's id as soon as one
    # side has a deletion vector (a path alone never equals a path joined with an id).
    with_dv = _has_dv(head_files) or _has_dv(tail_files)
    if not n_reconciled:
        return _last_of_each_key(_combined(logical_keys(tail_files)) if with_dv else commit_paths)
    # Only checkpoint rows whose key the commits repeat can be superseded: look those up instead of hashing
    # every checkpoint key.
    tail = _combined(logical_keys(tail_files) if with_dv else tail_files.column("path"))
    head = logical_keys(head_files) if with_dv else head_files.column("path")
    hit = np.flatnonzero(to_numpy(pc.is_in(head, value_set=pc.unique(tail))))
    candidates = np.concatenate([hit, np.arange(n_reconciled, files.num_rows)])
    kept = _last_of_each_key(pa.concat_arrays([_combined(head.take(from_numpy(hit))), tail]))
    if kept is None:
        return None
    keep = np.ones(files.num_rows, dtype=bool)
    keep[candidates] = False
    keep[candidates[kept]] = True
    return np.flatnonzero(keep)


def _combined(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _has_dv(files: pa.Table) -> bool:
    dv = files.column("deletionVector")
    return dv.null_count < len(dv)


def _last_of_each_key(key: pa.Array | pa.DictionaryArray) -> np.ndarray | None:
    """Positions (ascending) of the last occurrence of each key (or of each dictionary-encoded key), or None when
    no key repeats."""
    # Hash the keys to group ids in one pass. (No group_by: it pulls in pyarrow.dataset, whose import
    # costs more than the whole replay of a mid-size log.)
    encoded = key if isinstance(key, pa.DictionaryArray) else pc.dictionary_encode(key)
    if len(encoded.dictionary) == len(key):
        return None
    group = to_numpy(encoded.indices)
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    last = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
    return np.sort(order[last]).astype(np.int64)


def refuse_repeated_file_actions(files: pa.Table, table: str, source_file: Callable[[int], str],
                                 paths: pa.DictionaryArray | None = None) -> None:
    """Raise CorruptLogError for a commit holding two adds, or two removes, of one path (``files``: the
    FILE_CHANGES_SCHEMA rows of commits; ``paths``: their dictionary-encoded path keys, when known).

    The protocol (Action Reconciliation): "a valid version is restricted to contain at most one file action of
    the same type (i.e. add/remove) for any one combination of path and dvId. Moreover, for simplicity it is
    required that there is at most one file action of the same type for any path (regardless of dvId)." The
    actions of a commit have no order, so which of two adds is in force is undefined. Costs one hash of the
    paths, and nothing more when no path repeats in the rows at all.
    """
    if not files.num_rows:
        return
    if paths is None:
        paths = pc.dictionary_encode(_combined(files.column("path")))
    n_keys = len(paths.dictionary)
    if n_keys == files.num_rows:
        return
    codes = to_numpy(paths.indices.fill_null(n_keys)).astype(np.int64)
    repeated = np.flatnonzero(np.bincount(codes, minlength=n_keys + 1)[codes] > 1)
    versions = to_numpy(files.column("version").take(from_numpy(repeated)).fill_null(-1)).astype(np.int64)
    is_add = to_numpy(files.column("is_add").take(from_numpy(repeated)).fill_null(False)).astype(np.int64)
    # One integer per (version, path, type): equal integers are two actions of one type for one path.
    key = ((versions - versions.min()) * (n_keys + 1) + codes[repeated]) * 2 + is_add
    order = np.argsort(key, kind="stable")
    twice = np.flatnonzero(key[order][1:] == key[order][:-1])
    if not len(twice):
        _refuse_add_and_remove_of_one_logical_file(files, repeated, versions, codes[repeated], is_add, table,
                                                   source_file)
        return
    row = int(repeated[order[twice + 1]].min())
    version = files.column("version")[row].as_py()
    kind = "add" if files.column("is_add")[row].as_py() else "remove"
    raise CorruptLogError(
        f"the commit holds two {kind} actions for the file {files.column('path')[row].as_py()!r}; a valid version "
        "holds at most one file action of each type for any path (the order of a commit's actions is undefined)",
        table=table, version=version, file=source_file(version),
    )


def _refuse_add_and_remove_of_one_logical_file(files: pa.Table, rows: np.ndarray, versions: np.ndarray,
                                               paths: np.ndarray, is_add: np.ndarray, table: str,
                                               source_file: Callable[[int], str]) -> None:
    """Raise CorruptLogError for a commit that adds and removes one logical file, (path, deletion vector) (the
    protocol, Delta Log Entries: "a single log entry MUST NOT include more than one action that reconciles with
    each other: add / remove actions with the same (path, DV) tuple"): the actions of a commit have no order, so
    whether the file is live is undefined (Delta on Spark keeps the one logged last, deltalake the remove).
    ``rows`` are the rows of ``files`` whose path repeats, with their versions, path codes and types."""
    dv_ids = pc.dictionary_encode(dv_unique_ids(_combined(files.column("deletionVector")).take(from_numpy(rows))))
    dvs = to_numpy(dv_ids.indices).astype(np.int64)
    order = np.lexsort((is_add, dvs, paths, versions))
    same = ((versions[order][1:] == versions[order][:-1]) & (paths[order][1:] == paths[order][:-1])
            & (dvs[order][1:] == dvs[order][:-1]))
    both = np.flatnonzero(same & (is_add[order][1:] != is_add[order][:-1]))
    if not len(both):
        return
    row = int(rows[order[both + 1]].min())
    version = files.column("version")[row].as_py()
    raise CorruptLogError(
        f"the commit both adds and removes the file {files.column('path')[row].as_py()!r} (with the same deletion "
        "vector); a log entry must not hold two actions that reconcile with each other, and a commit's actions have "
        "no order", table=table, version=version, file=source_file(version),
    )


def refuse_missing_partition_values(adds: pa.Table, metadata: Metadata, table: str,
                                    source_file: Callable[[int], str]) -> None:
    """Raise CorruptLogError for an add whose partitionValues holds a key that is not a partition column
    (``refuse_unknown_partition_keys``) or lacks a partition column (protocol, Consistency
    Between Table Metadata and Data Files: "values for all partition columns present in the schema MUST be present
    for all files in the table"). Delta readers disagree on such a file (deltalake refuses the table, others read
    the value as null), and an Iceberg table would say null where the file's rows hold a value (found by the fuzz
    suite, seed 4 case 7027: a filter on the partition column pruned the file)."""
    if not adds.num_rows:
        return
    for name, physical in zip(metadata.partition_columns, metadata.physical_partition_columns, strict=True):
        missing = rows_without_key(adds.column("partitionValues"), physical)
        if len(missing):
            row = int(missing[0])
            version = adds.column("version")[row].as_py()
            logical = physical != name and not len(rows_without_key(adds.column("partitionValues").slice(row, 1), name))
            raise CorruptLogError(
                f"the add of {adds.column('path')[row].as_py()!r} has no value for the partition column {name!r} in "
                "its partitionValues; every file must give every partition column a value (null included)"
                + (f"; it names the column by its logical name, not by its physical name {physical!r} as column "
                   f"mapping ({metadata.column_mapping_mode!r}) wants" if logical else ""),
                table=table, version=version, file=source_file(version),
            )
    refuse_unknown_partition_keys(adds, metadata, table, source_file)


def refuse_unknown_partition_keys(adds: pa.Table, metadata: Metadata, table: str,
                                  source_file: Callable[[int], str]) -> None:
    """Raise CorruptLogError for an add whose partitionValues holds a key that is not a partition column
    (physical name): the protocol's partitionValues is "a map from partition column to value". Vectorised: one
    membership test over every key of every add."""
    keys, rows = partition_keys_and_rows(adds.column("partitionValues"))
    if not len(keys):
        return
    unknown = np.flatnonzero(~to_numpy(pc.is_in(keys, pa.array(metadata.physical_partition_columns,
                                                                  pa.string())).fill_null(False)))
    if not len(unknown):
        return
    row = int(rows[unknown[0]])
    version = adds.column("version")[row].as_py()
    raise CorruptLogError(
        f"the add of {adds.column('path')[row].as_py()!r} has the partitionValues key {keys[int(unknown[0])].as_py()!r}"
        f", which is not a partition column ({len(unknown)} such key(s) in all); partitionValues maps the "
        "partition columns to values", table=table, version=version, file=source_file(version),
    )


def refuse_file_live_twice(adds: pa.Table, table: str, source_file: Callable[[int], str],
                           scan: PathScan | None = None) -> None:
    """Raise CorruptLogError when one data file is live twice (``adds``: the live FILE_CHANGES_SCHEMA rows of the
    table at location ``table``): two live adds of one path with different deletion vectors, or of two spellings
    of one file (``part%2D1`` and ``part-1``, paths.data_file_identities).

    The protocol's reconciliation key (path, deletionVector.uniqueId) lets such a state through (Delta on Spark
    and deltalake compare the path strings as logged, and read the file twice), but no Delta writer leaves it: a
    new deletion vector comes with the remove of the file's previous add in the same commit, and a writer spells
    its paths one way. Two live copies mean a lost or unmatched remove, i.e. a damaged log, hence CorruptLogError
    rather than an unsupported feature; Iceberg could not express it anyway (a data file is one entry, and its
    position deletes apply to the path, not to one of its copies).

    Cheap: without deletion vectors and without paths that can be spelled two ways ('%', dot segments, absolute
    URIs), reconciliation left the paths unique and nothing is hashed; with deletion vectors only, only the
    paths of the adds that have one are looked up. ``scan``: paths.scan_paths of the adds' paths, when known.
    """
    if not adds.num_rows:
        return
    paths = adds.column("path")
    keys = data_file_identities(paths, table, scan)
    has_dv = _has_dv(adds)
    if keys is None and not has_dv:
        return
    if keys is None:
        keys = _combined(paths).cast(pa.binary())
        dv_keys = keys.filter(_combined(adds.column("deletionVector").is_valid()))
        hit = to_numpy(pc.is_in(keys, value_set=dv_keys))
        if int(hit.sum()) == len(dv_keys) and len(pc.unique(dv_keys)) == len(dv_keys):
            return
        rows = np.flatnonzero(hit)
    else:
        rows = np.arange(adds.num_rows)
        if len(pc.unique(keys)) == len(keys):
            return
    codes = to_numpy(pc.dictionary_encode(keys.take(from_numpy(rows))).indices)
    first_of: dict[int, int] = {}
    for candidate, code in zip(rows.tolist(), codes.tolist(), strict=True):  # log order
        if code in first_of:
            row, first = candidate, first_of[code]
            break
        first_of[code] = candidate
    else:
        return
    dv = adds.column("deletionVector")
    version = adds.column("version")[row].as_py()
    path, first_path = paths[row].as_py(), paths[first].as_py()
    spelled = "" if path == first_path else f" (spelled {first_path!r})"
    raise CorruptLogError(
        f"the data file {path!r} is live twice: added {_with_dv(dv[row].is_valid)} while its add of version "
        f"{adds.column('version')[first].as_py()}{spelled} {_with_dv(dv[first].is_valid)} is not removed; Delta "
        "writers remove a file's add when they add it again (with a new deletion vector), so a remove is missing "
        "(and Iceberg cannot express two copies of one file)",
        table=table, version=version, file=source_file(version),
    )


def _with_dv(present: bool) -> str:
    return "with a deletion vector" if present else "without a deletion vector"


def _source_file(storage: Storage, segment: LogSegment, version: int) -> str:
    """The log file an action of ``version`` was read from, for messages."""
    if segment.checkpoint is not None and version == segment.checkpoint.version:
        return storage.uri(segment.checkpoint.files[0].key)
    return storage.uri(commit_key(version))


def _reconcile_other(
    storage: Storage, table: str, actions: list[tuple[int, str, dict[str, Any]]], segment: LogSegment
) -> tuple[
    Protocol | None, Metadata | None, dict[str, Transaction], dict[str, DomainMetadata], dict[str, Any] | None,
    tuple[int, str] | None, tuple[int, str] | None,
]:
    check_one_protocol_and_metadata(actions, table, lambda version: _source_file(storage, segment, version))
    # Only the protocol and metaData in force (the last ones) are read: an earlier one may be incomplete, as
    # the version-0 metaData without schemaString that Delta Live Tables writes, and Delta readers ignore it.
    in_force: dict[str, tuple[int, dict[str, Any]]] = {}
    txns: dict[str, Transaction] = {}
    domains: dict[str, DomainMetadata] = {}
    commit_info: dict[str, Any] | None = None
    mapped: Metadata | None = None  # the last earlier metaData under column mapping that parses
    for version, name, body in actions:
        with _naming_the_action(storage, table, segment, version, name):
            if name == "metaData":
                Metadata.check_containers(body)
                current = _mapped_metadata(body)
                refuse_changed_column_id(mapped, current, table=table, version=version,
                                         file=_source_file(storage, segment, version))
                mapped = current
            if name == "protocol" or name == "metaData":
                in_force[name] = (version, body)
            elif name == "txn":
                txn = Transaction.from_action(body)
                txns[txn.app_id] = txn
            elif name == "domainMetadata":
                domain = DomainMetadata.from_action(body)
                if domain.removed:
                    domains.pop(domain.domain, None)
                else:
                    domains[domain.domain] = domain
            elif name == "commitInfo" and version == segment.version:
                commit_info = body
    protocol = metadata = None
    if "protocol" in in_force:
        version, body = in_force["protocol"]
        with _naming_the_action(storage, table, segment, version, "protocol"):
            protocol = Protocol.from_action(body)
    if "metaData" in in_force:
        version, body = in_force["metaData"]
        with _naming_the_action(storage, table, segment, version, "metaData"):
            metadata = Metadata.from_action(body)
            metadata.check()  # the schema parsed now, so that a bad schemaString names its file
    def located(name: str) -> tuple[int, str] | None:
        if name not in in_force:
            return None
        version = in_force[name][0]
        return version, _source_file(storage, segment, version)

    return protocol, metadata, txns, domains, commit_info, located("protocol"), located("metaData")


def refuse_reader_only_features(protocol: Protocol, *, table: str, version: int, file: str | None) -> None:
    """Raise CorruptLogError for a reader feature not also listed in ``writerFeatures``: "It is not allowed to list a
    feature only in `readerFeatures` but not in `writerFeatures`" (Table Features). delta-kernel refuses such a
    protocol, Delta on Spark such a table (validate reports it). ``version`` and ``file``: where the protocol is."""
    if protocol.reader_features is not None and protocol.writer_features is not None:
        only_read = sorted(protocol.reader_features - protocol.writer_features)
        if only_read:
            raise CorruptLogError(
                f"the protocol lists {', '.join(only_read)} in readerFeatures but not in writerFeatures, which the "
                "protocol does not allow (delta-kernel and Delta on Spark refuse such a table)",
                table=table, version=version, file=file,
            )


def refuse_unsupported_metadata(protocol: Protocol, metadata: Metadata, *, table: str, version: int,
                                file: str | None) -> None:
    """Raise CorruptLogError when ``metadata`` uses what ``protocol`` does not support, or sets column mapping with a
    column that lacks its id or physical name (``refuse_unmapped_columns``).

    - A column mapping mode: the protocol says to honour delta.columnMapping.mode only on reader version 2, or 3
      with the columnMapping feature (Column Mapping). Readers part ways on such a table (delta-kernel reads its
      files by logical names, Delta on Spark refuses it as a protocol/metadata mismatch), and deltalake 1.6 writes
      one when a table with column mapping gets a timestamp without time zone. Converting it either way could give
      another table than some Delta reader does (validate reports it: protocol.reader-version).
    - A timestamp_ntz type: the protocol requires the timestampNtz feature of such a table (Timestamp without
      timezone). delta-kernel refuses it, and Delta on Spark on a table-features protocol
      (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH).

    A rule of the protocol alone is ``refuse_reader_only_features``: its callers name the protocol's own file."""
    mode = metadata.column_mapping_mode
    if mode in ("id", "name") and "columnMapping" not in protocol.effective_reader_features:
        raise CorruptLogError(
            f"delta.columnMapping.mode is {mode!r} but the protocol (reader version {protocol.min_reader_version}"
            f"{_listed(protocol.reader_features)}) does not support the columnMapping feature; the protocol says the "
            "property is then not honoured, and Delta readers disagree on such a table (delta-kernel reads the files "
            "by logical names, Delta on Spark refuses the table)",
            table=table, version=version, file=file,
        )
    refuse_unmapped_columns(metadata, table=table, version=version, file=file)
    if "timestampNtz" not in protocol.effective_reader_features and holds_type(metadata.schema, "timestamp_ntz"):
        raise CorruptLogError(
            f"the schema has a timestamp_ntz column but the protocol (reader version {protocol.min_reader_version}"
            f"{_listed(protocol.reader_features)}) does not support the timestampNtz feature, which such a table "
            "needs", table=table, version=version, file=file,
        )


def refuse_unmapped_columns(metadata: Metadata, *, table: str, version: int, file: str | None) -> None:
    """Raise CorruptLogError when ``metadata`` sets column mapping and a column lacks its id or physical name.
    Delta on Spark ("Missing physical name in column mapping mode") and delta-kernel refuse such a table; which
    columns of the data files it reads would be a guess (validate reports it: column-mapping.field-id and
    column-mapping.physical-name)."""
    if metadata.column_mapping_mode not in ("id", "name"):
        return
    unmapped = unmapped_column(metadata.schema)
    if unmapped is not None:
        path, missing = unmapped
        raise CorruptLogError(f"delta.columnMapping.mode is {metadata.column_mapping_mode!r} but the column "
                              f"{path!r} has no {' and no '.join(missing)}; column mapping gives every column both",
                              table=table, version=version, file=file)


def _listed(features: frozenset[str] | None) -> str:
    return "" if features is None else f", reader features {', '.join(sorted(features)) or 'none'}"


def _mapped_metadata(body: dict[str, Any]) -> Metadata | None:
    """The metaData ``body`` when it parses and has column mapping on; None otherwise (only the metaData in force
    must parse: Delta Live Tables writes an incomplete one at version 0; turning column mapping off rewrites the
    files with logical names)."""
    try:
        metadata = Metadata.from_action(body)
        if metadata.column_mapping_mode not in ("id", "name"):
            return None
        metadata.schema  # noqa: B018 - parsed here: one that does not parse is left to the replay
    except (KeyError, ValueError, TypeError):
        return None
    return metadata


def refuse_changed_column_id(before: Metadata | None, after: Metadata | None, *, table: str, version: int,
                             file: str | None) -> None:
    """Raise CorruptLogError when ``after`` (the metaData of ``version``) gives a column another column mapping id
    than ``before`` (an earlier metaData; either None or without column mapping: nothing to compare). Readers
    resolving columns by id would read the column's earlier files as nulls, readers by physical name their values
    (found by the fuzz suite)."""
    if before is None or after is None or {before.column_mapping_mode, after.column_mapping_mode} - {"id", "name"}:
        return
    changed = changed_column_id(before.schema, after.schema)
    if changed is not None:
        path, old, new = changed
        raise CorruptLogError(
            f"the metaData changes the column mapping id of column {path!r} from {old} to {new}; a column's id is "
            "fixed when it is added (data files written before carry the old one)",
            table=table, version=version, file=file,
        )


@contextmanager
def _naming_the_action(storage: Storage, table: str, segment: LogSegment, version: int, name: str) -> Iterator[None]:
    """Turn a malformed action (KeyError, ValueError, TypeError) into a CorruptLogError naming its file."""
    try:
        yield
    except (KeyError, ValueError, TypeError) as exc:
        detail = f"lacks the field {exc.args[0]!r}" if isinstance(exc, KeyError) else f"is invalid: {exc}"
        raise CorruptLogError(
            f"the {name} action {detail}", table=table, version=version, file=_source_file(storage, segment, version),
        ) from exc
