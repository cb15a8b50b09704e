"""Delta's refusals against our validator's verdicts: an action Delta must refuse (and its error text), the same
table state committed without Delta's checks (a metaData/protocol commit copied from our snapshot), and the
validator's outcome on a table (compliant, data checks included, or the rule ids it fails)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_deltaberg.core.compat import validate
from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.delta.log.commit import write_commit

#: The error class of every IcebergCompat rule Delta on Spark enforces (a sub-class names the rule).
COMPAT = "DELTA_ICEBERG_COMPAT_VIOLATION"


def error_text(exc: BaseException) -> str:
    """Error class and message of a Spark (captured or raw py4j) or Kernel exception."""
    condition = getattr(exc, "getCondition", lambda: None)()
    java = getattr(exc, "java_exception", None)
    parts = [type(exc).__name__, str(condition or "")]
    parts.append(f"{java.getClass().getName()}: {java.getMessage()}" if java is not None else str(exc))
    return " ".join(parts)


def refused(action: Callable[[], Any], *needles: str) -> str:
    """Run ``action``, which Delta must refuse with an error containing every needle; returns the error."""
    try:
        action()
    except Exception as exc:  # py4j and pyspark raise many types: the text is what counts
        text = error_text(exc)
        missing = [n for n in needles if n not in text]
        assert not missing, f"Delta refused, but the error lacks {missing}:\n{text[:3000]}"
        return text
    raise AssertionError(f"Delta accepted what it should refuse (expected an error with {needles})")


def commit_state(
    path: Path,
    *,
    configuration: dict[str, str] | None = None,
    writer_features: frozenset[str] | set[str] = frozenset(),
    reader_features: frozenset[str] | set[str] = frozenset(),
    min_reader_version: int = 1,
    schema: dict[str, Any] | None = None,
) -> int:
    """Commit the table's metaData and protocol, copied from our snapshot, with changes: what Delta would have
    committed without its checks. Reader features lift the protocol to reader version 3."""
    table = DeltaTable(str(path))
    snap = table.snapshot()
    metadata = snap.metadata.to_action()
    metadata["configuration"] = {**metadata["configuration"], **(configuration or {})}
    if schema is not None:
        metadata["schemaString"] = json.dumps(schema)
    protocol = snap.protocol.to_action()
    readers = set(snap.protocol.effective_reader_features) | set(reader_features)
    reader_version = max(protocol["minReaderVersion"], min_reader_version, 3 if reader_features else 1)
    protocol.update(
        minReaderVersion=reader_version,
        minWriterVersion=7,
        writerFeatures=sorted(set(snap.protocol.effective_writer_features) | set(writer_features) | readers),
    )
    protocol.pop("readerFeatures", None)
    if reader_version >= 3:
        protocol["readerFeatures"] = sorted(readers)
    return write_commit(
        table,
        [{"protocol": protocol}, {"metaData": metadata}],
        read_version=snap.version,
        operation="SET TBLPROPERTIES",
        parameters={"properties": configuration or {}},
    )


def add_column(path: Path, name: str, type_: Any, config: dict[str, str] | None = None) -> tuple[dict, dict]:
    """The schema (JSON) and configuration with one more column, id maxColumnId + 1, physical name col-<id>."""
    snap = DeltaTable(str(path)).snapshot()
    schema = json.loads(snap.metadata.schema_string)
    new_id = int(snap.metadata.configuration["delta.columnMapping.maxColumnId"]) + 1
    schema["fields"].append({
        "name": name, "type": type_, "nullable": True,
        "metadata": {"delta.columnMapping.id": new_id, "delta.columnMapping.physicalName": f"col-{new_id}"},
    })
    return schema, {**(config or {}), "delta.columnMapping.maxColumnId": str(new_id)}


def assert_compliant(path: Path, level: str, *, version: int | None = None) -> Any:
    report = validate(str(path), level, version=version, data_checks=True)
    assert report.violations == (), report.to_text()
    assert report.files_sampled > 0, "the data checks looked at no file"
    return report


def failed_rules(path: Path, level: str) -> set[str]:
    return validate(str(path), level, data_checks=True).failed_rule_ids
