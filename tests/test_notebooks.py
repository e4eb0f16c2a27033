"""The notebooks in notebooks/: stored without outputs, and each one runs top to bottom under nbmake."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow   # subprocesses: run by .ci/run, not by make test

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"compare_strategies.ipynb", "trace_anatomy.ipynb", "custom_strategy.ipynb", "tune_policy.ipynb"}


def test_the_notebooks_are_there():
    assert EXPECTED <= {nb.name for nb in NOTEBOOKS}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(notebook):
    book = json.loads(notebook.read_text())
    for cell in book["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, notebook.name
    assert book["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_under_nbmake(notebook, tmp_path):
    # A copy runs in a temporary directory (the kernel's working directory, and TMPDIR), so
    # whatever the notebook or a library writes stays out of the tree; nbmake never writes back.
    copy = tmp_path / notebook.name
    shutil.copyfile(notebook, copy)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbmake", "--nbmake-timeout=300", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(copy)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=_env(TMPDIR=str(tmp_path)))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def _env(**extra: str) -> dict[str, str]:
    """This environment without the outer pytest's variables, so the inner run is independent."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, **extra}
