"""The examples in the installed modules' docstrings run as written (imported under ``ctxbench.``, as users import them)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ctxbench.sim
import ctxbench.strategies
import ctxbench.traces


def _modules() -> list[str]:
    names = []
    for package in (ctxbench.sim, ctxbench.strategies, ctxbench.traces):
        names.append(package.__name__)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return sorted(n for n in names if not n.endswith(".__main__"))


MODULES = _modules()


def test_every_package_module_is_found():
    assert "ctxbench.sim.engine.rules" in MODULES and "ctxbench.traces.importers.codex" in MODULES
    assert len(MODULES) > 100


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
