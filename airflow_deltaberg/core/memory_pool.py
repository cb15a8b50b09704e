"""The Arrow memory pool for one pass over a whole big table."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa

_lock = threading.Lock()
_depth = 0
_previous: pa.MemoryPool | None = None


def _large_buffer_pool() -> pa.MemoryPool | None:
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return None  # the user chose a pool for the process: keep it
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow build without jemalloc (e.g. Windows wheels)
        return None


@contextmanager
def large_buffer_pool() -> Iterator[None]:
    """Arrow allocations made inside, by any thread, go to jemalloc where pyarrow has it.

    A full conversion of 1M files allocates and frees gigabytes in buffers of tens of MB; on 2 cores jemalloc
    ran it ~15% faster than pyarrow's default mimalloc with ~200 MB less peak memory (concatenating the parsed
    stats alone: 0.25 s against 1.0-1.3 s). The pool is process-wide: blocks entered by several threads keep
    it until the last one leaves. Buffers remember their pool, so those made inside may outlive the block.
    """
    global _depth, _previous
    pool = _large_buffer_pool()
    if pool is None:
        yield
        return
    with _lock:
        if _depth == 0:
            _previous = pa.default_memory_pool()
            pa.set_memory_pool(pool)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _previous is not None:
                pa.set_memory_pool(_previous)
                _previous = None
