"""A Spark standalone cluster on loopback for the tests that submit to a real master: one master and two workers,
each a JVM of its own started with the installed pyspark's ``bin/spark-class`` (SPARK_HOME = the pyspark install),
bound to 127.0.0.1 on free ports, work directories under a temporary folder.

Each worker runs in a process group of its own, so killing a worker takes its executors (and their Python
workers) with it, as when a machine is lost. The applications' Python (driver and workers) is this interpreter
through ``spark_session.python_without_zips``. The master's JSON (``<web UI>/json/``) tells which workers are alive;
a worker's JSON which executors it runs or ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.environment import REPO_ROOT
from support.servers import free_port
from support.spark_session import INTERPRETED, java, jvm_options, python_without_zips, spark_home

START_TIMEOUT_S = 90.0
WORKERS = 2
#: Per worker: one core, and room for one executor of EXECUTOR_MEMORY (Spark wants at least 450 MB of heap).
WORKER_CORES = 1
WORKER_MEMORY = "768m"
EXECUTOR_MEMORY = "512m"


@dataclass
class ClusterProcess:
    """A master or worker JVM: its process (leader of its own process group), web UI and log."""

    name: str
    process: subprocess.Popen[bytes]
    web_url: str
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def json(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.loads(response.read())

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL to the whole process group (the JVM and every executor and Python worker it started)."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)


@dataclass
class SparkCluster:
    """A running standalone cluster: ``master_url`` (``spark://127.0.0.1:PORT``) for spark-submit."""

    root: Path
    host: str
    port: int
    master: ClusterProcess
    workers: list[ClusterProcess] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def state(self) -> dict[str, Any]:
        """The master's JSON: workers (id, state, web UI), apps (active and completed)."""
        return self.master.json()

    def alive_workers(self) -> list[str]:
        return sorted(w["webuiaddress"] for w in self.state()["workers"] if w["state"] == "ALIVE")

    def work_dir(self, index: int) -> Path:
        return self.root / f"worker-{index}"

    def app_conf(self) -> dict[str, str]:
        """Spark conf an application needs on this cluster: executors that fit the workers, this interpreter (with
        this package importable) for the driver and the executors' Python workers."""
        return {
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": str(WORKER_CORES),
            "spark.cores.max": str(WORKERS * WORKER_CORES),
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.pyspark.python": python_without_zips(),
            "spark.pyspark.driver.python": python_without_zips(),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            **INTERPRETED,
            # The tests' JVM options (C1 only, serial GC, the JVM archive): Spark's classpath is the same in every
            # JVM of the cluster, so the driver, the executors and the daemons all map the archive's classes.
            "spark.driver.extraJavaOptions": jvm_options(),
            "spark.executor.extraJavaOptions": jvm_options(),
        }

    def start_worker(self, index: int) -> ClusterProcess:
        """Start worker ``index`` (again, after a kill) and wait until the master lists it alive."""
        worker = self._launch_worker(index)
        self._wait_registered(index)
        return worker

    def _wait_registered(self, index: int) -> None:
        worker = self.workers[index]
        _wait_for(lambda: worker.web_url in self.alive_workers(), f"worker {index} to register", worker)

    def _launch_worker(self, index: int) -> ClusterProcess:
        web_port = free_port()
        work = self.work_dir(index)
        work.mkdir(parents=True, exist_ok=True)
        worker = _launch(
            f"worker-{index}", self.root / f"worker-{index}.log", f"http://{self.host}:{web_port}",
            ["org.apache.spark.deploy.worker.Worker", "--host", self.host, "--port", "0", "--webui-port",
             str(web_port), "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(work),
             self.master_url],
        )
        if index < len(self.workers):
            self.workers[index] = worker
        else:
            self.workers.append(worker)
        return worker

    def ensure_workers(self) -> None:
        """Every worker alive (a test that killed one leaves the cluster as it found it)."""
        for index, worker in enumerate(self.workers):
            if not worker.alive() or worker.web_url not in self.alive_workers():
                worker.stop()
                self.start_worker(index)

    def app_dirs(self) -> set[Path]:
        """The applications' folders in the workers' work dirs (one per application a worker ran executors for)."""
        return {app for index in range(len(self.workers)) for app in self.work_dir(index).glob("app-*")}

    def worker_running_a_task(self, ignore: set[Path] = frozenset()) -> int | None:  # type: ignore[assignment]
        """The index of a worker whose executor logged that it started a task (its stderr in the work dir), for
        applications whose folders are not in ``ignore``."""
        for index in range(len(self.workers)):
            for stderr in self.work_dir(index).glob("app-*/*/stderr"):
                if stderr.parents[1] not in ignore and "Running task" in stderr.read_text(errors="replace"):
                    return index
        return None

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            process.stop()


def _launch(name: str, log: Path, web_url: str, arguments: list[str]) -> ClusterProcess:
    home = spark_home()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update({
        "SPARK_HOME": str(home),
        "JAVA_HOME": str(Path(java()).resolve().parents[1]),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(log.parent),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": f"{jvm_options()} -Dspark.master.rest.enabled=false",
        # Executors inherit the worker's environment: this checkout first, as in the test process.
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
    })
    with log.open("wb") as out:
        process = subprocess.Popen([str(home / "bin" / "spark-class"), *arguments], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=log.parent,
                                   start_new_session=True)
    return ClusterProcess(name, process, web_url, log)


def _wait_for(condition: Any, what: str, process: ClusterProcess) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"{process.name} exited with {process.process.returncode}:\n{process.log_tail()}")
        try:
            if condition():
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"waited {START_TIMEOUT_S} s for {what}:\n{process.log_tail()}")


def spark_cluster(root: Path, workers: int = WORKERS) -> Iterator[SparkCluster]:
    """The body of a session fixture: a master and ``workers`` workers, all alive; every JVM stopped at the end."""
    root.mkdir(parents=True, exist_ok=True)
    host, port, web_port = "127.0.0.1", free_port(), free_port()
    master = _launch("master", root / "master.log", f"http://{host}:{web_port}",
                     ["org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port),
                      "--webui-port", str(web_port)])
    cluster = SparkCluster(root, host, port, master)
    try:
        _wait_for(lambda: master.json()["status"] == "ALIVE", "the master", master)
        for index in range(workers):  # the JVMs start side by side
            cluster._launch_worker(index)
        for index in range(workers):
            cluster._wait_registered(index)
        yield cluster
    finally:
        cluster.stop()
