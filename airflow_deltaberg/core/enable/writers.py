"""Which known engines can still write (and read) a table after ``enable`` at each level: the one table of known
engine support. ``plan_enable``, the CLI and the operator list it for the chosen level; docs/enable.md's table is
generated from it (``markdown_table``), and tests/spark/test_enable_writers.py checks every cell marked ``tested``
against the jars and wheels the tests have (an append or a read that must succeed or be refused as written here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WRITES, REFUSES, UNKNOWN = "writes", "refuses", "unknown"
READS = "reads"


@dataclass(frozen=True)
class Engine:
    """A writer or reader: ``key`` is stable (tests name cells by it), ``name`` says which version."""

    key: str
    name: str
    role: str  # "writer" or "reader"
    #: "tested" (a test appends/reads with it after an enable) or "documented" (the vendor's documentation).
    source: str


@dataclass(frozen=True)
class Support:
    """What one engine does with a table enabled at one level."""

    engine: Engine
    level: str
    outcome: str  # writes / refuses / unknown (writers); reads / refuses (readers)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (WRITES, READS)

    def text(self) -> str:
        return f"{self.engine.name}: {self.outcome}" + (f" ({self.note})" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine.key, "name": self.engine.name, "role": self.engine.role,
                "outcome": self.outcome, "note": self.note, "source": self.engine.source}


DELTA_SPARK_44 = Engine("delta-spark-4.4", "Delta on Spark 4.4.0 (Spark 4.1)", "writer", "tested")
DELTA_SPARK_31_43 = Engine("delta-spark-3.1-4.3", "Delta on Spark 3.1 to 4.3", "writer", "documented")
DELTA_SPARK_30 = Engine("delta-spark-3.0", "Delta on Spark 3.0 and older", "writer", "documented")
KERNEL_44 = Engine("delta-kernel-4.4", "Delta Kernel (Java) 4.4.0", "writer", "tested")
DELTALAKE = Engine("deltalake-1.6", "deltalake (delta-rs) 1.6.6", "writer", "tested")
DATABRICKS = Engine("databricks", "Databricks Runtime", "writer", "documented")

SPARK_READER = Engine("delta-spark-4.4-read", "Delta on Spark 4.4.0 reads", "reader", "tested")
DELTALAKE_ARROW = Engine("deltalake-1.6-to_pyarrow_table", "deltalake 1.6.6 DeltaTable.to_pyarrow_table()", "reader",
                         "tested")
DELTALAKE_QUERY = Engine("deltalake-1.6-QueryBuilder", "deltalake 1.6.6 QueryBuilder (DataFusion)", "reader",
                         "tested")

ENGINES = (DELTA_SPARK_44, DELTA_SPARK_31_43, DELTA_SPARK_30, KERNEL_44, DELTALAKE, DATABRICKS, SPARK_READER,
           DELTALAKE_ARROW, DELTALAKE_QUERY)

_SPARK_REFUSES = "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE"
_KERNEL_PHYSICAL = ("Transaction.transformLogicalData refuses column-mapped tables: the writer hands Kernel the "
                    "physical batch and commits generateAppendActions")
_DELTALAKE_REFUSES = "Unsupported table features required"
_TO_PYARROW = ("DeltaProtocolError: reader feature columnMapping is not supported by the deltalake reader; "
               "QueryBuilder reads")

WV1, CV2, WV3 = "writer-compat-v1", "compat-v2", "writer-compat-v3"

#: (engine, level) -> (outcome, note).
_TABLE: dict[tuple[Engine, str], tuple[str, str]] = {
    (DELTA_SPARK_44, WV1): (REFUSES, f"{_SPARK_REFUSES}: icebergWriterCompatV1"),
    (DELTA_SPARK_44, CV2): (WRITES, ""),
    (DELTA_SPARK_44, WV3): (REFUSES, f"{_SPARK_REFUSES}: icebergWriterCompatV3"),
    (DELTA_SPARK_31_43, WV1): (REFUSES, "no IcebergWriterCompatV1 in Delta on Spark"),
    (DELTA_SPARK_31_43, CV2): (WRITES, "IcebergCompatV2 since Delta 3.1"),
    (DELTA_SPARK_31_43, WV3): (REFUSES, "no IcebergWriterCompatV3 in Delta on Spark"),
    (DELTA_SPARK_30, WV1): (REFUSES, "no IcebergWriterCompatV1 in Delta on Spark"),
    (DELTA_SPARK_30, CV2): (REFUSES, "IcebergCompatV2 came with Delta 3.1"),
    (DELTA_SPARK_30, WV3): (REFUSES, "no IcebergWriterCompatV3 in Delta on Spark"),
    (KERNEL_44, WV1): (WRITES, _KERNEL_PHYSICAL),
    (KERNEL_44, CV2): (WRITES, _KERNEL_PHYSICAL),
    (KERNEL_44, WV3): (WRITES, _KERNEL_PHYSICAL),
    (DELTALAKE, WV1): (REFUSES, f"{_DELTALAKE_REFUSES}: IcebergCompatV2, icebergWriterCompatV1"),
    (DELTALAKE, CV2): (REFUSES, f"{_DELTALAKE_REFUSES}: IcebergCompatV2"),
    (DELTALAKE, WV3): (REFUSES, f"{_DELTALAKE_REFUSES}: IcebergCompatV3, icebergWriterCompatV3, DomainMetadata, "
                                "RowTracking"),
    (DATABRICKS, WV1): (WRITES, "IcebergWriterCompatV1 comes from Databricks; first version not pinned here"),
    (DATABRICKS, CV2): (WRITES, "UniForm with IcebergCompatV2, Databricks Runtime 14.3 LTS and later"),
    (DATABRICKS, WV3): (UNKNOWN, "not documented"),
    (SPARK_READER, WV1): (READS, ""),
    (SPARK_READER, CV2): (READS, ""),
    (SPARK_READER, WV3): (READS, ""),
    (DELTALAKE_ARROW, WV1): (REFUSES, _TO_PYARROW),
    (DELTALAKE_ARROW, CV2): (REFUSES, _TO_PYARROW),
    (DELTALAKE_ARROW, WV3): (REFUSES, _TO_PYARROW),
    (DELTALAKE_QUERY, WV1): (READS, ""),
    (DELTALAKE_QUERY, CV2): (READS, ""),
    (DELTALAKE_QUERY, WV3): (READS, ""),
}

LEVELS = (WV1, CV2, WV3)


def support(level: str) -> tuple[Support, ...]:
    """Every known engine's support of a table enabled at ``level`` (ValueError for a level not in the table)."""
    if level not in LEVELS:
        raise ValueError(f"no writer support is known for level {level!r}")
    return tuple(Support(engine, level, *_TABLE[(engine, level)]) for engine in ENGINES)


