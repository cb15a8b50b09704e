"""A real Airflow deployment for the tests: ``airflow api-server``, ``scheduler``, ``dag-processor`` and
``triggerer`` as separate processes, the LocalExecutor, and a SQLite metadata DB in a throwaway AIRFLOW_HOME whose
DAG folder is dags_examples/.

Airflow 3.3 runs the LocalExecutor on SQLite (``airflow standalone`` does the same); the scheduler serialises the
writes. Task processes talk to the metadata DB only through the api-server's execution API (hence the api-server);
the dag-processor and the triggerer use an in-process one. The processes share one environment (``env``): the same
configuration, JWT secret and Fernet key, as the processes of one deployment must.

Each task runs in a process forked from the scheduler's LocalExecutor worker, and each DAG file is parsed in one
forked from the dag-processor: the scheduler and the dag-processor import the provider's modules once at start
(``PRELOAD``, through the deployment's ``airflow_local_settings``), so that no fork imports them again (~2-3 CPU s
each; ~22 tasks and 7 parses a run). The DAG files and tasks run as before: their imports find the modules loaded.
Each DAG file is parsed once (they do not change during a test), again on request (``Deployment.reparse``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from support.environment import AIRFLOW, REPO_ROOT
from support.servers import free_port, stop_process

T = TypeVar("T")

#: What the scheduler and the dag-processor import at start, for the tasks and the DAG parses they fork: the
#: provider's operators (with pyiceberg, pyarrow, the Spark provider) and the task runner.
PRELOAD = ("airflow_deltaberg.operators", "airflow_deltaberg.sensors", "airflow_deltaberg.notifications",
           "airflow.sdk.execution_time.task_runner")
#: AIRFLOW_HOME/config/airflow_local_settings.py, which every Airflow process imports at start: only the two
#: processes that fork tasks and parses preload (the triggerer forks one trigger runner: nothing to share).
LOCAL_SETTINGS = f"""import importlib
import sys

if sys.argv[1:2] in (["scheduler"], ["dag-processor"]):
    for module in {PRELOAD!r}:
        importlib.import_module(module)
"""
#: The processes of the deployment, in start order, with their arguments.
PROCESSES: dict[str, tuple[str, ...]] = {
    "api-server": ("api-server", "--host", "127.0.0.1", "--workers", "1"),
    "scheduler": ("scheduler",),
    "dag-processor": ("dag-processor",),
    "triggerer": ("triggerer",),
}


def deployment_env(home: Path, api_port: int, dags_folder: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of every process: this one's minus any Airflow setting of the test session, plus the
    deployment's configuration and ``extra`` (connections, the example DAGs' settings)."""
    from cryptography.fernet import Fernet

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # Not Airflow's default: a DAG that must not run before a deployer unpauses it has to say so itself.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),
        "AIRFLOW__API__SECRET_KEY": os.urandom(32).hex(),
        # The scheduler's and the triggerer's log servers: free ports, not the fixed defaults 8793 and 8794.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        # Quick turns for a test: the scheduler loop, the dag-processor's folder scans, the triggerer's health.
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # The DAG files do not change during a test: parsed once (and when a file is new), not every 30 s.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        # Every user an admin: the test drives the public API without a login (connections, unpausing, reads).
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    })
    env.update(extra)
    return env


