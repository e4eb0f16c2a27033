"""``ctxbench strategies``: list the strategies a spec can name."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from ctxbench.sim.presentation.console import console as make_console
from ctxbench.strategies.registry import DEFAULT_SPEC, describe, kind_of

NAME = "strategies"
HELP = "list the available strategies and context policies with a one-line description each"
DESCRIPTION = """\
List the strategies and context policies registered by name: the built-ins and those published
by installed packages under the entry-point group 'ctxbench.strategies'. Any of them can be
named in a spec with options (lru?max_entries=50, claude-code?trigger_tokens=150000); an import
path (pkg.module:factory) works too, and STRATEGY+POLICY (lru+compaction) compacts a managed
context's conversation as the policy does."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ctxbench strategies``."""
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: argparse.Namespace) -> int:
    """Print the available strategies."""
    rows = [{"name": name, "kind": kind_of(name), "description": text, "default": name == DEFAULT_SPEC}
            for name, text in describe().items()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(show_edge=False)
    table.add_column("name")
    table.add_column("kind")
    table.add_column("description")
    for row in rows:
        table.add_row(row["name"] + (" (default)" if row["default"] else ""), row["kind"], row["description"])
    console = make_console()
    console.print(table)
    console.print("Spec syntax: NAME[?key=value[&key=value...]], an import path pkg.module:factory, "
                  "cmd:<command line>[?kind=policy], or STRATEGY+POLICY (lru+compaction)",
                  markup=False, highlight=False, soft_wrap=True)
    return 0
