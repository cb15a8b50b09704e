"""The live files of a Delta log segment as a Spark DataFrame.

Spark reads the segment's checkpoint (classic, multi-part, V2 in Parquet or JSON, and its sidecars) and its commit
files, and reconciles the actions as the protocol's "Action Reconciliation" says: the newest action per logical
file ``(path, deletionVector unique id)`` wins, and the files whose newest action is an ``add`` are live. Which
files make the segment comes from the core (``LogSegment``); log compactions are not read, since the segment's
commits cover the same versions.

The result has the columns the core's manifest writer takes (``write_file_manifests``): path, partitionValues
(map<string,string>), size, stats (the JSON string, null for checkpoint rows that carry only parsed stats),
stats_parsed (the checkpoint's struct, null elsewhere; only when a checkpoint source has it) and deletionVector.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_deltaberg.core.delta.log_segment import LogSegment
from airflow_deltaberg.core.delta.models import Metadata
from airflow_deltaberg.core.delta.replay import SIDECAR_DIR
from airflow_deltaberg.core.delta.schema import PrimitiveType
from airflow_deltaberg.core.storage import LocalStorage, Storage
from airflow_deltaberg.spark.enable_rewrite import spark_location

DV_STRUCT = T.StructType(
    [
        T.StructField("storageType", T.StringType()),
        T.StructField("pathOrInlineDv", T.StringType()),
        T.StructField("offset", T.IntegerType()),
        T.StructField("sizeInBytes", T.IntegerType()),
        T.StructField("cardinality", T.LongType()),
    ]
)
STRING_MAP = T.MapType(T.StringType(), T.StringType(), valueContainsNull=True)
_FILE_ACTION = T.StructType(
    [
        T.StructField("path", T.StringType()),
        T.StructField("partitionValues", STRING_MAP),
        T.StructField("size", T.LongType()),
        T.StructField("stats", T.StringType()),
        T.StructField("deletionVector", DV_STRUCT),
    ]
)
#: What Spark is told about commit lines: other actions (metaData, commitInfo, ...) are not read.
COMMIT_SCHEMA = T.StructType([T.StructField("add", _FILE_ACTION), T.StructField("remove", _FILE_ACTION)])
_SIDECAR = T.StructType([T.StructField("path", T.StringType())])
JSON_CHECKPOINT_SCHEMA = T.StructType([*COMMIT_SCHEMA.fields, T.StructField("sidecar", _SIDECAR)])
#: The columns of ``live_files``, in order.
FILE_COLUMNS = ("path", "partitionValues", "size", "stats", "stats_parsed", "deletionVector")
_GLOB_CHARS = "\\*?[]{}"


def hadoop_path(storage: Storage, key: str) -> str:
    """The location of ``key`` as Spark's Hadoop filesystems name it, glob characters escaped (Spark expands
    globs in the paths it is given; a table folder named ``t[1]`` must stay one literal path)."""
    uri = storage.uri(key)
    if isinstance(storage, LocalStorage):
        uri = "file://" + uri  # not the cluster's default filesystem (HDFS on YARN)
    location = spark_location(uri)
    return "".join(f"\\{c}" if c in _GLOB_CHARS else c for c in location)


def logical_key(path: Column, dv: Column) -> Column:
    """The logical file key: path, and the DV's unique id (storageType + pathOrInlineDv + "@offset" when the
    offset is set), joined as the core's replay joins them."""
    offset = F.when(dv["offset"].isNotNull(), F.concat(F.lit("@"), dv["offset"].cast("string"))).otherwise("")
    uid = F.when(dv.isNotNull(), F.concat(dv["storageType"], dv["pathOrInlineDv"], offset)).otherwise("")
    return F.concat_ws("\x00", path, uid)