@dataclass
class Deployment:
    """The processes of one Airflow deployment, their environment, and read access to its metadata DB."""

    home: Path
    env: dict[str, str]
    api_port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: Seconds each step of the start took, by name.
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def output(self, name: str) -> Path:
        """The file holding the stdout and stderr of process ``name``."""
        return self.home / f"{name}.out"

    def airflow(self, *args: str, timeout: float = 300) -> str:
        """Run ``airflow *args`` in the deployment's environment; its stdout (fails the test on a non-zero exit)."""
        result = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"airflow {' '.join(args)}: exit {result.returncode}\n" + (
            result.stdout[-3000:] + result.stderr[-3000:])
        return result.stdout

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A call of the api-server's public API (``/api/v2/<path>``) with a JSON body; the decoded answer. The
        deployment's users are all admins (no token). Cheaper than an ``airflow`` CLI process (3-4 CPU s each)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.api_port}/api/v2/{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)

    def unpause(self, dag_id: str) -> None:
        assert self.api("PATCH", f"dags/{dag_id}", {"is_paused": False})["is_paused"] is False

    def reparse(self, dag_id: str) -> None:
        """Have the dag-processor parse ``dag_id``'s file at its next turn (the REST API's parseDagFile, the UI's
        Reparse button): the files are parsed once, not every few seconds (``deployment_env``)."""
        token = self.api("GET", f"dags/{dag_id}/details")["file_token"]
        self.api("PUT", f"parseDagFile/{token}")

    def start(self, name: str) -> None:
        with open(self.output(name), "wb") as out:
            self.processes[name] = subprocess.Popen(
                [AIRFLOW, *PROCESSES[name]], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        """SIGTERM every process at once, then wait for each (SIGKILL after 20 s) and kill its process group: the
        LocalExecutor's workers, the api-server's uvicorn worker and Spark JVMs go with their parent."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            stop_process(process)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def diagnostics(self, lines: int = 40) -> str:
        """Each process's state and the last lines of its output: for assertion messages."""
        parts = []
        for name, process in self.processes.items():
            code = process.poll()
            text = self.output(name).read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            parts.append(f"--- {name} ({'running' if code is None else f'exited {code}'}):\n" + "\n".join(text))
        return "\n".join(parts)

    def check_running(self) -> None:
        dead = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        assert not dead, f"Airflow processes exited: {dead}\n{self.diagnostics()}"

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
        """The first value of ``probe()`` that is not None, False or empty (a query's rows), polled while every
        process runs."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_running()
            value = probe()
            if value is not None and value is not False and value != []:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f} s for {what}\n{self.diagnostics()}")
            time.sleep(interval)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` on the metadata DB (sqlite3, read-only: the deployment is the writer)."""
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)) as conn:
            return conn.execute(sql, args).fetchall()

    def api_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/execution/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        rows = self.query("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", dag_id, run_id)
        return dict(rows)

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """Every XCom of a task instance, key -> value (the stored JSON)."""
        rows = self.query("SELECT key, value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ?",
                          dag_id, run_id, task_id)
        return {key: json.loads(value) if isinstance(value, (str, bytes)) else value for key, value in rows}

    def log_files(self) -> list[Path]:
        """Every file under the deployment's log folder (task logs, the dag-processor's and scheduler's logs)."""
        return sorted(p for p in (self.home / "logs").rglob("*") if p.is_file())


@contextlib.contextmanager
def deployment(home: Path, extra_env: dict[str, str], dags_folder: Path = REPO_ROOT / "dags_examples",
               connections: dict[str, dict[str, Any]] | None = None) -> Iterator[Deployment]:
    """A migrated metadata DB, the four processes running (the api-server answering) and ``connections`` added
    through the public API (its audit log masks every ``extra`` value; no secret is on a command line, which
    Airflow records in its log table); stopped on exit."""
    home.mkdir(parents=True, exist_ok=True)
    api_port = free_port()
    deploy = Deployment(home, deployment_env(home, api_port, dags_folder, extra_env), api_port)
    started = time.monotonic()
    deploy.airflow("db", "migrate")
    deploy.timings["airflow db migrate"] = time.monotonic() - started
    (home / "config").mkdir(exist_ok=True)
    (home / "config" / "airflow_local_settings.py").write_text(LOCAL_SETTINGS, encoding="utf-8")
    try:
        for name in PROCESSES:
            deploy.start(name)
        deploy.wait_for("the api-server to answer", deploy.api_healthy, timeout=300)
        for conn_id, connection in (connections or {}).items():  # before any DAG is unpaused: none needs them yet
            assert deploy.api("POST", "connections", {"connection_id": conn_id, **connection})["connection_id"] == (
                conn_id)
        deploy.timings["processes up"] = time.monotonic() - started - deploy.timings["airflow db migrate"]
        yield deploy
    finally:
        deploy.stop()
