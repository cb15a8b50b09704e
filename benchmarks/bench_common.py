"""Helpers the benchmark scripts share: memory and load figures, table and profile printing, linked copies."""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    """This process's peak RSS in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / (1 << 20)


def timed(fn: Callable[[], dict], profile_out: str | None = None) -> dict:
    """Run ``fn`` once (under cProfile when ``profile_out`` names a file for the stats); its figures plus wall
    seconds (unless ``fn`` gave them), CPU seconds, peak RSS and the RSS before the call."""
    idle_mb = rss_mb()
    profiler = None
    if profile_out:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile_out)
    result.setdefault("seconds", seconds)
    result.update(peak_mb=rss_mb(), idle_mb=idle_mb,
                  cpu=after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return result


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_table(header: list[str], lines: list[list[str]]) -> None:
    """A markdown table, columns padded to their widest cell."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")


def linked_copy(source: Path, target: Path) -> Path:
    """``target`` with hard links to the files of ``source``'s _delta_log (copies across devices), and the
    generator's marker file when there is one."""
    (target / "_delta_log").mkdir(parents=True)
    for item in sorted((source / "_delta_log").iterdir()):
        if item.is_file():
            try:
                os.link(item, target / "_delta_log" / item.name)
            except OSError:
                shutil.copy2(item, target / "_delta_log" / item.name)
    marker = source / "_generated.json"
    if marker.exists():
        shutil.copy2(marker, target / marker.name)
    return target


def _short(filename: str) -> str:
    for marker in ("site-packages/", str(REPO) + "/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def print_profile(stats_file: str, top: int, *, by_own_time: bool = True) -> None:
    """The ``top`` functions of a cProfile dump by cumulative time (and by own time)."""
    import pstats

    stats = pstats.Stats(stats_file)
    rows = [(cum, own, func, f"{_short(filename)}:{line}")
            for (filename, line, func), (_cc, _nc, own, cum, _callers) in stats.stats.items()]
    orders = (("by cumulative time", 0), ("by own time", 1)) if by_own_time else (("by cumulative time", 0),)
    for title, key in orders:
        print(f"  top {top} {title}:")
        print(f"    {'cumulative s':>12}  {'own s':>7}  function (file:line)")
        for cum, own, func, where in sorted(rows, key=lambda r: r[key], reverse=True)[:top]:
            print(f"    {cum:12.3f}  {own:7.3f}  {func} ({where})")
