"""``ctxbench fidelity``: how well an imported session's whole simulated window tracks its real input tokens."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping

from ctxbench.sim.analysis.fidelity import FIDELITY_COLUMNS, aligned_turns, by_session, fidelity, window_composition
from ctxbench.sim.cli.commands import add_evict_timeout, add_token_ratios, evict_timeout, token_ratios
from ctxbench.sim.cli.commands._options import (bytes_per_token_option, check_budgets, check_triggers, every_ratios,
                                                ratios_note)
from ctxbench.sim.errors import InputError
from ctxbench.strategies.isolation import built_kind
from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN
from ctxbench.sim.output import OutputDir
from ctxbench.traces.io import load
from ctxbench.traces.model_ratios import session_model, session_ratios
from ctxbench.traces.tokens import DEFAULT_TOKENS, TokenRatios, as_ratios

NAME = "fidelity"
HELP = "compare the whole simulated context window with the real input tokens of imported sessions"
FIGURE = "figures/window"
DESCRIPTION = f"""\
Replay each session (and each arm: subagents have their own window) of a trace imported from
logs that record input tokens per call (Claude Code transcripts: 'ctxbench import claude-code')
and compare, call by call, the whole simulated window with the real input tokens the model saw
(message.usage: input + cache creation + cache read). By default the simulated window is the
whole window as the agent's append-only transcript holds it: the fixed overhead, the
conversation, each tool call's input, every file read (a re-read adds its copy again) and tool
output; an edit or a write adds nothing beyond its call's input and its returned text. With
--budget or --strategy the managed model is replayed instead (what stays pinned plus the
resident files and tool outputs, each path once at its last size). Each content kind counts at
its bytes per token, in tokens: each session at its model's family's ratios (the model that made
most of its calls, as the log records it; claude, deepseek and the others, see 'ctxbench
calibrate'), or --token-ratios FILE (ratios by family, or by kind for every session) or one
--bytes-per-token for every kind; the column token_ratios names the ratios of each row.

The real count of a call is compared with the simulated window before that call's own output
and results. A managed replay has no budget and no entry cap unless --budget is given, since the
real agent evicts nothing until it compacts; each compaction segment is replayed from a window holding only the
arm's fixed overhead (the summary and what the agent re-attached are the segment's own events).
Calls without a real count are skipped.

Columns: calls compared, compaction segments, Pearson and Spearman correlation, the median of
simulated / real tokens, the least-squares fit real = intercept + slope * simulated (ideally 0
and 1 now that the whole window is modelled) and the arm's fixed overhead in tokens. With
--out DIR the rows (fidelity.json), the per-call comparison by content (calls.csv) and a figure
of one session's window over time, stacked by what it holds against its recorded input tokens
({FIGURE}.png and .svg; --session picks it, default the main arm with most calls), are
written by ctxbench's output rule: a directory ctxbench did not write is refused unless --force.

A trace without real token counts (OpenHands V1 conversations, for one) is bad input (exit 2)
unless --policy is given: then the compaction points alone are compared (each row's comparisons
says which were made: window, compactions, or both), and so are an unreadable or invalid
--token-ratios file (naming the key) and --token-ratios with --bytes-per-token.

The strategy and the policy run as 'ctxbench run' runs them. One that breaks the contract is exit 2
naming it, the session and the turn; one loaded from your code (an import path, an entry point)
replays in a process of its own, so one that ends it (os._exit, a crash, a signal) is reported the
same way, and a factory that ends it is a load error (exit 2); with --evict-timeout-ms a call past
the limit is a violation too (without it, a call that never returns is waited for, as in a run;
Ctrl-C stops it). A cmd: program keeps its own timeout_ms.

With --policy SPEC (a context policy: claude-code, codex, ...), each session and arm is also replayed
as a transcript under that policy in a window of --window tokens (default 200000; the calibrated
token ratio of each kind) and its rows gain compactions_real (the turns before which the real agent
compacted: the importer's compact_before markers), compactions_sim (the turns before which the
policy compacted), calls_apart (turns from the first real to the first simulated compaction) and the
summarization call's prompt: summary_prompt_sim (the first one, in tokens), summary_prompt_real (the real
input tokens of the last call before the first real compaction) and summary_over_window (simulated ones
larger than the window).
A SPEC that is not a policy is bad input (exit 2).

