"""Write a synthetic Delta table log (no data files) for load benchmarks.

The log has version 0 with ``protocol`` (1, 2) and ``metaData`` (a string partition column ``part``
plus K stat columns cycling through long, double, string and timestamp), then ``num_files`` add
actions spread over ``commits`` JSON commits (versions 1..commits). Every add carries
partitionValues, size, modificationTime, dataChange and a ``stats`` JSON string with numRecords,
minValues, maxValues and nullCount for all K columns. Optionally a classic (V1) Parquet checkpoint is
written at the last version, with ``_last_checkpoint`` pointing at it. With ``stats_struct`` the table sets
``delta.checkpoint.writeStatsAsStruct`` and the checkpoint carries, as Delta writes it then, the stats also
typed (``add.stats_parsed``) and the partition values typed (``add.partitionValues_parsed``), next to the
JSON ``add.stats``.

Everything is built column-at-a-time with numpy and pyarrow compute (no Python object per file), in
chunks so that memory stays bounded for millions of files.

    python benchmarks/gen_delta_log.py /tmp/t --num-files 1000000 --stat-columns 20 --checkpoint
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import time
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

LOG_DIR = "_delta_log"
MARKER = "_generated.json"  # written last in the table root: parameters of a complete generation
PARTITION_COLUMN = "part"
COLUMN_TYPES = ("long", "double", "string", "timestamp")
CHUNK_ROWS = 50_000
BASE_TIME_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z

STRING_MAP = pa.map_(pa.string(), pa.string())
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
    ]
)
REMOVE_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("tags", STRING_MAP),
    ]
)
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("createdTime", pa.int64()),
        ("configuration", STRING_MAP),
    ]
)
PROTOCOL_TYPE = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", TXN_TYPE),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        ("metaData", METADATA_TYPE),
        ("protocol", PROTOCOL_TYPE),
    ]
)

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def column_names(num_stat_columns: int) -> list[tuple[str, str]]:
    """(name, Delta type) of the stat columns."""
    out = []
    for i in range(num_stat_columns):
        typ = COLUMN_TYPES[i % len(COLUMN_TYPES)]
        out.append((f"{typ}_{i}", typ))
    return out


def schema_string(num_stat_columns: int) -> str:
    fields = [{"name": PARTITION_COLUMN, "type": "string", "nullable": True, "metadata": {}}]
    fields += [
        {"name": name, "type": typ, "nullable": True, "metadata": {}}
        for name, typ in column_names(num_stat_columns)
    ]
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


# -- column builders --------------------------------------------------------------------------------


def _uuids(rng: np.random.Generator, n: int) -> pa.Array:
    """n random UUID-formatted strings (36 chars), built as one byte matrix."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    hexed = np.empty((n, 32), dtype=np.uint8)
    hexed[:, 0::2] = _HEX[raw >> 4]
    hexed[:, 1::2] = _HEX[raw & 0x0F]
    out = np.full((n, 36), ord("-"), dtype=np.uint8)
    for src, dst in ((slice(0, 8), slice(0, 8)), (slice(8, 12), slice(9, 13)), (slice(12, 16), slice(14, 18)),
                     (slice(16, 20), slice(19, 23)), (slice(20, 32), slice(24, 36))):
        out[:, dst] = hexed[:, src]
    return _fixed_width_strings(out)


def _fixed_width_strings(matrix: np.ndarray) -> pa.Array:
    """A StringArray from an (n, w) uint8 matrix of ASCII bytes."""
    n, w = matrix.shape
    offsets = pa.py_buffer(np.arange(0, (n + 1) * w, w, dtype=np.int32).tobytes())
    data = pa.py_buffer(np.ascontiguousarray(matrix).tobytes())
    return pa.StringArray.from_buffers(n, offsets, data)


