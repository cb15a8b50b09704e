"""What one enable rewrite did (the Spark application reports it through airflow_deltaberg.spark.protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


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

