"""The layers of sim/: analysis imports no presentation, presentation not the bracket, renderers compute nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parent.parent / "sim"
RENDERERS = ("report.py", "terminal.py", "summary_text.py", "markdown.py")
# What computes a summary: the renderers take the summary instead.
COMPUTATIONS = {"ranked", "aggregate", "bootstrap_ci", "price_of_purity", "bracket_gaps", "compare_claim_modes",
                "one_claim_mode", "headline_budget", "focus_budget", "pick_session"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def _modules(layer: str) -> list[Path]:
    return sorted((SIM / layer).glob("*.py"))


@pytest.mark.parametrize("path", _modules("analysis"), ids=lambda p: p.name)
def test_analysis_imports_neither_presentation_nor_the_command_line(path):
    rel = path.relative_to(SIM.parent).as_posix()
    upward = [m for m, _ in _imports(path) if m.startswith(("ctxbench.sim.presentation", "ctxbench.sim.cli"))]
    assert not upward, f"{rel} imports {upward}"


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: p.name)
def test_the_engine_imports_no_layer_above_it(path):
    upward = [m for m, _ in _imports(path) if m.startswith(("ctxbench.sim.analysis", "ctxbench.sim.presentation", "ctxbench.sim.cli"))]
    assert not upward, f"{path.name} imports {upward}"


@pytest.mark.parametrize("path", _modules("presentation"), ids=lambda p: p.name)
def test_presentation_takes_bound_labels_from_the_labels_module(path):
    imported = [m for m, _ in _imports(path)]
    assert "ctxbench.sim.analysis.bracket" not in imported and not any(m.startswith("ctxbench.sim.cli") for m in imported), imported


@pytest.mark.parametrize("name", RENDERERS)
def test_renderers_compute_nothing(name):
    path = SIM / "presentation" / name
    computed = sorted({n for m, names in _imports(path) if m.startswith("ctxbench.sim.analysis") for n in names} & COMPUTATIONS)
    assert not computed, f"{name} imports {computed}"
    calls = [node.func.attr for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]
    assert not {"groupby", "agg", "aggregate", "mean", "sum"} & set(calls), name
