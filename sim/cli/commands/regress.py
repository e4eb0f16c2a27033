"""`ctxbench regress`: the regression gate; replay the fixed suite and compare with a baseline."""

from __future__ import annotations

import argparse
import json
import sys

from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.analysis.grid import WORKERS_HELP, workers_note
from ctxbench.sim.errors import InputError
from ctxbench.sim.cli.commands import add_evict_timeout, evict_timeout
from ctxbench.sim.analysis.latency import REFERENCE, LatencyRatio
from ctxbench.sim.analysis.regress import (DEFAULT_BASELINE, DEFAULT_SUITE, LATENCY_METRIC, MAX_BASELINE_BYTES, MAX_LATENCY_SETTING,
                         Check, RegressReport, run_regress)

NAME = "regress"
HELP = "the regression gate: compare strategies on a fixed seeded suite with a baseline file"
DESCRIPTION = f"""\
Replay a fixed, seeded suite (default {DEFAULT_SUITE!r}, or the baseline's suite) against every
strategy and compare, per (strategy, budget), the deterministic metrics summed over the suite
(misses by class, miss rate, re-read tokens, evictions, contract violations) with the baseline
file, exactly by default. Eviction latency is gated as a ratio to {REFERENCE!r} timed on the
same recorded states in the same run (tolerance x1.5 by default), never as wall-clock time.
Tolerances per metric live in the baseline file.

Exit codes: 0 nothing regressed (improvements are reported), 1 a metric regressed or a
strategy of the baseline cannot be built, 2 bad input (missing or invalid baseline, unknown
suite or strategy, baseline made for another suite definition or other traces).

A baseline is data and never makes ctxbench load or run code. Without --strategy, the run
gates every built-in strategy, the context policies of the default suite (claude-code, codex,
clear-tool-uses, observation-masking, openhands-summarizing, amortized-forgetting and
lru+compaction; new, so not gated, until a baseline records them) plus the baseline's
strategies, and those must be ctxbench built-ins or combinations of them (options allowed, as
plain values: lru?max_entries=50); an import path, an entry point or a cmd: spec in the
baseline is run only when --strategy names it, else exit 2 naming it. A policy has no evict
latency: its evict_ratio is not measured.

Every key and value of the baseline is checked before anything runs: unknown keys, numbers
that are not finite or of the wrong type or sign (counts are integers >= 0, latency settings
1 to {MAX_LATENCY_SETTING}), budgets other than the suite's or missing ones, tolerances other
than {{"rel": x}}, {{"abs": x}}, {{"rel": x, "abs": y}} or {{"factor": x}} (x >= 0; a factor
>= 1), malformed log hashes, duplicate keys, nesting too deep or a file over
{MAX_BASELINE_BYTES // 2**20} MiB are exit 2 naming the file and the JSON path, e.g.
strategies["lru"]["budgets"]["50000"]["metrics"]["miss_rate"]. --update replaces a valid
baseline made for another suite definition or other traces, but refuses an invalid one (exit
2, the file left as it was).

Strategies run but not in the baseline are reported as new and not gated; --update rewrites
the baseline (atomically) after showing the differences: review them, then commit the file.
--update replaces only a ctxbench baseline (its "format"), never another file.
Contract violations are counted, never fatal: a strategy that raises, leaves (sys.exit, a
KeyboardInterrupt of its own) or runs past --evict-timeout-ms is a violation on that turn, so
the gate fails when a baselined strategy starts doing so (violations is a gated metric).
--update refuses (exit 2, naming the first violation) to record a run with violations unless
--allow-violations is given; a baseline recorded that way is named in every later report.
Strategies loaded from your code (import paths, entry points) run in processes of their own,
in the replay and in the latency measurement: one that ends its process (os._exit, a crash, a
signal) is counted in the replay as in 'ctxbench run --lenient'; if it ends the process
measuring its latency, the gate fails (exit 1) where one of its metrics regressed, and is
otherwise exit 2 with one line naming the strategy and the session and turn of its replay where
it ended its process (--update then writes nothing).

Examples:
  ctxbench regress
  ctxbench regress --strategy lru mypkg.policy:factory --baseline ci/ctxbench-baseline.json
  ctxbench regress --update          # after a deliberate change; review the diff, commit
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", default=DEFAULT_BASELINE, metavar="PATH",
                   help=f"baseline JSON file (default {DEFAULT_BASELINE})")
    p.add_argument("--suite", default=None, metavar="NAME",
                   help=f"suite to replay (default: the baseline's, else {DEFAULT_SUITE!r})")
    p.add_argument("--strategy", nargs="+", action="extend", metavar="SPEC",
                   help="strategies or policies to gate (default: every built-in strategy, the default suite's "
                        "policies and the baseline's strategies, which must then be built-ins; name any other here)")
    p.add_argument("--update", action="store_true",
                   help="rewrite the baseline with this run's numbers after showing the differences")
    p.add_argument("--allow-violations", action="store_true",
                   help="with --update, record strategies whose calls broke the contract (refused otherwise)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help=WORKERS_HELP)
    add_evict_timeout(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")


def _budget(b: float) -> str:
    return f"{b:,.0f}"


def _value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    if metric == "miss_rate":
        return f"{v:.4%}"
    if metric == LATENCY_METRIC:
        return f"{v:.3f}"
    if metric == "reread_tokens":
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def _change(c: Check) -> str:
    if c.baseline is None or c.now is None:
        return "-"
    if c.metric == LATENCY_METRIC:
        return f"x{c.now / c.baseline:.2f}" if c.baseline else "-"
    diff = c.now - c.baseline
    rel = f" ({diff / c.baseline:+.2%})" if c.baseline else ""
    if c.metric == "miss_rate":
        return f"{diff * 100:+.4f} pts{rel}"
    return f"{diff:+,.1f}{rel}" if c.metric == "reread_tokens" else f"{diff:+,.0f}{rel}"


def _table(title: str, checks: list[Check]):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col, justify in (("strategy", "left"), ("budget", "right"), ("metric", "left"), ("baseline", "right"),
                         ("now", "right"), ("change", "right"), ("tolerance", "right"), ("status", "left")):
        t.add_column(col, justify=justify)
    styles = {"regressed": "bold red", "improved": "green"}
    for c in checks:
        t.add_row(escape(c.strategy), _budget(c.budget_tokens), c.metric, _value(c.metric, c.baseline),
                  _value(c.metric, c.now), _change(c), c.tolerance, c.status, style=styles.get(c.status))
    return t


def _latency_line(report: RegressReport) -> str:
    measured = [v for (s, _), v in report.latency.items() if isinstance(v, LatencyRatio) and s != REFERENCE]
    if not measured:
        return f"latency: no ratio to {REFERENCE} measured"
    worst = max(v.spread for v in measured)
    s = report.latency_settings
    return (f"latency: evict time as a ratio to {REFERENCE} on the same states ({s.states} states x {s.repeats} "
            f"repeats, interleaved); resampling spread up to ±{worst:.1%}")


def _print(report: RegressReport) -> None:
    from rich.markup import escape

    from ctxbench.sim.presentation.console import console as make_console

    console = make_console(highlight=False)
    suite = report.suite
    # Names come from files and the command line: escaped, never read as markup.
    console.print(f"ctxbench regress: suite {escape(repr(suite.name))} (seed {suite.seed}, {report.sessions} sessions, "
                  f"budgets {', '.join(_budget(b) for b in suite.budgets_tokens)} tokens), baseline "
                  f"{escape(str(report.baseline_path))}")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    # A latency ratio within its factor is noise, not a change worth a row.
    changed = [c for c in report.checks if c.status not in ("same", "regressed")
               and not (c.metric == LATENCY_METRIC and c.status == "within")]
    if report.regressions:
        console.print(_table("Regressions", report.regressions))
    if changed:
        console.print(_table("Other changes", changed))
    for spec, why in report.missing.items():
        console.print(f"[bold red]missing[/]: {escape(spec)} is in the baseline but cannot be run: {escape(why)}")
    if report.new:
        hint = "" if report.updated else " (add them with --update)"
        console.print(f"new, not gated: {escape(', '.join(report.new))}{hint}")
    if report.not_run:
        console.print(f"in the baseline, not run: {escape(', '.join(report.not_run))}")
    if report.replay:
        same = sum(i for i, _ in report.replay.values())
        total = sum(n for _, n in report.replay.values())
        differ = [f"{s}@{_budget(b)} ({n - i})" for (s, b), (i, n) in report.replay.items() if i != n]
        console.print(f"exact replay: {same}/{total} session logs identical to the baseline's"
                      + (f"; differing: {escape(', '.join(differ))}" if differ else ""))
    for (s, b), v in report.latency.items():
        if isinstance(v, str):
            console.print(f"latency of {escape(s)} at {_budget(b)}: {escape(v)}")
    console.print(_latency_line(report))
    if report.violations:
        console.print(f"{len(report.violations)} contract violations; first: {escape(report.violations[0])}")
    counts = (f"{len(report.checks)} checks: {len(report.regressions)} regressed, "
              f"{len(report.improvements)} improved ({report.elapsed_s:.1f}s)")
    if report.updated:
        console.print(f"[bold]baseline written[/]: {escape(str(report.baseline_path))} ({counts}); review the diff "
                      "and commit it")
    elif report.exit_code:
        console.print(f"[bold red]REGRESSED[/]: {counts}")
    else:
        console.print(f"ok: {counts}")


def run(args) -> int:
    note = workers_note(args.workers)
    if note:
        print(f"ctxbench regress: note: {note}", file=sys.stderr)
    if args.allow_violations and not args.update:
        raise InputError("--allow-violations goes with --update (it lets a baseline record contract violations)")
    report = run_regress(args.baseline, suite=args.suite, strategies=args.strategy, update=args.update,
                         allow_violations=args.allow_violations, workers=args.workers,
                         settings=ReplaySettings(evict_timeout_ms=evict_timeout(args)))
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
    else:
        _print(report)
    return report.exit_code