def _conform(column: Column, source: T.DataType, target: T.DataType) -> Column:
    """``column`` (of type ``source``) as ``target``: struct fields matched by name, missing ones null."""
    if source == target:
        return column
    if isinstance(target, T.StructType):
        if not isinstance(source, T.StructType):
            return F.lit(None).cast(target)
        present = {f.name: f.dataType for f in source.fields}
        fields = [
            (_conform(column[f.name], present[f.name], f.dataType) if f.name in present
             else F.lit(None).cast(f.dataType)).alias(f.name)
            for f in target.fields
        ]
        return F.when(column.isNull(), F.lit(None).cast(target)).otherwise(F.struct(*fields))
    return column.cast(target)


def _field(struct_type: T.StructType, name: str) -> T.DataType | None:
    return next((f.dataType for f in struct_type.fields if f.name == name), None)


def _action_columns(action: Column, action_type: T.StructType, stats_parsed: T.DataType | None) -> list[Column]:
    """The FILE_COLUMNS of an add/remove struct column, normalized whatever the writer put in it."""
    columns = []
    for name in FILE_COLUMNS:
        if name == "stats_parsed":
            if stats_parsed is None:
                continue
            source = _field(action_type, name)
            value = F.lit(None).cast(stats_parsed) if source is None else _conform(action[name], source, stats_parsed)
        else:
            target = next(f.dataType for f in _FILE_ACTION.fields if f.name == name)
            source = _field(action_type, name)
            value = F.lit(None).cast(target) if source is None else _conform(action[name], source, target)
        columns.append(value.alias(name))
    return columns


def _adds(frame: DataFrame, stats_parsed: T.DataType | None) -> DataFrame | None:
    """The add actions of a checkpoint part or sidecar frame."""
    if "add" not in frame.columns:
        return None
    add_type = frame.schema["add"].dataType
    assert isinstance(add_type, T.StructType)
    return frame.where(F.col("add").isNotNull()).select(*_action_columns(F.col("add"), add_type, stats_parsed))


