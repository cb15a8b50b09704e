"""read_ahead and map_ahead: order, errors, early close, and that the next items really are worked on while the
caller works."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from airflow_deltaberg.core.read_ahead import map_ahead, read_ahead


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


def _watched_source(closed: threading.Event) -> Iterator[int]:
    try:
        yield from range(100)
    finally:
        closed.set()


def test_closing_early_closes_the_source() -> None:
    closed = threading.Event()
    items = read_ahead(_watched_source(closed))
    assert [next(items), next(items)] == [0, 1]
    items.close()  # type: ignore[attr-defined]
    assert closed.is_set()


def test_map_ahead_keeps_the_order_of_its_items() -> None:
    assert list(map_ahead(lambda x: x * x, range(200))) == [x * x for x in range(200)]
    assert list(map_ahead(str, [])) == []


def test_map_ahead_works_on_two_items_at_once() -> None:
    both_running = threading.Barrier(2, timeout=30)

    def work(item: int) -> int:
        both_running.wait()  # passes only when another item's work runs at the same time
        return item

    assert list(map_ahead(work, [1, 2])) == [1, 2]


def test_map_ahead_raises_the_error_of_the_item_that_failed() -> None:
    def work(item: int) -> int:
        if item == 3:
            raise ValueError(f"item {item} is broken")
        return item

    got = []
    with pytest.raises(ValueError, match="item 3 is broken"):
        for result in map_ahead(work, range(10)):
            got.append(result)
    assert got == [0, 1, 2]


def test_closing_map_ahead_early_closes_its_source() -> None:
    closed = threading.Event()
    results = map_ahead(lambda x: x + 1, read_ahead(_watched_source(closed)))
    assert [next(results), next(results)] == [1, 2]
    results.close()  # type: ignore[attr-defined]
    assert closed.is_set()
