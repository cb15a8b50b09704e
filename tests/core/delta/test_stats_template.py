"""The template decoder of stats JSON (core/delta/stats/stats_template.py): every batch parses to exactly what pyarrow's
JSON reader (and the row-by-row parser after it) gives, whichever rows the template takes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from airflow_deltaberg.core.delta.schema import parse_schema
from airflow_deltaberg.core.delta.stats import stats_template
from airflow_deltaberg.core.delta.stats.stats import _json_parse_type, parse_stats, stats_type
from airflow_deltaberg.core.errors import StatsParseError

pytestmark = pytest.mark.skipif(not stats_template.available(), reason="numba (the `fast` extra) is not installed")


@pytest.fixture(autouse=True)
def _small_batches_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_template, "MIN_ROWS", 1)
    monkeypatch.setattr(stats_template, "WORTH_BYTES", 0)

COLUMNS = (("b", "byte"), ("sh", "short"), ("i", "integer"), ("l", "long"), ("f", "float"), ("d", "double"),
           ("s", "string"), ("ts", "timestamp"), ("ntz", "timestamp_ntz"), ("dt", "date"), ("dec", "decimal(10,2)"),
           ("st", {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}},
                                                  {"name": "y", "type": "string", "nullable": True, "metadata": {}}]}))
SCHEMA = parse_schema(json.dumps({"type": "struct", "fields": [
    {"name": name, "type": t, "nullable": True, "metadata": {}} for name, t in COLUMNS]}))
#: The columns the decoder converts itself (decimal is left to the reader).
FAST = ("b", "sh", "i", "l", "f", "d", "s", "ts", "ntz", "dt", "st")
INT_RANGE = {"b": 2**7, "sh": 2**15, "i": 2**31, "l": 2**63}


def _int(rng: random.Random, name: str) -> str:
    bound = INT_RANGE[name]
    value = rng.choice([0, 1, -1, bound - 1, -bound, rng.randrange(-bound, bound), rng.randrange(-1000, 1000)])
    return str(value)


def _odd_int(rng: random.Random, name: str) -> str:
    bound = INT_RANGE[name]
    return rng.choice([str(bound), str(-bound - 1), "-0", "01", "1.0", "1e2", "10" * 12, '"5"', "null", "-"])


def _float(rng: random.Random, name: str) -> str:
    if name == "f":  # within float32 (beyond it, pyarrow's cast refuses and the reader takes the batch)
        return rng.choice([repr(float(np.float32(rng.uniform(-1e6, 1e6)))), "0", "-0.0", "1e-5", "3.4e38", "1E5"])
    return rng.choice([
        repr(rng.uniform(-1e6, 1e6)), repr(rng.random()), "0", "-0", "-0.0", "1E5", "1e-5", "2.5e+10",
        repr(float(np.float32(rng.uniform(-10, 10)))), "5e-324", "1.7976931348623157e308", "0.1", "123456789012345678",
        f"{rng.randrange(10**18)}.{rng.randrange(10**6)}e{rng.randrange(-320, 300)}",
    ])


def _odd_float(rng: random.Random) -> str:
    return rng.choice(["1e400", "-1e999", '"NaN"', "NaN", "Infinity", ".5", "1.", "01.5", "+1", "1e", '"1.5"', "null"])


def _string(rng: random.Random) -> str:
    if rng.random() < 0.01:  # escapes: the template leaves such rows to the reader
        return json.dumps(rng.choice(["tab\there", "q\"uote", "back\\slash", "\u0001", "é"]))
    return json.dumps(rng.choice(["", "a", "abc" * rng.randrange(1, 8), "ünï©ødé", "日本語", "x" * 40,
                                  str(rng.randrange(10**8))]), ensure_ascii=False)


def _timestamp(rng: random.Random) -> str:
    year = rng.choice([1, 1970, 2024, 9999, rng.randrange(1900, 2100)])
    base = f"{year:04d}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:" \
           f"{rng.randrange(60):02d}:{rng.randrange(60):02d}"
    frac = rng.choice(["", ".0", ".123", ".123456", ".5"])
    zone = rng.choice(["Z", "Z", ""])
    return f'"{base}{frac}{zone}"'


def _odd_timestamp(rng: random.Random) -> str:
    return rng.choice(['"2024-03-25T17:12:51.1234567Z"', '"2024-03-25"', '"2024-03-25 17:12:51Z"',
                       '"2024-03-25T17:12:51+01:00"', '"2024-13-40T17:12:51Z"', '"2024-02-30T00:00:00Z"',
                       '"2024-03-25T17:12Z"', '"garbage"', "12", '"2024-03-25T24:00:00Z"', "null",
                       '"2024-03-25T17:12:51ZZ"', '"2024-03-25T17:12:51.5x"', '"2024-03-25T17:12:51\\u005a"',
                       '"2024-03-25T17:12:51Z\\""'])


def _date(rng: random.Random) -> str:
    return f'"{rng.randrange(1, 9999):04d}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"'


def _value(rng: random.Random, name: str, odd: bool) -> str:
    if name in INT_RANGE:
        return _odd_int(rng, name) if odd else _int(rng, name)
    if name in ("f", "d"):
        return _odd_float(rng) if odd else _float(rng, name)
    if name in ("ts", "ntz"):
        return _odd_timestamp(rng) if odd else _timestamp(rng)
    if name == "dt":
        return '"2024-02-30"' if odd else _date(rng)
    if name == "dec":
        return rng.choice(["1.5", "123456789.99", "-0.01", "1e3"])
    return '"\\u00e9"' if odd else _string(rng)


def _bounds(rng: random.Random, names: list[str], odd: Callable[[], bool], sep: str) -> str:
    parts = []
    for name in names:
        if name == "st":
            inner = [f'"x"{sep}{_value(rng, "l", odd())}', f'"y"{sep}{_value(rng, "s", odd())}']
            parts.append(f'"st"{sep}{{{",".join(inner)}}}')
        else:
            parts.append(f'"{name}"{sep}{_value(rng, name, odd())}')
    return "{" + ",".join(parts) + "}"


def _row(rng: random.Random, names: list[str], odd_rate: float, sep: str) -> str:
    def odd() -> bool:
        return rng.random() < odd_rate

    kept = [n for n in names if not (odd() and rng.random() < 0.3)]  # a bound left out now and then
    counts = ",".join(f'"{n}"{sep}{rng.randrange(0, 100) if not odd() else rng.choice([-1, 2**63, 0])}'
                      for n in names if n != "st")
    extra = f',"unknown"{sep}{rng.choice(["1", "true", "null", chr(34) + "x" + chr(34)])}' if odd() else ""
    tight = rng.choice(["true", "false"])
    return (f'{{"numRecords"{sep}{rng.randrange(1, 10**6)},"minValues"{sep}{_bounds(rng, kept, odd, sep)},'
            f'"maxValues"{sep}{_bounds(rng, kept, odd, sep)},"nullCount"{sep}{{{counts}}}{extra},'
            f'"tightBounds"{sep}{tight}}}')


def _parse_both(texts: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, int]:
    """parse_stats with the template decoder and without it, and how many rows the decoder took."""
    decode = stats_template.decode
    taken = []

    def spy(strings: pa.StringArray, parse_type: pa.StructType) -> object:
        result = decode(strings, parse_type)
        taken.append(0 if result is None else len(result[1]))
        return result

    def run() -> object:
        try:
            return parse_stats(pa.array(texts, pa.string()), SCHEMA)
        except StatsParseError as exc:
            return ("error", exc.row, str(exc))

    with monkeypatch.context() as m:
        m.setattr(stats_template, "decode", spy)
        fast = run()
    with monkeypatch.context() as m:
        m.setattr(stats_template, "NUMBA", False)
        slow = run()
    return fast, slow, sum(taken)


@pytest.mark.parametrize("seed", range(40))
def test_batches_parse_as_the_reader_parses_them(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    names = list(FAST) + (["dec"] if seed % 4 == 0 else [])
    rng.shuffle(names)
    sep = ":" if seed % 5 else ": "
    odd_rate = [0.0, 0.002, 0.02, 0.1][seed % 4]
    texts = [_row(rng, names, odd_rate, sep) for _ in range(rng.choice([1, 50, 400]))]
    fast, slow, taken = _parse_both(texts, monkeypatch)
    if isinstance(slow, tuple):
        assert fast == slow
    else:
        assert isinstance(fast, pa.StructArray)
        assert fast.equals(slow), _first_difference(fast, slow)
    if odd_rate <= 0.002 and "dec" not in names:  # decimals are left to the reader
        assert taken >= len(texts) * 0.5  # the decoder did the work, not only the reader


def _first_difference(a: pa.StructArray, b: pa.StructArray) -> str:
    for i, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist(), strict=True)):
        if x != y:
            return f"row {i}: {x} != {y}"
    return "same values, different layout"


def test_a_uniform_batch_is_decoded_whole() -> None:
    """The fast path is taken: every row of a batch laid out alike is the template's."""
    rng = random.Random(7)
    names = list(FAST)
    rows = [row for row in (_row(rng, names, 0.0, ":") for _ in range(400)) if "\\" not in row][:300]
    decoded = stats_template.decode(pa.array(rows, pa.string()), _json_parse_type(stats_type(SCHEMA)))
    assert decoded is not None
    assert np.array_equal(decoded[1], np.arange(300))


