"""read_ahead: order, errors, early close, and that the next item really is produced while the caller works."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from airflow_deltaberg.core.read_ahead import read_ahead


def test_items_come_in_order() -> None:
    assert list(read_ahead(range(1000))) == list(range(1000))
    assert list(read_ahead([])) == []


def test_the_next_item_is_produced_while_the_caller_holds_the_current_one() -> None:
    second_started = threading.Event()

    def source() -> Iterator[int]:
        yield 1
        second_started.set()
        yield 2

    items = read_ahead(source())
    assert next(items) == 1
    # Nothing more is asked for, yet the background thread is already producing item 2.
    assert second_started.wait(timeout=30)
    assert list(items) == [2]


def test_an_error_surfaces_at_the_item_that_raised_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("the third item is broken")

    got = []
    with pytest.raises(ValueError, match="the third item is broken"):
        for item in read_ahead(source()):
            got.append(item)
    assert got == [1, 2]


def test_closing_early_closes_the_source() -> None:
    closed = threading.Event()

    def source() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            closed.set()

    items = read_ahead(source())
    assert [next(items), next(items)] == [0, 1]
    items.close()  # type: ignore[attr-defined]
    assert closed.is_set()
