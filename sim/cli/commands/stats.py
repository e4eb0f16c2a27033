"""`ctxbench stats`: figures that characterise a trace, or two traces side by side."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from ctxbench.sim.cli.commands._options import bytes_per_token_option, check_budgets
from ctxbench.sim.presentation.console import console as make_console
from ctxbench.sim.errors import InputError
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN
from ctxbench.traces.io import open_trace
from ctxbench.traces.stats import DEFAULT_BUDGET_TOKENS, WINDOW_LEVELS, compare, stats, summary
from ctxbench.traces.model_ratios import DEFAULT_FAMILY, GIVEN, family_ratios, session_ratios, trace_models
from ctxbench.traces.tokens import KINDS

NAME = "stats"
HELP = "statistics of a trace (per session and overall), or two traces side by side"
DESCRIPTION = """\
Characterise a trace: events by op, turns, distinct paths, unique bytes and tokens against a
budget, re-read fraction (reads of a path already read in the session), the most-read paths,
reuse distances (distinct other paths accessed between two accesses of a path: an LRU context
of C entries keeps the path when the distance is below C), output bytes share and durations.
These file figures leave out the content that stays in the window for good (message, call and
overhead events), which counts only in events, turns and durations.

The shape of a turn (the tool calls one call to the model answers, per session and arm): tool
calls per turn (its read, edit, write and output events) and tool bytes per turn (their sizes:
the file content and tool output entering the window), each median, p99 and max over every turn
with a tool call, and the results a tool cut at its agent's cap (the trace's truncated column).
Real Claude Code and Codex sessions have at most 8 calls (p99 4) and 87 KB in a turn; compare
yours with a preset: ctxbench stats --compare mine.parquet preset.parquet.

