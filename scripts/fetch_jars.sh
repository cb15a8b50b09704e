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
)
mkdir -p "$JARS_DIR"
for artifact in "${ARTIFACTS[@]}"; do
  IFS=: read -r group name version <<< "$artifact"
  if [ ! -f "$JARS_DIR/$name-$version.jar" ]; then
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$JARS_DIR" -Dtransitive=false >&2
  fi
done
ls "$JARS_DIR"/*.jar