def _str(values: np.ndarray) -> pa.Array:
    return pa.array(values).cast(pa.string())


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """(n, width) ASCII digits of non-negative integers, zero-padded."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((values[:, None] // powers) % 10 + ord("0")).astype(np.uint8)


def _timestamps(ms: np.ndarray) -> pa.Array:
    """ISO-8601 UTC strings with milliseconds, as Delta writes timestamp stats (2023-11-14T22:13:20.123Z)."""
    days, in_day = np.divmod(ms.astype(np.int64), 86_400_000)
    unique_days, which = np.unique(days, return_inverse=True)
    dates = np.datetime_as_string(unique_days.astype("datetime64[D]"), unit="D").astype("S10")
    matrix = np.empty((len(ms), 24), dtype=np.uint8)
    matrix[:, :10] = dates.view(np.uint8).reshape(-1, 10)[which.ravel()]
    seconds, millis = np.divmod(in_day, 1000)
    hours, rest = np.divmod(seconds, 3600)
    minutes, secs = np.divmod(rest, 60)
    for col, (value, width) in zip((11, 14, 17, 20), ((hours, 2), (minutes, 2), (secs, 2), (millis, 3)),
                                   strict=True):
        matrix[:, col:col + width] = _digits(value, width)
    for col, char in ((10, "T"), (13, ":"), (16, ":"), (19, "."), (23, "Z")):
        matrix[:, col] = ord(char)
    return _fixed_width_strings(matrix)


STATS_VALUE_TYPES = {"long": pa.int64(), "double": pa.float64(), "string": pa.string(),
                     "timestamp": pa.timestamp("us", "UTC")}


def stats_parsed_type(columns: list[tuple[str, str]]) -> pa.StructType:
    """The type Delta gives ``add.stats_parsed`` for these stat columns."""
    bounds = pa.struct([(name, STATS_VALUE_TYPES[typ]) for name, typ in columns])
    return pa.struct([("numRecords", pa.int64()), ("minValues", bounds), ("maxValues", bounds),
                      ("nullCount", pa.struct([(name, pa.int64()) for name, _ in columns]))])


def _stats_pieces(rng: np.random.Generator, n: int, columns: list[tuple[str, str]]) -> tuple[list, pa.StructArray]:
    """Pieces (scalars and arrays) whose element-wise concatenation is the stats JSON of each row, and the
    same stats typed (the ``stats_parsed`` struct)."""
    num_records = rng.integers(1_000, 1_000_000, size=n)
    mins: list[list] = []
    maxs: list[list] = []
    typed_mins: list[pa.Array] = []
    typed_maxs: list[pa.Array] = []
    for _, typ in columns:
        if typ == "long":
            lo = rng.integers(-1_000_000_000, 1_000_000_000, size=n)
            hi = lo + rng.integers(0, 1_000_000, size=n)
            mins.append([_str(lo)])
            maxs.append([_str(hi)])
            typed = [pa.array(lo), pa.array(hi)]
        elif typ == "double":
            lo = np.round(rng.uniform(-1e6, 1e6, size=n), 3)
            hi = np.round(lo + rng.uniform(0, 1e4, size=n), 3)
            mins.append([_str(lo)])
            maxs.append([_str(hi)])
            typed = [pa.array(lo), pa.array(hi)]
        elif typ == "string":
            lo = rng.integers(0, 10_000_000, size=n)
            hi = lo + rng.integers(0, 10_000_000, size=n)
            lo_s, hi_s = pc.utf8_lpad(_str(lo), 8, "0"), pc.utf8_lpad(_str(hi), 8, "0")
            mins.append(['"', lo_s, '"'])
            maxs.append(['"', hi_s, '"'])
            typed = [lo_s, hi_s]
        else:  # timestamp: the JSON has milliseconds, the struct the same instant in microseconds
            lo = BASE_TIME_MS + rng.integers(0, 365 * 86_400_000, size=n)
            hi = lo + rng.integers(0, 86_400_000, size=n)
            mins.append(['"', _timestamps(lo), '"'])
            maxs.append(['"', _timestamps(hi), '"'])
            typed = [pa.array(v * 1000).cast(STATS_VALUE_TYPES["timestamp"]) for v in (lo, hi)]
        typed_mins.append(typed[0])
        typed_maxs.append(typed[1])
    pieces: list = ['{"numRecords":', _str(num_records)]
    for label, values in (("minValues", mins), ("maxValues", maxs)):
        pieces.append(f',"{label}":{{')
        for i, ((name, _), value) in enumerate(zip(columns, values, strict=True)):
            pieces.append(("," if i else "") + f'"{name}":')
            pieces.extend(value)
        pieces.append("}")
    pieces.append(',"nullCount":{')
    null_counts = rng.integers(0, 100, size=(len(columns), n)) * (rng.random((len(columns), n)) < 0.3)
    for i, (name, _) in enumerate(columns):
        pieces.append(("," if i else "") + f'"{name}":')
        pieces.append(_str(null_counts[i]))
    pieces.append("}}")
    parsed_type = stats_parsed_type(columns)
    children = [typed_mins, typed_maxs, [pa.array(c) for c in null_counts]]
    parsed = pa.StructArray.from_arrays(
        [pa.array(num_records), *(pa.StructArray.from_arrays(values, fields=list(parsed_type.field(i + 1).type))
                                  for i, values in enumerate(children))],
        fields=list(parsed_type),
    )
    return pieces, parsed


def _concat(pieces: list) -> pa.Array:
    return pc.binary_join_element_wise(*pieces, "")


def _chunk(rng: np.random.Generator, start: int, n: int, version: int, num_partitions: int,
           columns: list[tuple[str, str]], raw_stats: bool = True) -> dict[str, pa.Array]:
    """The columns of add actions start..start+n."""
    index = np.arange(start, start + n, dtype=np.int64)
    part = _concat(["p", pc.utf8_lpad(_str(index % num_partitions), 5, "0")])
    path = _concat([f"{PARTITION_COLUMN}=", part, "/part-", pc.utf8_lpad(_str(index % 100_000), 5, "0"), "-",
                    _uuids(rng, n), ".c000.snappy.parquet"])
    size = rng.integers(1 << 20, 256 << 20, size=n)
    mtime = BASE_TIME_MS + version * 60_000 + rng.integers(0, 60_000, size=n)
    pieces, parsed = _stats_pieces(rng, n, columns)
    return {"path": path, "part": part, "size": pa.array(size), "modificationTime": pa.array(mtime),
            "stats": _concat(pieces) if raw_stats else None, "stats_pieces": pieces, "stats_parsed": parsed}


def _json_lines(chunk: dict[str, pa.Array]) -> pa.Buffer:
    """NDJSON `add` actions of a chunk, as one buffer."""
    # Only the literal pieces of the stats hold quotes, so the JSON-escaped stats string is spliced
    # into each line directly (no escaping pass over the built strings).
    escaped = [p.replace('"', '\\"') if isinstance(p, str) else p for p in chunk["stats_pieces"]]
    lines = _concat([
        '{"add":{"path":"', chunk["path"], '","partitionValues":{"' + PARTITION_COLUMN + '":"', chunk["part"],
        '"},"size":', chunk["size"].cast(pa.string()), ',"modificationTime":',
        chunk["modificationTime"].cast(pa.string()), ',"dataChange":true,"stats":"', *escaped, '"}}\n',
    ])
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1)
    return lines.buffers()[2][int(offsets[0]): int(offsets[-1])]


def checkpoint_schema(columns: list[tuple[str, str]] | None = None) -> pa.Schema:
    """The checkpoint's schema; with ``columns`` (stats as a struct) ``add`` ends with
    ``partitionValues_parsed`` and ``stats_parsed``, as Delta writes them under writeStatsAsStruct."""
    if columns is None:
        return CHECKPOINT_SCHEMA
    add = pa.struct([*ADD_TYPE, ("partitionValues_parsed", pa.struct([(PARTITION_COLUMN, pa.string())])),
                     ("stats_parsed", stats_parsed_type(columns))])
    return pa.schema([f if f.name != "add" else pa.field("add", add) for f in CHECKPOINT_SCHEMA])


def _add_struct(chunk: dict[str, pa.Array], add_type: pa.StructType) -> pa.StructArray:
    n = len(chunk["path"])
    partition_values = pa.MapArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32)),
        pa.array(np.full(n, PARTITION_COLUMN, dtype=object), pa.string()),
        chunk["part"],
    )
    children = [chunk["path"], partition_values, chunk["size"], chunk["modificationTime"], pa.array(np.ones(n, bool)),
                chunk["stats"], pa.nulls(n, STRING_MAP)]
    if add_type.num_fields > len(children):
        partition_parsed = pa.StructArray.from_arrays([chunk["part"]], fields=list(add_type.field(7).type))
        children += [partition_parsed, chunk["stats_parsed"]]
    return pa.StructArray.from_arrays(children, fields=list(add_type))


def _checkpoint_rows(columns: dict[str, pa.Array], n: int, schema: pa.Schema = CHECKPOINT_SCHEMA) -> pa.Table:
    arrays = [columns.get(f.name, pa.nulls(n, f.type)) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


# -- generation -------------------------------------------------------------------------------------


def generate(
    path: str | Path,
    num_files: int,
    num_stat_columns: int,
    num_partitions: int,
    commits: int,
    checkpoint: bool,
    *,
    seed: int = 0,
    overwrite: bool = False,
    workers: int = 2,
    stats_struct: bool = False,
) -> dict:
    """Write the synthetic log at ``path`` and return a summary (also stored as ``_generated.json``)."""
    if commits < 1 or num_files < 0 or num_partitions < 1 or num_stat_columns < 0:
        raise ValueError("need commits >= 1, num_partitions >= 1, num_files >= 0, num_stat_columns >= 0")
    started = time.perf_counter()
    root = Path(path)
    log_dir = root / LOG_DIR
    if log_dir.exists():
        if not overwrite:
            raise FileExistsError(f"{log_dir} exists (pass overwrite=True / --overwrite)")
        shutil.rmtree(log_dir)
    (root / MARKER).unlink(missing_ok=True)
    log_dir.mkdir(parents=True)
    columns = column_names(num_stat_columns)
    table_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"gen_delta_log/{seed}"))

    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    metadata = {
        "id": table_id,
        "name": None,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string(num_stat_columns),
        "partitionColumns": [PARTITION_COLUMN],
        "createdTime": BASE_TIME_MS,
        "configuration": {"delta.checkpoint.writeStatsAsStruct": "true"} if stats_struct else {},
    }
    commit0 = [
        {"commitInfo": {"timestamp": BASE_TIME_MS, "operation": "CREATE TABLE",
                        "operationParameters": {}, "engineInfo": "gen_delta_log"}},
        {"protocol": protocol},
        {"metaData": {k: v for k, v in metadata.items() if v is not None}},
    ]
    (log_dir / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in commit0))

    writer = None
    cp_path = log_dir / f"{commits:020d}.checkpoint.parquet"
    cp_schema = checkpoint_schema(columns if stats_struct else None)
    add_type = cp_schema.field("add").type
    if checkpoint:
        writer = pq.ParquetWriter(cp_path, cp_schema, compression="snappy")
        meta_row = dict(metadata, format={"provider": "parquet", "options": []},
                        configuration=list(metadata["configuration"].items()))
        writer.write_table(
            pa.Table.from_pylist(
                [{"protocol": protocol}, {"metaData": meta_row}],
                schema=cp_schema,
            )
        )

    bounds = np.linspace(0, num_files, commits + 1).astype(np.int64)
    tasks = [(version, start, min(CHUNK_ROWS, int(bounds[version]) - start))
             for version in range(1, commits + 1)
             for start in range(int(bounds[version - 1]), int(bounds[version]), CHUNK_ROWS)]

    def build(task: tuple[int, int, int]) -> tuple[int, pa.Buffer, pa.Table | None]:
        version, start, n = task
        rng = np.random.default_rng([seed, start])
        chunk = _chunk(rng, start, n, version, num_partitions, columns, raw_stats=writer is not None)
        rows = _checkpoint_rows({"add": _add_struct(chunk, add_type)}, n, cp_schema) if writer is not None else None
        return version, _json_lines(chunk), rows

    # Arrow compute releases the GIL: build the next chunks while this thread writes finished ones,
    # keeping a bounded number in flight.
    outputs: dict[int, BinaryIO] = {}
    try:
        for version in range(1, commits + 1):
            out = outputs[version] = open(log_dir / f"{version:020d}.json", "wb")  # noqa: SIM115
            info = {"commitInfo": {"timestamp": BASE_TIME_MS + version * 60_000, "operation": "WRITE",
                                   "operationParameters": {"mode": "Append"}, "engineInfo": "gen_delta_log"}}
            out.write((json.dumps(info) + "\n").encode())
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending: deque[Future] = deque()
            queue = iter(tasks)
            for task in itertools.islice(queue, workers + 1):
                pending.append(pool.submit(build, task))
            while pending:
                version, lines, rows = pending.popleft().result()
                task = next(queue, None)
                if task is not None:
                    pending.append(pool.submit(build, task))
                outputs[version].write(memoryview(lines))
                if rows is not None:
                    writer.write_table(rows)
                del lines, rows
    finally:
        for out in outputs.values():
            out.close()
    summary = {
        "num_files": num_files,
        "num_stat_columns": num_stat_columns,
        "num_partitions": num_partitions,
        "commits": commits,
        "checkpoint": checkpoint,
        "stats_struct": stats_struct,
        "seed": seed,
        "version": commits,
    }
    if writer is not None:
        writer.close()
        last = {"version": commits, "size": num_files + 2, "sizeInBytes": cp_path.stat().st_size,
                "numOfAddFiles": num_files}
        (log_dir / "_last_checkpoint").write_text(json.dumps(last))
    summary["seconds"] = round(time.perf_counter() - started, 2)
    (root / MARKER).write_text(json.dumps(summary, indent=1))
    return summary


def append_commit(
    path: str | Path,
    num_adds: int,
    remove: pa.Table | None = None,
    *,
    seed: int = 1,
    first_index: int | None = None,
) -> int:
    """Write the next commit of a generated log: ``num_adds`` adds with stats, plus a ``remove`` per row of
    ``remove`` (columns ``path``, ``part`` and ``size``, e.g. picked from the checkpoint). Returns its version.

    The schema, partition count and stat columns come from ``_generated.json``. New paths continue the
    file numbering at ``first_index`` (default: the generated file count) with fresh random UUIDs.
    """
    root = Path(path)
    params = json.loads((root / MARKER).read_text())
    log_dir = root / LOG_DIR
    version = max(int(p.name[:20]) for p in log_dir.glob("*.json") if p.name[:20].isdigit()) + 1
    timestamp = BASE_TIME_MS + version * 60_000
    operation = "WRITE" if remove is None or remove.num_rows == 0 else "MERGE"
    head = {"commitInfo": {"timestamp": timestamp, "operation": operation, "operationParameters": {},
                           "engineInfo": "gen_delta_log"}}
    parts = [(json.dumps(head) + "\n").encode()]
    if remove is not None and remove.num_rows:
        lines = _concat([
            '{"remove":{"path":"', remove.column("path"), f'","deletionTimestamp":{timestamp},'
            '"dataChange":true,"extendedFileMetadata":true,"partitionValues":{"' + PARTITION_COLUMN + '":"',
            remove.column("part"), '"},"size":', remove.column("size").cast(pa.string()), "}}\n",
        ])
        parts.append("".join(lines.to_pylist()).encode())
    if num_adds:
        start = params["num_files"] if first_index is None else first_index
        rng = np.random.default_rng([seed, version, start])
        chunk = _chunk(rng, start, num_adds, version, params["num_partitions"],
                       column_names(params["num_stat_columns"]), raw_stats=False)
        parts.append(_json_lines(chunk).to_pybytes())
    target = log_dir / f"{version:020d}.json"
    with open(target, "xb") as out:  # never overwrite a commit
        out.write(b"".join(parts))
    return version


def checkpoint_files(path: str | Path, columns: tuple[str, ...] = ("path", "size")) -> pa.Table:
    """The add actions of a generated log's checkpoint: ``columns`` of ``add`` plus ``part``."""
    root = Path(path)
    last = json.loads((root / LOG_DIR / "_last_checkpoint").read_text())
    # Nested columns come back flattened (named after the leaf); rows without an add have a null path.
    table = pq.read_table(root / LOG_DIR / f"{last['version']:020d}.checkpoint.parquet",
                          columns=[f"add.{c}" for c in columns] + ["add.partitionValues"])
    table = table.filter(pc.is_valid(table.column("path")))
    out = {c: table.column(c).combine_chunks() for c in columns}
    values = table.column("partitionValues").combine_chunks()  # one key per map: the partition column
    out["part"] = values.items.take(pa.array(np.asarray(values.offsets)[:-1]))
    return pa.table(out)


def is_generated(path: str | Path, **params) -> bool:
    """Whether ``path`` holds a complete generation with these parameters."""
    marker = Path(path) / MARKER
    try:
        found = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    found.setdefault("stats_struct", False)  # generations before the option never wrote stats_parsed
    return all(found.get(k) == v for k, v in params.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="table directory to create (its _delta_log is written)")
    parser.add_argument("--num-files", type=int, default=1_000_000)
    parser.add_argument("--stat-columns", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--checkpoint", action=argparse.BooleanOptionalAction, default=True,
                        help="write a classic Parquet checkpoint at the last version (default: yes)")
    parser.add_argument("--stats-struct", action=argparse.BooleanOptionalAction, default=False,
                        help="also write the checkpoint's stats as a struct (add.stats_parsed), as Delta does with "
                             "delta.checkpoint.writeStatsAsStruct (default: no)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="threads building chunks (default: 2)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing _delta_log")
    args = parser.parse_args(argv)
    summary = generate(args.path, args.num_files, args.stat_columns, args.partitions, args.commits,
                       args.checkpoint, seed=args.seed, overwrite=args.overwrite, workers=args.workers,
                       stats_struct=args.stats_struct)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