The whole window, per arm of each session: the overhead, the conversation and the tool calls'
inputs with every file and tool output at its latest size (nothing evicted), in tokens by
content kind (bytes, tokens, share of the window at the arm's end), its growth per tool call
(the window after a tool's result less the window after the previous one's: median, p90,
mean) and the tool calls after which it first reaches 100K, 167K and 200K tokens at a turn's
end. Tokens (unique tokens too: each path's largest size at its kind's ratio) use the
bytes per token of each kind of the sessions' model family (the default family's when the
trace mixes families), and the exact tokens an import counted (an OpenAI model's text);
--bytes-per-token X counts every kind at X. The table of models gives each session's model
(the one that made most of its calls), its family and the ratios 'ctxbench run' and
'ctxbench fidelity' count it with.

Integers in a trace are at most 2**50 in magnitude, and its sizes add up to at most 2**50; a
value outside, or one that is no integer, is an error (exit 2) naming row and column.

examples:
  ctxbench stats traces/mixed.parquet
  ctxbench stats traces/mixed.parquet --json > mixed.json
  ctxbench stats --compare real.parquet synthetic.parquet
"""
MAX_SESSION_ROWS = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `ctxbench stats`."""
    parser.add_argument("path", nargs="?", metavar="PATH", help="trace file (.parquet, .csv, .jsonl, gzip)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (overall, per session and the whole window per arm) instead of tables")
    parser.add_argument("--budget-tokens", type=float, default=DEFAULT_BUDGET_TOKENS, metavar="N",
                        help="context budget to compare unique tokens with, at least one byte and at most 2**53 "
                             f"bytes (default {DEFAULT_BUDGET_TOKENS:,})")
    parser.add_argument("--bytes-per-token", type=bytes_per_token_option(), default=None, metavar="X",
                        help=f"one bytes-per-token ratio, between {MIN_BYTES_PER_TOKEN:g} and "
                             f"{MAX_BYTES_PER_TOKEN:,}, for every kind (default: the calibrated ratio of each "
                             "kind)")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two traces side by side")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    return value


def _fmt(value: Any) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _count(value: Any) -> str:
    """A tool-call count: whole numbers as integers, a median between two as x.5."""
    if isinstance(value, float) and value == value and value.is_integer():
        return _fmt(int(value))
    return "-" if value is None else f"{value:,.1f}" if isinstance(value, float) and value == value else _fmt(value)


def _session_records(sessions: pd.DataFrame) -> list[dict[str, Any]]:
    return [_jsonable(r) for r in sessions.astype(object).where(sessions.notna(), None).to_dict(orient="records")]


def _check_numbers(args: argparse.Namespace) -> None:
    check_budgets([args.budget_tokens], args.bytes_per_token)


def _stats_of(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """`stats` of the trace at ``path`` with the options' budget and ratios, read session by session:
    --bytes-per-token, else the ratios of its sessions' model family when they share one, else the default
    family's; with each session's model and the ratios a replay counts it with (``models``) and the ratios
    used (``ratios``)."""
    if args.bytes_per_token is not None:
        label, tokens = GIVEN, args.bytes_per_token
    else:
        label, tokens = family_ratios(_shared_family(path))
    models: list[dict] = []
    reader = open_trace(path, on_chunk=lambda chunk: models.extend(trace_models(chunk, args.bytes_per_token)))
    result = stats(reader, args.budget_tokens, tokens=tokens)
    result["models"], result["ratios"] = models, label
    return result


def _shared_family(path: str) -> str:
    """The family whose ratios every session of the trace at ``path`` is counted with, else `DEFAULT_FAMILY`:
    from the distinct model names alone where they settle it (Parquet), else from a first pass over the trace."""
    names = open_trace(path).distinct("model")
    labels = None if names is None else {session_ratios(name)[0] for name in names or {""}}
    if labels is None or len(labels) > 1:
        labels = {row["ratios"] for chunk in open_trace(path) for row in trace_models(chunk)}
    return labels.pop() if len(labels) == 1 else DEFAULT_FAMILY


def run(args: argparse.Namespace) -> int:
    """Print the statistics (tables or JSON); unreadable traces exit 2."""
    _check_numbers(args)
    console = make_console()
    if args.compare:
        if args.path:
            raise InputError("give either PATH or --compare A B, not both")
        a_path, b_path = args.compare
        a, b = _stats_of(a_path, args), _stats_of(b_path, args)
        table = compare(a, b, labels=("A", "B"))
        if args.json:
            print(json.dumps({"a": {"path": a_path, **_jsonable(a["overall"]),
                                    "window": _jsonable(a["window"]["overall"])},
                              "b": {"path": b_path, **_jsonable(b["overall"]),
                                    "window": _jsonable(b["window"]["overall"])}}, indent=2))
            return 0
        # Paths go above the table, unwrapped, so they stay whole and copyable at any width.
        console.print(f"A = {a_path}\nB = {b_path}", soft_wrap=True, highlight=False, markup=False)
        out = Table()
        out.add_column("figure")
        for col in table.columns:
            out.add_column(col, justify="right")
        for figure, row in table.iterrows():
            out.add_row(str(figure), *(_fmt(v) for v in row))
        console.print(out)
        return 0
    if not args.path:
        raise InputError("give a trace PATH, or --compare A B")
    result = _stats_of(args.path, args)
    if args.json:
        print(json.dumps({"path": args.path, "models": result["models"], "ratios": result["ratios"],
                          "overall": _jsonable(result["overall"]),
                          "sessions": _session_records(result["sessions"]),
                          "window": {"overall": _jsonable(result["window"]["overall"]),
                                     "sessions": _session_records(result["window"]["sessions"])}}, indent=2))
        return 0
    _print_tables(console, args.path, result)
    return 0


def _print_tables(console: Console, path: str, result: dict[str, Any]) -> None:
    overall = result["overall"]
    if any(row["model"] for row in result["models"]):
        models = Table(title="models")
        for col in ("session", "model", "family", "replayed with"):
            models.add_column(col)
        for row in result["models"][:MAX_SESSION_ROWS]:
            models.add_row(row["session"], row["model"] or "-", row["family"] or "-", row["ratios"])
        console.print(models)
        console.print(f"tokens below: at the {result['ratios']} ratios", markup=False, highlight=False, soft_wrap=True)
    table = Table(title=f"{path}: overall")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, value in summary(result):
        table.add_row(label, _fmt(value))
    console.print(table)
    if overall["top_paths"]:
        top = Table(title="most-read paths")
        for col in ("path", "reads", "sessions"):
            top.add_column(col, justify="left" if col == "path" else "right")
        for row in overall["top_paths"]:
            top.add_row(row["path"], _fmt(row["reads"]), _fmt(row["sessions"]))
        console.print(top)
    hist = Table(title="reuse distance (distinct other paths between two accesses)")
    hist.add_column("distance")
    hist.add_column("accesses", justify="right")
    for label, count in overall["reuse_distance"]["histogram"].items():
        if count:
            hist.add_row(label, _fmt(count))
    console.print(hist)
    if overall["outputs_by_tool"]:
        tools = Table(title="outputs by tool")
        for col in ("tool", "count", "bytes"):
            tools.add_column(col, justify="left" if col == "tool" else "right")
        for name, row in overall["outputs_by_tool"].items():
            tools.add_row(name, _fmt(row["count"]), _fmt(row["bytes"]))
        console.print(tools)
    sessions = result["sessions"]
    shown = sessions.head(MAX_SESSION_ROWS)
    per = Table(title="sessions" + (f" (first {MAX_SESSION_ROWS} of {len(sessions)}; --json for all)"
                                    if len(sessions) > MAX_SESSION_ROWS else ""))
    cols = ("session", "events", "turns", "reads", "edits", "outputs", "distinct_files_read", "reread_fraction",
            "top_path_reads", "unique_tokens", "budget_ratio", "reuse_median", "duration_s")
    heads = ("session", "events", "turns", "reads", "edits", "outputs", "files read", "re-read", "top reads",
             "unique tok", "/budget", "reuse med", "duration s")
    for col, head in zip(cols, heads):
        per.add_column(head, justify="left" if col == "session" else "right", no_wrap=col == "session")
    for _, row in shown.iterrows():
        per.add_row(*(_fmt(row[c]) for c in cols))
    console.print(per)
    _print_window(console, result["window"])


def _print_window(console: Console, window: dict[str, Any]) -> None:
    """The whole window's tables: composition by kind, growth per tool call, and per arm."""
    overall = window["overall"]
    composition = Table(title="whole window by content kind (each arm at its end)")
    for col in ("kind", "events", "bytes", "bytes/token", "tokens", "share"):
        composition.add_column(col, justify="left" if col == "kind" else "right")
    for kind in KINDS:
        row = overall["by_kind"][kind]
        composition.add_row(kind, _fmt(row["events"]), _fmt(row["bytes"]), _fmt(overall["bytes_per_token"][kind]),
                            _fmt(row["tokens"]), _fmt(row["share"]))
    console.print(composition)
    growth = Table(title="window growth")
    growth.add_column("figure")
    growth.add_column("value", justify="right")
    per_call = overall["tokens_per_call"]
    for label, value in (("tokens per tool call, median", per_call["median"]),
                         ("tokens per tool call, p90", per_call["p90"]),
                         ("tokens per tool call, mean", per_call["mean"]),
                         ("peak tokens, median", overall["peak_tokens"]["median"]),
                         ("peak tokens, max", overall["peak_tokens"]["max"])):
        growth.add_row(label, _fmt(value))
    for level in WINDOW_LEVELS:
        reached = overall["calls_to"][str(level)]
        span = f" ({_count(reached['min'])}-{_count(reached['max'])})" if reached["arms"] else ""
        growth.add_row(f"tool calls to {level // 1000}K tokens, median (range)", _count(reached["median"]) + span)
        growth.add_row(f"arms reaching {level // 1000}K tokens", f"{reached['arms']:,} of {overall['arms']:,}")
    console.print(growth)
    arms = window["sessions"]
    shown = arms.head(MAX_SESSION_ROWS)
    per = Table(title="whole window per arm" + (f" (first {MAX_SESSION_ROWS} of {len(arms)}; --json for all)"
                                                if len(arms) > MAX_SESSION_ROWS else ""))
    cols = ("session", "arm", "tool_calls", "window_tokens", "peak_tokens", "pinned_tokens",
            "tokens_per_call_median", "tokens_per_call_p90") + tuple(
        f"calls_to_{level // 1000}k" for level in WINDOW_LEVELS)
    heads = ("session", "arm", "tool calls", "window tok", "peak tok", "pinned tok", "tok/call med",
             "tok/call p90") + tuple(f"calls to {level // 1000}K" for level in WINDOW_LEVELS)
    for col, head in zip(cols, heads):
        per.add_column(head, justify="left" if col in ("session", "arm") else "right", no_wrap=col == "session")
    counts = {"tool_calls"} | {f"calls_to_{level // 1000}k" for level in WINDOW_LEVELS}
    for _, row in shown.iterrows():
        per.add_row(*(_count(row[c]) if c in counts else _fmt(row[c]) for c in cols))
    console.print(per)