@pytest.mark.parametrize(("row", "why"), [
    ('{"numRecords":5,"minValues":{"l":1},"maxValues":{"l":2}}', "another key set"),
    ('{"numRecords":5,"minValues":{"l":1},"maxValues":{"l":2},"nullCount":{"l":0},"tightBounds":true}', "other keys"),
    ('{"numRecords":5,"minValues":{"l":1.5},"maxValues":{"l":2},"nullCount":{"l":0}}', "a long with a fraction"),
    ('{"numRecords":5,"minValues":{"l":9223372036854775808},"maxValues":{"l":2},"nullCount":{"l":0}}', "beyond int64"),
    ('{"numRecords":5,"minValues":{"l":1},"maxValues":{"l":2},"nullCount":{"l":0}} ', "trailing space"),
])
def test_rows_unlike_the_template_are_left_to_the_reader(row: str, why: str) -> None:
    template = '{"numRecords":5,"minValues":{"l":1},"maxValues":{"l":2},"nullCount":{"l":0}}'
    decoded = stats_template.decode(pa.array([template, row, template], pa.string()),
                                    _json_parse_type(stats_type(SCHEMA)))
    assert decoded is not None
    assert decoded[1].tolist() == [0, 2], why


def test_int64_edges_are_exact() -> None:
    rows = [f'{{"numRecords":1,"minValues":{{"l":{v}}}}}' for v in (-(2**63), 2**63 - 1, 0, -1, 10**18)]
    parsed = parse_stats(pa.array(rows, pa.string()), SCHEMA)
    assert [r["minValues"]["l"] for r in parsed.to_pylist()] == [-(2**63), 2**63 - 1, 0, -1, 10**18]


