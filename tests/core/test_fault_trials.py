"""Object-store faults end, and end typed: ``convert`` on S3 (moto) behind the fault proxy (support.fault_proxy).

Seeded trials append to a small Delta table and convert it through the proxy, which injects 500/503, resets before
and after a request lands, truncated bodies, stalls and lost responses. Each trial ends with Iceberg rows equal to
Delta's, or a typed error (a DeltabergError); none runs past the bound (a small ``deltaberg_timeout_s`` here); and
what readers find published (through the version hint) always reads as Delta at its ``delta-version``; after the
faults stop a clean conversion converges. The trials run as CHAINS independent chains (a table and a proxy each) on
threads of their own: a trial mostly waits (a stall waits the bound out), so one chain at a time left the core
idle for minutes. Then the cases one at a time: a write whose response is lost succeeds, an
``Expect: 100-continue`` never answered and a fully stalled store end typed within the bound.

Delta's rows come from the local copy the table is written in (deltalake), uploaded to the bucket after each append.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.table import StaticTable
from support.fault_proxy import FAULTS, Request, fault_proxy, seeded_faults
from support.object_store import S3Endpoint, s3_server
from support.oracle import delta_rows, rows_of

from airflow_deltaberg.core.errors import DeltabergError, StorageTimeoutError
from airflow_deltaberg.core.iceberg.convert import convert
from airflow_deltaberg.core.iceberg.table_metadata import DELTA_VERSION
from airflow_deltaberg.core.storage import open_storage

TRIALS = 50
#: Chains of trials run at once, each on its own table behind its own proxy, TRIALS // CHAINS trials a chain (one
#: in ten converts in full). Each trial is seeded by its number, as in one chain of TRIALS: 10 chains took the
#: test from 189 s (one chain, 67 CPU s) to 34 s (32 CPU s: shorter logs) at load average 9.
CHAINS = 10
#: The bound of one storage call in the faulty runs (seconds): small, so that stalls end the trials quickly.
BOUND_S = 2.0
#: A stall lasts far longer than the bound: only the bound can end the call that meets it in time.
STALL_S = 60.0
#: Longest a faulty conversion may run: its own work and a few bounded calls that failed (a run may go on after a
#: failed read, e.g. to a full conversion), generous for a loaded machine, and below STALL_S: a call that met a stall
#: and was not bounded would take STALL_S at least.
RUN_LIMIT_S = 45.0
#: The bound where one fault is injected on purpose: a loaded machine must not time out the other calls.
CALM_BOUND_S = 30.0
FIRST_COMMIT = "_delta_log/00000000000000000000.json"
#: How often each of FAULTS is drawn: a stall ends a trial at the bound, so it is drawn less often than the others.
WEIGHTS = [0.25 if fault == "stall" else 1.0 for fault in FAULTS]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    yield from s3_server(tmp_path_factory.mktemp("s3"))


class Lake:
    """A Delta table written locally with deltalake and mirrored to the bucket (new files only)."""

    def __init__(self, s3: S3Endpoint, local: Path, key: str) -> None:
        self.s3, self.local, self.key = s3, local, key
        self.uri = s3.uri(key)
        self.fs = _filesystem(s3)
        self.uploaded: set[Path] = set()
        self.next_id = 0
        self._read: dict[str, tuple[int, list[tuple[Any, ...]]]] = {}
        self._delta: dict[int, list[tuple[Any, ...]]] = {}

    def append(self, rows: int = 3) -> None:
        ids = pa.array(range(self.next_id, self.next_id + rows), pa.int64())
        write_deltalake(str(self.local), pa.table({"id": ids, "name": pa.array([f"n{i}" for i in ids.to_pylist()])}),
                        mode="append")
        self.next_id += rows
        for path in sorted(p for p in self.local.rglob("*") if p.is_file()):
            if path not in self.uploaded:
                self.fs.put_file(str(path), f"{self.s3.bucket}/{self.key}/{path.relative_to(self.local).as_posix()}")
                self.uploaded.add(path)

    def options(self, endpoint: str | None = None, bound_s: float | None = None) -> dict[str, Any]:
        options = dict(self.s3.storage_options)
        if endpoint is not None:
            options["endpoint_url"] = endpoint
        if bound_s is not None:
            options["deltaberg_timeout_s"] = bound_s
        return options

    def published(self) -> tuple[int, list[tuple[Any, ...]]] | None:
        """(delta-version, rows) of the Iceberg table readers find through the version hint, if any."""
        metadata = f"{self.s3.bucket}/{self.key}/_iceberg/metadata"
        try:
            hint = self.fs.cat_file(f"{metadata}/version-hint.text").decode().strip()
        except FileNotFoundError:
            return None
        if hint not in self._read:  # a metadata file never changes once written (write-if-absent)
            table = StaticTable.from_metadata(f"s3://{metadata}/v{hint}.metadata.json",
                                              properties=self.s3.pyiceberg_properties)
            self._read[hint] = int(table.metadata.properties[DELTA_VERSION]), rows_of(table.scan().to_arrow())
        return self._read[hint]

    def delta_rows(self, version: int | None = None) -> list[tuple[Any, ...]]:
        """deltalake's rows of the local table at ``version`` (the latest when None); a committed version's rows
        never change, so each is read once."""
        version = rng_free_version(self) if version is None else version
        if version not in self._delta:
            self._delta[version] = delta_rows(self.local, version)
        return self._delta[version]

    def assert_published_reads_as_delta(self, what: str) -> None:
        published = self.published()
        if published is not None:
            version, rows = published
            assert rows == self.delta_rows(version), f"{what}: Iceberg at Delta version {version} differs"


_FILESYSTEMS: dict[str, Any] = {}


def _filesystem(s3: S3Endpoint) -> Any:
    """One s3fs client of the server for the module's tables (the trials' ten chains share it; s3fs' sync calls are
    thread-safe): a client costs 0.1-0.2 CPU s to make (botocore loads the S3 service model for each)."""
    if s3.endpoint not in _FILESYSTEMS:
        fs = s3.filesystem()
        fs.connect()  # made here, in the thread that makes the tables: the chains' first calls do not race to make it
        _FILESYSTEMS[s3.endpoint] = fs
    return _FILESYSTEMS[s3.endpoint]


@pytest.fixture
def lake(s3: S3Endpoint, tmp_path: Path, request: pytest.FixtureRequest) -> Lake:
    return Lake(s3, tmp_path / "t", f"{request.node.name}-{time.monotonic_ns()}")


def test_seeded_fault_trials(s3: S3Endpoint, tmp_path: Path) -> None:
    per_chain = TRIALS // CHAINS
    with ThreadPoolExecutor(CHAINS, thread_name_prefix="fault-trials") as pool:
        chains = [pool.submit(run_chain, Lake(s3, tmp_path / f"t{chain}", f"trials-{chain}-{time.monotonic_ns()}"),
                              s3, range(chain * per_chain, (chain + 1) * per_chain))
                  for chain in range(CHAINS)]
        results = [chain.result() for chain in chains]  # a chain's failed assertion is raised here
    outcomes: dict[str, int] = {}
    injected: set[str] = set()
    for chain_outcomes, chain_injected in results:
        for outcome, count in chain_outcomes.items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
        injected |= chain_injected
    assert injected == set(FAULTS), injected
    assert outcomes.get("converted", 0) >= 5 and len(outcomes) >= 2, outcomes


def run_chain(lake: Lake, s3: S3Endpoint, trials: range) -> tuple[dict[str, int], set[str]]:
    """The ``trials`` one after another on ``lake``, then a clean conversion: the outcomes and the faults injected."""
    outcomes: dict[str, int] = {}
    lake.append()
    with fault_proxy(s3.endpoint, stall_s=STALL_S) as proxy:
        # The S3 client of this endpoint made before the trials (with a calm bound; fsspec keeps it): made by ten
        # chains at once on a loaded machine, it alone took more than BOUND_S.
        assert open_storage(lake.uri, lake.options(proxy.endpoint, CALM_BOUND_S)).exists(FIRST_COMMIT)
        for trial in trials:
            rng = random.Random(trial)
            lake.append(rng.randint(1, 4))
            proxy.decide = seeded_faults(trial, rate=rng.choice((0.02, 0.05, 0.1, 0.2)), weights=WEIGHTS)
            faults_before = len(proxy.faults())
            started = time.monotonic()
            try:
                # Five snapshots kept: each run reads the commits since the oldest (expiry), not a growing log.
                convert(lake.uri, storage_options=lake.options(proxy.endpoint, BOUND_S), full=trial % 10 == 9,
                        retain_snapshots=5)
                outcome = "converted"
            except DeltabergError as exc:
                outcome = type(exc).__name__
            elapsed = time.monotonic() - started
            proxy.decide = seeded_faults(0, rate=0.0)
            what = f"trial {trial} ({outcome}, faults {proxy.faults()[faults_before:]})"
            assert elapsed < RUN_LIMIT_S, f"{what} ran {elapsed:.1f} s"
            if outcome == "converted":
                assert lake.published() == (rng_free_version(lake), lake.delta_rows()), what
            lake.assert_published_reads_as_delta(what)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        # The faults stopped: a clean conversion converges and reads as Delta does.
        convert(lake.uri, storage_options=lake.options())
        assert lake.published() == (rng_free_version(lake), lake.delta_rows()), f"trials {trials}: clean run"
        return outcomes, set(proxy.faults())


def rng_free_version(lake: Lake) -> int:
    """The Delta table's latest version (one commit a file in the local log)."""
    return max(int(p.stem) for p in (lake.local / "_delta_log").glob("*.json"))


