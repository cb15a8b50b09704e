"""The protocol between the Spark applications (spark/regenerate.py, spark/enable_rewrite.py) and the operators
that submit them: arguments, the result document, the exit codes, and the error rebuilt from a document.
Importing it needs neither pyspark nor Airflow.

**Arguments.** A JSON object argument (storage options, catalog properties) is the JSON itself or ``@PATH``, a
file the submitting side wrote readable by its user only (a command line is visible to every user of the machine).
``--result-file LOCATION`` (a path or any fsspec location, reached with ``--storage-options-json``) is where the
document goes.

**Result document.**

- success: ``{"result": {...}}``, the application's payload (a ConversionResult or RewriteResult dict);
- failure: ``{"error": {"type", "message", "table", "version", "file", "retryable"}}``. ``type`` is the stable name
  of a core error class (``core.errors.error_classes()``); table, version and file are a DeltaError's, else null.
  An EnableBlockedError also carries ``plan`` (``EnablePlan.to_dict()``), a ComplianceViolationError ``report``.
  Any other exception is reported by its class name and is retryable (a lost executor or an out-of-memory worker
  may well pass on the next try).

**Exit codes.** ``EXIT_OK`` (0) success; ``EXIT_ERROR`` (2) a core error, described in the document; an unexpected
exception writes its document, then ends the application with its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from airflow_deltaberg.core.errors import (
    ComplianceViolationError,
    DeltabergError,
    DeltaError,
    EnableBlockedError,
    error_classes,
)
from airflow_deltaberg.core.storage import Storage, open_storage

EXIT_OK = 0
EXIT_ERROR = 2


# -- arguments ------------------------------------------------------------------------------------------------


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every application takes: the storage options and the result file."""
    parser.add_argument("--storage-options-json", default=None, help="fsspec storage options (JSON object or @FILE)")
    parser.add_argument("--result-file", default=None, help="write the result (or the error) here as JSON")


def json_object_argument(value: str | None, name: str) -> dict[str, Any] | None:
    """A JSON object argument, or ``@PATH`` for one kept in a file."""
    if not value:
        return None
    if value.startswith("@"):
        with open(value[1:], encoding="utf-8") as handle:
            value = handle.read()
    parsed = json.loads(value)
    if not isinstance(parsed, dict):
        raise SystemExit(f"{name} must be a JSON object, got {type(parsed).__name__}")
    return parsed


# -- the result document --------------------------------------------------------------------------------------


def success_document(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"result": dict(payload)}


def error_document(error: BaseException) -> dict[str, Any]:
    """The document of a failed run (see the module docstring)."""
    document: dict[str, Any] = {
        "error": {
            "type": type(error).__name__,
            "message": str(error),
            "table": getattr(error, "table", None),
            "version": getattr(error, "version", None),
            "file": getattr(error, "file", None),
            "retryable": bool(error.retryable) if isinstance(error, DeltabergError) else True,
        }
    }
    if isinstance(error, EnableBlockedError) and error.plan is not None:
        document["error"]["plan"] = error.plan.to_dict()
    if isinstance(error, ComplianceViolationError) and error.report is not None:
        document["error"]["report"] = error.report.to_dict()
    return document


def _result_store(location: str, storage_options: Mapping[str, Any] | None) -> tuple[Storage, str]:
    """The storage of the folder holding ``location`` (with the table's storage options: a result on an object
    store is reached with the same credentials as the table), and the file's name in it."""
    folder, _, name = location.rstrip("/").rpartition("/")
    return open_storage(folder or ".", storage_options), name


def write_result(location: str | None, document: Mapping[str, Any],
                 storage_options: Mapping[str, Any] | None = None) -> None:
    if location:
        store, name = _result_store(location, storage_options)
        store.replace(name, json.dumps(document, indent=2).encode())


def read_result(location: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The document at ``location``, or None when the application wrote none (or not a JSON object)."""
    store, name = _result_store(location, storage_options)
    if not store.exists(name):
        return None
    try:
        document = json.loads(store.read(name))
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def remove_result(location: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Remove a result document left at ``location`` (by an earlier try)."""
    store, name = _result_store(location, storage_options)
    if store.exists(name):
        store.delete(name)


def error_from_document(document: Mapping[str, Any]) -> DeltabergError:
    """The error a failure document describes, as its own class: a core class by its stable name, with its
    message, the table, version and file of a DeltaError, the plan of an EnableBlockedError and the retryable of
    the document; an unknown type (a non-core failure) as a DeltabergError naming that type."""
    fields = document.get("error")
    if not isinstance(fields, Mapping):
        raise ValueError(f"not a failure document: {sorted(document)}")
    name = str(fields.get("type"))
    message = str(fields.get("message") or "the Spark application failed without a message")
    cls = error_classes().get(name)
    if cls is None:
        error = DeltabergError(f"{name}: {message}")
    else:
        # Built without its __init__: the classes take different arguments, and the message already names the
        # table, version and file.
        error = cls.__new__(cls)
        Exception.__init__(error, message)
        if isinstance(error, DeltaError):
            error.table, error.version, error.file = fields.get("table"), fields.get("version"), fields.get("file")
        if isinstance(error, EnableBlockedError):
            error.plan = _plan(fields.get("plan"))
        if isinstance(error, ComplianceViolationError):
            error.report = _report(fields.get("report"))
    retryable = bool(fields.get("retryable"))
    if error.retryable != retryable:
        error.retryable = retryable
    return error


def result_payload(document: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a success document; raises the error of a failure document."""
    if "error" in document:
        raise error_from_document(document)
    payload = document.get("result")
    if not isinstance(payload, Mapping):
        raise DeltabergError(f"the Spark application wrote a result document without a result: {sorted(document)}")
    return dict(payload)


def _plan(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return None
    from airflow_deltaberg.core.enable.plan import EnablePlan

    fields = EnablePlan.__dataclass_fields__
    return EnablePlan(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items() if k in fields})


def _report(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return None
    from airflow_deltaberg.core.compat.report import ComplianceReport

    return ComplianceReport.from_dict(value)


# -- the application's end ------------------------------------------------------------------------------------


def run_application(name: str, result_file: str | None, work: Callable[[], Mapping[str, Any]],
                    storage_options: Mapping[str, Any] | None = None) -> int:
    """Run ``work`` and report it: the result document in ``result_file``, the payload on stdout (indented JSON);
    on a core error its document, one line on stderr and ``EXIT_ERROR``. Any other exception is re-raised after
    its document is written (its traceback is what to look at)."""
    try:
        payload = work()
    except Exception as exc:
        write_result(result_file, error_document(exc), storage_options)
        if not isinstance(exc, DeltabergError):
            raise
        print(f"{name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    write_result(result_file, success_document(payload), storage_options)
    print(json.dumps(dict(payload), indent=2))
    return EXIT_OK
