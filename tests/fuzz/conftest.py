"""The fuzz suite's settings, case parametrization and worker pool.

Settings (pytest option, else environment variable, else default):

* ``--fuzz-seed`` / ``DELTABERG_FUZZ_SEED``: an integer, or ``date`` (today, UTC); default fuzz_cases.DEFAULT_SEED
* ``--fuzz-count`` / ``DELTABERG_FUZZ_COUNT``: number of cases; default fuzz_cases.DEFAULT_COUNT
* ``--fuzz-index`` / ``DELTABERG_FUZZ_INDEX``: only these indexes (``7``, ``3,9``, ``10-20``)
* ``--fuzz-workers`` / ``DELTABERG_FUZZ_WORKERS``: worker processes; default min(2, CPUs)

The options exist only when tests/fuzz is named on the command line (pytest reads options from the conftest files
of its arguments); the environment variables work everywhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_cases import (  # noqa: E402
    COUNT_ENV,
    DEFAULT_COUNT,
    INDEX_ENV,
    SEED_ENV,
    WORKERS_ENV,
    CasePlan,
    plans_from_env,
    resolve_seed,
)
from fuzz_harness import CaseResult  # noqa: E402
from fuzz_pool import FuzzPool  # noqa: E402
from support.environment import FIXTURES_DIR  # noqa: E402

FIXTURES_ROOT = FIXTURES_DIR


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fuzz: the seeded mutation fuzzer over the fixture tables (tests/fuzz)")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzz", "deltaberg mutation fuzzer (tests/fuzz)")
    group.addoption("--fuzz-seed", default=None, help=f"seed: an integer or 'date' (env {SEED_ENV})")
    group.addoption("--fuzz-count", type=int, default=None, help=f"number of cases (env {COUNT_ENV})")
    group.addoption("--fuzz-index", default=None, help=f"only these case indexes: 7, 3,9, 10-20 (env {INDEX_ENV})")
    group.addoption("--fuzz-workers", type=int, default=None, help=f"worker processes (env {WORKERS_ENV})")


def _option(config: pytest.Config, name: str) -> object:
    try:
        return config.getoption(name)
    except ValueError:  # the option is not registered (tests/fuzz was not an argument)
        return None


def _settings(config: pytest.Config) -> tuple[int, int, str | None, int]:
    seed = resolve_seed(_option(config, "--fuzz-seed") or os.environ.get(SEED_ENV))  # type: ignore[arg-type]
    count = _option(config, "--fuzz-count") or int(os.environ.get(COUNT_ENV) or DEFAULT_COUNT)
    indexes = _option(config, "--fuzz-index") or os.environ.get(INDEX_ENV)
    workers = _option(config, "--fuzz-workers") or int(os.environ.get(WORKERS_ENV) or min(2, os.cpu_count() or 1))
    return seed, int(count), indexes, int(workers)  # type: ignore[arg-type]


def pytest_report_header(config: pytest.Config) -> str:
    seed, count, indexes, workers = _settings(config)
    return (f"deltaberg fuzz: seed {seed}, {count} cases{f', indexes {indexes}' if indexes else ''}, "
            f"{workers} workers ({SEED_ENV}/{COUNT_ENV}/{INDEX_ENV} or --fuzz-seed/--fuzz-count/--fuzz-index)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fuzz_plan" not in metafunc.fixturenames:
        return
    if not FIXTURES_ROOT.is_dir():
        metafunc.parametrize("fuzz_plan", [pytest.param(None, marks=pytest.mark.skip(
            reason=f"the Delta fixture tables are expected at {FIXTURES_ROOT}"))])
        return
    seed, count, indexes, _workers = _settings(metafunc.config)
    plans = plans_from_env(FIXTURES_ROOT, seed=seed, count=count, indexes=indexes)
    metafunc.parametrize("fuzz_plan", plans, ids=[p.id for p in plans])


@pytest.fixture(scope="session")
def fuzz_results(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Future[CaseResult]]]:
    """Every selected case submitted at once to the worker pool (in collection order); each test waits for its
    own. Cases deselected with -k are not run."""
    plans: list[CasePlan] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        plan = callspec.params.get("fuzz_plan") if callspec else None
        if isinstance(plan, CasePlan):
            plans.append(plan)
    _seed, _count, _indexes, workers = _settings(request.config)
    pool = FuzzPool(FIXTURES_ROOT, tmp_path_factory.mktemp("fuzz"), workers=workers)
    futures = dict(zip((p.index for p in plans), pool.submit(plans), strict=True))
    try:
        yield futures
    finally:
        pool.close()
