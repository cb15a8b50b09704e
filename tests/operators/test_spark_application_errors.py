"""Every error a Spark application of this package raises arrives in the submitting operator as the same class
with the same ``retryable``: the applications' main() run in-process with a result file (Spark itself is not
needed for these failures), the operators' submit base (operators/spark_submit.py) reading it back. The real
spark-submit path is in test_regenerate_operator.py and tests/enable/test_enable_operator.py."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from deltalake import write_deltalake

from airflow_deltaberg.core.errors import (
    ConcurrentConversionError,
    DeltabergError,
    DeltaError,
    EnableBlockedError,
    NotADeltaTableError,
    StatsParseError,
    VersionNotFoundError,
    error_classes,
)
from airflow_deltaberg.operators.spark_submit import (
    SparkApplicationRun,
    SparkTarget,
    local_python_env,
    raise_task_failure,
    spark_target,
)
from airflow_deltaberg.spark import enable_rewrite, regenerate

LOCAL = SparkTarget(master="local[*]", deploy_mode=None, spark_binary="spark-submit")


class _Session:
    """Stands in for the SparkSession of enable_rewrite.main(): these failures come before Spark is used."""

    def stop(self) -> None:
        pass


def submitted(main: Callable[[list[str]], int], argv: list[str]) -> Callable[[], None]:
    """A submit that runs ``main`` here and fails as SparkSubmitHook.submit does on a non-zero exit."""

    def submit() -> None:
        try:
            code = main(argv)
        except Exception as exc:  # the application's own traceback: spark-submit exits non-zero
            raise AirflowException(f"Cannot execute: spark-submit. Error code is: 1 ({exc!r})") from exc
        if code != 0:
            raise AirflowException(f"Cannot execute: spark-submit. Error code is: {code}.")

    return submit


def arrived(main: Callable[[list[str]], int], argv: list[str], tmp_path: Path) -> DeltabergError:
    """What the operator's submit base raises after ``main`` ran with ``argv`` and a result file."""
    with SparkApplicationRun(LOCAL, "test-", str(tmp_path / "result.json")) as run:
        with pytest.raises(DeltabergError) as caught:
            run.result(submitted(main, [*argv, "--result-file", run.result_location]))
    assert isinstance(caught.value.__cause__, AirflowException)  # raised from the failed submit
    return caught.value


def an_error(cls: type[DeltabergError]) -> DeltabergError:
    if cls is EnableBlockedError:
        from airflow_deltaberg.core.enable.plan import EnablePlan

        plan = EnablePlan(table="/t", read_version=0, protocol={}, metadata={}, needs_rewrite=True, reasons=(),
                          blockers=("change data feed is active",))
        return cls("IcebergWriterCompatV1 cannot be enabled: change data feed is active", plan)
    if issubclass(cls, DeltaError):
        return cls(f"a {cls.__name__}", table="/t", version=1, file="/t/_delta_log/1.json")
    if cls is StatsParseError:  # names the row of the stats array it failed on
        return cls(f"a {cls.__name__}", row=0)
    return cls(f"a {cls.__name__}")


def failing(error: BaseException) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    return fail


@pytest.mark.parametrize("app", ["regenerate", "enable_rewrite"])
#: ComplianceViolationError is raised by the validate operator itself, never by a Spark application.
@pytest.mark.parametrize("name", sorted(set(error_classes()) - {"ComplianceViolationError"}))
def test_every_error_class_arrives_as_itself(app: str, name: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    error = an_error(error_classes()[name])
    if app == "regenerate":
        monkeypatch.setattr(regenerate, "regenerate", failing(error))
        main, argv = regenerate.main, ["--table", "/t"]
    else:
        monkeypatch.setattr(enable_rewrite, "_session", _Session)
        monkeypatch.setattr(enable_rewrite, "run_rewrite", failing(error))
        main, argv = enable_rewrite.main, ["--table", "/t", "--read-version", "0"]

    back = arrived(main, argv, tmp_path)

    assert type(back) is type(error) and back.retryable is error.retryable
    assert str(back) == str(error)
    if isinstance(error, DeltaError):
        assert (back.table, back.version, back.file) == (error.table, error.version, error.file)
    if isinstance(error, EnableBlockedError):
        assert back.plan == error.plan


def test_regenerate_of_a_missing_table(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    back = arrived(regenerate.main, ["--table", missing], tmp_path)
    assert type(back) is NotADeltaTableError and back.retryable is False and back.table == missing


def test_regenerate_beyond_the_latest_version(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": [1, 2]}))
    back = arrived(regenerate.main, ["--table", str(table), "--version", "5"], tmp_path)
    assert type(back) is VersionNotFoundError and back.retryable is False and back.table == str(table)


def test_enable_rewrite_of_a_blocked_table_carries_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"id": [1, 2]}), configuration={"delta.enableChangeDataFeed": "true"})
    monkeypatch.setattr(enable_rewrite, "_session", _Session)

    back = arrived(enable_rewrite.main, ["--table", str(table), "--read-version", "0"], tmp_path)

    assert type(back) is EnableBlockedError and back.retryable is False
    assert (back.plan.table, back.plan.read_version) == (str(table), 0)
    assert any("change data feed" in b for b in back.plan.blockers)


