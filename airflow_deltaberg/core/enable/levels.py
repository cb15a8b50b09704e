"""The levels ``enable`` can switch on, and what each asks of a table: the table features and properties it
commits, whether column mapping must be in id mode with ``col-<id>`` physical names, whether byte/short are
widened, whether the features outside IcebergWriterCompatV1's allowlist block it, and whether row tracking is
switched on (what Delta Kernel 4.4 itself writes when it creates a table at that level)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from airflow_deltaberg.core.compat.model import Level

ROW_TRACKING = "delta.enableRowTracking"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
#: The domain holding the row id high-water mark (Delta protocol, "Row Tracking").
ROW_TRACKING_DOMAIN = "delta.rowTracking"


@dataclass(frozen=True)
class EnableLevel:
    """What enabling ``level`` commits and requires."""

    level: Level
    #: Writer features the protocol gains (columnMapping is a reader feature too).
    features: frozenset[str]
    #: Properties set to these values.
    properties: tuple[tuple[str, str], ...]
    #: id mode and col-<id> physical names (the writer-compat levels); else name or id mode, names kept.
    id_mode: bool
    #: byte/short columns widened to integer (Iceberg has neither).
    widen: bool
    #: IcebergWriterCompat's disallowed features (CDF, constraints, identity, generated, outside the allowlist)
    #: block the enable.
    strict: bool
    #: Row tracking on (IcebergCompatV3): every live file needs a base row id, so a table with files is rewritten.
    row_tracking: bool = False

    @property
    def name(self) -> str:
        return self.level.value

    @property
    def title(self) -> str:
        """The feature's name as the Delta protocol writes it (IcebergWriterCompatV1, ...)."""
        return self.level.feature[0].upper() + self.level.feature[1:]


WRITER_COMPAT_V1 = EnableLevel(
    Level.WRITER_COMPAT_V1,
    frozenset({"columnMapping", "icebergCompatV2", "icebergWriterCompatV1"}),
    (("delta.columnMapping.mode", "id"), ("delta.enableIcebergCompatV2", "true"),
     ("delta.enableIcebergWriterCompatV1", "true")),
    id_mode=True, widen=True, strict=True,
)
COMPAT_V2 = EnableLevel(
    Level.COMPAT_V2,
    frozenset({"columnMapping", "icebergCompatV2"}),
    (("delta.enableIcebergCompatV2", "true"),),
    id_mode=False, widen=False, strict=False,
)
WRITER_COMPAT_V3 = EnableLevel(
    Level.WRITER_COMPAT_V3,
    frozenset({"columnMapping", "icebergCompatV3", "icebergWriterCompatV3", "rowTracking", "domainMetadata"}),
    (("delta.columnMapping.mode", "id"), ("delta.enableIcebergCompatV3", "true"),
     ("delta.enableIcebergWriterCompatV3", "true"), (ROW_TRACKING, "true")),
    id_mode=True, widen=True, strict=True, row_tracking=True,
)

#: The levels enable offers, the default first.
ENABLE_LEVELS: dict[str, EnableLevel] = {t.name: t for t in (WRITER_COMPAT_V1, COMPAT_V2, WRITER_COMPAT_V3)}
DEFAULT_LEVEL = WRITER_COMPAT_V1.name


def enable_level(level: str | Level | EnableLevel) -> EnableLevel:
    """The EnableLevel of a level name (ValueError naming the choices for any other)."""
    if isinstance(level, EnableLevel):
        return level
    name = level.value if isinstance(level, Level) else str(level)
    try:
        return ENABLE_LEVELS[name]
    except KeyError:
        raise ValueError(f"level must be one of {', '.join(ENABLE_LEVELS)}, not {name!r}") from None


def materialized_row_columns() -> dict[str, str]:
    """Fresh names of the materialized row id / row commit version columns, as Delta names them."""
    return {ROW_ID_COLUMN: f"_row-id-col-{uuid.uuid4()}",
            ROW_COMMIT_VERSION_COLUMN: f"_row-commit-version-col-{uuid.uuid4()}"}
