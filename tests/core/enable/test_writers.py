"""The table of known writer support (core.enable.writers): one place, listed by the plan, and docs/enable.md's
copy kept equal to it. Its cells are checked against the real engines in tests/spark/test_enable_writers.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_deltaberg.core.delta import DeltaTable
from airflow_deltaberg.core.enable import writers
from airflow_deltaberg.core.enable.levels import ENABLE_LEVELS
from airflow_deltaberg.core.enable.plan import plan_enable

ENABLE_DOC = Path(__file__).resolve().parents[3] / "docs" / "enable.md"
START, END = "<!-- writer-table:start -->\n", "<!-- writer-table:end -->"


def test_enable_doc_holds_the_table() -> None:
    text = ENABLE_DOC.read_text(encoding="utf-8")
    assert START in text and END in text, "docs/enable.md lost its writer table markers"
    copy = text[text.index(START) + len(START):text.index(END)].strip()
    assert copy == writers.markdown_table(), "docs/enable.md's writer table differs from core/enable/writers.py: " \
                                             "paste writers.markdown_table() between the markers"


@pytest.mark.parametrize("level", list(ENABLE_LEVELS))
def test_the_plan_lists_the_writers_of_its_level(level: str, deltalake_table: Callable[..., Path],
                                                 rows: pa.Table) -> None:
    path = deltalake_table("t", data=rows.slice(0, 0))
    plan = plan_enable(DeltaTable(str(path)).snapshot(), level=level)
    assert plan.level == level
    impact = plan.writers
    assert impact.entries == writers.support(level)
    doc = plan.to_dict()["writers"]
    assert doc["level"] == level
    for key, group in (("can_write", impact.can_write), ("will_refuse", impact.will_refuse),
                       ("readers", impact.readers)):
        assert [e["engine"] for e in doc[key]] == [s.engine.key for s in group]
    # Every writer is in exactly one group.
    writer_keys = [e.key for e in writers.ENGINES if e.role == "writer"]
    grouped = [s.engine.key for s in (*impact.can_write, *impact.will_refuse, *impact.unknown)]
    assert sorted(grouped) == sorted(writer_keys)


def test_what_each_level_leaves() -> None:
    def keys(level: str) -> tuple[set[str], set[str]]:
        impact = writers.impact(level)
        return {s.engine.key for s in impact.can_write}, {s.engine.key for s in impact.will_refuse}

    can, refuse = keys("writer-compat-v1")
    assert "delta-kernel-4.4" in can and {"delta-spark-4.4", "deltalake-1.6"} <= refuse
    can, refuse = keys("compat-v2")
    assert {"delta-spark-4.4", "delta-kernel-4.4"} <= can and "deltalake-1.6" in refuse
    can, refuse = keys("writer-compat-v3")
    assert "delta-kernel-4.4" in can and {"delta-spark-4.4", "deltalake-1.6"} <= refuse
    with pytest.raises(ValueError, match="no writer support is known"):
        writers.support("compat-v1")
