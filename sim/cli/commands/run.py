"""`ctxbench run`: replay traces against strategies under budgets; rank, and write a results dir."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from ctxbench.sim.analysis.claim_modes import parse_claim_modes
from ctxbench.sim.analysis.prices import PRICES, dollars, price_for
from ctxbench.sim.analysis.ranking import DEFAULT_RANK_BY, RANK_BY
from ctxbench.sim.analysis.summary import summarise_run
from ctxbench.sim.cli.commands import add_evict_timeout, add_max_files, add_token_ratios, evict_timeout, token_ratios
from ctxbench.sim.cli.commands._options import (bytes_per_token_option, check_budgets, check_triggers, default_of,
                                                every_ratios, int_option)
from ctxbench.sim.analysis.grid import WORKERS_HELP, resolve_workers, run_grid, workers_note
from ctxbench.sim.analysis.turn_log import TurnParts
from ctxbench.sim.engine.settings import OptimumLimits, ReplaySettings
from ctxbench.traces.tokens import DEFAULT_TOKENS, TokenRatios
from ctxbench.sim.engine.measures import CACHE_TTLS, cache_ttl_ms
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN
from ctxbench.sim.engine.suite import DEFAULT_SUITE_TOOL_CALLS, SUITES, get_suite, preset_traces
from ctxbench.sim.errors import InputError
from ctxbench.sim.folder_lock import folder_lock
from ctxbench.sim.interrupts import held
from ctxbench.sim.output import check_output_dir
from ctxbench.sim.presentation.results import (ARMS_FILE, SCHEDULES_FILE, SUMMARY_FILE, THRASHING_FILE, TURNS_FILE, Results, report_turns,
                                      results_dir, run_metadata, turn_strategies, write_results)
from ctxbench.sim.presentation.summary_text import summary_markdown
from ctxbench.sim.presentation.jobs import run_jobs
from ctxbench.sim.presentation.terminal import print_summary
from ctxbench.strategies.registry import builtin_names
from ctxbench.traces.io import TraceReader, open_trace
from ctxbench.traces.schema import MAX_TOTAL, MAX_VALUE, exact_sum
from ctxbench.traces.presets import PresetError, parse_override

#: What a run of traces or presets replays beside the built-in strategies when no --strategy is given.
DEFAULT_POLICIES = tuple(get_suite("default").policies)

NAME = "run"
HELP = "replay traces against strategies under token budgets (the main job)"
DESCRIPTION = f"""\
Replay coding sessions against eviction strategies and agents' context policies under token budgets,
print the decision view (every configuration with re-read tokens, the cost of every call with the
prompt cache, its multiple of the offline optimum, compactions and eviction p99, each with a 95% bootstrap CI
across sessions; feasible ones ranked by --rank-by, the Pareto frontier of cost against re-reads
marked; a configuration with any call whose prompt is larger than the window is infeasible, listed
after them with its share of such calls and never priced), then the misses, and write a
results directory: results.parquet/.csv (one row per session x strategy x budget), turns.parquet
(per-turn log), meta.json (version, commit, seeds, config, machine) and summary.md. The run is
summarised once (ranking, bracket gaps, price of purity, claim modes, violations); the terminal
tables, summary.md, the report and --json all show that one summary.

With no arguments: the default synthetic suite (seeded, every preset, sessions of {DEFAULT_SUITE_TOOL_CALLS} tool calls:
long enough that even the offline optimum must re-read at 200K tokens), every built-in strategy
and context policy and lru+compaction, a 200,000-token budget, results in ./results (with
--traces or --preset and no --strategy, the same strategies and policies; other suites name
their own).

A SPEC names an eviction strategy (lru, importance, gdsf, ...: the managed context, one copy of
each file, the strategy evicts) or a real agent's context policy (claude-code, codex,
clear-tool-uses, observation-masking, openhands-summarizing, amortized-forgetting: the
append-only transcript, a re-read adds a copy, the policy compacts or masks); see 'ctxbench
strategies'. STRATEGY+POLICY (lru+compaction, gdsf+codex?trigger_fraction=0.8; compaction is
claude-code) is the managed context whose conversation the policy compacts once the pinned
content reaches its trigger. Every row has the same columns either way, 'model' saying which:
input_tokens (billed over the session), cost_input_tokens (with the prompt cache: read 0.1,
written 1.25 for the 5-minute cache or 2 for the 1-hour one), cache_read/cache_write/uncached
input tokens, reread_tokens (re-fetched: needed again after leaving the window), compactions.
A compaction that writes a summary is first a summarization call (summary_calls): its prompt is
the window before compaction (summary_input_tokens, counted in input_tokens and the cache's
columns) and its output the summary (summary_output_tokens). cost_tokens, the cost every report
shows, is cost_input_tokens plus that output at 5x input (Anthropic's output price).
Each call writes to the cache what it did not read from it; --cache-ttl off counts every input
token as uncached. --price MODEL adds cost_usd at the model's input and output prices (Anthropic's
published price list; 'ctxbench run --help' names the known models under --price).

