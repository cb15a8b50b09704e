"""Worker processes for fuzz cases: each imports the libraries once and runs cases one after the other; the pool
kills a worker that overruns the hard deadline (a hang the alarm could not interrupt) or dies, reports the case,
and starts a fresh worker. Results come back in submission order through futures."""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
import traceback
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from fuzz_cases import CasePlan
from fuzz_harness import CALL_TIMEOUT_S, ORACLE_TIMEOUT_S, CaseResult, Finding, apply_expectations

#: Beyond the alarms of the calls (three commands, the pre-conversion, convert --verify-stats and the two readers):
#: the worker is stuck.
HARD_DEADLINE_S = 5 * CALL_TIMEOUT_S + 2 * ORACLE_TIMEOUT_S + 30
#: A worker is replaced after this many cases (bounds memory growth of long runs). The CI run's 500 cases on two
#: workers start each once: a start costs ~2.5 s of CPU (spawn, imports, the first case's lazy imports).
CASES_PER_WORKER = 250


class WorkerGone(Exception):
    """The worker process exited between two cases."""


def worker_main(conn: Any, fixtures_root: str, workdir: str, keep: bool) -> None:
    import faulthandler
    import logging
    import os

    # A crash in native code (segfault, abort) leaves the Python stacks here for the pool's report.
    crash_log = open(Path(workdir) / f"crash-{os.getpid()}.log", "w")  # noqa: SIM115 - open for the process' life
    faulthandler.enable(crash_log)

    # Library warnings reach the CLI's stderr through logging's last-resort handler, as they would for a user.
    logging.captureWarnings(True)
    import fuzz_harness

    fuzz_harness._install_recorder()  # noqa: SLF001 - imports the CLI and pyiceberg before the first case
    while True:
        message = conn.recv()
        if message is None:
            return
        plan = CasePlan(**message)

        def progress(phase: str, detail: Any = None) -> None:
            conn.send(("phase", (phase, detail)))

        try:
            result = fuzz_harness.run_case(plan, Path(fixtures_root), Path(workdir), keep=keep, progress=progress)
            conn.send(("result", result.to_dict()))
        except BaseException as exc:  # noqa: BLE001 - report, then let the pool replace this worker
            conn.send(("crash", "".join(traceback.format_exception(exc))[-3000:]))
            return


class _Worker:
    def __init__(self, ctx: Any, fixtures_root: Path, workdir: Path, keep: bool):
        self.workdir = workdir
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, str(fixtures_root), str(workdir), keep),
                                   daemon=True)
        self.process.start()
        child.close()
        self.cases = 0

    def run(self, plan: CasePlan) -> tuple[CaseResult, bool]:
        """The case's result, and whether this worker can take another case. WorkerGone when the worker exited
        after its last case, before this one was handed to it."""
        self.cases += 1
        try:
            self.conn.send(plan.to_dict())
        except OSError as exc:  # BrokenPipeError: nothing of this case has run
            self.process.join(5)
            raise WorkerGone(f"the worker that ran the previous cases had exited with {self.process.exitcode}"
                             f"{self._crash_stack()}") from exc
        phase = "start"
        mutation_args: Any = None
        end = time.monotonic() + HARD_DEADLINE_S
        while True:
            remaining = end - time.monotonic()
            try:
                ready = remaining > 0 and self.conn.poll(remaining)
                if not ready:
                    self.stop(kill=True)
                    return _failed(plan, "hang", f"worker killed after {HARD_DEADLINE_S} s in phase {phase}",
                                   phase, mutation_args), False
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                self.process.join(5)
                return _failed(plan, "worker-died", f"worker exited with {self.process.exitcode} in phase {phase}"
                               f"{self._crash_stack()}", phase, mutation_args), False
            if kind == "phase":
                phase, detail = payload
                if phase == "mutated":
                    mutation_args = detail
            elif kind == "result":
                return CaseResult.from_dict(payload), self.cases < CASES_PER_WORKER and not _timed_out(payload)
            else:
                return _failed(plan, "harness-error", payload, phase), False

    def _crash_stack(self) -> str:
        """The innermost frames faulthandler wrote for the dead worker (empty when there are none)."""
        path = self.workdir / f"crash-{self.process.pid}.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return ""
        frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
        ours = [f for f in frames if "/airflow_deltaberg/" in f]
        shown = (ours[:3] or frames[:3])
        return (": " + " <- ".join(shown)) if shown else ""

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


def _timed_out(result: dict[str, Any]) -> bool:
    # After an alarm the interrupted call may have left threads running: start afresh.
    return any(f["kind"] == "hang" for f in result.get("findings", []))


def _failed(plan: CasePlan, kind: str, detail: str, phase: str, mutation_args: Any = None) -> CaseResult:
    # Deaths in our own calls are ours; in the readers (deltalake, pyiceberg) they are the oracle's.
    ours = phase in ("copy", "pre-convert", "mutate", "mutated", "inspect", "validate", "convert", "verify-stats",
                     "start")
    command = phase if ours else f"oracle:{phase}"
    result = CaseResult(plan.to_dict(), status="failed" if ours else "ok")
    if isinstance(mutation_args, dict):
        apply_expectations(result, mutation_args)
    result.findings.append(Finding("problem" if ours else "review", kind, command, detail))
    return result


class FuzzPool:
    """``submit(plans)`` -> a future per plan; ``workers`` processes work through them in order."""

    def __init__(self, fixtures_root: Path, workdir: Path, workers: int = 2, keep: bool = False):
        self.fixtures_root = fixtures_root
        self.workdir = workdir
        self.keep = keep
        self.workers = max(1, workers)
        self._ctx = mp.get_context("spawn")
        self._queue: queue.Queue[tuple[CasePlan, Future[CaseResult]] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._running: dict[str, _Worker] = {}  # by serving thread

    def submit(self, plans: list[CasePlan]) -> list[Future[CaseResult]]:
        futures = []
        for plan in plans:
            future: Future[CaseResult] = Future()
            self._queue.put((plan, future))
            futures.append(future)
        while len(self._threads) < min(self.workers, len(plans)):
            thread = threading.Thread(target=self._serve, daemon=True, name=f"fuzz-worker-{len(self._threads)}")
            thread.start()
            self._threads.append(thread)
        return futures

    def _serve(self) -> None:
        worker: _Worker | None = None
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                plan, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    if worker is None:
                        worker = self._start_worker()
                    try:
                        result, reusable = worker.run(plan)
                    except WorkerGone as gone:
                        # Not this case's doing: it runs on a fresh worker, and the exit is reported for review.
                        worker.stop(kill=True)
                        worker = self._start_worker()
                        result, reusable = worker.run(plan)
                        result.findings.append(Finding("review", "worker-exited-between-cases", "harness", str(gone)))
                    if not reusable:
                        worker.stop(kill=result.status == "failed")
                        worker = None
                    future.set_result(result)
                except BaseException as exc:  # noqa: BLE001 - never leave a future unresolved
                    future.set_exception(exc)
                    if worker is not None:
                        worker.stop(kill=True)
                        worker = None
        finally:
            if worker is not None:
                worker.stop()

    def _start_worker(self) -> _Worker:
        worker = _Worker(self._ctx, self.fixtures_root, self.workdir, self.keep)
        self._running[threading.current_thread().name] = worker
        return worker

    def processes(self) -> list[Any]:
        """The worker processes alive now."""
        return [w.process for w in list(self._running.values()) if w.process.is_alive()]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Cancel what is still queued, then stop each thread (and its worker process).
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[1].cancel()
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(HARD_DEADLINE_S + 30)
