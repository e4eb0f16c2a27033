"""``ctxbench check``: run the conformance checker on one strategy spec."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from ctxbench.sim.cli.commands import add_evict_timeout, evict_timeout
from ctxbench.sim.cli.commands._options import int_option
from ctxbench.sim.presentation.console import console
from ctxbench.sim.errors import InputError
from ctxbench.strategies.check import KINDS, CheckReport, check_strategy
from ctxbench.strategies.check_policy import POLICY_KINDS, check_policy
from ctxbench.strategies.isolation import built_kind
from ctxbench.strategies.registry import combination_parts

NAME = "check"
HELP = "check that a strategy or a context policy keeps its contract, with minimal failing examples, and time it"
DESCRIPTION = """\
Check that a strategy keeps the contract: hypothesis-generated states and budgets, each
violation shrunk to a minimal example (a {"state": [...], "budget": {...}} request in the
TypeScript JSON form), an answer under another PYTHONHASHSEED, and the latency of evict at
100 and 10,000 entries.

SPEC is a registered name with options (lru?max_entries=50), an import path
(pkg.module:factory) or an entry-point name; see 'ctxbench strategies'. An import path or
an entry point runs in a process of its own, as in 'ctxbench run': a call during which it
ends that process (os._exit, a crash, a signal) fails 'leaves' ("the process running the
strategy ended (exit status 0) during evict"), and the check goes on in a fresh process.

Calls are judged as 'ctxbench run' judges them: an answer must be a list or tuple (anything
else, a generator for one, is refused before it is read) of at most as many ids as the state
has entries ('bad-return'; the rest of a longer one is not read); a call that raises fails
'raises'; one that leaves (sys.exit, a KeyboardInterrupt of its own, another BaseException)
fails 'leaves'; with --evict-timeout-ms, one past the limit fails 'time-limit' (the limit holds in the
subprocess of the hash-seed check too, which is left out once a call has run past it). A cmd:
program past its own timeout_ms fails 'time-limit' (and is not started again: every later call
fails at once, as in a run); one that exits or closes its output fails 'leaves' (the next request
starts it afresh). Each is a failed property with a minimal example; a real Ctrl-C stops the check
(exit 130). Stateful strategies are called through reset() and evict only. Ids of a str subclass
are read as the strings they hold.

A context policy (claude-code, codex, observation-masking, ..., an import path or a
'cmd:...?kind=policy' program) is checked against the policy contract instead: generated
transcripts and windows, each property one check: edit returns (no raising, leaving or running
past the limit), a list or tuple of Replace and Append edits with valid roles and tokens,
replacing only items of the transcript, each once, never the overhead, never putting more tokens
than it removes, attaching only revisions an item held at most as large, never growing the window
as a whole; the same edits again and under another PYTHONHASHSEED; its input untouched; admit
at most an item's tokens; and the latency of edit on full transcripts of 100 and 10,000 items.
STRATEGY+POLICY checks both parts.

Exit codes: 0 the strategy or policy conforms, 1 a violation was found, 2 the spec cannot be
loaded (a factory or module that raises, calls sys.exit or ends its process included)."""

MAX_EXAMPLES = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ctxbench check``."""
    parser.add_argument("spec", metavar="SPEC", help="strategy or policy spec, e.g. lru, importance?max_entries=50, "
                                                     "claude-code, pkg.mod:factory, lru+compaction")
    parser.add_argument("--examples", type=int, default=200, metavar="N",
                        help="generated examples per search (default: 200)")
    parser.add_argument("--seed", type=int_option("--seed", 0), default=0, help="seed of the example search, >= 0 (default: 0)")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency measurement")
    add_evict_timeout(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _us(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1000:,.1f}"


def _print(report: CheckReport, console: Console, kinds: dict[str, str] = KINDS, noun: str = "strategy") -> None:
    console.print(f"Checking [bold]{report.strategy}[/bold] ({report.examples} examples, seed {report.seed})",
                  highlight=False)
    if not report.pure:
        console.print("A stateful strategy: reset() before every call, so each check sees no history.",
                      highlight=False)
    failed = {f.kind for f in report.failures}
    table = Table(show_edge=False)
    table.add_column("check")
    table.add_column("property")
    table.add_column("result")
    for kind, prop in kinds.items():
        if kind in failed:
            result = "[bold red]FAIL[/bold red]"
        elif kind in report.skipped:
            result = "[yellow]skipped[/yellow]"
        else:
            result = "[green]ok[/green]" if kind in report.checked else "-"
        table.add_row(kind, prop, result)
    console.print(table)
    for failure in report.failures:
        console.print(f"\n[bold red]FAIL {failure.kind}[/bold red]: ", end="", highlight=False)
        console.print(failure.message, markup=False, highlight=False, soft_wrap=True)
        console.print("  minimal example: ", end="", highlight=False)
        console.print(failure.example or "-", markup=False, highlight=False, soft_wrap=True)
    for kind, why in report.skipped.items():
        console.print(f"\n[yellow]skipped {kind}[/yellow]: ", end="", highlight=False)
        console.print(why, markup=False, highlight=False, soft_wrap=True)
    if report.latency:
        caption = "compiled kernel; CTXBENCH_PURE_PYTHON=1 for Python" if report.compiled else None
        title = ("evict latency (over-budget plain tuple)" if noun == "strategy"
                 else "edit latency (a full transcript)")
        lat_table = Table(title=title, caption=caption, show_edge=False)
        for col in (("entries", "calls", "evicted") if noun == "strategy" else ("items", "calls", "edits")) + (
                "p50 µs", "p99 µs", "max µs"):
            lat_table.add_column(col, justify="right")
        for lat in report.latency:
            if lat.error:
                lat_table.add_row(f"{lat.entries:,}", str(lat.calls), "-", "-", "-", lat.error)
            else:
                evicted = "-" if lat.evicted is None else str(lat.evicted)
                lat_table.add_row(f"{lat.entries:,}", str(lat.calls), evicted, _us(lat.p50_ns), _us(lat.p99_ns),
                                  _us(lat.max_ns))
        console.print()
        console.print(lat_table)
    if report.ok:
        console.print(f"\n[bold green]{report.strategy} conforms to the {noun} contract[/bold green]", highlight=False)
    else:
        console.print(f"\n[bold red]{report.strategy} breaks the contract: "
                      f"{', '.join(f.kind for f in report.failures)}[/bold red]", highlight=False)


def run(args: argparse.Namespace) -> int:
    """Check ``args.spec`` (both parts of a combination); 0 when it conforms, 1 when not."""
    if not 1 <= args.examples <= MAX_EXAMPLES:
        raise InputError(f"--examples must be between 1 and {MAX_EXAMPLES:,}, got {args.examples}")
    options = dict(examples=args.examples, latency=not args.no_latency, seed=args.seed,
                   evict_timeout_ms=evict_timeout(args))
    parts = combination_parts(args.spec) or (args.spec,)
    reports = []
    for spec in parts:
        policy = built_kind(spec) == "policy"
        report = check_policy(spec, **options) if policy else check_strategy(spec, **options)
        reports.append((report, POLICY_KINDS if policy else KINDS, "policy" if policy else "strategy"))
    if args.json:
        documents = [report.to_dict() | {"kind": noun} for report, _, noun in reports]
        print(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    else:
        for report, kinds, noun in reports:
            _print(report, console(), kinds, noun)
    return 0 if all(report.ok for report, _, _ in reports) else 1