@pytest.mark.parametrize("written", ["v2.metadata.json", ".state.arrow"])
def test_a_lost_response_to_a_write_is_success(lake: Lake, s3: S3Endpoint, written: str) -> None:
    """The write lands, its response is lost, the client sends it again and finds its own bytes: written."""
    lake.append()
    convert(lake.uri, storage_options=lake.options())
    lake.append()
    lost: list[str] = []

    def decide(request: Request) -> str | None:
        if request.method == "PUT" and request.target.endswith(written) and not lost:
            lost.append(request.target)
            return "lost"
        return None

    with fault_proxy(s3.endpoint, decide, stall_s=STALL_S) as proxy:
        convert(lake.uri, storage_options=lake.options(proxy.endpoint, CALM_BOUND_S))
    assert lost, "no such write"
    assert lake.published() == (1, delta_rows(lake.local))


@pytest.mark.parametrize("stalled", ["expect-100", "everything"])
def test_a_stalled_store_ends_typed_within_the_bound(lake: Lake, s3: S3Endpoint, stalled: str) -> None:
    """``expect-100``: the PUT of the metadata file waits for a ``100 Continue`` that never comes (the proxy
    answers nothing); ``everything``: no request is answered."""
    # ``everything``: the conversion's first call meets the stall, so a short bound proves the point sooner;
    # ``expect-100``: the calls before the stall must not time out on a loaded machine.
    bound_s = 1.0 if stalled == "everything" else 5.0
    lake.append()
    stalling = threading.Event()

    def decide(request: Request) -> str | None:
        if stalled == "everything":
            return "stall" if stalling.is_set() else None
        expecting = (request.header("expect") or "").lower() == "100-continue"
        return "stall" if expecting and request.target.endswith(".metadata.json") else None

    with fault_proxy(s3.endpoint, decide, stall_s=STALL_S) as proxy:
        # The S3 client of the proxy's endpoint made before the stall, with a calm bound (fsspec keeps it for the
        # conversion, whose options differ only in the bound): made within 1 s on a loaded machine, it alone could
        # take longer, and the conversion would end typed before any request met the stall.
        assert open_storage(lake.uri, lake.options(proxy.endpoint, CALM_BOUND_S)).exists(FIRST_COMMIT)
        stalling.set()
        started = time.monotonic()
        with pytest.raises(StorageTimeoutError) as info:
            convert(lake.uri, storage_options=lake.options(proxy.endpoint, bound_s))
        elapsed = time.monotonic() - started
    assert info.value.retryable and lake.uri in str(info.value), str(info.value)
    assert elapsed < 2 * bound_s + 12.0, elapsed
    assert "stall" in proxy.faults()
    assert lake.published() is None
    convert(lake.uri, storage_options=lake.options())
    assert lake.published() == (0, delta_rows(lake.local))