The results directory (--out) is ctxbench's own: a run replaces the files an earlier run wrote
there (atomically, the whole directory when nothing else is in it) and never touches other
files. A directory ctxbench did not write (no .ctxbench.json manifest), and not empty, is
refused (exit 2) unless --force, which adds ctxbench's files beside the others; a file that
ctxbench would write but did not write itself is never replaced. The working directory, or a
directory holding it, is never renamed or removed. SIGINT and SIGTERM stop the run (exit 130 or
143, "interrupted"), stop its worker processes and external strategies, and leave earlier
results as they were.

A strategy breaks the contract (exit 2 naming strategy, session and turn; counted with --lenient)
when a call to evict, a stateful hook or reset raises, leaves (sys.exit, a KeyboardInterrupt of its
own, any other BaseException), ends its worker process (os._exit, a crash) or runs past
--evict-timeout-ms, or when its answer is not a list or
tuple (a generator, a set, a numpy array: refused before it is read), names ids not in the state,
repeats one, or leaves the context over budget. At most one id more than the state has entries
is read: a longer answer has shown a wrong id by then.
A real Ctrl-C still interrupts the run (exit 130).

Integers in a trace are at most 2**50 in magnitude, and the sizes of the traces of one run add
up to at most 2**50; a value outside, or one that is no integer, is an error (exit 2) naming
file, row and column. Options that take several values may be repeated.

Examples:
  ctxbench run
  ctxbench run --preset mixed --sessions 20 --strategy lru importance --budget-tokens 50000 100000 200000
  ctxbench run --preset claude-code-like --set tool_calls=400 --sessions 12
  ctxbench run --traces my_sessions.parquet --strategy lru mypkg.policy:factory --lenient