def test_an_unexpected_failure_arrives_retryable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regenerate, "regenerate", failing(RuntimeError("executor lost")))
    back = arrived(regenerate.main, ["--table", "/t"], tmp_path)
    assert type(back) is DeltabergError and back.retryable is True
    assert str(back) == "RuntimeError: executor lost"


def test_a_failed_submit_without_a_document_stays_the_submit_error(tmp_path: Path) -> None:
    def submit() -> None:
        raise AirflowException("Cannot execute: spark-submit. Error code is: 1.")

    with SparkApplicationRun(LOCAL, "test-") as run, pytest.raises(AirflowException, match="Error code is: 1"):
        run.result(submit)


def test_a_result_left_by_an_earlier_try_is_removed(tmp_path: Path) -> None:
    location = tmp_path / "result.json"
    location.write_text(json.dumps({"result": {"version": 1}}))
    with SparkApplicationRun(LOCAL, "test-", str(location)) as run:
        assert run.result(lambda: None) is None


# -- the task's outcome ---------------------------------------------------------------------------------------


def test_a_retryable_error_fails_the_task_as_itself() -> None:
    error = ConcurrentConversionError("metadata v4 was taken")
    cause = AirflowException("spark-submit failed")
    with pytest.raises(ConcurrentConversionError) as caught:
        raise_task_failure(error, "/t", cause)
    assert caught.value is error and error.__cause__ is cause


def test_an_error_that_retrying_cannot_fix_fails_without_retries() -> None:
    error = NotADeltaTableError("no _delta_log", table="/t")
    with pytest.raises(AirflowFailException) as caught:
        raise_task_failure(error, "/t")
    assert caught.value.__cause__ is error
    assert str(caught.value) == f"NotADeltaTableError: {error}"  # names the table once
    with pytest.raises(AirflowFailException, match=r"DeltabergError: no catalog \(table /t\)"):
        raise_task_failure(DeltabergError("no catalog"), "/t")


# -- where the submission goes --------------------------------------------------------------------------------


CONNECTIONS = {
    "local": ({"conn_type": "spark", "host": "local[2]"}, {}),
    "yarn_cluster": ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}, {}),
    "override": ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}},
                 {"deploy_mode": "client"}),
    "standalone": ({"conn_type": "spark", "host": "spark://master", "port": 7077}, {}),
    "uri_style": ({"conn_type": "spark", "host": "master", "port": 7077}, {}),
    "binary_extra": ({"conn_type": "spark", "host": "mesos://m:5050", "extra": {"spark-binary": "spark3-submit"}}, {}),
    "binary_argument": ({"conn_type": "spark", "host": "local"}, {"spark_binary": "spark3-submit"}),
}


@pytest.mark.parametrize("name", sorted(CONNECTIONS))
def test_spark_target_is_what_the_hook_resolves(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    connection, arguments = CONNECTIONS[name]
    monkeypatch.setenv(f"AIRFLOW_CONN_T_{name.upper()}", json.dumps(connection))

    target = spark_target(f"t_{name}", **arguments)

    # The hook's private resolution is the oracle here only; the operators never read it.
    resolved = SparkSubmitHook(conn_id=f"t_{name}", **arguments)._connection
    assert (target.master, target.deploy_mode, target.spark_binary) == (
        resolved["master"], resolved["deploy_mode"], resolved["spark_binary"])


def test_a_missing_connection_means_yarn() -> None:
    assert spark_target("no_such_connection") == SparkTarget("yarn", None, "spark-submit")
    assert spark_target(None, deploy_mode="cluster").driver_is_local is False


def test_local_master_runs_this_python_and_finds_spark_submit_beside_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no spark-submit on the PATH
    binary = Path(sys.executable).parent / "spark-submit"
    env = local_python_env(LOCAL, None, {"A": "1"})
    assert env is not None and env["A"] == "1" and env["PYSPARK_PYTHON"] == sys.executable
    if binary.is_file() and binary.stat().st_mode & stat.S_IXUSR:
        assert env["PATH"].split(":")[0] == str(binary.parent)
    assert "PYSPARK_PYTHON" not in (local_python_env(LOCAL, {"spark.pyspark.python": "/py"}, None) or {})
    yarn = SparkTarget("yarn", "cluster", "spark-submit")
    assert local_python_env(yarn, None, None) is None and local_python_env(yarn, None, {"A": "1"}) == {"A": "1"}