def test_a_batch_right_after_the_warm_up_parses_as_the_reader_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """warm_up loads the compiled passes on a thread of its own; a batch parsed meanwhile waits for them."""
    rng = random.Random(11)
    names = [n for n in FAST if n not in ("s", "st")]
    texts = [_row(rng, names, 0.0, ":") for _ in range(2000)]
    stats_template.warm_up()
    fast, slow, taken = _parse_both(texts, monkeypatch)
    assert isinstance(fast, pa.StructArray) and fast.equals(slow)
    assert taken >= len(texts) * 0.99  # a double beyond its type now and then goes to the reader


def test_a_decoder_that_cannot_load_leaves_the_stats_to_the_reader(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """numba refuses to cache with no writable cache folder (an installed package on a read-only image): the
    conversion goes on with the reader, once warned."""
    def refuse() -> None:
        raise RuntimeError("cannot cache function 'scan': no locator available for file 'stats_kernels.py'")

    monkeypatch.setattr(stats_template, "kernels", refuse)
    monkeypatch.setattr(stats_template, "NUMBA", True)
    rng = random.Random(3)
    texts = [_row(rng, ["l", "d", "ts"], 0.0, ":") for _ in range(100)]
    parsed = parse_stats(pa.array(texts, pa.string()), SCHEMA)
    assert [r["numRecords"] for r in parsed.to_pylist()] == [json.loads(t)["numRecords"] for t in texts]
    assert stats_template.NUMBA is False
    assert "cannot load" in caplog.text


def test_the_decoder_can_be_turned_off() -> None:
    code = "from airflow_deltaberg.core.delta.stats import stats_template as t; print(t.available())"
    env = {**os.environ, "DELTABERG_FAST_STATS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_small_batch_loads_the_decoder_only_once_it_is_warmed_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below WORTH_BYTES of text a batch goes to the reader until a caller warms the decoder up."""
    monkeypatch.setattr(stats_template, "_warming", threading.Event())
    monkeypatch.setattr(stats_template, "WORTH_BYTES", 10**9)
    rng = random.Random(5)
    strings = pa.array([_row(rng, ["l", "d", "ts"], 0.0, ":") for _ in range(200)], pa.string())
    parse_type = _json_parse_type(stats_type(SCHEMA))
    assert stats_template.decode(strings, parse_type) is None
    stats_template.warm_up()
    decoded = stats_template.decode(strings, parse_type)
    assert decoded is not None and len(decoded[1]) == len(strings)


def test_a_batch_worth_the_start_loads_the_decoder_for_the_next_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_template, "_warming", threading.Event())
    rng = random.Random(6)
    strings = pa.array([_row(rng, ["l", "d", "ts"], 0.0, ":") for _ in range(200)], pa.string())
    parse_type = _json_parse_type(stats_type(SCHEMA))
    monkeypatch.setattr(stats_template, "WORTH_BYTES", len(strings.buffers()[2]) // 2)
    assert stats_template.decode(strings, parse_type) is not None  # a batch this big pays for the start by itself
    small = strings.slice(0, 20)
    assert stats_template.decode(small, parse_type) is not None  # and the next, smaller ones use it too


def test_times_anywhere_in_the_calendar_are_the_casts_microseconds() -> None:
    """The scan reads a time as microseconds itself: every year from 0000 to 9999, the ends of months (leap years by
    the 4/100/400 rule), fractions of 1 to 6 digits, with and without Z: the values of pyarrow's cast."""
    import calendar

    rng = random.Random(17)
    texts = []
    for _ in range(3000):
        year = rng.choice([0, 1, 4, 100, 400, 1582, 1600, 1899, 1900, 1969, 1970, 2000, 2100, 9999,
                           rng.randrange(0, 10000)])
        month = rng.randrange(1, 13)
        last = 29 if month == 2 and (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)) else \
            calendar.monthrange(2001, month)[1]
        day = rng.choice([1, last, rng.randrange(1, last + 1)])
        fraction = rng.choice(["", "." + "".join(str(rng.randrange(10)) for _ in range(rng.randrange(1, 7)))])
        texts.append(f"{year:04d}-{month:02d}-{day:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:"
                     f"{rng.randrange(60):02d}{fraction}" + rng.choice(["Z", ""]))
    rows = pa.array([f'{{"numRecords":1,"minValues":{{"ts":"{t}"}}}}' for t in texts], pa.string())
    decoded = stats_template.decode(rows, _json_parse_type(stats_type(SCHEMA)))
    assert decoded is not None and len(decoded[1]) == len(texts)
    got = decoded[0].field("minValues").field("ts").cast(pa.int64()).to_pylist()
    expected = pa.array([t.rstrip("Z") for t in texts]).cast(pa.timestamp("us")).cast(pa.int64()).to_pylist()
    assert got == expected