Examples:
  ctxbench import claude-code ~/.claude/projects/my-project --out real.parquet
  ctxbench fidelity real.parquet --out fidelity/
  ctxbench fidelity real.parquet --token-ratios mine.json --json
  ctxbench fidelity real.parquet --budget 100000 --strategy importance
  ctxbench fidelity real.parquet --policy claude-code --json

Default bytes per token: {', '.join(f'{k} {v:g}' for k, v in DEFAULT_TOKENS.ratios.items())}."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ctxbench fidelity``."""
    parser.add_argument("trace", metavar="TRACE", help="an imported trace (.parquet, .csv, .jsonl)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--bytes-per-token", type=bytes_per_token_option(), default=None, metavar="X",
                        help=f"one bytes-per-token ratio for every content kind, between {MIN_BYTES_PER_TOKEN:g} "
                             f"and {MAX_BYTES_PER_TOKEN:,} (default: the calibrated ratio of each kind)")
    add_token_ratios(parser)
    parser.add_argument("--budget", type=float, default=None, metavar="TOKENS",
                        help="replay under this token budget instead of an unbounded context (at least one byte, "
                             "at most 2**53 bytes)")
    parser.add_argument("--strategy", default=None, metavar="SPEC",
                        help="replay the managed model with this strategy (default: the whole window, every "
                             "copy; lru when --budget is given)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write fidelity.json, calls.csv and the window figure into DIR")
    parser.add_argument("--force", action="store_true",
                        help="write into a directory ctxbench did not write, beside the files already there")
    parser.add_argument("--session", default=None, metavar="ID",
                        help="the session of the figure (default: the main arm with most recorded calls)")
    parser.add_argument("--arm", default=None, metavar="ARM", help="the arm of the figure (default main)")
    parser.add_argument("--policy", default=None, metavar="SPEC",
                        help="a context policy (claude-code, codex, ...) whose compaction points to compare with the "
                             "real ones")
    parser.add_argument("--window", type=float, default=200_000, metavar="TOKENS",
                        help="the window of the --policy replay, in tokens (default 200000)")
    add_evict_timeout(parser)


def _fmt(value: float, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _records(rows) -> list[dict]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in rows.to_dict(orient="records")]


def run(args: argparse.Namespace) -> int:
    """Load the trace, compute the fidelity rows, print them; with --out, write them and the figure."""
    chosen = token_ratios(args)
    timeout_ms = evict_timeout(args)
    if chosen is not None and not isinstance(chosen, (TokenRatios, Mapping)):
        check_budgets([], chosen)   # an absurd --bytes-per-token named before it is used
    for each in every_ratios(chosen):
        check_budgets([] if args.budget is None else [args.budget], each, option="--budget")
        check_budgets([args.window], each, option="--window")
    ratios = chosen if chosen is None or isinstance(chosen, Mapping) else as_ratios(chosen)
    for option, value, what in (("--session", args.session, "session"), ("--arm", args.arm, "arm")):
        if value is not None and args.out is None:
            raise InputError(f"{option} picks the {what} of the window figure, which only --out writes; give --out "
                             "DIR, or leave it out")
    if args.strategy is not None and built_kind(args.strategy) == "policy":
        raise InputError(f"--strategy {args.strategy!r} is a context policy, not an eviction strategy; compare its "
                         "compaction points with --policy")
    if args.policy is not None:
        for note in check_triggers([args.policy], [args.window], None):
            print(f"ctxbench fidelity: note: {note}", file=sys.stderr)
    writer = OutputDir(args.out, force=args.force) if args.out is not None else None   # refused before any work
    trace = load(args.trace)
    rows = fidelity(trace, bytes_per_token=ratios, strategy=args.strategy, budget_tokens=args.budget,
                    policy=args.policy, window_tokens=args.window,
                    settings=ReplaySettings(evict_timeout_ms=timeout_ms))
    records = _records(rows)
    if writer is not None:
        _write(writer, trace, records, ratios, args, timeout_ms)
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    from rich.table import Table

    from ctxbench.sim.presentation.console import console as make_console

    console = make_console()
    strategy = args.strategy or "lru"
    transcript = args.budget is None and args.strategy is None
    model = ("the transcript's whole window, every copy of a re-read file" if transcript
             else f"managed, {strategy}, no budget" if args.budget is None
             else f"managed, {strategy}, budget {args.budget:,.0f} tokens")
    shown = ratios_note(ratios)
    console.print(f"Fidelity of {args.trace} ({model}; {shown})", markup=False, highlight=False,
                  soft_wrap=True)
    if records and all(r["comparisons"] == "compactions" for r in records):
        console.print(f"no real token counts in {args.trace}: the compaction points alone are compared",
                      markup=False, highlight=False, soft_wrap=True)
    for session in dict.fromkeys(r["session"] for r in records):
        if all(r["comparisons"] == "compactions" for r in records if r["session"] == session):
            console.print(f"session {session}", markup=False, highlight=False)
            _print_compactions(console, records, session, args.policy)
            continue
        table = Table(title=f"session {session}", title_justify="left", show_edge=False)
        for name in ("arm", "calls", "segments", "pearson", "spearman", "median sim/real", "intercept tokens",
                     "slope", "overhead tokens"):
            table.add_column(name, justify="left" if name == "arm" else "right")
        for r in (r for r in records if r["session"] == session):
            table.add_row(r["arm"], str(r["turns_compared"]), str(r["segments"]),
                          _fmt(r["pearson"], 3), _fmt(r["spearman"], 3), _fmt(r["median_ratio"], 3),
                          _fmt(r["intercept_tokens"], 0), _fmt(r["slope"], 2), _fmt(r["overhead_tokens"], 0))
        console.print(table)
        if args.policy is not None:
            _print_compactions(console, records, session, args.policy)
    if writer is not None:
        console.print(f"wrote {args.out}", markup=False, highlight=False)
    return 0


