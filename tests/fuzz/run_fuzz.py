"""Long fuzz runs outside pytest, and the reproduction of one case.

    .venv/bin/python tests/fuzz/run_fuzz.py --count 10000 --seed 7 --json /tmp/fuzz-7.json
    .venv/bin/python tests/fuzz/run_fuzz.py --seed 7 --index 1234 --keep     # one case, its table kept

Prints one line per failing case as it comes, then the findings grouped by signature (kind | command |
exception type | innermost airflow_deltaberg frame) with the number of cases and the first case of each; exits 1
when any case failed. ``--json`` writes every case's result for later analysis.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]  # the fuzzer, tests/ (support), the repository

from fuzz_cases import DEFAULT_COUNT, baseline_plans, plans_from_env, resolve_seed  # noqa: E402
from fuzz_harness import CaseResult  # noqa: E402
from fuzz_pool import FuzzPool  # noqa: E402
from support.environment import FIXTURES_DIR  # noqa: E402

FIXTURES_ROOT = FIXTURES_DIR


def summarize(results: list[CaseResult]) -> str:
    groups: dict[tuple[str, str], list[CaseResult]] = collections.defaultdict(list)
    for result in results:
        for finding in {(f.severity, f.signature): f for f in result.findings}.values():
            groups[(finding.severity, finding.signature)].append(result)
    statuses = collections.Counter(r.status for r in results)
    lines = [f"{len(results)} cases: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))]
    for (severity, signature), cases in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        first = min(cases, key=lambda r: r.plan["index"])
        mutations = collections.Counter(r.plan["mutation"] for r in cases)
        lines.append(f"[{severity}] {len(cases):5d}  {signature}")
        lines.append(f"          mutations: {dict(mutations.most_common(6))}")
        lines.append(f"          first: seed {first.plan['seed']} index {first.plan['index']} "
                     f"({first.plan['fixture']}, {first.plan['mutation']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", default=None, help="an integer or 'date' (default: the CI seed)")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    parser.add_argument("--index", default=None, help="only these case indexes: 7, 3,9 or 10-20")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--keep", action="store_true", help="keep each mutated table (and print where)")
    parser.add_argument("--json", type=Path, default=None, help="write every case's result here")
    parser.add_argument("--quiet", action="store_true", help="no line per failing case")
    parser.add_argument("--baseline", action="store_true",
                        help="run every fixture unmutated (full and incremental) instead: all must pass")
    args = parser.parse_args(argv)

    seed = resolve_seed(args.seed)
    if args.baseline:
        plans = baseline_plans(FIXTURES_ROOT)
    else:
        plans = plans_from_env(FIXTURES_ROOT, seed=seed, count=args.count, indexes=args.index)
    workdir = Path(tempfile.mkdtemp(prefix="deltaberg-fuzz-"))
    shown_seed = plans[0].seed if plans else seed
    print(f"fuzz seed {shown_seed}: {len(plans)} cases, {args.workers} workers, work in {workdir}", flush=True)
    started = time.perf_counter()
    pool = FuzzPool(FIXTURES_ROOT, workdir, workers=args.workers, keep=args.keep)
    results: list[CaseResult] = []
    try:
        for n, future in enumerate(pool.submit(plans), 1):
            result = future.result()
            results.append(result)
            if (result.findings and not args.quiet) or len(plans) == 1:
                print(result.render(), flush=True)
            if n % 100 == 0:
                failed = sum(r.status == "failed" for r in results)
                print(f"... {n}/{len(plans)} cases, {failed} failed, {time.perf_counter() - started:.0f} s",
                      flush=True)
    finally:
        pool.close()
    elapsed = time.perf_counter() - started
    print(f"\n{len(results)} cases in {elapsed:.1f} s ({elapsed / max(1, len(results)):.2f} s per case)")
    print(summarize(results))
    phases = collections.defaultdict(list)
    for r in results:
        for phase, seconds in r.seconds.items():
            phases[phase].append(seconds)
    print("mean seconds per case: " + ", ".join(f"{p} {sum(v) / len(v):.3f} ({len(v)})" for p, v in phases.items()))
    if args.json:
        args.json.write_text(json.dumps({"seed": seed, "seconds": elapsed,
                                         "results": [r.to_dict() for r in results]}, default=str))
        print(f"results written to {args.json}")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