def cell(engine: Engine, level: str) -> Support:
    return Support(engine, level, *_TABLE[(engine, level)])


@dataclass(frozen=True)
class WriterImpact:
    """For one level: the writers that can still write, those that will refuse, and what readers do."""

    level: str
    entries: tuple[Support, ...]

    @property
    def can_write(self) -> tuple[Support, ...]:
        return tuple(s for s in self.entries if s.engine.role == "writer" and s.outcome == WRITES)

    @property
    def will_refuse(self) -> tuple[Support, ...]:
        return tuple(s for s in self.entries if s.engine.role == "writer" and s.outcome == REFUSES)

    @property
    def unknown(self) -> tuple[Support, ...]:
        return tuple(s for s in self.entries if s.engine.role == "writer" and s.outcome == UNKNOWN)

    @property
    def readers(self) -> tuple[Support, ...]:
        return tuple(s for s in self.entries if s.engine.role == "reader")

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "can_write": [s.to_dict() for s in self.can_write],
                "will_refuse": [s.to_dict() for s in self.will_refuse],
                "unknown": [s.to_dict() for s in self.unknown], "readers": [s.to_dict() for s in self.readers]}

    def lines(self) -> list[str]:
        """The impact as text lines (the CLI's and the operator log's)."""
        out = ["can still write:", *(f"  - {s.text()}" for s in self.can_write),
               "will refuse to write:", *(f"  - {s.text()}" for s in self.will_refuse)]
        if self.unknown:
            out += ["not known:", *(f"  - {s.text()}" for s in self.unknown)]
        out += ["readers:", *(f"  - {s.text()}" for s in self.readers)]
        return out


def impact(level: str) -> WriterImpact:
    return WriterImpact(level, support(level))


def markdown_table() -> str:
    """The table as Markdown (docs/enable.md holds exactly this; a test keeps them equal)."""
    head = "| Engine | " + " | ".join(f"`{level}`" for level in LEVELS) + " | Verified |"
    rule = "|---|" + "---|" * len(LEVELS) + "---|"
    rows = []
    for engine in ENGINES:
        cells = []
        for level in LEVELS:
            s = cell(engine, level)
            cells.append(s.outcome + (f" ({s.note})" if s.note else ""))
        source = "by test" if engine.source == "tested" else "documentation"
        rows.append(f"| {engine.name} | " + " | ".join(cells) + f" | {source} |")
    return "\n".join([head, rule, *rows])