def _print_compactions(console, records: list[dict], session: str, policy: str) -> None:
    """One line per arm of ``session``: where the real agent compacted and where ``policy`` does."""
    for r in (r for r in records if r["session"] == session):
        console.print(f"  {r['arm']}: compactions real before turns {r['compactions_real'] or '-'}, "
                      f"{policy} before turns {r['compactions_sim'] or '-'}"
                      + ("" if r["calls_apart"] is None else f" ({r['calls_apart']:+d} calls)")
                      + _summary_call(r), markup=False, highlight=False, soft_wrap=True)


def _summary_call(r: dict) -> str:
    """The first summarization call's prompt, simulated and real, and how many simulated ones passed the window."""
    if r.get("summary_prompt_sim") is None:
        return ""
    real = "" if r.get("summary_prompt_real") is None else f" (real {r['summary_prompt_real']:,})"
    over = f"; {r['summary_over_window']} over the window" if r.get("summary_over_window") else ""
    return f"; first summarization call {r['summary_prompt_sim']:,} tokens{real}{over}"


def _session_model(trace, session: str) -> str:
    """The model of ``session`` in ``trace`` (`traces.model_ratios.session_model`)."""
    if "model" not in trace.columns:
        return ""
    part = trace[trace["session"].astype(str) == session].drop_duplicates("turn")
    return session_model(part["model"].astype(str))


def _write(writer: OutputDir, trace, records: list[dict], ratios, args: argparse.Namespace,
           timeout_ms: int | None) -> None:
    """fidelity.json, calls.csv (each call: the replayed window and the unbounded one by content) and the figure."""
    from ctxbench.sim.presentation.plots import save_figure
    from ctxbench.sim.presentation.window_plots import window_figure

    used = {r["token_ratios"]: r["session"] for r in records}
    doc = {"format": "ctxbench-fidelity/2", "trace": str(args.trace),
           "token_ratios": {label: session_ratios(_session_model(trace, session), ratios)[1].to_dict()
                            for label, session in used.items()},
           "budget_tokens": args.budget, "strategy": args.strategy, "columns": list(FIDELITY_COLUMNS),
           "rows": records}
    if all(r["comparisons"] == "compactions" for r in records):   # no real counts: no window to draw
        with writer as tmp:
            (tmp / "fidelity.json").write_text(json.dumps(doc, indent=2) + "\n")
        return
    composition = by_session(trace, ratios, window_composition)
    replayed = by_session(trace, ratios, lambda part, each: aligned_turns(part, each, args.strategy or "lru",
                                                                          args.budget, timeout_ms))
    calls = composition.merge(replayed[["session", "arm", "segment", "turn", "sim_tokens", "evictions"]]
                              .rename(columns={"sim_tokens": "replayed_tokens"}),
                              on=["session", "arm", "segment", "turn"], how="left")
    figure = window_figure(composition, args.session, args.arm)
    with writer as tmp:
        (tmp / "fidelity.json").write_text(json.dumps(doc, indent=2) + "\n")
        calls.to_csv(tmp / "calls.csv", index=False)
        save_figure(figure, tmp / FIGURE, formats=("png", "svg"))
