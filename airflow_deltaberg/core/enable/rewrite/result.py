"""What one enable rewrite did, and the JSON document the Spark application reports it (or its error) in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_deltaberg.core import errors


@dataclass(frozen=True)
class RewriteResult:
    """What one enable rewrite did: the version it read and the version it committed."""

    table: str
    read_version: int
    version: int
    files_removed: int
    files_added: int
    rows_written: int
    bytes_written: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> RewriteResult:
        return cls(**{k: value[k] for k in cls.__dataclass_fields__})


def result_document(result: RewriteResult | None = None, error: BaseException | None = None) -> dict[str, Any]:
    """The JSON document the application writes to ``--result-file``: ``{"result": {...}}`` on success,
    ``{"error": {"type", "message", "table", "version", "file"}}`` on failure."""
    if result is not None:
        return {"result": result.to_dict()}
    assert error is not None
    return errors.error_document(error, retryable=bool(getattr(error, "retryable", False)))


def result_from_document(document: Mapping[str, Any]) -> RewriteResult:
    """The RewriteResult of a result document, or raise the typed error it describes (a DeltaError subclass
    of ``core.errors`` when the type is one, otherwise DeltabergError)."""
    if "result" in document:
        return RewriteResult.from_dict(document["result"])
    error = document.get("error") or {}
    cls = getattr(errors, str(error.get("type")), None)
    message = str(error.get("message") or "the enable rewrite failed without a message")
    if isinstance(cls, type) and issubclass(cls, errors.DeltaError) and error.get("table"):
        # Built without its __init__: subclasses take other arguments (EnableBlockedError takes the plan), and
        # the message already names table, version and file.
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        exc.table, exc.version, exc.file = error["table"], error.get("version"), error.get("file")
        raise exc
    if isinstance(cls, type) and issubclass(cls, errors.DeltabergError):
        raise cls(message)
    raise errors.DeltabergError(f"the enable rewrite failed: {error.get('type')}: {message}")
