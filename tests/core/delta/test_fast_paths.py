"""The fast paths of the log engine give the results of the careful ones: JSON commits parsed with only the
common fields typed, checkpoint stats read from ``add.stats_parsed`` instead of the JSON, stats parsed
for some columns only, and reconciliation that looks up only the checkpoint keys the commits repeat.

Tables are written by deltalake (with and without ``delta.checkpoint.writeStatsAsStruct``) or are real log
files written here line by line, for what deltalake does not write (tags, row tracking, odd values)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.partition_codec import partition_strings
from airflow_deltaberg.core.delta.stats.stats import parse_stats, stats_type
from airflow_deltaberg.core.errors import CorruptLogError

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "d", "type": "date", "nullable": True, "metadata": {}},
        {"name": "x", "type": "long", "nullable": True, "metadata": {}},
    ],
}


def write_log(root: Path, commits: list[list[dict]]) -> Path:
    """Commit files 0..n-1 with these actions, one JSON line each."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return root


def table_start(partition_columns: list[str] | None = None, **protocol) -> list[dict]:
    return [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2, **protocol}},
        {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(SCHEMA),
                      "partitionColumns": partition_columns or [], "configuration": {}, "createdTime": 1}},
    ]


def add(path: str, **fields) -> dict:
    return {"add": {"path": path, "partitionValues": fields.pop("partitionValues", {}), "size": 10,
                    "modificationTime": 1, "dataChange": True, **fields}}


# -- JSON commits --------------------------------------------------------------------------------------


def test_date_like_partition_values_and_tags_stay_as_written(tmp_path):
    """JSON inference reads date-like strings as timestamps; partition values and tags must come back as
    the exact strings of the log, in snapshots and in commit ranges (which do not know the partition
    columns up front)."""
    root = write_log(tmp_path / "t", [
        table_start(["d"]),
        [{"commitInfo": {"timestamp": 5}},
         add("d=2024-01-01/a.parquet", partitionValues={"d": "2024-01-01"},
             tags={"when": "2024-01-02", "n": "5", "at": "2024-01-02T03:04:05.000Z"}),
         add("d=2024-01-02/b.parquet", partitionValues={"d": "2024-01-02"})],
        [{"remove": {"path": "d=2024-01-01/a.parquet", "partitionValues": {"d": "2024-01-01"},
                     "deletionTimestamp": 9, "dataChange": True, "extendedFileMetadata": True, "size": 10}}],
    ])
    table = DeltaTable(str(root))
    files = table.snapshot(1).files
    assert files.column("partitionValues").to_pylist() == [[("d", "2024-01-01")], [("d", "2024-01-02")]]
    assert files.column("tags").to_pylist()[0] == [("when", "2024-01-02"), ("n", "5"),
                                                   ("at", "2024-01-02T03:04:05.000Z")]
    actions = table.commits(1, 2).actions.file_actions
    assert actions.column("partitionValues").to_pylist() == [[("d", "2024-01-01")], [("d", "2024-01-02")],
                                                            [("d", "2024-01-01")]]
    assert actions.column("is_add").to_pylist() == [True, True, False]
    assert actions.column("deletionTimestamp").to_pylist() == [None, None, 9]
    assert table.snapshot().tombstones.column("path").to_pylist() == ["d=2024-01-01/a.parquet"]


def test_optional_fields_are_read_with_their_protocol_types(tmp_path):
    """Fields the fast parse leaves to inference (deletion vectors, row tracking, clustering) come back
    typed as the protocol says, with their values; unknown fields, even with clashing types, are ignored."""
    dv = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", "sizeInBytes": 40,
          "cardinality": 6}
    root = write_log(tmp_path / "t", [
        table_start(minReaderVersion=3, minWriterVersion=7, readerFeatures=["deletionVectors"],
                    writerFeatures=["deletionVectors", "rowTracking", "domainMetadata", "clustering"]),
        [add("a.parquet", deletionVector=dv, baseRowId=7, defaultRowCommitVersion=1, clusteringProvider="liquid",
             extra={"q": [1, 2]}),
         add("b.parquet", baseRowId=2**40, extra="text"),
         add("c.parquet", deletionVector={**dv, "storageType": "u", "offset": 1})],
    ])
    files = DeltaTable(str(root)).snapshot().files
    assert files.schema.field("deletionVector").type.field("offset").type == pa.int32()
    assert files.schema.field("baseRowId").type == pa.int64()
    rows = files.select(["path", "deletionVector", "baseRowId", "defaultRowCommitVersion",
                         "clusteringProvider"]).to_pylist()
    assert rows == [
        {"path": "a.parquet", "deletionVector": {**dv, "offset": None}, "baseRowId": 7, "defaultRowCommitVersion": 1,
         "clusteringProvider": "liquid"},
        {"path": "b.parquet", "deletionVector": None, "baseRowId": 2**40, "defaultRowCommitVersion": None,
         "clusteringProvider": None},
        {"path": "c.parquet", "deletionVector": {**dv, "storageType": "u", "offset": 1}, "baseRowId": None,
         "defaultRowCommitVersion": None, "clusteringProvider": None},
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [("baseRowId", "seven"), ("deletionVector", {"storageType": 5}), ("clusteringProvider", 3),
     ("deletionVector", {"storageType": "u", "pathOrInlineDv": "x", "sizeInBytes": 2**40, "cardinality": 1})],
    ids=["string-for-long", "number-for-string-in-dv", "number-for-string", "int32-overflow"],
)
def test_optional_field_of_the_wrong_type_names_its_line(tmp_path, field, value):
    lines = [{"commitInfo": {}}, add("a.parquet"), add("b.parquet", **{field: value})]
    root = write_log(tmp_path / "t", [table_start(), lines])
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(str(root)).snapshot()
    assert "line 3" in str(info.value)
    assert info.value.version == 1 and info.value.file.endswith("00000000000000000001.json")


