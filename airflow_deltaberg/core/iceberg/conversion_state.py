"""What an incremental run needs from the previous one, kept next to the Iceberg metadata.

Per Iceberg snapshot, ``<manifest list>.state.arrow`` (named after the snapshot's manifest list, which is
unique per attempt, so a converter that lost a race never overwrites the winner's) records the Delta
version and its metaData action, and for each manifest of the snapshot its manifest-list row (as fields, and as
the Avro bytes the manifest list holds), the path range of its files, and a copy of its entries
(``<manifest>.entries.arrow``, an Arrow IPC file: the columns a later run changes or looks up, and where each entry's
row starts in the manifest, whose bytes give the stats back: ``manifest_rows``). With it, an incremental run reads
only the commits after the converted version, rewrites only the manifests a removal touches, and copies the rows of
the manifests it keeps into the new manifest list and state as they are: a commit costs what it changes, not what the
table holds (``ManifestTable``). A state this code cannot read (ConversionStateError) makes the run a full
conversion, which writes a new one.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema

from airflow_deltaberg.core.delta.models import Metadata, Protocol
from airflow_deltaberg.core.errors import ConversionStateError
from airflow_deltaberg.core.iceberg.manifests.manifest import (
    MANIFEST_LIST_ARROW_TYPES,
    FieldSummary,
    ManifestFileInfo,
    manifest_list_columns,
    write_manifest,
)
from airflow_deltaberg.core.iceberg.manifests.manifest_rows import ROW_START, entries_index, index_entries
from airflow_deltaberg.core.iceberg.publish import METADATA_DIR
from airflow_deltaberg.core.redact import location_text
from airflow_deltaberg.core.storage import Storage

# LZ4: the copy of 25k entries with 20 columns' bounds in 60-75% of zstd's CPU, 40% bigger (~350 against ~250
# bytes an entry); one thread: the manifests are written two at a time already, and the buffers of one table
# compressed on Arrow's pool took 25% more CPU for the same bytes.
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)


@dataclass(frozen=True)
class ManifestRecord:
    info: ManifestFileInfo
    entries_key: str
    min_path: str | None
    max_path: str | None

    def may_contain(self, paths: pa.Array) -> bool:
        if self.min_path is None or self.max_path is None:
            return False
        inside = pc.and_(pc.greater_equal(paths, self.min_path), pc.less_equal(paths, self.max_path))
        return bool(pc.any(inside).as_py())

    def to_json(self) -> dict[str, Any]:
        """The record as the conversion state (and the Spark engine's executors) hand it on."""
        return {"info": _info_to_json(self.info), "entries": self.entries_key, "min_path": self.min_path,
                "max_path": self.max_path}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ManifestRecord:
        return cls(_info_from_json(dict(data["info"])), data["entries"], data["min_path"], data["max_path"])


_INFO_FIELDS = tuple(f.name for f in fields(ManifestFileInfo))
#: The columns of a ManifestTable: the manifest-list row's fields, where its entries and files are, its encoding.
MANIFEST_TABLE_SCHEMA = pa.schema(
    [(name, MANIFEST_LIST_ARROW_TYPES.get(name, pa.int64())) for name in _INFO_FIELDS]
    + [("entries_key", pa.string()), ("min_path", pa.string()), ("max_path", pa.string()), ("list_row", pa.binary())]
)
_STATE_METADATA = b"deltaberg.conversion-state"


class ManifestTable:
    """The manifests of a snapshot in manifest-list order, one row each (``MANIFEST_TABLE_SCHEMA``).

    ``list_row`` is the manifest's row of the manifest list as Avro encodes it for Iceberg format version
    ``list_rows_version`` (null for a manifest new in the snapshot being built, until ``commit_snapshot`` encodes
    it): the rows of the manifests a commit keeps go into the next manifest list and state as they are, so that a
    commit touches only the rows of the manifests it adds or rewrites. Records (``ManifestRecord``) are made for
    the rows asked for; iterating makes all of them."""

    def __init__(self, table: pa.Table, list_rows_version: int | None = None) -> None:
        self.table = table
        self.list_rows_version = list_rows_version

    @classmethod
    def from_records(cls, records: Sequence[ManifestRecord], list_rows: pa.Array | None = None,
                     list_rows_version: int | None = None) -> ManifestTable:
        columns = manifest_list_columns([r.info for r in records], format_version=3)
        arrays = [columns[name] for name in _INFO_FIELDS] + [
            pa.array([r.entries_key for r in records], pa.string()),
            pa.array([r.min_path for r in records], pa.string()),
            pa.array([r.max_path for r in records], pa.string()),
            pa.nulls(len(records), pa.binary()) if list_rows is None else list_rows,
        ]
        return cls(pa.Table.from_arrays(arrays, schema=MANIFEST_TABLE_SCHEMA), list_rows_version)

    def __len__(self) -> int:
        return self.table.num_rows

    def __iter__(self) -> Iterator[ManifestRecord]:
        return iter([_record(row) for row in self.table.drop_columns(["list_row"]).to_pylist()])

    def records(self, positions: Sequence[int]) -> list[ManifestRecord]:
        """The records at ``positions``, in their order."""
        if not positions:
            return []
        rows = self.table.drop_columns(["list_row"]).take(pa.array(positions, pa.int64())).to_pylist()
        return [_record(row) for row in rows]

    def ints(self, name: str) -> np.ndarray:
        """A column of longs; nulls read as 0."""
        return np.asarray(self.table.column(name).combine_chunks().fill_null(0), np.int64) if len(self) else \
            np.zeros(0, np.int64)

    def candidates(self, content: int, paths: pa.Array) -> list[int]:
        """Positions of the manifests of ``content`` whose path range holds one of ``paths``, in order (what
        ``ManifestRecord.may_contain`` says of each, for all of them at once)."""
        paths = pc.drop_null(paths)
        if not len(paths) or not len(self):
            return []
        wanted = np.flatnonzero((self.ints("content") == content)
                                & self.table.column("min_path").is_valid().to_numpy(zero_copy_only=False)
                                & self.table.column("max_path").is_valid().to_numpy(zero_copy_only=False))
        if not len(wanted):
            return []
        # Python's str order is Arrow's (UTF-8 byte order is code point order).
        ordered = np.asarray(pc.unique(paths).sort().to_pylist(), object)
        low = np.asarray(self.table.column("min_path").take(pa.array(wanted)).to_pylist(), object)
        high = np.asarray(self.table.column("max_path").take(pa.array(wanted)).to_pylist(), object)
        first = np.searchsorted(ordered, low, side="left")  # the first path >= min_path
        inside = first < len(ordered)
        inside[inside] = ordered[first[inside]] <= high[inside]
        return wanted[inside].tolist()

    def with_changes(self, replaced: Mapping[int, ManifestRecord], added: Sequence[ManifestRecord] = (), *,
                     list_rows: Sequence[bytes] | None = None) -> ManifestTable:
        """The manifests with those at the positions of ``replaced`` replaced and ``added`` after them. The new
        rows' ``list_row`` is null, or ``list_rows`` (in the order of the replaced positions, then ``added``),
        encoded for ``list_rows_version``."""
        if not replaced and not added:
            return self
        positions = sorted(replaced)
        new = [replaced[p] for p in positions] + list(added)
        rows = None if list_rows is None else pa.array(list(list_rows), pa.binary())
        new_table = ManifestTable.from_records(new, rows).table
        order = np.arange(len(self) + len(added), dtype=np.int64)
        order[positions] = len(self) + np.arange(len(positions))
        order[len(self):] = len(self) + len(positions) + np.arange(len(added))
        combined = pa.concat_tables([self.table, new_table]).take(pa.array(order))
        return ManifestTable(combined, self.list_rows_version)

    def without_positions(self, positions: Sequence[int]) -> ManifestTable:
        """The manifests without those at ``positions``."""
        if not positions:
            return self
        keep = np.ones(len(self), bool)
        keep[list(positions)] = False
        return ManifestTable(self.table.filter(pa.array(keep)), self.list_rows_version)

    def without_spent(self, snapshot_id: int) -> ManifestTable:
        """Without the manifests an earlier snapshot than ``snapshot_id`` left with no live entry (every entry
        DELETED): the snapshot that deleted the entries lists them, the next ones need not (as Iceberg's own
        writers do). Carried on, each would be read by every scan planner at every later snapshot."""
        if not len(self):
            return self
        live = self.ints("added_files_count") + self.ints("existing_files_count")
        spent = (live == 0) & (self.ints("deleted_files_count") > 0) & (self.ints("added_snapshot_id") != snapshot_id)
        if not spent.any():
            return self
        return ManifestTable(self.table.filter(pa.array(~spent)), self.list_rows_version)

    def unencoded(self, format_version: int) -> list[int]:
        """Positions of the manifests whose manifest-list row is to be encoded for ``format_version``."""
        if self.list_rows_version != format_version:
            return list(range(len(self)))
        return np.flatnonzero(self.table.column("list_row").is_null().to_numpy(zero_copy_only=False)).tolist()

    def encoded(self, records: Mapping[int, ManifestRecord], list_rows: pa.BinaryArray,
                format_version: int) -> ManifestTable:
        """The manifests with the rows at the positions of ``records`` (every one ``unencoded`` named) replaced
        by them and their encoded manifest-list rows (in position order)."""
        table = self.with_changes(records, list_rows=list_rows.to_pylist()).table if records else self.table
        return ManifestTable(table, format_version)

    @property
    def list_rows(self) -> pa.ChunkedArray:
        return self.table.column("list_row")


def _record(row: dict[str, Any]) -> ManifestRecord:
    partitions = row["partitions"]
    info = ManifestFileInfo(
        **{name: row[name] for name in _INFO_FIELDS if name != "partitions"},
        partitions=None if partitions is None else tuple(
            FieldSummary(p["contains_null"], p["contains_nan"], p["lower_bound"], p["upper_bound"])
            for p in partitions
        ),
    )
    return ManifestRecord(info, row["entries_key"], row["min_path"], row["max_path"])


@dataclass(frozen=True)
class ConversionState:
    delta_version: int
    delta_metadata: Metadata  # the Delta metaData in force at delta_version
    manifests: ManifestTable
    delta_protocol: Protocol  # the Delta protocol in force at delta_version


def data_path_column(content: str | int) -> str:
    """The entry column naming the data file an entry is about."""
    return "referenced_data_file" if content in ("deletes", 1) else "file_path"


def state_key(manifest_list_key: str) -> str:
    return f"{manifest_list_key}.state.arrow"


def _bytes_to_text(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _text_to_bytes(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _info_to_json(info: ManifestFileInfo) -> dict[str, Any]:
    # Field by field, not asdict (a recursive deep copy): every snapshot writes the records of all its manifests,
    # 400 on a 10M-file table.
    data = {name: getattr(info, name) for name in _INFO_FIELDS}
    data["key_metadata"] = _bytes_to_text(info.key_metadata)
    data["partitions"] = None if info.partitions is None else [
        {"contains_null": p.contains_null, "contains_nan": p.contains_nan,
         "lower_bound": _bytes_to_text(p.lower_bound), "upper_bound": _bytes_to_text(p.upper_bound)}
        for p in info.partitions
    ]
    return data


def _info_from_json(data: dict[str, Any]) -> ManifestFileInfo:
    partitions = data.get("partitions")
    return ManifestFileInfo(
        **{k: v for k, v in data.items() if k not in ("partitions", "key_metadata")},
        key_metadata=_text_to_bytes(data.get("key_metadata")),
        partitions=None if partitions is None else tuple(
            FieldSummary(p["contains_null"], p["contains_nan"], _text_to_bytes(p["lower_bound"]),
                         _text_to_bytes(p["upper_bound"]))
            for p in partitions
        ),
    )


def write_state(storage: Storage, manifest_list_key: str, state: ConversionState) -> None:
    """Write the state as an Arrow IPC file: the manifests' rows, and the Delta version, metaData and protocol (JSON) in
    the schema's metadata."""
    about = {"delta_version": state.delta_version, "delta_metadata": state.delta_metadata.to_action(),
             "list_rows_version": state.manifests.list_rows_version,
             "delta_protocol": state.delta_protocol.to_action()}
    table = state.manifests.table.replace_schema_metadata({_STATE_METADATA: json.dumps(about).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    storage.write_if_absent(state_key(manifest_list_key), sink.getvalue().to_pybytes())


def read_state(storage: Storage, manifest_list: str) -> ConversionState | None:
    """The state kept beside a snapshot's manifest list (a location under the table), None if there is none.
    ConversionStateError when it cannot be read (damaged, or without the header this code writes)."""
    prefix = storage.root.rstrip("/") + "/"
    if not manifest_list.startswith(prefix):
        return None
    key = state_key(manifest_list[len(prefix):])
    try:
        data = storage.read(key)
    except FileNotFoundError:
        return None
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        about = json.loads((table.schema.metadata or {})[_STATE_METADATA])
        return ConversionState(about["delta_version"], Metadata.from_action(about["delta_metadata"]),
                               ManifestTable(table.replace_schema_metadata(None), about["list_rows_version"]),
                               Protocol.from_action(about["delta_protocol"]))
    except (pa.ArrowInvalid, ValueError, KeyError, TypeError) as exc:
        raise ConversionStateError(f"the conversion state {location_text(storage.uri(key))} cannot be read "
                                   f"({type(exc).__name__}: {exc})") from exc


def write_manifest_record(
    storage: Storage, entries: pa.Table, schema: Schema, spec: PartitionSpec, snapshot_id: int, sequence_number: int,
    *, content: str = "data", format_version: int = 2, attempt: str = "",
) -> ManifestRecord:
    """Write a manifest added by snapshot ``snapshot_id`` (sequence ``sequence_number``) and the copy of its
    entries (``manifest_rows.entries_index``); its manifest-list row comes back with them, sequence numbers
    resolved. The path range kept is that of the data files the entries describe (``referenced_data_file`` for
    delete manifests). The file names start with ``attempt`` (see ``attempt_keys``)."""
    name = f"{METADATA_DIR}/{attempt_prefix(attempt)}{uuid.uuid4()}-m0"
    fs, path = storage.arrow_path(f"{name}.avro")
    with storage.typed_errors("write", f"{name}.avro"):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        summary = write_manifest(path, entries, schema=schema, spec=spec, snapshot_id=snapshot_id, content=content,
                                 filesystem=fs, format_version=format_version)
    entries_key = f"{name}.entries.arrow"
    efs, epath = storage.arrow_path(entries_key)
    # Read back only when a removal touches the manifest. It keeps what a rewrite changes or looks up, and where
    # each entry's row starts in the manifest: the stats are read back from the manifest itself.
    index = entries_index(entries, summary.row_starts)
    with (storage.typed_errors("write", entries_key), efs.open_output_stream(epath) as stream,
          pa.ipc.new_file(stream, index.schema, options=IPC_OPTIONS) as out):
        out.write_table(index)
    bounds = pc.min_max(entries.column(data_path_column(content)))
    info = summary.manifest_file(storage.uri(f"{name}.avro"))
    info = replace(info, sequence_number=sequence_number,
                   min_sequence_number=info.min_sequence_number if info.min_sequence_number is not None
                   else sequence_number)
    return ManifestRecord(info, entries_key, bounds["min"].as_py(), bounds["max"].as_py())


def attempt_prefix(attempt: str) -> str:
    """How the files one attempt at a snapshot writes with fresh names begin (manifests, their entry copies)."""
    return f"{attempt}-" if attempt else ""


def attempt_keys(storage: Storage, attempt: str) -> list[str]:
    """Keys of the files written by the snapshot attempt ``attempt``: its manifests and their entry copies, its
    manifest list and its state (every fresh name of an attempt holds its id). Content-addressed delete files
    are not among them: their names do not depend on the attempt, and another run may use the same ones."""
    if not attempt:
        return []
    return [e.key for e in storage.list_from(METADATA_DIR) if attempt in e.name]


def read_entries(storage: Storage, record: ManifestRecord, *, data_files: bool = True) -> pa.Table:
    """The entries of a manifest, as ``write_manifest`` takes them again: the columns its copy keeps, and each
    entry's data_file bytes up to its tail, read from the manifest (``PREFIX_COLUMN``). ``data_files=False``: the
    copy's columns alone (status, paths, record counts...), without reading the manifest."""
    fs, path = storage.arrow_path(record.entries_key)
    with storage.typed_errors("read", record.entries_key), fs.open_input_file(path) as source:
        entries = pa.ipc.open_file(source).read_all()
    if ROW_START not in entries.column_names:
        raise ConversionStateError(f"the copy of the entries {location_text(storage.uri(record.entries_key))} does "
                                   "not say where each entry's row starts in its manifest")
    if not data_files:
        return entries.drop_columns([ROW_START])
    manifest_key = record.entries_key.removesuffix(".entries.arrow") + ".avro"
    try:
        manifest = storage.read(manifest_key)
    except FileNotFoundError as exc:
        raise ConversionStateError(f"the manifest {location_text(storage.uri(manifest_key))}, which the "
                                   "conversion state lists, is gone") from exc
    return index_entries(entries, manifest, storage.uri(manifest_key))


def with_first_row_ids(entries: pa.Table, manifest_first_row_id: int | None) -> pa.Table:
    """v3 data entries with their ``first_row_id`` written out: an entry without one inherits the manifest's plus
    the record counts of the entries without one listed before it (table spec, "Row Lineage"), so that a
    rewritten manifest keeps each file's row ids. Entries stay null when the manifest has no first_row_id."""
    n = entries.num_rows
    if "first_row_id" in entries.column_names:
        current = entries.column("first_row_id").combine_chunks()
    else:
        current = pa.nulls(n, pa.int64())
    if manifest_first_row_id is not None and current.null_count:
        missing = np.asarray(current.is_null())
        counts = np.where(missing, np.asarray(entries.column("record_count").combine_chunks(), np.int64), 0)
        inherited = manifest_first_row_id + np.cumsum(counts) - counts
        known = np.asarray(current.fill_null(0), np.int64)
        current = pa.array(np.where(missing, inherited, known), pa.int64())
    if "first_row_id" in entries.column_names:
        return entries.set_column(entries.schema.get_field_index("first_row_id"), "first_row_id", current)
    return entries.append_column("first_row_id", current)
