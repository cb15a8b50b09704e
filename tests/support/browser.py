"""Headless Chromium from Debian's packages (scripts/install_chromium.sh installs it), driven by Playwright for
Python (its driver ships in the wheel; no browser is ever downloaded). Without Chromium or Playwright a test
skips with the reason, except in CI (CI=true), where it fails."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.environment import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
#: Without the background-networking flags Chromium's own outbound connections (updates, sync, field trials) are
#: refused here many at a time; the page needs none of them.
ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (in CI the browser test must run: scripts/test.sh installs Chromium)")
    pytest.skip(reason)


def require_chromium() -> None:
    """Chromium installed (waits up to 10 minutes for scripts/install_chromium.sh, started in the background by
    scripts/test.sh, when its lock is held), and Playwright importable; else skip (fail in CI)."""
    lock = REPO_ROOT / ".cache" / "install_chromium.lock"
    deadline = time.monotonic() + 600
    while not os.access(CHROMIUM, os.X_OK) and lock.exists() and time.monotonic() < deadline:
        time.sleep(2)
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"{CHROMIUM} is not installed (scripts/install_chromium.sh: apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("playwright is not installed (the test extra)")
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=60)
    if version.returncode != 0:
        _unavailable(f"{CHROMIUM} --version failed: {version.stderr[-500:]}")


@contextlib.contextmanager
def chromium_page() -> Iterator[Any]:
    """A Playwright page of one headless Chromium with a fresh profile, closed (profile deleted) on exit."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="deltaberg-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=list(ARGS),
                viewport={"width": 1400, "height": 1000})
            try:
                yield context.pages[0] if context.pages else context.new_page()
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


#: Decodes a PNG (a data URL) in the page and counts its distinct colours.
_COLOURS_JS = """async (url) => {
  const image = new Image();
  image.src = url;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = image.width;
  canvas.height = image.height;
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const pixels = context.getImageData(0, 0, image.width, image.height).data;
  const seen = new Set();
  for (let i = 0; i < pixels.length; i += 4) seen.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
  return seen.size;
}"""


def colours(page: Any, png: Path) -> int:
    """How many distinct colours the PNG ``png`` holds, decoded by the browser (a blank image has one)."""
    url = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    return int(page.evaluate(_COLOURS_JS, url))
