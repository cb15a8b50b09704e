"""The plan of enabling a level (IcebergWriterCompatV1 by default, IcebergCompatV2 or IcebergWriterCompatV3; see
core.enable.levels) on an existing table: the target protocol and metadata, what changes, whether the data must
be rewritten and why (reason codes), what blocks it, and which known writers can still write the table after
(core.enable.writers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_deltaberg.core.compat.data_rules import (
    num_records,
    parquet_field_ids,
    partition_values_materialized,
    timestamps_int64,
)
from airflow_deltaberg.core.compat.feature_rules import ALLOWED_FEATURES, ALLOWED_IF_INACTIVE, IDENTITY_KEYS
from airflow_deltaberg.core.compat.model import CheckContext, Finding, Level
from airflow_deltaberg.core.compat.schema_rules import MAX_COLUMN_ID, V2_PRIMITIVES
from airflow_deltaberg.core.compat.validate import validate_snapshot
from airflow_deltaberg.core.delta.schema import COLLATIONS_KEY, PrimitiveType, nested_slots
from airflow_deltaberg.core.delta.snapshot import Snapshot
from airflow_deltaberg.core.delta.table import DeltaTable
from airflow_deltaberg.core.enable.levels import (
    ROW_ID_COLUMN,
    ROW_TRACKING,
    WRITER_COMPAT_V1,
    EnableLevel,
    enable_level,
    materialized_row_columns,
)
from airflow_deltaberg.core.enable.schema import writer_compat_schema
from airflow_deltaberg.core.enable.writers import WriterImpact, impact
from airflow_deltaberg.core.storage import Storage, open_storage

# Reason codes: every reason string starts with one of them, then ": " and the details.
NO_COLUMN_MAPPING = "no-column-mapping"
NAME_MODE = "name-mode"
PHYSICAL_NAMES = "physical-names"
WIDEN_TYPES = "byte-short"
DELETION_VECTORS = "deletion-vectors"
PARTITION_VALUES = "partition-values-not-materialized"
NUM_RECORDS = "missing-num-records"
NESTED_IDS = "nested-ids"
FIELD_IDS = "parquet-field-ids"
INT96 = "int96-timestamps"
ROW_TRACKING_IDS = "row-tracking"

# Features dropped from the protocol (not in the IcebergWriterCompatV1 allowlist, and made inactive here).
DROPPABLE = {
    # Reader-writer feature. Versions before the enable keep their own protocol, so time travel to them still
    # applies their deletion vectors; no live file of the new version has one (the rewrite applies them).
    "deletionVectors": "delta.enableDeletionVectors",
    # Writer-only; IcebergCompatV2 (enabled here) supersedes it and the two must not be active together.
    "icebergCompatV1": "delta.enableIcebergCompatV1",
}
#: What IcebergWriterCompatV3 drops besides: the V2 family, which the V3 one supersedes.
DROPPABLE_AT_V3 = {
    "icebergCompatV2": "delta.enableIcebergCompatV2",
    "icebergWriterCompatV1": "delta.enableIcebergWriterCompatV1",
}
#: Features IcebergWriterCompatV3 allows beyond IcebergWriterCompatV1's allowlist.
ALLOWED_AT_V3 = frozenset({"icebergCompatV3", "icebergWriterCompatV3", "rowTracking", "domainMetadata"})


def _droppable(target: EnableLevel) -> dict[str, str]:
    return {**DROPPABLE, **DROPPABLE_AT_V3} if target.row_tracking else DROPPABLE


@dataclass(frozen=True)
class EnablePlan:
    """What enabling IcebergWriterCompatV1 on a table at ``read_version`` takes.

    ``protocol`` and ``metadata`` are the bodies of the `protocol` and `metaData` actions to commit.
    ``reasons`` say why the data files must be rewritten (each starts with a reason code), ``blockers``
    what prevents enabling at all (the user must act first), ``changes`` the metadata-level changes.
    """

    table: str
    read_version: int
    protocol: dict[str, Any]
    metadata: dict[str, Any]
    needs_rewrite: bool
    reasons: tuple[str, ...]
    blockers: tuple[str, ...]
    changes: tuple[str, ...] = ()
    already_enabled: bool = False
    num_files: int = 0
    level: str = WRITER_COMPAT_V1.name
    #: The schemaString at ``read_version`` (``metadata`` holds the one to commit); not part of ``to_dict``.
    read_schema: str = ""

    @property
    def writers(self) -> WriterImpact:
        """The known writers that can still write the table after the enable, those that will refuse, and
        what known readers do (core.enable.writers)."""
        return impact(self.level)

    @property
    def reason_codes(self) -> tuple[str, ...]:
        return tuple(r.split(":", 1)[0] for r in self.reasons)

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "level": self.level,
            "read_version": self.read_version,
            "already_enabled": self.already_enabled,
            "needs_rewrite": self.needs_rewrite,
            "reasons": list(self.reasons),
            "blockers": list(self.blockers),
            "changes": list(self.changes),
            "num_files": self.num_files,
            "protocol": self.protocol,
            "metadata": self.metadata,
            "writers": self.writers.to_dict(),
        }


def _reason(code: str, detail: str) -> str:
    return f"{code}: {detail}"


def _listed(paths: list[str], limit: int = 5) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more


# -- blockers -----------------------------------------------------------------------------------------------


def _blockers(snapshot: Snapshot, target: EnableLevel) -> list[str]:
    """Active features the level forbids that this project will not turn off for the user."""
    md = snapshot.metadata
    out = []
    if target.strict:
        out += _strict_blockers(snapshot, target)
    for path, f in snapshot.schema.walk():
        for suffix, t in [("", f.type), *nested_slots(f.type)]:
            if isinstance(t, PrimitiveType) and not t.is_decimal and t.name not in V2_PRIMITIVES:
                out.append(f"column {'.'.join(path)}{suffix} has type {t.name}, which IcebergCompatV2 does not "
                           "allow")
    unknown = [c for c in md.partition_columns if c not in snapshot.schema.names]
    if unknown:
        out.append(f"partition column(s) {', '.join(unknown)} are not in the schema")
    return out


def _strict_blockers(snapshot: Snapshot, target: EnableLevel) -> list[str]:
    """What the writer-compat levels forbid: change data feed, constraints, invariants, identity, generated and
    collated columns, features outside the allowlist."""
    md = snapshot.metadata
    out = []
    if md.bool_property("delta.enableChangeDataFeed"):
        out.append("change data feed is active (delta.enableChangeDataFeed=true): set it to false first "
                   "(consumers of the change feed lose it)")
    for key in sorted(md.configuration):
        if key.startswith("delta.constraints."):
            out.append(f"CHECK constraint {key[len('delta.constraints.'):]} is defined: "
                       "ALTER TABLE ... DROP CONSTRAINT first")
    for path, f in snapshot.schema.walk():
        where = ".".join(path)
        if "delta.invariants" in f.metadata:
            out.append(f"column {where} has an invariant (delta.invariants): drop it first")
        if any(k in f.metadata for k in IDENTITY_KEYS):
            out.append(f"column {where} is an identity column: recreate it without IDENTITY")
        if "delta.generationExpression" in f.metadata:
            out.append(f"column {where} is a generated column: recreate it without GENERATED ALWAYS AS")
        if COLLATIONS_KEY in f.metadata:
            out.append(f"column {where} is collated: collations are not allowed")
    features = snapshot.protocol.effective_reader_features | snapshot.protocol.effective_writer_features
    allowed = ALLOWED_FEATURES | ALLOWED_IF_INACTIVE | _droppable(target).keys()
    if target.row_tracking:
        allowed |= ALLOWED_AT_V3
    for name in sorted(features - allowed):
        out.append(f"table feature {name} is not allowed by {target.title} and cannot be removed "
                   "in place: recreate the table without it")
    return out


# -- target protocol and metadata ---------------------------------------------------------------------------


def _target_protocol(snapshot: Snapshot, target: EnableLevel) -> dict[str, Any]:
    p = snapshot.protocol
    droppable = _droppable(target).keys()
    reader = set(p.effective_reader_features) - droppable
    # Upgrading a legacy protocol lists every feature its versions imply: the protocol says to assume a
    # feature was used unless proven otherwise (the legacy ones are allowed while inactive).
    writer = set(p.effective_writer_features) - droppable
    reader.add("columnMapping")
    writer |= reader | target.features
    return {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": sorted(reader),
            "writerFeatures": sorted(writer)}


def _target_properties(snapshot: Snapshot, target: EnableLevel) -> dict[str, str]:
    config = snapshot.metadata.configuration
    properties = dict(target.properties)
    if not target.id_mode:
        mode = snapshot.metadata.column_mapping_mode
        properties["delta.columnMapping.mode"] = mode if mode in ("name", "id") else "id"
    if target.row_tracking and ROW_ID_COLUMN not in config:
        properties.update(materialized_row_columns())
    return properties


def _target_metadata(snapshot: Snapshot, target: EnableLevel) -> tuple[dict[str, Any], list[str], Any]:
    md = snapshot.metadata
    mode = md.column_mapping_mode
    try:
        declared = int(md.configuration.get(MAX_COLUMN_ID, "0"))
    except ValueError:
        declared = 0
    schema, max_id, schema_changes = writer_compat_schema(md.schema, keep_ids=mode in ("name", "id"),
                                                          max_column_id=declared, col_id_names=target.id_mode,
                                                          widen=target.widen)
    config = dict(md.configuration)
    changes = []
    for key, value in _target_properties(snapshot, target).items():
        if config.get(key) != value:
            changes.append(f"set {key}={value}")
        config[key] = value
    if config.get(MAX_COLUMN_ID) != str(max_id):
        changes.append(f"set {MAX_COLUMN_ID}={max_id}")
    config[MAX_COLUMN_ID] = str(max_id)
    features = snapshot.protocol.effective_reader_features | snapshot.protocol.effective_writer_features
    for feature, prop in _droppable(target).items():
        if feature in features or md.bool_property(prop):
            changes.append(f"drop table feature {feature} from the protocol and set {prop}=false")
            config[prop] = "false"
    action = md.to_action()
    action["schemaString"] = schema.to_json_string()
    action["configuration"] = config
    if schema_changes.ids_assigned:
        changes.append(f"assign column ids and col-<id> physical names to {_listed(schema_changes.ids_assigned)}")
    if schema_changes.renamed:
        changes.append(f"physical names become col-<id> for {_listed(schema_changes.renamed)}")
    if schema_changes.widened:
        changes.append(f"widen byte/short to integer: {_listed(schema_changes.widened)}")
    if schema_changes.nested_ids_assigned:
        changes.append(f"assign nested ids to {_listed(schema_changes.nested_ids_assigned)}")
    return action, changes, schema_changes


def _protocol_changes(snapshot: Snapshot, target: dict[str, Any]) -> list[str]:
    p = snapshot.protocol
    out = []
    if (p.min_reader_version, p.min_writer_version) != (3, 7):
        out.append(f"upgrade the protocol from {p.min_reader_version}/{p.min_writer_version} to 3/7")
    added = sorted(set(target["writerFeatures"]) - (p.effective_writer_features | p.effective_reader_features))
    if added:
        out.append(f"add table feature(s) {', '.join(added)}")
    return out


# -- reasons to rewrite the data -----------------------------------------------------------------------------


def _schema_reasons(snapshot: Snapshot, schema_changes: Any, target: EnableLevel) -> list[str]:
    mode = snapshot.column_mapping_mode
    out = []
    if mode not in ("name", "id"):
        out.append(_reason(NO_COLUMN_MAPPING, f"column mapping mode is {mode!r}: the data files have no parquet "
                           "field ids and use the logical column names"))
    elif mode == "name" and target.id_mode:
        out.append(_reason(NAME_MODE, "column mapping is in name mode: the data files must be rewritten with "
                           "parquet field ids and col-<id> column names"))
    elif schema_changes.renamed or schema_changes.ids_assigned:
        out.append(_reason(PHYSICAL_NAMES, "physical names are not col-<id> for "
                           f"{_listed(schema_changes.renamed + schema_changes.ids_assigned)}; stats and partition "
                           "values in the log are keyed by them, so every file is rewritten"))
    if schema_changes.widened:
        out.append(_reason(WIDEN_TYPES, f"byte/short column(s) {_listed(schema_changes.widened)} are widened to "
                           "integer in the data files"))
    if mode in ("name", "id") and not (mode == "name" and target.id_mode) and schema_changes.nested_ids_assigned:
        out.append(_reason(NESTED_IDS, f"nested id(s) for {_listed(schema_changes.nested_ids_assigned)} are new: "
                           "the data files must carry them as parquet field ids"))
    return out


def _file_reasons(snapshot: Snapshot, storage: Storage | None, target: EnableLevel) -> list[str]:
    """Reasons read from the log alone (no data file opened)."""
    out = []
    if target.row_tracking and not snapshot.metadata.bool_property(ROW_TRACKING):
        out.append(_reason(ROW_TRACKING_IDS, "row tracking is switched on: every live file needs a base row id "
                           "and a default row commit version, which only a rewrite commit assigns here"))
    dv = snapshot.state.adds.column("deletionVector")
    with_dv = len(dv) - dv.null_count
    if with_dv:
        out.append(_reason(DELETION_VECTORS, f"{with_dv} live file(s) carry deletion vectors; the rewrite "
                           "applies them"))
    findings = list(num_records(_context(snapshot, storage)))
    if findings:
        out.append(_reason(NUM_RECORDS, findings[0].message))
    return out


#: Footers read to explain a rewrite that is needed anyway (all files are read when the decision depends on them).
FOOTER_SAMPLE = 20


def _context(snapshot: Snapshot, storage: Storage | None, sample: int | None = None) -> CheckContext:
    # ``sample`` None: every live file, since a single file that breaks a rule breaks Iceberg readers.
    return CheckContext(snapshot, storage if storage is not None else open_storage(snapshot.table),
                        sample_size=max(snapshot.num_files, 1) if sample is None else sample)


def _footer_reasons(snapshot: Snapshot, storage: Storage | None, sample: int | None) -> list[str]:
    """Reasons read from parquet footers: of every live file (``sample`` None) or of an even sample."""
    ctx = _context(snapshot, storage, sample)
    scope = "" if sample is None or sample >= snapshot.num_files else f" (in a sample of {sample} files)"
    out = []
    for code, rule in ((PARTITION_VALUES, partition_values_materialized), (INT96, timestamps_int64),
                       (FIELD_IDS, parquet_field_ids)):
        findings: list[Finding] = list(rule(ctx))
        if findings:
            first = findings[0]
            more = f"; {len(findings)} file(s) in all" if len(findings) > 1 else ""
            out.append(_reason(code, f"{first.message} in {first.location.path}{more}{scope}"))
    return out


def plan_enable(snapshot: Snapshot, *, level: str | Level | EnableLevel = WRITER_COMPAT_V1.name,
                storage: Storage | None = None, footer_checks: bool = True) -> EnablePlan:
    """What enabling ``level`` (core.enable.levels; IcebergWriterCompatV1 by default) on ``snapshot`` takes.

    Reasons come from the schema and the log first. When those alone would allow a metadata-only enable, the
    parquet footers of every live file decide (partition values materialized, int64 timestamps, field ids);
    when a rewrite is needed anyway, a sample of footers adds what else the rewrite fixes. ``footer_checks``
    False reads no footer. ``storage`` is the table's storage (opened from the snapshot's location without
    options when None).
    """
    target = enable_level(level)
    protocol = _target_protocol(snapshot, target)
    metadata, meta_changes, schema_changes = _target_metadata(snapshot, target)
    blockers = tuple(_blockers(snapshot, target))
    reasons: list[str] = []
    if snapshot.num_files:
        reasons = _schema_reasons(snapshot, schema_changes, target) + _file_reasons(snapshot, storage, target)
        if footer_checks:
            reasons += _footer_reasons(snapshot, storage, FOOTER_SAMPLE if reasons else None)
    already = not blockers and not reasons and _compliant(snapshot, storage, target)
    changes = () if already else tuple(_protocol_changes(snapshot, protocol) + meta_changes)
    return EnablePlan(
        table=snapshot.table,
        read_version=snapshot.version,
        protocol=protocol,
        metadata=metadata,
        needs_rewrite=bool(reasons),
        reasons=tuple(reasons),
        blockers=blockers,
        changes=changes,
        already_enabled=already,
        num_files=snapshot.num_files,
        level=target.name,
        read_schema=snapshot.metadata.schema_string,
    )


def _compliant(snapshot: Snapshot, storage: Storage | None, target: EnableLevel) -> bool:
    """Whether the table already has the level on and passes the validator at it (then nothing is committed)."""
    md = snapshot.metadata
    if not all(md.configuration.get(key) == value for key, value in target.properties):
        return False
    table = DeltaTable(snapshot.table, storage=storage) if storage is not None else DeltaTable(snapshot.table)
    return validate_snapshot(snapshot, table, target.level).compliant
