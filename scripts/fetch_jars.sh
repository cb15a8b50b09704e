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

# An Iceberg REST catalog server (Iceberg's RESTCatalogServer test fixture over a JdbcCatalog on SQLite) for
# tests/core/iceberg/test_catalogs.py, in its own folder: the tests' Spark session puts every jar of $JARS_DIR on
# its classpath, and these (Iceberg 1.10 core, Jetty 11, Hadoop's client) must stay off it. 1.10.0 is the newest
# iceberg-open-api test-fixtures jar Maven Central serves; its pom lists no dependencies, so they are named here.
REST_DIR="$JARS_DIR/rest"
REST_ARTIFACTS=(
  org.apache.iceberg:iceberg-open-api:1.10.0:test-fixtures
  org.apache.iceberg:iceberg-core:1.10.0:
  org.apache.iceberg:iceberg-core:1.10.0:tests
  org.eclipse.jetty:jetty-servlet:11.0.25:
  org.apache.hadoop:hadoop-client-api:3.4.2:
  org.apache.hadoop:hadoop-client-runtime:3.4.2:
  org.xerial:sqlite-jdbc:3.50.3.0:
  org.slf4j:slf4j-simple:2.0.17:
)
REST_STAMP="$(printf '%s\n' "${REST_ARTIFACTS[@]}")"
if [ ! -f "$REST_DIR/.complete" ] || [ "$(cat "$REST_DIR/.complete")" != "$REST_STAMP" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  {
    echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
    echo '<groupId>local.deltaberg</groupId><artifactId>rest-catalog-server</artifactId><version>0</version>'
    echo '<packaging>pom</packaging><dependencies>'
    for artifact in "${REST_ARTIFACTS[@]}"; do
      IFS=: read -r group name version classifier <<< "$artifact"
      echo "<dependency><groupId>$group</groupId><artifactId>$name</artifactId><version>$version</version>"
      [ -n "$classifier" ] && echo "<classifier>$classifier</classifier>"
      echo '</dependency>'
    done
    echo '</dependencies></project>'
  } > "$work/pom.xml"
  # Into a fresh folder first: an interrupted download never leaves a folder that looks complete.
  mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$work/jars" >&2
  printf '%s' "$REST_STAMP" > "$work/jars/.complete"
  rm -rf "$REST_DIR"
  mv "$work/jars" "$REST_DIR"
fi
# S3 for that REST server (Iceberg's S3FileIO, the AWS SDK v2 bundle Iceberg publishes for it, and the retry
# library S3FileIO needs besides), in a folder of
# their own: only the server of the cluster + S3 tests (tests/operators/test_cluster_s3.py) puts them on its
# classpath, next to $REST_DIR. The converter itself needs no jar for S3: it writes through fsspec (s3fs).
REST_AWS_DIR="$JARS_DIR/rest-aws"
REST_AWS_ARTIFACTS=(
  org.apache.iceberg:iceberg-aws:1.10.0
  org.apache.iceberg:iceberg-aws-bundle:1.10.0
  dev.failsafe:failsafe:3.3.2
)
mkdir -p "$REST_AWS_DIR"
for artifact in "${REST_AWS_ARTIFACTS[@]}"; do
  IFS=: read -r group name version <<< "$artifact"
  if [ ! -f "$REST_AWS_DIR/$name-$version.jar" ]; then
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$REST_AWS_DIR" -Dtransitive=false >&2
  fi
done
ls "$JARS_DIR"/*.jar
