"""large_buffer_pool: jemalloc inside (where pyarrow has it), the previous default pool after, nesting and threads."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from airflow_deltaberg.core.memory_pool import large_buffer_pool


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.fixture(autouse=True)
def no_user_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)


@pytest.mark.skipif(not _has_jemalloc(), reason="this pyarrow build has no jemalloc pool")
def test_jemalloc_inside_and_the_previous_pool_after() -> None:
    before = pa.default_memory_pool().backend_name
    with large_buffer_pool():
        assert pa.default_memory_pool().backend_name == "jemalloc"
        kept = pa.array(range(100_000))  # made inside, used after
        with large_buffer_pool():
            assert pa.default_memory_pool().backend_name == "jemalloc"
        assert pa.default_memory_pool().backend_name == "jemalloc"  # the outer block still runs
    assert pa.default_memory_pool().backend_name == before
    assert kept.sum().as_py() == sum(range(100_000))


@pytest.mark.skipif(not _has_jemalloc(), reason="this pyarrow build has no jemalloc pool")
def test_the_pool_stays_until_the_last_thread_leaves() -> None:
    before = pa.default_memory_pool().backend_name
    entered, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        with large_buffer_pool():
            entered.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=other_thread)
    thread.start()
    assert entered.wait(timeout=30)
    with large_buffer_pool():
        pass
    assert pa.default_memory_pool().backend_name == "jemalloc"  # the other thread is still inside
    release.set()
    thread.join(timeout=30)
    assert pa.default_memory_pool().backend_name == before


def test_a_pool_chosen_by_the_user_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    before = pa.default_memory_pool().backend_name
    with large_buffer_pool():
        assert pa.default_memory_pool().backend_name == before
