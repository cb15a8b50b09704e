"""The two paths of DeltaCommitSensor reach the same outcome from the same table state: a poke, and the event of
DeltaCommitTrigger handed to execute_complete. Same XCom value, same exception type, same message."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout
from deltalake import write_deltalake

from airflow_deltaberg.core.errors import StorageError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.sensors import DeltaCommitSensor
from airflow_deltaberg.triggers import DeltaCommitTrigger

DATA = pa.table({"id": pa.array([1], pa.int64())})


def make_sensor(table: Path | str, **kwargs: Any) -> DeltaCommitSensor:
    return DeltaCommitSensor(task_id="wait", table_uri=str(table), poke_interval=0.1, timeout=30, **kwargs)


def trigger_for(sensor: DeltaCommitSensor, end_at: float | None = None) -> DeltaCommitTrigger:
    start = None if sensor.start_version is None else int(sensor.start_version)
    return DeltaCommitTrigger(
        table_uri=sensor.table_uri, start_version=start, start_from="version" if start is not None else "iceberg",
        min_commits=sensor.min_commits, wait_for_table=sensor.wait_for_table, poll_interval=0.1,
        deltaberg_conn_id=sensor.deltaberg_conn_id, end_at=end_at,
    )


def event_of(trigger: DeltaCommitTrigger) -> dict[str, Any]:
    async def _first() -> dict[str, Any]:
        return (await asyncio.wait_for(anext(trigger.run()), 30)).payload

    # Through JSON, as the event travels through the metadata DB.
    return json.loads(json.dumps(asyncio.run(_first())))


def both_paths(sensor: DeltaCommitSensor, end_at: float | None = None) -> list[Any]:
    """[poke outcome, trigger-path outcome]: the XCom value, or (exception type, message)."""
    outcomes: list[Any] = []
    for run in (lambda: sensor.poke({}).xcom_value,  # type: ignore[arg-type]
                lambda: sensor.execute_complete({}, event_of(trigger_for(sensor, end_at)))):  # type: ignore[arg-type]
        try:
            outcomes.append(run())
        except Exception as exc:
            outcomes.append((type(exc), str(exc)))
    return outcomes


def test_success_gives_the_same_xcom(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for mode in ("error", "append", "append"):
        write_deltalake(str(table), DATA, mode=mode)
    poke, deferred = both_paths(make_sensor(table, start_version=0, min_commits=2))
    assert poke == deferred == {
        "table": str(table), "from_version": 1, "to_version": 2, "new_commits": 2, "start_version": 0,
        "start_from": "version",
    }


def test_iceberg_start_gives_the_same_xcom(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    convert(str(table))
    write_deltalake(str(table), DATA, mode="append")
    poke, deferred = both_paths(make_sensor(table))
    assert poke == deferred and (poke["start_version"], poke["to_version"], poke["start_from"]) == (0, 1, "iceberg")


def test_missing_table(tmp_path: Path) -> None:
    poke, deferred = both_paths(make_sensor(tmp_path / "none", start_version=0))
    assert poke == deferred
    kind, message = poke
    assert kind is AirflowFailException
    assert message.startswith("NotADeltaTableError: no Delta table here")
    assert f"file {tmp_path / 'none' / '_delta_log'}" in message


def test_start_version_never_reached(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    poke, deferred = both_paths(make_sensor(table, start_version=5))
    assert poke == deferred
    assert poke[0] is AirflowFailException and "VersionNotFoundError: the start version 5" in poke[1]
    assert f"table {table}, version 5" in poke[1]


def test_unreadable_storage_is_a_retryable_storage_error(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    shutil.rmtree(table / "_delta_log")
    (table / "_delta_log").symlink_to(table / "_delta_log")  # ELOOP: unreadable for root too
    poke, deferred = both_paths(make_sensor(table, start_version=0))
    assert poke == deferred
    assert poke[0] is StorageError
    assert f"table {table}: cannot read {table / '_delta_log' / '_last_checkpoint'}" in poke[1]


def test_iceberg_metadata_without_a_delta_version(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    location = Path(convert(str(table)).metadata_location.removeprefix("file://"))
    metadata = json.loads(location.read_text())
    metadata["properties"].pop("delta-version")
    for snapshot in metadata["snapshots"]:
        snapshot["summary"].pop("delta-version")
    location.write_text(json.dumps(metadata))
    poke, deferred = both_paths(make_sensor(table))
    assert poke == deferred
    assert poke[0] is AirflowFailException and poke[1].startswith("IcebergStartError:")
    assert str(location) in poke[1]


def test_unusable_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_WRONG_KIND", json.dumps({"conn_type": "http", "host": "example.invalid"}))
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    poke, deferred = both_paths(make_sensor(table, start_version=0, deltaberg_conn_id="wrong_kind"))
    assert poke == deferred
    assert poke[0] is AirflowFailException and "connection 'wrong_kind'" in poke[1] and "'http'" in poke[1]


def test_timeout_event_is_a_sensor_timeout(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    sensor = make_sensor(table, start_version=0)
    assert sensor.poke({}).is_done is False  # type: ignore[arg-type]
    with pytest.raises(AirflowSensorTimeout, match="0 new commit"):
        sensor.execute_complete({}, event_of(trigger_for(sensor, end_at=time.time() + 0.3)))  # type: ignore[arg-type]


def test_arguments_are_checked_when_the_dag_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="start_from"):
        make_sensor(tmp_path, start_from="latest")
    with pytest.raises(ValueError, match="min_commits"):
        make_sensor(tmp_path, min_commits=0)
    with pytest.raises(AirflowFailException, match="start_version"):
        make_sensor(tmp_path, start_version="v3").poke({})  # type: ignore[arg-type]


class LogRecorder:
    """A stand-in for a task's logger: the (level, message) of every call."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda msg, *args, **kwargs: self.lines.append((level, msg % args if args else msg))


def test_each_poke_and_poll_that_waits_logs_at_debug_only(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), DATA)
    sensor = make_sensor(table, start_version=0)
    sensor._cached_logger = LogRecorder()
    for _ in range(3):
        assert sensor.poke({}).is_done is False  # type: ignore[arg-type]
    waiting = [(level, line) for level, line in sensor._cached_logger.lines if "0 new commit(s)" in line]
    assert [level for level, _ in waiting] == ["debug"] * 3
    assert [level for level, line in sensor._cached_logger.lines if "Waiting for 1 new commit(s)" in line] == ["info"]

    trigger = trigger_for(sensor, end_at=time.time() + 0.5)
    trigger._log = LogRecorder()
    assert event_of(trigger)["status"] == "timeout"
    assert trigger._log.lines and {level for level, _ in trigger._log.lines} == {"debug"}
