"""A class-data-sharing archive of the Spark JVM (Java's dynamic CDS), so that each Spark JVM of a test run (the
session of each worker, every spark-submit) maps the classes of Spark, Delta and Iceberg from one file instead of
loading and verifying them again: about 10 CPU s less per JVM on the 2-core machine (tests/README.md).

``start_build()`` makes it once per Java and set of jars, under ``.cache/jvm/``, on a thread while the first tests
run (~65 s, most of it one busy core, which had the other idle when the tests waited for it): a small Delta and
Iceberg job (``jvm_archive_job.py``) through spark-submit with ``-XX:ArchiveClassesAtExit``, written under a
temporary name, checked to load (``-Xshare:on``) and only then renamed into place (Java aborts on a truncated
archive). The process that makes it holds ``build.lock`` until the end, named in $DELTABERG_JVM_ARCHIVE_LOCK for
the pytest-xdist workers it starts; ``wait()`` (support.spark_session, before a Spark JVM starts) returns once the
build has ended, in this process or in that one. No run depends on the archive: without one, or with one Java
finds stale (another classpath), the JVMs start as before, and its messages are off.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

from support.environment import JARS_DIR, REPO_ROOT

ARCHIVE_DIR = REPO_ROOT / ".cache" / "jvm"
#: The job whose classes the archive holds.
JOB = Path(__file__).resolve().parent / "jvm_archive_job.py"
#: Java's messages about an archive it cannot use (another classpath): off, it then runs without sharing.
QUIET = "-Xlog:cds*=off"
#: The build.lock a build holds while it runs, for the processes (pytest-xdist workers) that wait for it.
LOCK_ENV = "DELTABERG_JVM_ARCHIVE_LOCK"
#: The thread of start_build() in this process, the job it runs now, and whether wait() has returned once.
_builder: threading.Thread | None = None
_running: list[subprocess.Popen[str]] = []
_stopping = threading.Event()
_waited = False


def _java_binary() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return (Path(home) / "bin" / "java").resolve()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / "java"
        if candidate.exists():
            return candidate.resolve()
    return None


def _spark_jars() -> list[Path]:
    """pyspark's jars (none where pyspark is not installed: .venv-floor)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return []
    return sorted((Path(spec.origin).parent / "jars").glob("*.jar"))


def archive_path(base_options: str) -> Path | None:
    """The archive for this Java, these jars (pyspark's and JARS_DIR's) and JVM options (None without Java)."""
    java, spark_jars = _java_binary(), _spark_jars()
    if java is None or not spark_jars:
        return None
    digest = hashlib.sha256(base_options.encode())
    for path in [java, *java.parent.parent.rglob("libjvm.so"), *spark_jars, *sorted(JARS_DIR.glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return ARCHIVE_DIR / f"spark-{digest.hexdigest()[:16]}.jsa"


def options(base_options: str) -> str:
    """The JVM options that use the archive when it exists ("" otherwise)."""
    if os.environ.get("DELTABERG_JVM_ARCHIVE") == "0":
        return ""
    path = archive_path(base_options)
    if path is None or not path.is_file() or any(c.isspace() for c in str(path)):
        return ""  # Spark splits extraJavaOptions at whitespace
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {QUIET}"


def _submit(java_options: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    from support.spark_session import spark_submit_command

    if _stopping.is_set():
        return subprocess.CompletedProcess([], 1, "", "the run ended first")
    jars = ",".join(str(p) for p in sorted(JARS_DIR.glob("*.jar")))
    command, env = spark_submit_command(str(JOB), *arguments, jars=jars or None,
                                        conf={"spark.driver.extraJavaOptions": java_options})
    # A session of its own: stop() ends the JVM and the job's Python together.
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        _running.append(process)
        try:
            stdout, stderr = process.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        finally:
            _running.remove(process)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _needed(base_options: str) -> Path | None:
    """The archive to make, or None when there is nothing to make (it exists, or it cannot or must not be made)."""
    path = archive_path(base_options)
    if path is None or not list(JARS_DIR.glob("delta-spark_*.jar")) or os.environ.get("DELTABERG_JVM_ARCHIVE") == "0":
        return None
    return None if path.is_file() else path


def _take_lock() -> IO[str] | None:
    """build.lock, held (None when another process holds it: that run is making the archive)."""
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    lock = open(ARCHIVE_DIR / "build.lock", "w")  # noqa: SIM115 - held past this function, closed by _make
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _make(path: Path, base_options: str, lock: IO[str]) -> Path | None:
    """Make the archive at ``path`` holding ``lock``, released at the end."""
    with lock:
        if path.is_file():
            return path
        with tempfile.TemporaryDirectory(dir=ARCHIVE_DIR) as work:
            partial = Path(work) / path.name
            made = _submit(f"{base_options} -XX:ArchiveClassesAtExit={partial}", str(Path(work) / "tables"))
            if made.returncode != 0 or not partial.is_file():
                print(f"jvm_archive: no archive ({made.stderr[-2000:]})", file=sys.stderr)
                return None
            # -Xshare:on fails the JVM when the archive cannot be used; the same launcher gives the same classpath.
            checked = _submit(f"{base_options} -XX:SharedArchiveFile={partial} -Xshare:on", "--check")
            if checked.returncode != 0:
                print(f"jvm_archive: the archive does not load ({checked.stderr[-2000:]})", file=sys.stderr)
                return None
            for stale in ARCHIVE_DIR.glob("spark-*.jsa"):
                stale.unlink()
            os.replace(partial, path)
    return path


def start_build(base_options: str) -> None:
    """build() on a thread of this process, when there is an archive to make and no other run is making it; the
    lock is taken here, before the workers that wait on it start."""
    global _builder
    path = _needed(base_options)
    lock = None if path is None else _take_lock()
    if path is None or lock is None:
        return
    os.environ[LOCK_ENV] = str(ARCHIVE_DIR / "build.lock")
    _builder = threading.Thread(target=_make, args=(path, base_options, lock), daemon=True, name="jvm-archive")
    _builder.start()


def wait() -> bool:
    """Wait until the build start_build() began, here or in the process that started this one, has ended; True the
    first time it returns (the JVM options may have changed since this process read them)."""
    global _waited
    if _waited:
        return False
    if _builder is not None:
        _builder.join()
    elif os.environ.get(LOCK_ENV):
        with open(os.environ[LOCK_ENV]) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)  # granted once the build's exclusive lock is released
    _waited = True
    return True


def finish(kill: bool) -> None:
    """At the end of the run: wait for a build still running (the next run then has the archive), or, with
    ``kill`` (an interrupted run), end it: its job is killed and nothing is kept."""
    if _builder is None:
        return
    if kill:
        _stopping.set()
        for process in list(_running):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _builder.join()
