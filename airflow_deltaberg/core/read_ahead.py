"""Iterators that keep working on the next items on background threads while the caller works on the current one."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
_END = object()


def read_ahead(items: Iterable[T]) -> Iterator[T]:
    """The items of ``items`` in order, each next one produced on a background thread while the caller works on
    the one it was given (at most one item ahead). Errors surface in the caller, at the item that raised them;
    closing this iterator early closes ``items`` too."""
    source = iter(items)

    def pull() -> object:
        return next(source, _END)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead")
    try:
        pending = pool.submit(pull)
        while True:
            item = pending.result()
            if item is _END:
                return
            pending = pool.submit(pull)
            yield item  # type: ignore[misc]
    finally:
        _stop(pool, source)


def map_ahead(work: Callable[[T], R], items: Iterable[T], *, workers: int = 2) -> Iterator[R]:
    """``work`` over ``items`` on ``workers`` threads, results in order, at most ``workers`` items in flight.

    Items are pulled from ``items`` in the calling thread; wrap a slow source in read_ahead to overlap it too.
    Closing this iterator early waits for the work under way and closes ``items``.
    """
    source = iter(items)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="map-ahead")
    pending: deque[Future[R]] = deque()
    try:
        for item in source:
            pending.append(pool.submit(work, item))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        _stop(pool, source)


def _stop(pool: ThreadPoolExecutor, source: Iterator[object]) -> None:
    # The work under way finishes first: a generator must not be closed while another thread runs it.
    pool.shutdown(wait=True, cancel_futures=True)
    close = getattr(source, "close", None)
    if close is not None:
        close()
