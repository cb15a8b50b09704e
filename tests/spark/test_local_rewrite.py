"""The local session of `deltaberg enable`: its settings sized for one machine, and the user's kept (no JVM: the
session is a stand-in holding a configuration; tests/spark/test_enable_spark.py runs the real one)."""

from __future__ import annotations

import os

import pytest

from airflow_deltaberg.spark.local_rewrite import apply_defaults, local_cores, local_defaults


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[3]", 3), ("local[*]", os.cpu_count() or 1), ("local[4,2]", 4), (" local[2] ", 2),
    ("spark://host:7077", None), ("yarn", None), ("local-cluster[2,1,1024]", None), ("localhost", None),
])
def test_local_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


def test_local_defaults_are_sized_for_the_master() -> None:
    assert local_defaults("local[4]") == {"spark.sql.shuffle.partitions": "4",
                                          "spark.databricks.delta.snapshotPartitions": "4"}
    assert local_defaults("local")["spark.sql.shuffle.partitions"] == "2"  # never fewer than 2
    assert local_defaults("spark://host:7077") == {}  # a cluster keeps Spark's and Delta's own


class _Conf:
    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    def contains(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str) -> str:
        return self.values[key]

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    """What apply_defaults uses of a SparkSession: the configuration it started with, and the runtime one."""

    def __init__(self, started_with: dict[str, str]):
        self.sparkContext = type("Context", (), {"getConf": lambda _self: _Conf(started_with)})()
        self.conf = _Conf(started_with)


def test_defaults_fill_only_what_the_user_did_not_set() -> None:
    """A value from spark-defaults.conf or --conf in $PYSPARK_SUBMIT_ARGS (in the conf the session started with)
    is kept; the others take the local defaults."""
    session = _Session({"spark.sql.shuffle.partitions": "64"})
    applied = apply_defaults(session, local_defaults("local[2]"))
    assert applied == {"spark.databricks.delta.snapshotPartitions": "2"}
    assert session.conf.get("spark.sql.shuffle.partitions") == "64"
    assert session.conf.get("spark.databricks.delta.snapshotPartitions") == "2"
