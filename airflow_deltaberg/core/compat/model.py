"""The vocabulary of compliance checks: levels, rules, findings and what a rule sees of the table."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

import pyarrow as pa

from airflow_deltaberg.core.delta.models import Metadata, Protocol
from airflow_deltaberg.core.delta.schema import StructType
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.storage import Storage


class Level(str, Enum):
    """A compatibility level of the Delta protocol."""

    COMPAT_V1 = "compat-v1"
    COMPAT_V2 = "compat-v2"
    WRITER_COMPAT_V1 = "writer-compat-v1"
    COMPAT_V3 = "compat-v3"
    WRITER_COMPAT_V3 = "writer-compat-v3"

    @property
    def feature(self) -> str:
        return {
            Level.COMPAT_V1: "icebergCompatV1",
            Level.COMPAT_V2: "icebergCompatV2",
            Level.WRITER_COMPAT_V1: "icebergWriterCompatV1",
            Level.COMPAT_V3: "icebergCompatV3",
            Level.WRITER_COMPAT_V3: "icebergWriterCompatV3",
        }[self]

    @property
    def property(self) -> str:
        return {
            Level.COMPAT_V1: "delta.enableIcebergCompatV1",
            Level.COMPAT_V2: "delta.enableIcebergCompatV2",
            Level.WRITER_COMPAT_V1: "delta.enableIcebergWriterCompatV1",
            Level.COMPAT_V3: "delta.enableIcebergCompatV3",
            Level.WRITER_COMPAT_V3: "delta.enableIcebergWriterCompatV3",
        }[self]

    def checked_levels(self) -> tuple[Level, ...]:
        """The levels whose rules apply: a writer-compat level requires its compat level to hold too."""
        if self is Level.WRITER_COMPAT_V1:
            return (Level.COMPAT_V2, Level.WRITER_COMPAT_V1)
        if self is Level.WRITER_COMPAT_V3:
            return (Level.COMPAT_V3, Level.WRITER_COMPAT_V3)
        return (self,)


V1, V2, WV1 = Level.COMPAT_V1, Level.COMPAT_V2, Level.WRITER_COMPAT_V1
V3, WV3 = Level.COMPAT_V3, Level.WRITER_COMPAT_V3
ALL_LEVELS = frozenset(Level)
#: The levels that forbid deletion vectors (IcebergCompatV3 allows them).
BEFORE_V3 = frozenset({V1, V2, WV1})


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Location:
    """Where a violation is: kind is protocol, property, column, feature, file or table."""

    kind: str
    path: str

    def __str__(self) -> str:
        return f"{self.kind} {self.path}"


@dataclass(frozen=True)
class Finding:
    """One place where a rule does not hold."""

    message: str
    location: Location


@dataclass
class CheckContext:
    """What rules look at: the snapshot, and for data checks the storage and a sample of files."""

    snapshot: Snapshot
    storage: Storage
    sample_size: int | None = 20  # files whose footers the data checks read; None: every live file
    _footers: dict[str, object] = field(default_factory=dict)

    @property
    def protocol(self) -> Protocol:
        return self.snapshot.protocol

    @property
    def metadata(self) -> Metadata:
        return self.snapshot.metadata

    @property
    def schema(self) -> StructType:
        return self.snapshot.schema

    @property
    def config(self) -> dict[str, str]:
        return self.snapshot.metadata.configuration

    def property_true(self, key: str) -> bool:
        return self.snapshot.metadata.bool_property(key)

    def supports(self, feature: str) -> bool:
        """Whether the protocol supports a feature (listed, or implied by a legacy version)."""
        return self.protocol.supports(feature)

    @cached_property
    def adds(self) -> pa.Table:
        """Live files without parsed stats (cheap: no stats parsing)."""
        return self.snapshot.state.adds


Check = Callable[[CheckContext], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """A named requirement of one or more levels."""

    id: str
    title: str
    levels: frozenset[Level]
    check: Check
    hint: str
    spec: str
    severity: Severity = Severity.ERROR
    data: bool = False  # reads the files' stats or parquet footers


@dataclass(frozen=True)
class Violation:
    rule_id: str
    title: str
    levels: tuple[str, ...]
    severity: Severity
    message: str
    location: Location
    hint: str
    spec: str

    def to_dict(self) -> dict[str, object]:
        return {
            "rule_id": self.rule_id,
            "title": self.title,
            "levels": list(self.levels),
            "severity": self.severity.value,
            "message": self.message,
            "location": {"kind": self.location.kind, "path": self.location.path},
            "hint": self.hint,
            "spec": self.spec,
        }


def protocol_location(what: str) -> Location:
    return Location("protocol", what)


def property_location(key: str) -> Location:
    return Location("property", key)


def column_location(path: Iterable[str]) -> Location:
    return Location("column", ".".join(path))


def feature_location(name: str) -> Location:
    return Location("feature", name)