"""


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """The options that choose the sessions (`load_workload` reads them): --traces, --preset with --sessions,
    --seed and --set, or --suite."""
    src = p.add_argument_group("workload (default: the default suite)")
    src.add_argument("--traces", nargs="+", action="extend", metavar="PATH",
                     help="trace files (.parquet, .csv, .jsonl[.gz]); results name each by its file name, or by "
                          "the shortest path suffix that tells apart two files of the same name")
    src.add_argument("--preset", nargs="+", action="extend", metavar="NAME", help="generate these presets instead")
    src.add_argument("--sessions", type=int_option("--sessions", 1), default=4, metavar="N", help="sessions per preset (default 4)")
    src.add_argument("--seed", type=int_option("--seed", 0), default=0, help="seed for --preset generation (default 0)")
    src.add_argument("--set", dest="overrides", action="append", default=[], metavar="KNOB=VALUE",
                     help="change a knob of every --preset (repeatable), e.g. --set tool_calls=400; "
                          "'ctxbench generate --list' shows the knobs")
    src.add_argument("--suite", default=None, metavar="NAME",
                     help=f"a named suite ({', '.join(SUITES)}) instead of --traces/--preset")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_workload_arguments(p)
    p.add_argument("--strategy", nargs="+", action="extend", metavar="SPEC",
                   help="strategy specs, e.g. lru 'lru?max_entries=50' pkg.mod:factory "
                        "(default: every built-in)")
    p.add_argument("--budget-tokens", nargs="+", action="extend", type=float, metavar="N",
                   help="token budgets, each at least one byte and at most 2**53 bytes (default 200000, or the "
                        "suite's)")
    p.add_argument("--bytes-per-token", type=bytes_per_token_option(), default=None, metavar="X",
                   help=f"one bytes-per-token ratio for every content kind, between {MIN_BYTES_PER_TOKEN:g} and "
                        f"{MAX_BYTES_PER_TOKEN:,} (default: each session counted with its model family's ratio of "
                        f"each kind, claude's {_ratios_text()} for a session without a recorded model; budgets "
                        f"count in tokens of code, {DEFAULT_TOKENS.reference:g} bytes each at claude's ratios)")
    add_token_ratios(p)
    p.add_argument("--out", default="results", metavar="DIR",
                   help="results directory (default results/); one ctxbench did not write is refused unless --force")
    p.add_argument("--force", action="store_true",
                   help="write into a directory ctxbench did not write, beside the files already there "
                        "(which are never removed or replaced)")
    p.add_argument("--lenient", action="store_true",
                   help="count contract violations instead of stopping at the first")
    p.add_argument("--workers", type=int, default=None, metavar="N", help=WORKERS_HELP)
    add_evict_timeout(p)
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on a Dask cluster (needs ctxbench[dask])")
    p.add_argument("--no-turns", action="store_true", help="do not keep the per-turn log (saves memory)")
    p.add_argument("--bracket", action=argparse.BooleanOptionalAction, default=True,
                   help="add the offline optimum per session and budget, opt:exact (solved exactly as an integer "
                        "program; each managed strategy's re-reads as a multiple of it), and the bracket: opt:lower "
                        "(PFOO-L lower bound) and opt:belady-size (offline Belady-Size) (default: on)")
    p.add_argument("--opt-time-limit", type=float, default=OptimumLimits.time_limit_s, metavar="SECONDS",
                   help="the solver's time per program (one per session, budget, arm and objective); past it the "
                        "optimum is reported as a bracket, the best schedule found and the proven lower bound "
                        f"(default: {OptimumLimits.time_limit_s:g}; at most 86400)")
    p.add_argument("--opt-max-intervals", type=int_option("--opt-max-intervals", 0, MAX_VALUE), default=OptimumLimits.max_intervals, metavar="N",
                   help="the most undecided reuse intervals of an arm for which the integer program is built; above "
                        "it only its LP relaxation (FOO-L) is solved and rounded, reported as a bracket (default: "
                        f"{OptimumLimits.max_intervals:,}; 0: always the relaxation)")
    p.add_argument("--no-report", action="store_true",
                   help="do not write figures, report.md and report.html into the results directory")
    mc = p.add_argument_group("multi-arm sessions")
    mc.add_argument("--claims", metavar="MODES",
                    help="compare claim modes on multi-arm sessions, e.g. strict,lazy,disabled (default: disabled)")
    mc.add_argument("--thrashing-threshold", type=int_option("--thrashing-threshold", 1, MAX_VALUE), default=2, metavar="N",
                    help="overwrites of a path before lazy mode escalates (default 2)")
    mc.add_argument("--settle-ms", type=int_option("--settle-ms", 0, MAX_VALUE), default=300_000, metavar="MS",
                    help="how long a change stays unsaved, and a claim lasts, at most 2**50 (default 300000)")
    mc.add_argument("--on-conflict", choices=("wait", "handoff"), default="wait",
                    help="strict mode: wait for the claim, or hand the change to its holder (default wait)")
    add_max_files(p)
    p.add_argument("--max-directories", type=int_option("--max-directories", 1, MAX_VALUE), metavar="N",
                   help="cap on distinct directories of resident files per context, enforced by the replay engine, "
                        "1 to 2**50")
    p.add_argument("--cache-ttl", choices=tuple(CACHE_TTLS), default="5m",
                   help="the prompt cache's lifetime in trace time: 5m (writes cost 1.25x), 1h (2x) or off "
                        "(default 5m)")
    p.add_argument("--price", metavar="MODEL", default=None,
                   help=f"add cost_usd at this model's input and output prices ({', '.join(PRICES)})")
    p.add_argument("--rank-by", choices=tuple(RANK_BY), default=DEFAULT_RANK_BY, metavar="METRIC",
                   help="what the first table ranks the feasible configurations by, smaller first: "
                        + "; ".join(f"{name}: {doc}" for name, doc in RANK_BY.items()))
    p.add_argument("--json", action="store_true",
                   help="print the run's summary as JSON instead of tables: results_dir, ranking, violations, "
                        "price_of_purity, then the headline budget, bracket gaps, miss rate by budget, claim modes "
                        "and the rest of what the tables and reports show")


def load_workload(args) -> tuple[dict[str, pd.DataFrame | TraceReader], dict, tuple | None, tuple[str, ...]]:
    """Traces keyed by label (trace files opened, to be read session by session as the replay goes), the
    workload's description, the suite's budgets if any, and the policies it runs beside the strategies
    by default."""
    chosen = [name for name, value in (("--traces", args.traces), ("--preset", args.preset),
                                       ("--suite", args.suite)) if value]
    if len(chosen) > 1:
        raise InputError(f"choose one workload: {' and '.join(chosen)} given")
    if args.traces:
        seen: dict[Path, str] = {}
        for path in args.traces:
            key = Path(path).resolve()
            if key in seen:
                raise InputError(f"--traces: {path} is {seen[key]} again" if seen[key] != path
                                 else f"--traces: {path} given twice")
            seen[key] = path
        total = RunTotal()
        traces = {label: open_trace(path, on_chunk=total.add) for label, path in zip(trace_labels(args.traces), args.traces)}
        return traces, {"traces": [str(Path(p).resolve()) for p in args.traces]}, None, DEFAULT_POLICIES
    if args.overrides and not args.preset:
        raise InputError("--set changes the knobs of --preset, which was not given")
    if args.preset:
        presets = [(name, args.sessions) for name in args.preset]
        try:
            overrides = dict(parse_override(text) for text in args.overrides)
        except PresetError as exc:
            raise InputError(f"--set: {exc}") from None
        described = {"presets": [list(p) for p in presets], "seed": args.seed}
        if overrides:
            described["overrides"] = overrides
        return (preset_traces(presets, args.seed, {name: overrides for name in args.preset}), described, None,
                DEFAULT_POLICIES)
    suite = get_suite(args.suite or "default")
    return (preset_traces(list(suite.presets), suite.seed, suite.overrides), {"suite": suite.to_dict()},
            suite.budgets_tokens if args.suite else None, suite.policies)


def trace_labels(paths: list[str]) -> list[str]:
    """How each trace is named in results: its file name, or the shortest path suffix that tells it
    apart from the other traces with that name.

    >>> trace_labels(["a/t.csv", "b/t.csv", "c/u.csv"])
    ['a/t.csv', 'b/t.csv', 'u.csv']
    """
    parts = [Path(os.path.normpath(Path(p).absolute())).parts for p in paths]
    labels = []
    for i, mine in enumerate(parts):
        others = [theirs for j, theirs in enumerate(parts) if j != i]
        k = 1
        while k < len(mine) and any(theirs[-k:] == mine[-k:] for theirs in others):
            k += 1
        labels.append("/".join(mine[-k:]).lstrip("/") or mine[-1])
    return labels


class RunTotal:
    """The sizes of the traces of one run added up as they are read; `InputError` once they pass the
    schema's total (`traces.schema.MAX_TOTAL`)."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, df: pd.DataFrame) -> None:
        self.total += exact_sum(df["size_bytes"].to_numpy())
        if self.total > MAX_TOTAL:
            raise InputError(f"--traces: their sizes add up to {self.total:,} bytes, more than the {MAX_TOTAL:,} "
                             "(2**50) one run may replay")


