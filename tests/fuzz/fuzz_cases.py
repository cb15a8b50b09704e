"""Which case index ``i`` of seed ``S`` is: a fixture, a mutation, full or incremental. Pure function of (S, i),
decided from the read-only fixtures' tags only, so a case id is known at collection and reproduces anywhere."""

from __future__ import annotations

import datetime as dt
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from fuzz_fixtures import FUZZ_FIXTURES, fixture_info
from fuzz_mutations import applicable, choose

#: The CI run's seed when none is given (fixed: the failure list stays comparable from run to run).
DEFAULT_SEED = 20261127
DEFAULT_COUNT = 500
#: Share of cases (among those whose mutation can) that convert the version before the mutated commit first,
#: then convert incrementally over the mutated commit.
INCREMENTAL_SHARE = 0.3

#: Fixtures whose checkpoint disagrees with their commits (not a finding): its multi-part checkpoint at version 1
#: has a column `missing` that no commit adds, so replaying the commits (an incremental conversion, or a full
#: one once the checkpoint is incomplete) cannot see it, a reader of the checkpoint does. No incremental cases;
#: different rows are for review.
SELF_INCONSISTENT = {"parquet_row_group_skipping"}
NO_INCREMENTAL = SELF_INCONSISTENT

SEED_ENV = "DELTABERG_FUZZ_SEED"
COUNT_ENV = "DELTABERG_FUZZ_COUNT"
WORKERS_ENV = "DELTABERG_FUZZ_WORKERS"
INDEX_ENV = "DELTABERG_FUZZ_INDEX"


@dataclass(frozen=True)
class CasePlan:
    seed: int
    index: int
    fixture: str
    mutation: str
    incremental: bool  # convert version latest-1 first; the mutation touches only the newest commit

    @property
    def id(self) -> str:
        mode = "incr" if self.incremental else "full"
        return f"{self.index:05d}-{self.fixture.replace('/', '.')}-{self.mutation}-{mode}"

    def rng(self, purpose: str = "mutate") -> random.Random:
        """A generator for one purpose of this case (the mutation's, the filters'), independent of the others."""
        return random.Random(f"deltaberg-fuzz:{self.seed}:{self.index}:{purpose}")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def reproduce(self) -> str:
        return (f"{SEED_ENV}={self.seed} {INDEX_ENV}={self.index} .venv/bin/python -m pytest tests/fuzz -q   "
                f"# or: .venv/bin/python tests/fuzz/run_fuzz.py --seed {self.seed} --index {self.index} --keep")


def resolve_seed(value: str | int | None) -> int:
    """A seed from an option/env value: an integer, ``date`` (today, UTC, as YYYYMMDD), or None (the default)."""
    if value is None or value == "":
        return DEFAULT_SEED
    if isinstance(value, str) and value.lower() == "date":
        return int(dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d"))
    return int(value)


def parse_indexes(text: str | None, count: int) -> list[int]:
    """``"7"``, ``"3,9"``, ``"10-20"`` -> indexes; None -> range(count)."""
    if not text:
        return list(range(count))
    out: list[int] = []
    for part in str(text).split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out += range(int(lo), int(hi) + 1)
        elif part.strip():
            out.append(int(part))
    return out


def plan_case(seed: int, index: int, fixtures_root: Path, fixtures: tuple[str, ...] = FUZZ_FIXTURES) -> CasePlan:
    rng = random.Random(f"deltaberg-fuzz:{seed}:{index}:plan")
    name = rng.choice(fixtures)
    info = fixture_info(fixtures_root, name)
    mutation = choose(rng, applicable(info.tags, scope_versions=False))
    incremental = False
    if (mutation.scope == "commit" and len(info.commits) >= 2 and rng.random() < INCREMENTAL_SHARE
            and name not in NO_INCREMENTAL):
        incremental = mutation.needs <= info.tags_of((info.latest,))
    return CasePlan(seed, index, name, mutation.name, incremental)


def baseline_plans(fixtures_root: Path, fixtures: tuple[str, ...] = FUZZ_FIXTURES) -> list[CasePlan]:
    """Every fixture unmutated, converted in full and (with two commits or more) incrementally: must all pass."""
    plans = []
    for name in fixtures:
        info = fixture_info(fixtures_root, name)
        plans.append(CasePlan(0, len(plans), name, "no_change", False))
        if len(info.commits) >= 2 and name not in NO_INCREMENTAL:
            plans.append(CasePlan(0, len(plans), name, "no_change", True))
    return plans


def plans_from_env(fixtures_root: Path, seed: str | int | None = None, count: int | None = None,
                   indexes: str | None = None) -> list[CasePlan]:
    seed_value = resolve_seed(seed if seed is not None else os.environ.get(SEED_ENV))
    n = count if count is not None else int(os.environ.get(COUNT_ENV) or DEFAULT_COUNT)
    chosen = parse_indexes(indexes if indexes is not None else os.environ.get(INDEX_ENV), n)
    return [plan_case(seed_value, i, fixtures_root) for i in chosen]
