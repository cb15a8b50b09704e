"""parse_stats on stats that are not what the protocol says (issue 11): what is corrupt raises StatsParseError
naming the row, what cannot be held as a bound is dropped (never replaced by a wrong value)."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_deltaberg.core.delta.schema import parse_schema
from airflow_deltaberg.core.delta.stats.stats import parse_stats
from airflow_deltaberg.core.errors import StatsParseError

SCHEMA = parse_schema(json.dumps({"type": "struct", "fields": [
    {"name": name, "type": t, "nullable": True, "metadata": {}}
    for name, t in (("a", "long"), ("f", "double"), ("dec", "decimal(5,2)"), ("s", "string"))
]}))
GOOD = '{"numRecords":10,"minValues":{"a":1},"maxValues":{"a":9},"nullCount":{"a":0}}'


def parse(*texts: str | None) -> list[dict | None]:
    return parse_stats(pa.array(list(texts), pa.string()), SCHEMA).to_pylist()


@pytest.mark.parametrize("text", ["[1,2]", "123", '"str"', "null", "", "  ", "true"])
def test_stats_that_are_not_an_object_name_their_row(text: str) -> None:
    with pytest.raises(StatsParseError) as info:
        parse(GOOD, None, text, GOOD)
    assert info.value.row == 2


def test_null_first_does_not_crash_the_reader() -> None:
    """pyarrow's NDJSON reader with an explicit schema crashes the process on a first line ``null``."""
    with pytest.raises(StatsParseError, match="not an object"):
        parse("null")


def test_two_objects_in_one_string_are_not_json() -> None:
    with pytest.raises(StatsParseError, match="not JSON") as info:
        parse(GOOD, GOOD + GOOD, GOOD)
    assert info.value.row == 1


def test_leading_whitespace_and_line_breaks_inside_an_object_parse() -> None:
    rows = parse(" \n" + GOOD, GOOD.replace(",", ",\n"), GOOD)
    assert [r["numRecords"] for r in rows] == [10, 10, 10]
    assert [r["maxValues"]["a"] for r in rows] == [9, 9, 9]


@pytest.mark.parametrize(("stats", "what"), [
    ({"numRecords": -1}, "numRecords"),
    ({"numRecords": 2**63}, "numRecords"),
    ({"numRecords": 1, "nullCount": {"a": -2}}, "nullCount of column a"),
    ({"numRecords": 1, "nullCount": {"a": 2**70}}, "nullCount of column a"),
])
def test_counts_below_zero_or_beyond_int64_are_corrupt(stats: dict, what: str) -> None:
    with pytest.raises(StatsParseError, match=what) as info:
        parse(GOOD, json.dumps(stats))
    assert info.value.row == 1


@pytest.mark.parametrize(("bounds", "column"), [
    ({"a": 2**63}, "a"), ({"a": -(2**63) - 1}, "a"),
    ({"dec": 1234.5}, "dec"), ({"dec": 1.234}, "dec"),
    ({"f": 1e400}, "f"), ({"f": "NaN"}, "f"),
])
def test_bounds_that_do_not_fit_are_dropped(bounds: dict, column: str) -> None:
    rows = parse(json.dumps({"numRecords": 3, "minValues": bounds, "maxValues": bounds}).replace('"NaN"', "NaN"))
    assert rows[0]["numRecords"] == 3
    assert rows[0]["minValues"][column] is None and rows[0]["maxValues"][column] is None


def test_bounds_that_fit_are_kept_exactly() -> None:
    (row,) = parse(json.dumps({"numRecords": 3, "minValues": {"a": -(2**63), "dec": 999.99, "f": -1e300},
                               "maxValues": {"a": 2**63 - 1, "dec": 1.5, "f": float("inf")}}))
    assert row["minValues"] == {"a": -(2**63), "f": -1e300, "dec": Decimal("999.99"), "s": None}
    assert row["maxValues"]["a"] == 2**63 - 1 and row["maxValues"]["dec"] == Decimal("1.50")


def test_a_bounds_struct_that_is_not_an_object_has_null_children() -> None:
    parsed = parse_stats(pa.array([GOOD, '{"numRecords":10,"maxValues":5}']), SCHEMA)
    # Readers of a child (Iceberg metrics) look at the child alone: it must be null under a null struct.
    assert parsed.field("maxValues").field("a").to_pylist() == [9, None]
    assert pc.struct_field(parsed, ["maxValues", "a"]).to_pylist() == [9, None]


# -- a stats column of another type (a checkpoint whose add.stats is not a string column; fuzz 857, 5005) ---------


@pytest.mark.parametrize("values", [pa.array([None, 5, 7], pa.int64()), pa.array([None, 1.5, None]),
                                    pa.array([None, [1], None], pa.list_(pa.int64()))], ids=["int64", "double", "list"])
def test_stats_that_are_not_text_name_their_first_row(values: pa.Array) -> None:
    with pytest.raises(StatsParseError, match="not JSON text") as info:
        parse_stats(values, SCHEMA)
    assert info.value.row == 1


def test_stats_held_as_binary_or_large_strings_parse_as_text() -> None:
    for values in (pa.array([GOOD.encode(), None], pa.binary()), pa.array([GOOD, None], pa.large_string()),
                   pa.array([GOOD.encode(), None], pa.large_binary())):
        assert [r and r["maxValues"]["a"] for r in parse_stats(values, SCHEMA).to_pylist()] == [9, None]
    with pytest.raises(StatsParseError, match="not UTF-8") as info:
        parse_stats(pa.array([GOOD.encode(), b'{"numRecords":\xff}'], pa.binary()), SCHEMA)
    assert info.value.row == 1


def test_stats_strings_holding_invalid_utf8_name_their_row() -> None:
    """A commit line with a byte that is not UTF-8 (fuzz 530: the log reader keeps its bytes in a string column)."""
    raw = [GOOD.encode(), b'{"numRecords":1,"minValues":{"s":"\x80"},"maxValues":{"s":"\x80"}}', GOOD.encode()]
    with pytest.raises(StatsParseError, match="not UTF-8") as info:
        parse_stats(pa.array(raw, pa.binary()).view(pa.string()), SCHEMA)
    assert info.value.row == 1