def test_other_actions_between_file_actions(tmp_path):
    """A commit whose non-file actions sit between its add and remove lines (not only before them)."""
    root = write_log(tmp_path / "t", [
        table_start(),
        [add("a.parquet"), add("b.parquet")],
        [add("c.parquet"), {"txn": {"appId": "app", "version": 3}},
         {"remove": {"path": "a.parquet", "dataChange": True}},
         {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}}, add("d.parquet"),
         {"commitInfo": {"timestamp": 1}}],
    ])
    snap = DeltaTable(str(root)).snapshot()
    assert snap.files.column("path").to_pylist() == ["b.parquet", "c.parquet", "d.parquet"]
    assert snap.transactions["app"].version == 3
    assert list(snap.domain_metadata) == ["d"]
    assert snap.tombstones.column("path").to_pylist() == ["a.parquet"]


def test_a_line_longer_than_the_parse_block(tmp_path):
    """The reader's blocks must hold whole lines: one add with megabytes of stats still parses."""
    big = json.dumps({"numRecords": 1, "minValues": {"x": 1}, "pad": "p" * (3 << 20)})
    root = write_log(tmp_path / "t", [table_start(), [add("a.parquet", stats=big), add("b.parquet")]])
    snap = DeltaTable(str(root)).snapshot()
    assert snap.files.column("stats").to_pylist()[0] == big
    assert pc.struct_field(snap.parsed_stats(["x"]), "numRecords").to_pylist() == [1, None]


# -- checkpoints and their stats -----------------------------------------------------------------------


def _data(start: int) -> pa.Table:
    n = 40
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": pa.array([f"n{i:03d}" for i in range(start, start + n)]),
        "ts": pa.array([1_700_000_000_000_000 + i * 1_000_123 for i in range(start, start + n)],
                       pa.timestamp("us", "UTC")),
        "amount": pa.array([i / 7 for i in range(start, start + n)], pa.float64()),
        "s": pa.array([{"a": i, "b": f"b{i}"} for i in range(start, start + n)],
                      pa.struct([("a", pa.int64()), ("b", pa.string())])),
        "p": pa.array([f"p{i % 3}" for i in range(start, start + n)]),
    })


def deltalake_table(root: Path, configuration: dict[str, str], *, tail_commits: int = 2) -> Path:
    """Five appends of files with stats (three partitions), a checkpoint, a delete (removes some checkpoint
    files and adds rewritten ones) and ``tail_commits`` appends after it."""
    deltalake.write_deltalake(str(root), _data(0), partition_by=["p"], configuration=configuration)
    for i in range(1, 5):
        deltalake.write_deltalake(str(root), _data(40 * i), mode="append")
    deltalake.DeltaTable(str(root)).create_checkpoint()
    deltalake.DeltaTable(str(root)).delete("id % 17 = 3")
    for i in range(5, 5 + tail_commits):
        deltalake.write_deltalake(str(root), _data(40 * i), mode="append")
    return root


def without_checkpoint(root: Path, dest: Path) -> Path:
    """A copy of the table that must be replayed from its JSON commits."""
    shutil.copytree(root, dest)
    for f in (dest / "_delta_log").iterdir():
        if ".checkpoint." in f.name or f.name == "_last_checkpoint":
            f.unlink()
    return dest


