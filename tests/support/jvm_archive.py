"""A class-data-sharing archive of the Spark JVM (Java's dynamic CDS), so that each Spark JVM of a test run (the
session of each worker, every spark-submit) maps the classes of Spark, Delta and Iceberg from one file instead of
loading and verifying them again: about 10 CPU s less per JVM on the 2-core machine (tests/README.md).

``build()`` makes it once per Java and set of jars, under ``.cache/jvm/``: a small Delta and Iceberg job
(``jvm_archive_job.py``) through spark-submit with ``-XX:ArchiveClassesAtExit``, written under a temporary name,
checked to load (``-Xshare:on``) and only then renamed into place (Java aborts on a truncated archive). No run
depends on it: without one, or with one Java finds stale (another classpath), the JVMs start as before, and its
messages are off.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from support.environment import JARS_DIR, REPO_ROOT

ARCHIVE_DIR = REPO_ROOT / ".cache" / "jvm"
#: The job whose classes the archive holds.
JOB = Path(__file__).resolve().parent / "jvm_archive_job.py"
#: Java's messages about an archive it cannot use (another classpath): off, it then runs without sharing.
QUIET = "-Xlog:cds*=off"


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
    from support.spark_session import run_spark_submit

    jars = ",".join(str(p) for p in sorted(JARS_DIR.glob("*.jar")))
    return run_spark_submit(str(JOB), *arguments, jars=jars or None, timeout=900,
                            conf={"spark.driver.extraJavaOptions": java_options})


def build(base_options: str) -> Path | None:
    """Make the archive unless it exists, another process is making it, or Java or the Spark jars are missing;
    returns it when it exists afterwards. Other archives in the folder (stale ones) are deleted."""
    path = archive_path(base_options)
    if path is None or not list(JARS_DIR.glob("delta-spark_*.jar")) or os.environ.get("DELTABERG_JVM_ARCHIVE") == "0":
        return None
    if path.is_file():
        return path
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    with open(ARCHIVE_DIR / "build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # another run is making it: this one starts its JVMs without
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
