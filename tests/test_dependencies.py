"""The dependency rule (docs/design.md): sim -> strategies, sim -> traces; strategies and traces import nothing of
each other or of sim. Checked on every import statement of every module, lazy ones inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"traces": {"sim", "strategies"}, "strategies": {"sim", "traces"}}


def imported_packages(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in a module of ``package``: statements anywhere,
    and ``importlib.import_module`` / ``__import__`` calls with a constant name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module_parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the module's package
                base = module_parts[:-1] if path.name != "__init__.py" else module_parts
                base = base[:len(base) - (node.level - 1)]
                found.append((node.lineno, ".".join([*base, node.module] if node.module else base)))
            else:
                found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return [(line, _package(name)) for line, name in found]


def _package(module: str) -> str:
    """The top-level package of an absolute module name, ``ctxbench.`` set aside (``ctxbench.sim.cli``: ``sim``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "ctxbench" and len(parts) > 1 else parts[0]


def test_the_import_finder_sees_every_kind_of_import(tmp_path):
    package = tmp_path / "traces"
    (package / "sub").mkdir(parents=True)
    module = package / "sub" / "probe.py"
    module.write_text("import os\nfrom .. import io\nfrom .x import y\n\ndef later():\n    from ctxbench.sim.cli import main\n"
                      "    import importlib\n    importlib.import_module('ctxbench.strategies.lru')\n")
    assert sorted(imported_packages(module, package)) == [(1, "os"), (2, "traces"), (3, "traces"), (6, "sim"),
                                                          (7, "importlib"), (8, "strategies")]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_package_imports_nothing_of_sim_or_of_the_other(package):
    modules = sorted((ROOT / package).rglob("*.py"))
    assert len(modules) > 5
    broken = [f"{module.relative_to(ROOT)}:{line} imports {name}"
              for module in modules for line, name in imported_packages(module, ROOT / package)
              if name in FORBIDDEN[package]]
    assert broken == []


@pytest.mark.parametrize("package", ["sim", "strategies", "traces"])
def test_every_module_imports_the_packages_under_the_ctxbench_namespace(package):
    """A bare ``import sim`` would find another distribution's ``sim`` (or none) once installed."""
    bare = []
    for module in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            bare += [f"{module.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                     if n.split(".")[0] in ("sim", "strategies", "traces")]
    assert bare == []