def checkpoint_file(root: Path) -> Path:
    (found,) = [f for f in (root / "_delta_log").iterdir() if f.name.endswith(".checkpoint.parquet")]
    return found


def rewrite_add(checkpoint: Path, change) -> None:
    """Rewrite the checkpoint with ``change(add_struct) -> add_struct`` applied to its ``add`` column."""
    data = pq.read_table(checkpoint)
    index = data.schema.get_field_index("add")
    changed = change(data.column("add").combine_chunks())
    pq.write_table(data.set_column(index, pa.field("add", changed.type), changed), checkpoint)


def replace_field(struct: pa.StructArray, name: str, value: pa.Array, new_name: str | None = None) -> pa.StructArray:
    fields = [f if f.name != name else pa.field(new_name or name, value.type) for f in struct.type]
    children = [struct.field(i) if f.name != name else value for i, f in enumerate(struct.type)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=struct.is_null())


STRUCT_ONLY = {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": "false"}
BOTH = {"delta.checkpoint.writeStatsAsStruct": "true"}


@pytest.mark.parametrize("configuration", [{}, STRUCT_ONLY, BOTH], ids=["json-stats", "struct-stats", "both"])
def test_checkpoint_stats_equal_the_commits_stats(tmp_path, configuration):
    """Whatever form the checkpoint keeps the stats in, the parsed stats of every live file equal those
    parsed from the JSON commits (the table without its checkpoint), for all columns and for a few."""
    root = deltalake_table(tmp_path / "t", configuration)
    fields = {f.name for f in pq.ParquetFile(checkpoint_file(root)).schema_arrow.field("add").type}
    assert ("stats_parsed" in fields) == bool(configuration)
    assert ("stats" in fields) == (configuration is not STRUCT_ONLY)
    replayed = DeltaTable(str(without_checkpoint(root, tmp_path / "replayed"))).snapshot()
    snap = DeltaTable(str(root)).snapshot()
    assert snap.segment.checkpoint is not None and replayed.segment.checkpoint is None
    ours = snap.files.sort_by("path")
    expected = replayed.files.sort_by("path")
    assert ours.column("path").equals(expected.column("path"))
    assert ours.column("stats_parsed").equals(expected.column("stats_parsed"))
    assert pc.struct_field(ours.column("stats_parsed"), "numRecords").null_count == 0
    for columns in (["ts", "id"], ["s"], []):
        some = DeltaTable(str(root)).snapshot().files_with_stats(columns).sort_by("path")
        assert some.column("stats_parsed").type == stats_type(snap.schema, columns)
        assert some.column("stats_parsed").equals(replayed.files_with_stats(columns).sort_by("path")
                                                  .column("stats_parsed")), columns
    nested = pc.struct_field(pc.struct_field(ours.column("stats_parsed"), "maxValues"), "s")
    assert pc.struct_field(nested, "b").null_count == 0
    assert snap.num_records == replayed.num_records == deltalake.DeltaTable(str(root)).to_pyarrow_table().num_rows


def test_struct_stats_missing_for_some_files_fall_back_to_their_json(tmp_path):
    """A checkpoint whose stats_parsed is null for some adds (their JSON stats present) gives the stats of
    every file."""
    root = deltalake_table(tmp_path / "t", BOTH, tail_commits=0)
    replayed = DeltaTable(str(without_checkpoint(root, tmp_path / "replayed"))).snapshot().files.sort_by("path")

    def null_every_other(add: pa.StructArray) -> pa.StructArray:
        parsed = add.field("stats_parsed")
        keep = pa.array([i % 2 == 0 for i in range(len(add))])
        return replace_field(add, "stats_parsed", pc.if_else(keep, parsed, pa.scalar(None, parsed.type)))

    rewrite_add(checkpoint_file(root), null_every_other)
    ours = DeltaTable(str(root)).snapshot().files.sort_by("path")
    assert ours.column("stats_parsed").equals(replayed.column("stats_parsed"))


def test_struct_stats_with_null_counts_named_as_in_the_protocol_example(tmp_path):
    """The protocol's checkpoint schema example calls the struct's null counts ``nullCounts`` (Delta and
    deltalake write ``nullCount``): both are read."""
    root = deltalake_table(tmp_path / "t", STRUCT_ONLY, tail_commits=0)
    replayed = DeltaTable(str(without_checkpoint(root, tmp_path / "replayed"))).snapshot().files.sort_by("path")

    def rename(add: pa.StructArray) -> pa.StructArray:
        parsed = add.field("stats_parsed")
        return replace_field(add, "stats_parsed", replace_field(parsed, "nullCount", parsed.field("nullCount"),
                                                                "nullCounts"))

    rewrite_add(checkpoint_file(root), rename)
    assert "nullCounts" in str(pq.ParquetFile(checkpoint_file(root)).schema_arrow)
    ours = DeltaTable(str(root)).snapshot().files.sort_by("path")
    assert ours.column("stats_parsed").equals(replayed.column("stats_parsed"))
    assert pc.struct_field(pc.struct_field(ours.column("stats_parsed"), "nullCount"), "id").null_count == 0


def test_re_added_checkpoint_file_takes_the_new_stats(tmp_path):
    """A commit after the checkpoint adds a path the checkpoint lists (as a stats recompute does, with
    dataChange false): the file stays live once, with the new add's stats."""
    root = deltalake_table(tmp_path / "t", BOTH, tail_commits=1)
    snap = DeltaTable(str(root)).snapshot()
    path = snap.files.column("path")[0].as_py()
    assert snap.state.checkpoint_add_index[0] >= 0  # the first live file comes from the checkpoint
    row = snap.files.slice(0, 1).to_pylist()[0]
    stats = json.dumps({"numRecords": 1234, "minValues": {"id": -5}, "maxValues": {"id": 99}, "nullCount": {"id": 0}})
    line = {"add": {"path": path, "partitionValues": dict(row["partitionValues"]), "size": row["size"],
                    "modificationTime": row["modificationTime"], "dataChange": False, "stats": stats}}
    version = snap.version + 1
    (root / "_delta_log" / f"{version:020d}.json").write_text(json.dumps(line) + "\n")
    after = DeltaTable(str(root)).snapshot()
    assert after.num_files == snap.num_files
    paths = after.files.column("path").to_pylist()
    assert paths.count(path) == 1 and paths[-1] == path
    assert set(paths) == set(snap.files.column("path").to_pylist())
    last = after.files.column("stats_parsed")[-1].as_py()
    assert last["numRecords"] == 1234 and last["minValues"]["id"] == -5 and last["minValues"]["name"] is None
    assert after.num_records == snap.num_records - row["stats_parsed"]["numRecords"] + 1234


# -- stats for some columns ----------------------------------------------------------------------------


def test_parse_stats_for_some_columns_only(tmp_path):
    """parse_stats(columns=...) is the full parse restricted to those columns' fields."""
    root = tmp_path / "t"
    deltalake.write_deltalake(str(root), _data(0), partition_by=["p"])
    deltalake.write_deltalake(str(root), _data(40), mode="append")
    snap = DeltaTable(str(root)).snapshot()
    raw = snap.files.column("stats").combine_chunks()
    assert raw.null_count == 0
    full = parse_stats(raw, snap.schema)
    parsed = parse_stats(raw, snap.schema, ["ts", "id"])
    assert parsed.type == stats_type(snap.schema, ["ts", "id"])
    for kind in ("minValues", "maxValues", "nullCount"):
        assert [f.name for f in parsed.type.field(kind).type] == ["ts", "id"]
        for name in ("ts", "id"):
            assert pc.struct_field(pc.struct_field(parsed, kind), name).equals(
                pc.struct_field(pc.struct_field(full, kind), name)), (kind, name)
    counts_only = parse_stats(raw, snap.schema, [])
    assert counts_only.type.field("minValues").type.num_fields == 0
    assert pc.struct_field(counts_only, "numRecords").equals(pc.struct_field(full, "numRecords"))
    assert pc.sum(pc.struct_field(counts_only, "numRecords")).as_py() == 80 == snap.num_records
    with pytest.raises(KeyError):
        stats_type(snap.schema, ["no such column"])


def test_stats_with_nan_bounds_keep_exact_decimals_and_timestamps() -> None:
    """Delta on Spark writes NaN and Infinity float bounds as JSON strings, which the columnar reader refuses for a
    double column; the rows of that batch are parsed one by one, and must keep every other bound exact."""
    import datetime as dt
    from decimal import Decimal

    from airflow_deltaberg.core.delta.schema import parse_type
    from airflow_deltaberg.core.delta.stats.stats import parse_stats

    schema = parse_type({"type": "struct", "fields": [
        {"name": "f", "type": "double", "nullable": True, "metadata": {}},
        {"name": "dec", "type": "decimal(38,10)", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "ntz", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
    ]})
    stats = pa.array([
        '{"numRecords":2,"minValues":{"f":"NaN","dec":-1.5,"ts":"2020-01-01T00:00:00.123+01:00",'
        '"ntz":"2020-01-01T00:00:00.5"},"maxValues":{"f":"Infinity","dec":12345678901234567890.0123456789,'
        '"ts":"2020-01-01T00:00:00.5Z","ntz":"2021-01-01T00:00:00"},"nullCount":{"f":0,"dec":0,"ts":0,"ntz":0}}',
        '{"numRecords":1,"minValues":{"f":1.5,"dec":0},"maxValues":{"f":2.5,"dec":0},"nullCount":{"f":0}}',
    ])
    parsed = parse_stats(stats, schema).to_pylist()
    first, second = parsed
    assert first["minValues"]["f"] is None and first["maxValues"]["f"] is None  # NaN / Infinity: no bound
    assert first["maxValues"]["dec"] == Decimal("12345678901234567890.0123456789")
    assert first["minValues"]["dec"] == Decimal("-1.5")
    assert first["minValues"]["ts"] == dt.datetime(2019, 12, 31, 23, 0, 0, 123000, tzinfo=dt.timezone.utc)
    assert first["maxValues"]["ts"] == dt.datetime(2020, 1, 1, 0, 0, 0, 500000, tzinfo=dt.timezone.utc)
    assert first["minValues"]["ntz"] == dt.datetime(2020, 1, 1, 0, 0, 0, 500000)
    assert (second["minValues"]["f"], second["maxValues"]["f"], second["numRecords"]) == (1.5, 2.5, 1)


@pytest.mark.parametrize("seed", range(40))
def test_partition_values_by_position_equal_the_lookup(seed: int) -> None:
    """Maps of one layout take the value at the key's position; a map with the keys in another order, one key more
    or less, a repeated key or a null map sends the column to the per-map lookup: the same strings either way."""
    import random

    rng = random.Random(seed)
    layout = rng.choice([["a"], ["a", "b"], ["b", "a"], ["a", "b", "c"]])
    odd = rng.random() < 0.5
    rows: list[list[tuple[str, str | None]] | None] = []
    for i in range(rng.randint(1, 40)):
        keys = list(layout)
        pick = rng.random() if odd else 1.0
        if pick < 0.05:
            rows.append(None)
            continue
        if pick < 0.1:
            keys.reverse()
        elif pick < 0.15:
            keys.append("a")
        elif pick < 0.2:
            keys.insert(0, "a")
        elif pick < 0.25:
            keys.pop()
        rows.append([(k, rng.choice([None, "", "x", str(i)])) for k in keys])
    maps = pa.array(rows, pa.map_(pa.string(), pa.string()))
    start = rng.randint(0, len(maps) - 1)
    for part in (maps, maps.slice(start, rng.randint(1, len(maps) - start))):
        for key in ("a", "b", "c", "z"):
            assert partition_strings(part, key).equals(pc.map_lookup(part, key, "first")), (part, key)


@pytest.mark.parametrize("configuration", [{}, STRUCT_ONLY, BOTH], ids=["json-stats", "struct-stats", "both"])
def test_stats_text_bytes_count_the_json_a_full_read_parses(tmp_path: Path, configuration: dict[str, str]) -> None:
    """The commits after the checkpoint always; the checkpoint only when its adds have no stats_parsed (the JSON is
    then all a reader has); nothing before the checkpoint."""
    root = deltalake_table(tmp_path / "t", configuration)
    log = root / "_delta_log"
    checkpoint = checkpoint_file(root)
    version = int(checkpoint.name.split(".")[0])
    commits = sum(f.stat().st_size for f in log.glob("*.json") if int(f.name.split(".")[0]) > version)
    expected = commits + (0 if configuration else checkpoint.stat().st_size)
    table = DeltaTable(str(root))
    assert commits > 0 and table.stats_text_bytes(table.log_segment()) == expected
    assert table.stats_text_bytes(table.log_segment(version - 1)) == sum(f.stat().st_size for f in log.glob("*.json")
                                                      if int(f.name.split(".")[0]) < version)


def test_a_snapshot_from_a_given_log_segment(tmp_path: Path) -> None:
    """The segment a caller listed already gives the same snapshot as a fresh listing; one of another version or
    another table is refused."""
    root = deltalake_table(tmp_path / "t", {})
    other = deltalake_table(tmp_path / "u", {})
    table = DeltaTable(str(root))
    segment = table.log_segment()
    given, listed = table.snapshot(segment=segment), table.snapshot()
    assert given.version == listed.version == segment.version
    assert given.state.adds.column("path").equals(listed.state.adds.column("path"))
    with pytest.raises(ValueError, match="of that version"):
        table.snapshot(segment.version - 1, segment=segment)
    with pytest.raises(ValueError, match="not of"):
        table.snapshot(segment=DeltaTable(str(other)).log_segment())
