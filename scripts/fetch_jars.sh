#!/usr/bin/env bash
# Fetch the Spark jars the tests and the Spark jobs use into .jars/ (cached; Maven Central through mvn).
# Versions must match pyspark's minor version pinned in pyproject.toml (Spark 4.1, Scala 2.13).
# Whatever is missing is fetched by one mvn run (a generated pom): each mvn start costs ~7 s of CPU, and a clean
# clone needs all of them while setup.sh installs .venv on the same cores.
set -euo pipefail
cd "$(dirname "$0")/.."
JARS_DIR=${DELTABERG_JARS_DIR:-.jars}
mkdir -p "$JARS_DIR"
JARS_DIR=$(cd "$JARS_DIR" && pwd)  # the generated pom lives elsewhere: Maven reads relative paths from there
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

# One jar each, without its dependencies (dependency:copy's artifact items), where it is missing.
items=""
missing() {  # missing DIR ARTIFACT...
  local dir=$1 artifact group name version
  shift
  for artifact in "$@"; do
    IFS=: read -r group name version <<< "$artifact"
    if [ ! -f "$dir/$name-$version.jar" ]; then
      items+="<artifactItem><groupId>$group</groupId><artifactId>$name</artifactId><version>$version</version>"
      items+="<outputDirectory>$dir</outputDirectory></artifactItem>"
    fi
  done
}
missing "$JARS_DIR" "${ARTIFACTS[@]}"
missing "$REST_AWS_DIR" "${REST_AWS_ARTIFACTS[@]}"
goals=()
[ -n "$items" ] && goals+=(dependency:copy@jars)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The REST server's jars with their runtime dependencies (dependency:copy-dependencies of the pom's dependencies),
# into a fresh folder first: an interrupted download never leaves a folder that looks complete.
dependencies=""
if [ ! -f "$REST_DIR/.complete" ] || [ "$(cat "$REST_DIR/.complete")" != "$REST_STAMP" ]; then
  goals+=(dependency:copy-dependencies@rest)
  for artifact in "${REST_ARTIFACTS[@]}"; do
    IFS=: read -r group name version classifier <<< "$artifact"
    dependencies+="<dependency><groupId>$group</groupId><artifactId>$name</artifactId><version>$version</version>"
    [ -n "$classifier" ] && dependencies+="<classifier>$classifier</classifier>"
    dependencies+='</dependency>'
  done
fi
if [ ${#goals[@]} -gt 0 ]; then
  # maven-dependency-plugin 2.8: the version Maven 3.8's `dependency:` prefix resolves to.
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>local.deltaberg</groupId><artifactId>deltaberg-jars</artifactId><version>0</version><packaging>pom</packaging>
<dependencies>$dependencies</dependencies>
<build><plugins><plugin>
<groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId><version>2.8</version>
<executions>
<execution><id>jars</id><configuration><artifactItems>$items</artifactItems></configuration></execution>
<execution><id>rest</id><configuration><includeScope>runtime</includeScope>
<outputDirectory>$work/jars</outputDirectory></configuration></execution>
</executions></plugin></plugins></build></project>
POM
  mvn -q -B -f "$work/pom.xml" "${goals[@]}" >&2
  if [ -n "$dependencies" ]; then
    printf '%s' "$REST_STAMP" > "$work/jars/.complete"
    rm -rf "$REST_DIR"
    mv "$work/jars" "$REST_DIR"
  fi
fi
ls "$JARS_DIR"/*.jar
