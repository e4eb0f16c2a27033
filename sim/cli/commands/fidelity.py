"""``ctxbench fidelity``: how well an imported session's simulated occupancy tracks its real input tokens."""

from __future__ import annotations

import argparse
import json
import math

from sim.cli.commands._options import check_budgets
from sim.analysis.fidelity import fidelity
from sim.engine.measures import DEFAULT_BYTES_PER_TOKEN
from sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN
from traces.io import load

NAME = "fidelity"
HELP = "compare simulated context occupancy with the real input tokens of imported Claude Code sessions"
DESCRIPTION = f"""\
Replay each session (and each arm: subagents have their own context) of a trace imported with
'ctxbench import claude-code' and compare, turn by turn, the simulated context occupancy
(files and tool outputs; assistant text and thinking too when imported with --include-messages)
with the real input tokens the model saw (message.usage: input + cache creation + cache read).

The real count of a turn is compared with the simulated occupancy before that turn's results.
By default the replay has no budget and no entry cap, since the real agent evicts nothing
until it compacts; each compaction segment is replayed from an empty context, as the real
context was replaced by a summary there. Turns without a real count are skipped.

Columns: turns compared, compaction segments, Pearson and Spearman correlation, the median of
simulated / real tokens, and the least-squares fit real = overhead + slope * simulated, whose
overhead estimates the tokens the trace does not model (system prompt, tool definitions,
summaries). A trace without real token counts is bad input (exit 2). A strategy that breaks
the contract is exit 2 naming strategy, session and turn; one loaded from your code (an import
path, an entry point) replays in a process of its own, so one that ends it (os._exit, a crash,
a signal) is reported the same way, and a factory that ends it is a load error (exit 2).

With --policy SPEC (a context policy: claude-code, codex, ...), each session and arm is also replayed
as a transcript under that policy in a window of --window tokens (default 200000; the calibrated
token ratio of each kind) and its rows gain compactions_real (the turns before which the real agent
compacted: the importer's compact_before markers), compactions_sim (the turns before which the
policy compacted) and calls_apart (turns from the first real to the first simulated compaction).
A SPEC that is not a policy is bad input (exit 2).

Examples:
  ctxbench import claude-code ~/.claude/projects/my-project --out real.parquet
  ctxbench fidelity real.parquet
  ctxbench fidelity real.parquet --bytes-per-token 2.4 --json
  ctxbench fidelity real.parquet --budget 100000 --strategy importance
  ctxbench fidelity real.parquet --policy claude-code --json

Default bytes per token: {DEFAULT_BYTES_PER_TOKEN}."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ctxbench fidelity``."""
    parser.add_argument("trace", metavar="TRACE", help="an imported trace (.parquet, .csv, .jsonl)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--bytes-per-token", type=float, default=DEFAULT_BYTES_PER_TOKEN, metavar="X",
                        help=f"bytes per token for the simulated occupancy, between {MIN_BYTES_PER_TOKEN:g} and "
                             f"{MAX_BYTES_PER_TOKEN:,} (default {DEFAULT_BYTES_PER_TOKEN})")
    parser.add_argument("--budget", type=float, default=None, metavar="TOKENS",
                        help="replay under this token budget instead of an unbounded context (at least one byte, "
                             "at most 2**53 bytes)")
    parser.add_argument("--strategy", default="lru", metavar="SPEC",
                        help="strategy for a budgeted replay (default lru)")
    parser.add_argument("--policy", default=None, metavar="SPEC",
                        help="a context policy (claude-code, codex, ...) whose compaction points to compare with the "
                             "real ones")
    parser.add_argument("--window", type=float, default=200_000, metavar="TOKENS",
                        help="the window of the --policy replay, in tokens (default 200000)")


def _fmt(value: float, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def run(args: argparse.Namespace) -> int:
    """Load the trace, compute the fidelity rows, print them."""
    check_budgets([] if args.budget is None else [args.budget], args.bytes_per_token, option="--budget")
    check_budgets([args.window], None, option="--window")
    rows = fidelity(load(args.trace), bytes_per_token=args.bytes_per_token, strategy=args.strategy,
                    budget_tokens=args.budget, policy=args.policy, window_tokens=args.window)
    records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
               for r in rows.to_dict(orient="records")]
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    from sim.presentation.console import console as make_console
    from rich.table import Table

    console = make_console()
    budget = "unbounded" if args.budget is None else f"{args.budget:,.0f} tokens, {args.strategy}"
    console.print(f"Fidelity of {args.trace} (budget {budget}, {args.bytes_per_token:g} bytes/token)",
                  markup=False, highlight=False, soft_wrap=True)
    for session in dict.fromkeys(r["session"] for r in records):
        table = Table(title=f"session {session}", title_justify="left", show_edge=False)
        for name in ("arm", "turns", "segments", "pearson", "spearman", "median sim/real", "overhead tokens",
                     "slope"):
            table.add_column(name, justify="left" if name == "arm" else "right")
        for r in (r for r in records if r["session"] == session):
            table.add_row(r["arm"], str(r["turns_compared"]), str(r["segments"]),
                          _fmt(r["pearson"], 3), _fmt(r["spearman"], 3), _fmt(r["median_ratio"], 3),
                          _fmt(r["intercept_tokens"], 0), _fmt(r["slope"], 2))
        console.print(table)
        if args.policy is not None:
            for r in (r for r in records if r["session"] == session):
                console.print(f"  {r['arm']}: compactions real before turns {r['compactions_real'] or '-'}, "
                              f"{args.policy} before turns {r['compactions_sim'] or '-'}"
                              + ("" if r["calls_apart"] is None else f" ({r['calls_apart']:+d} calls)"),
                              markup=False, highlight=False, soft_wrap=True)
    return 0
