"""ComplianceReport: the outcome of a validation, rendered as JSON, text or markdown.

JSON schema (``schema_version`` 1, stable; fields are only ever added):

    {
      "schema_version": 1,
      "table": str, "version": int, "level": str, "levels_checked": [str],
      "data_checks": bool, "files_sampled": int,
      "compliant": bool, "error_count": int, "warning_count": int,
      "rules_checked": [str],
      "violations": [
        {"rule_id": str, "title": str, "levels": [str], "severity": "error"|"warning",
         "message": str, "location": {"kind": str, "path": str}, "hint": str, "spec": str}
      ]
    }
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airflow_deltaberg.core import display
from airflow_deltaberg.core.compat.model import Severity, Violation

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ComplianceReport:
    table: str
    version: int
    level: str
    levels_checked: tuple[str, ...]
    data_checks: bool
    rules_checked: tuple[str, ...]
    violations: tuple[Violation, ...] = field(default_factory=tuple)
    files_sampled: int = 0

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity is Severity.ERROR]

    @property
    def compliant(self) -> bool:
        return not self.errors

    @property
    def failed_rule_ids(self) -> set[str]:
        return {v.rule_id for v in self.errors}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "table": self.table,
            "version": self.version,
            "level": self.level,
            "levels_checked": list(self.levels_checked),
            "data_checks": self.data_checks,
            "files_sampled": self.files_sampled,
            "compliant": self.compliant,
            "error_count": len(self.errors),
            "warning_count": len(self.violations) - len(self.errors),
            "rules_checked": list(self.rules_checked),
            "violations": [v.to_dict() for v in self.violations],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def summary(self) -> str:
        """One line (the table's location shown with control characters escaped, core.display)."""
        verdict = "COMPLIANT" if self.compliant else "NOT COMPLIANT"
        return (
            f"{verdict}: {display.text(self.table)} at version {self.version}, level {display.text(self.level)} "
            f"({len(self.rules_checked)} rules, {len(self.errors)} errors, "
            f"{len(self.violations) - len(self.errors)} warnings)"
        )

    def to_text(self) -> str:
        """The summary, then two lines a violation; names and messages from the table are shown escaped
        (core.display.text): a column name cannot start a line of its own."""
        lines = [self.summary()]
        for v in self.violations:
            lines.append(f"- [{v.severity.value}] {display.text(v.rule_id)}: {display.text(v.message)}")
            lines.append(f"    at {display.text(v.location)}; fix: {display.text(v.hint)}")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """A heading and a table of the violations; every value escaped for markdown (core.display)."""
        lines = [f"## {display.markdown(self.summary())}", ""]
        if not self.violations:
            lines.append("Every rule holds.")
            return "\n".join(lines)
        lines += ["| severity | rule | location | message | how to fix |", "|---|---|---|---|---|"]
        for v in self.violations:
            cells = [v.severity.value, display.code(v.rule_id),
                     f"{display.markdown(v.location.kind)} {display.code(v.location.path)}",
                     display.markdown(v.message), display.markdown(v.hint)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def render(self, fmt: str) -> str:
        return {"json": self.to_json, "text": self.to_text, "markdown": self.to_markdown}[fmt]()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ComplianceReport:
        from airflow_deltaberg.core.compat.model import Location

        violations = tuple(
            Violation(
                v["rule_id"], v["title"], tuple(v["levels"]), Severity(v["severity"]), v["message"],
                Location(v["location"]["kind"], v["location"]["path"]), v["hint"], v["spec"],
            )
            for v in data["violations"]
        )
        return cls(
            data["table"], data["version"], data["level"], tuple(data["levels_checked"]), data["data_checks"],
            tuple(data["rules_checked"]), violations, data.get("files_sampled", 0),
        )