def _parquet(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    # Parts of one checkpoint may differ in columns (a part holding only txn actions has no add column): merge.
    return spark.read.option("mergeSchema", "true").parquet(*paths)


def _sidecar_key(path: str) -> str:
    # Sidecars live in _delta_log/_sidecars; writers are encouraged to store only the file name (as the core's
    # replay reads them).
    return f"{SIDECAR_DIR}/{posixpath.basename(unquote(path))}"


def read_checkpoint_adds(spark: SparkSession, storage: Storage, segment: LogSegment) -> DataFrame | None:
    """The add actions of the segment's checkpoint, sidecars included (None without a checkpoint).

    The checkpoint's ``remove`` tombstones are not needed: a checkpoint is reconciled (no logical file is both
    added and removed in it), and the commits after it are newer than any of its actions.
    """
    checkpoint = segment.checkpoint
    if checkpoint is None:
        return None
    paths = [hadoop_path(storage, entry.key) for entry in checkpoint.files]
    if checkpoint.is_json:
        frames = [spark.read.schema(JSON_CHECKPOINT_SCHEMA).option("mode", "FAILFAST").json(paths)]
    else:
        frames = [_parquet(spark, paths)]
    if "sidecar" in frames[0].columns:
        sidecars = [r[0] for r in frames[0].where(F.col("sidecar").isNotNull()).select("sidecar.path").collect()]
        if sidecars:
            frames.append(_parquet(spark, [hadoop_path(storage, _sidecar_key(p)) for p in sidecars]))
    stats_parsed = _stats_parsed_type(frames)
    parts = [a for a in (_adds(f, stats_parsed) for f in frames) if a is not None]
    if not parts:
        return None
    adds = parts[0]
    for part in parts[1:]:
        adds = adds.unionByName(part)
    return adds


def _stats_parsed_type(frames: Sequence[DataFrame]) -> T.DataType | None:
    """The type of the first ``add.stats_parsed`` among the checkpoint's sources (the others are conformed to
    it by field name), or None when no source has one."""
    for frame in frames:
        if "add" in frame.columns:
            found = _field(frame.schema["add"].dataType, "stats_parsed")  # type: ignore[arg-type]
            if found is not None:
                return found
    return None


def read_commit_actions(spark: SparkSession, storage: Storage, segment: LogSegment) -> DataFrame | None:
    """The add and remove actions of the segment's commits after its checkpoint, with their ``version``
    and ``is_add`` (None when the segment is its checkpoint alone)."""
    if not segment.commits:
        return None
    paths = [hadoop_path(storage, entry.key) for _, entry in segment.commits]
    # FAILFAST: a line that does not parse is a corrupt log, never a silently dropped action.
    frame = spark.read.schema(COMMIT_SCHEMA).option("mode", "FAILFAST").json(paths)
    action = F.coalesce(F.col("add"), F.col("remove"))  # one of the two per file-action line
    version = F.split(F.col("_metadata.file_name"), r"\.").getItem(0).cast("long")
    return frame.where(action.isNotNull()).select(
        version.alias("version"),
        F.col("add").isNotNull().alias("is_add"),
        *[action[name].alias(name) for name in ("path", "partitionValues", "size", "stats", "deletionVector")],
    )


def live_files(spark: SparkSession, storage: Storage, segment: LogSegment) -> DataFrame:
    """The live files of ``segment`` (columns FILE_COLUMNS; stats_parsed only when the checkpoint has it)."""
    checkpoint = read_checkpoint_adds(spark, storage, segment)
    commits = read_commit_actions(spark, storage, segment)
    stats_parsed = checkpoint.schema["stats_parsed"].dataType if checkpoint is not None and \
        "stats_parsed" in checkpoint.columns else None
    columns = [c for c in FILE_COLUMNS if c != "stats_parsed" or stats_parsed is not None]
    if commits is None:
        if checkpoint is None:
            return spark.createDataFrame([], T.StructType(_FILE_ACTION.fields)).select(*columns)
        return checkpoint.select(*columns)
    keyed = commits.withColumn("_key", logical_key(F.col("path"), F.col("deletionVector")))
    # The newest action per logical file; a valid commit holds at most one add and one remove per key, and
    # should both be there, the add is taken.
    newest = Window.partitionBy("_key").orderBy(F.col("version").desc(), F.col("is_add").desc())
    latest_adds = keyed.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1 AND is_add")
    if stats_parsed is not None:
        latest_adds = latest_adds.withColumn("stats_parsed", F.lit(None).cast(stats_parsed))
    if checkpoint is None:
        return latest_adds.select(*columns)
    touched = keyed.select("_key").distinct()
    kept = (checkpoint.withColumn("_key", logical_key(F.col("path"), F.col("deletionVector")))
            .join(touched, "_key", "left_anti"))
    return kept.select(*columns).unionByName(latest_adds.select(*columns))


#: Spark SQL types to sort Delta partition values by (their serialized strings otherwise).
_SORT_TYPES = {"byte": "long", "short": "long", "integer": "long", "long": "long", "float": "double",
               "double": "double", "date": "date", "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz",
               "boolean": "boolean"}


def partition_sort_columns(metadata: Metadata) -> list[Column]:
    """Sort keys for the partition values (typed where Spark can cast them), then the path: each range of
    files then covers a narrow range of partitions, as the manifests' partition summaries want."""
    keys: list[Column] = []
    for name, physical in zip(metadata.partition_columns, metadata.physical_partition_columns, strict=True):
        value = F.col("partitionValues")[physical]
        dtype = metadata.schema.field(name).type
        sort_type = None
        if isinstance(dtype, PrimitiveType):
            sort_type = _SORT_TYPES.get(dtype.name) or (dtype.name if dtype.is_decimal else None)
        # try_cast: a value Spark cannot parse sorts as null instead of failing the job (ANSI mode).
        keys.append((value.try_cast(sort_type) if sort_type else value).asc_nulls_first())
    keys.append(F.col("path").asc())
    return keys
