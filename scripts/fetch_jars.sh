#!/usr/bin/env bash
# Fetch the Spark jars the tests and the Spark jobs use into .jars/ (cached; Maven Central through mvn).
# Versions must match pyspark's minor version pinned in pyproject.toml (Spark 4.1, Scala 2.13).
set -euo pipefail
cd "$(dirname "$0")/.."
JARS_DIR=${DELTABERG_JARS_DIR:-.jars}
ARTIFACTS=(
  io.delta:delta-spark_4.1_2.13:4.4.0
  io.delta:delta-storage:4.4.0
  org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0
  # Delta Kernel (Java), driven through py4j by tests/spark: the only Delta 4.4.0 component that creates
  # IcebergWriterCompatV1 tables (delta-spark 4.4.0 does not know the feature). Its other dependencies
  # (jackson-databind, parquet-hadoop, hadoop-client, RoaringBitmap, slf4j) are in pyspark's jars; the
  # jdk8 jackson module is not, and must match pyspark's jackson version (2.21.2 for pyspark 4.1.3).
  io.delta:delta-kernel-api:4.4.0
  io.delta:delta-kernel-defaults:4.4.0
  com.fasterxml.jackson.datatype:jackson-datatype-jdk8:2.21.2
)
mkdir -p "$JARS_DIR"
for artifact in "${ARTIFACTS[@]}"; do
  IFS=: read -r group name version <<< "$artifact"
  if [ ! -f "$JARS_DIR/$name-$version.jar" ]; then
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$JARS_DIR" -Dtransitive=false >&2
  fi
done
ls "$JARS_DIR"/*.jar
