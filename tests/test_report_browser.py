"""report.html in a real browser (headless Chromium): the page loads from disk and every image decodes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.presentation.report import write_report
from ctxbench.sim.presentation.results import run_metadata, write_results_dir
from ctxbench.sim.engine.suite import build_suite

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
# slow: each test starts a headless Chromium (about 1.6 s apiece), and the fixture replays a suite
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")]


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    grid = run_grid(build_suite("quick"), ["lru", "importance"], [25_000, 100_000], workers=1, progress=False)
    meta = run_metadata({"workload": {"suite": "quick"}, "strategies": ["lru", "importance"],
                         "budgets_tokens": [25_000, 100_000], "bytes_per_token": 3.8, "lenient": False})
    out = write_results_dir(tmp_path_factory.mktemp("browser") / "results", grid.results, grid.turns, meta)
    return write_report(out)


def test_every_image_decodes(report, tmp_path):
    done = chromium(tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", report.html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    root = re.search(r"<html\b[^>]*>", done.stdout)
    assert root, f"no page rendered: {done.stdout[:500]!r} {done.stderr[-1000:]}"
    total = re.search(r'data-images-total="(\d+)"', root.group(0))
    decoded = re.search(r'data-images-decoded="(\d+)"', root.group(0))
    assert total and decoded, f"the page's load handler did not run: {root.group(0)}"
    assert int(total.group(1)) == len(re.findall(r"<img\b", report.html.read_text())) == 5
    assert decoded.group(1) == total.group(1)
    assert "ctxbench report" in done.stdout and "<table>" in done.stdout


def test_page_renders_something(report, tmp_path):
    shot = tmp_path / "shot.png"
    done = chromium(tmp_path / "profile", "--hide-scrollbars", "--window-size=1100,2400",
                    f"--screenshot={shot}", report.html.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1100)
    assert pixels.std() > 0.05  # not a blank page
    # Figures are drawn with the strategies' colours: lru's blue is on the page.
    blue = np.array([0x1F, 0x77, 0xB4]) / 255
    assert (np.abs(pixels - blue).max(axis=-1) < 0.03).sum() > 500
