"""Seeded mutation fuzzing of the real fixture tables (issue 11: never a silent wrong Iceberg table).

One test per case (``<index>-<fixture>-<mutation>-<full|incr>``): a copy of a fixture with one random mutation,
run through `deltaberg inspect`, `validate --data-checks` and `convert`; each must give a typed error (exit 2,
one line, nothing written) or succeed with the rows deltalake reads (see fuzz_harness for every rule). A failure
prints the seed, the mutation and its arguments, and the command that reproduces it; `review` notes (successes no
oracle can judge) are printed without failing.

Run: ``.venv/bin/python -m pytest tests/fuzz -q`` (the seed and count are in the header; conftest.py lists the
settings); long runs: ``tests/fuzz/run_fuzz.py`` (tests/README.md).
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from fuzz_cases import CasePlan
from fuzz_harness import CaseResult

pytestmark = pytest.mark.fuzz


def test_mutation(fuzz_plan: CasePlan, fuzz_results: dict[int, Future[CaseResult]]) -> None:
    result = fuzz_results[fuzz_plan.index].result()
    if result.status == "not-applicable":
        pytest.skip(f"{fuzz_plan.mutation} does not apply to this copy: {result.mutation_args.get('reason')}")
    if result.problems:
        pytest.fail(result.render(), pytrace=False)
    if result.reviews:
        print(result.render())  # shown with -rP; the run's summary lists the reviews
    assert result.status == "ok", result.render()