def _check_options(args) -> None:
    """Refuse absurd numeric options before any work, naming the option and the value."""
    chosen = token_ratios(args)
    if chosen is not None and not isinstance(chosen, (TokenRatios, Mapping)):
        check_budgets(args.budget_tokens, chosen)   # an absurd --bytes-per-token named before it is used
    for ratios in every_ratios(chosen):
        check_budgets(args.budget_tokens, ratios)
    args.chosen, args.tokens = chosen, default_of(chosen)
    if not 0 < args.opt_time_limit <= 86_400:   # NaN fails both
        raise InputError(f"--opt-time-limit must be a number of seconds in (0, 86400], got {args.opt_time_limit!r}")
    args.optimum = OptimumLimits(args.opt_max_intervals, args.opt_time_limit)


def run(args) -> int:
    _check_options(args)
    with folder_lock(args.out):   # no other command reads or writes the results folder while this one runs
        return _run(args)


def _run(args) -> int:
    started = time.perf_counter()
    check_output_dir(args.out, force=args.force)   # refuse a directory that is not ctxbench's before any work
    note = workers_note(args.workers)
    if note:
        print(f"ctxbench run: note: {note}", file=sys.stderr)
    timeout_ms = evict_timeout(args)
    traces, workload, suite_budgets, policies = load_workload(args)
    price = price_for(args.price) if args.price is not None else None
    strategies = args.strategy or builtin_names() + list(policies)
    budgets = args.budget_tokens or list(suite_budgets or (200_000,))
    claims = parse_claim_modes(args.claims, thrashing_threshold=args.thrashing_threshold,
                               settle_ms=args.settle_ms, on_conflict=args.on_conflict) if args.claims else None
    tokens = args.tokens
    for trigger_note in check_triggers(strategies, budgets, tokens):
        print(f"ctxbench run: note: {trigger_note} (a call past the window makes it infeasible)", file=sys.stderr)
    in_memory = not any(isinstance(t, TraceReader) for t in traces.values())
    with results_dir(args.out, force=args.force) as staging:
        # the per-turn log: written as the replay goes when the traces are read from files, kept as the
        # replays left it (their traces are in memory already) and written beside the report otherwise
        log = TurnParts(budgets) if in_memory else staging / TURNS_FILE
        settings = ReplaySettings(strict=not args.lenient, tokens=args.chosen, evict_timeout_ms=timeout_ms,
                                  cache_ttl_ms=cache_ttl_ms(args.cache_ttl), max_files=args.max_files,
                                  max_directories=args.max_directories, keep_turns=not args.no_turns,
                                  bracket=args.bracket, claims=tuple(claims or ()), optimum=args.optimum)
        grid = run_grid(traces, strategies, budgets, settings, workers=args.workers, scheduler=args.scheduler,
                        turns_to=log, meanwhile=None if args.no_report else _import_report)
        results = grid.results
        if price is not None:
            results["cost_usd"] = dollars(results["cost_input_tokens"], results["summary_output_tokens"], price)
        config = {"workload": workload, "strategies": list(strategies),
                  "budgets_tokens": [float(b) for b in budgets], "bytes_per_token": tokens.reference,
                  "token_ratios": tokens.to_dict(),
                  "ratios_by": "given" if args.chosen is not None and not isinstance(args.chosen, Mapping)
                  else "model family",
                  "session_ratios": grid.ratios,
                  "lenient": args.lenient, "workers": args.workers, "scheduler": args.scheduler,
                  "claims": [vars(c) for c in claims] if claims else None, "bracket": args.bracket,
                  "optimum": {"time_limit_s": args.opt_time_limit, "max_intervals": args.opt_max_intervals},
                  "max_files": args.max_files, "max_directories": args.max_directories,
                  "evict_timeout_ms": args.evict_timeout_ms, "cache_ttl": args.cache_ttl, "rank_by": args.rank_by,
                  "price": None if price is None else vars(price)}
        meta = run_metadata(config)
        meta["elapsed_s"] = round(time.perf_counter() - started, 3)
        meta["violations"] = grid.violations[:100]
        kept = (log if len(log) else None) if in_memory else grid.turns_file   # only what is drawn is read from it
        summary = summarise_run(results, turns=turn_strategies(kept) if kept else None, arms=grid.arms, meta=meta,
                                schedules=grid.schedules)
        jobs = []
        report = None
        if not args.no_report:
            from ctxbench.sim.presentation.report import plan_report

            focus = summary.focus
            turns = report_turns(kept, summary.budget_tokens, focus and (focus.trace, focus.session,
                                                                          focus.budget_tokens)) if kept else None
            report = plan_report(Results(results, turns if turns is not None else pd.DataFrame(), meta, staging),
                                 summary, staging, arms=grid.arms)
            jobs += report.figures
        # costs against a plain figure's (`sim.presentation.report.DRAWING_COST`), measured on the default suite
        jobs.append((0.3, lambda: write_results(staging, results, None, meta, _extras(grid, summary))))
        if in_memory and kept:
            jobs.append((len(log) / 500_000, lambda: log.save(staging / TURNS_FILE)))
        # the results and each figure are written side by side, in as many processes as replayed
        run_jobs(jobs, 1 if args.scheduler else resolve_workers(args.workers))
        if report is not None:
            report.finish()
    out = Path(args.out)
    if args.json:
        json.dump({"results_dir": str(out), **summary.to_json()}, sys.stdout, indent=2, default=float)
        print()
    else:
        print_summary(summary)
        print(f"results: {out}/ ({summary.rows} rows) in {meta['elapsed_s']:.1f}s")
        if not args.no_report:
            print(f"report: {out / 'report.html'}")
    return 0


def _import_report() -> None:
    """Import the report's drawing code (and matplotlib): done while the workers replay, it costs no time. A
    signal meanwhile is held until the import is done: raised inside it, matplotlib turns it into a RuntimeError."""
    with held():
        importlib.import_module("ctxbench.sim.presentation.report")


def _extras(grid, summary):
    """What a results directory holds beside the results: per-arm, thrashing and schedule-frontier rows,
    ``summary.md``."""
    def extra(tmp: Path) -> None:
        if not grid.arms.empty:
            grid.arms.to_parquet(tmp / ARMS_FILE, index=False)
        if not grid.thrashing.empty:
            grid.thrashing.to_parquet(tmp / THRASHING_FILE, index=False)
        if not grid.schedules.empty:
            grid.schedules.to_parquet(tmp / SCHEDULES_FILE, index=False)
        (tmp / SUMMARY_FILE).write_text(summary_markdown(summary))
    return extra


def _ratios_text() -> str:
    return ", ".join(f"{kind} {ratio:g}" for kind, ratio in DEFAULT_TOKENS.ratios.items())
