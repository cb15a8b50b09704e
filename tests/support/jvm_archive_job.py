"""The Spark job whose loaded classes make the JVM archive (support.jvm_archive): what the tests do most, in small,
on a local[2] session like the tests' one (Delta with deletion vectors, DML, time travel, checkpoints; Iceberg
through a path catalog and its metadata tables). ``--check`` exits at once: the JVM has started."""

from __future__ import annotations

import sys


def main(folder: str) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName("deltaberg-jvm-archive")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.catalog.archive_ice", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.archive_ice.type", "hadoop")
        .config("spark.sql.catalog.archive_ice.warehouse", f"{folder}/iceberg")
        .config("spark.sql.catalogImplementation", "in-memory")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .getOrCreate()
    )
    delta = f"delta.`{folder}/delta`"
    for statement in (
        f"CREATE TABLE {delta} (id INT, p STRING, v DOUBLE, s STRUCT<a: INT>, m MAP<STRING, INT>) USING delta "
        "PARTITIONED BY (p) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '3')",
        f"INSERT INTO {delta} SELECT id, CAST(id % 3 AS STRING), id * 1.5, named_struct('a', 1), map('k', 1) "
        "FROM range(0, 30)",
        f"DELETE FROM {delta} WHERE id % 7 = 0",
        f"UPDATE {delta} SET v = -1 WHERE id % 5 = 1",
        f"MERGE INTO {delta} t USING (SELECT 1 AS id) u ON t.id = u.id WHEN MATCHED THEN DELETE",
        f"OPTIMIZE {delta}",
        "CREATE TABLE archive_ice.db.t (id INT, p STRING) USING iceberg PARTITIONED BY (p)",
        "INSERT INTO archive_ice.db.t VALUES (1, 'a'), (2, 'b')",
    ):
        spark.sql(statement)
    spark.read.format("delta").option("versionAsOf", 1).load(f"{folder}/delta").collect()
    spark.read.format("delta").load(f"{folder}/delta").groupBy("p").count().collect()
    spark.sql("SELECT * FROM archive_ice.db.t WHERE id > 1").collect()
    spark.sql("SELECT * FROM archive_ice.db.t.files").collect()
    spark.sql("SELECT * FROM archive_ice.db.t.snapshots").collect()
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1] != "--check":
        main(sys.argv[1])
