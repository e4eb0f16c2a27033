"""``ctxbench calibrate``: fit bytes per token by content kind on real logs that record input tokens per call."""

from __future__ import annotations

import argparse
import json
import math

from ctxbench.sim.analysis.calibrate import (BY_KIND, FITTED_KINDS, MIN_SHARE, ONE_RATIO, PLAUSIBLE, calibrate_families,
                                   ratios_document)
from ctxbench.sim.output import check_output_file, has_ctxbench_mark, output_file
from ctxbench.traces.importers import AUTO, FORMAT_NAMES, import_paths
from ctxbench.traces.model_ratios import family_ratios

NAME = "calibrate"
HELP = "fit bytes per token by content kind (and see the overhead) on real logs that record input tokens"
DESCRIPTION = f"""\
Import real agent logs with their whole window (as 'ctxbench import' does by default) and fit,
for each model family of their sessions (claude, openai, deepseek, gemini, qwen, other: each
session's model is the one that made most of its calls, as the log records it; a session with
none counts as claude), the bytes per token of each content kind ({', '.join(FITTED_KINDS)}) to the input tokens the
model recorded for every call (Claude Code transcripts: usage per assistant message). The
model: real = overhead + sum over kinds of bytes / ratio, the overhead being what the import
measured from each window's first call (shown per window); least squares on the growth from
that first call within each compaction segment, weighted by 1 / real^2, every ratio positive.
A kind with less than {MIN_SHARE:.0%} of the windows' growth, one the data cannot tell apart (its
weight at the bound) or one fitted outside {PLAUSIBLE[0]:g}-{PLAUSIBLE[1]:g} bytes per token keeps its
current default and is named as kept. The overhead kind's ratio is not fitted: it is the unit the
import wrote the measured overhead in, and content the import counted exactly (an OpenAI model's
text, with ctxbench[tokens]) is known, not fitted. With several sessions in a family, each kind its own
ratio is kept unless one ratio shared by every kind predicts the sessions left out better
(--fit chooses for every family).

Prints the ratios, each window's overhead and how well the fit predicts each window (median and
p10-p90 of simulated / real, Pearson) and all of them together; with several sessions, each
session predicted by ratios fitted on the others (leave-one-session-out) beside its in-sample
fit, which says how far the ratios carry to sessions they were not fitted on; one block per
family, and a line for a family that could not be fitted (say, one call). --out FILE writes the
ratios of every family fitted as JSON (format ctxbench-token-ratios/2) for 'ctxbench run
--token-ratios FILE' and 'ctxbench fidelity --token-ratios FILE', which count each session with
its family's ratios from the file (a family the file does not name: the built-in ones); an
existing FILE is replaced only if ctxbench wrote it (or with --force). Logs that record no input
tokens, or no window with two recorded calls, are bad input (exit 2), as are a missing or
unreadable log and one in no known format.

Examples:
  ctxbench calibrate ~/.claude/projects/my-project
  ctxbench calibrate session.jsonl --out ratios.json
  ctxbench run --preset claude-code-like --token-ratios ratios.json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ctxbench calibrate``."""
    parser.add_argument("logs", metavar="LOGS", nargs="+", help="agent logs (files or directories to walk)")
    parser.add_argument("--format", default=AUTO, choices=FORMAT_NAMES, metavar="FORMAT",
                        help=f"log format: {', '.join(FORMAT_NAMES)} (default {AUTO}: detected per file)")
    parser.add_argument("--json", action="store_true", help="print the fit as JSON")
    parser.add_argument("--out", default=None, metavar="FILE", help="write the ratios as JSON to FILE")
    parser.add_argument("--force", action="store_true", help="replace an existing --out that ctxbench did not write")
    parser.add_argument("--fit", choices=(BY_KIND, ONE_RATIO), default=None,
                        help=f"'{BY_KIND}' (each content kind its own ratio) or '{ONE_RATIO}' (one ratio shared by "
                             "every kind) for every family (default: by kind, unless one ratio predicts the "
                             "family's sessions left out better)")


def _fmt(value, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def run(args: argparse.Namespace) -> int:
    """Import the logs, fit each model family, print; with --out, write the ratios."""
    if args.out is not None:
        check_output_file(args.out, ours=has_ctxbench_mark, force=args.force)   # refused before any reading
    trace, _ = import_paths(args.format, args.logs)
    fits, skipped = calibrate_families(trace, fit=args.fit)
    if args.out is not None:
        with output_file(args.out, ours=has_ctxbench_mark, force=args.force) as tmp:
            tmp.write_text(json.dumps(ratios_document(fits, [str(p) for p in args.logs]), indent=2) + "\n")
    if args.json:
        print(json.dumps({"families": {family: fit.to_dict() for family, fit in fits.items()},
                          "not_fitted": skipped}, indent=2))
        return 0
    from ctxbench.sim.presentation.console import console as make_console

    console = make_console()
    for family, fit in fits.items():
        sessions = len(fit.windows["session"].unique())
        console.print(f"model family {family}: {sessions} session{'' if sessions == 1 else 's'}, "
                      f"{fit.why or fit.fit}", markup=False, highlight=False, soft_wrap=True)
        _print_fit(console, fit, family_ratios(family)[1])
    for family, reason in skipped.items():
        console.print(f"model family {family}: not fitted: {reason}", markup=False, highlight=False, soft_wrap=True)
    if args.out is not None:
        console.print(f"wrote {args.out}", markup=False, highlight=False)
    return 0


def _print_fit(console, fit, was) -> None:
    """One family's fit: its ratios, each window's fit, each session left out, and all calls together."""
    from rich.table import Table

    ratios = Table(title="bytes per token by content kind", title_justify="left", show_edge=False)
    for name in ("kind", "bytes/token", "was", "share of the growth", "how"):
        ratios.add_column(name, justify="left" if name in ("kind", "how") else "right")
    for kind, value in fit.ratios.ratios.items():
        how = (("fitted" if fit.fit == BY_KIND else "fitted, one ratio for every kind") if kind in fit.fitted
               else f"kept: {fit.kept[kind]}" if kind in fit.kept else "not fitted: the unit of the measured overhead")
        share = fit.shares.get(kind)
        ratios.add_row(kind, f"{value:.3g}", f"{was.ratios[kind]:.3g}", "-" if share is None else f"{share:.1%}", how)
    console.print(ratios)
    windows = Table(title="how well it predicts each window", title_justify="left", show_edge=False)
    for name in ("session", "arm", "calls", "overhead tokens", "median sim/real", "p10-p90", "pearson"):
        windows.add_column(name, justify="left" if name in ("session", "arm") else "right")
    for r in fit.to_dict()["windows"]:
        windows.add_row(str(r["session"]), str(r["arm"]), str(r["calls"]), _fmt(r["overhead_tokens"], 0),
                        _fmt(r["median_ratio"], 3), f"{_fmt(r['p10_ratio'], 2)}-{_fmt(r['p90_ratio'], 2)}",
                        _fmt(r["pearson"], 4))
    console.print(windows)
    if not fit.held_out.empty:
        held = Table(title="each session left out of the fit (ratios fitted on the others)", title_justify="left",
                     show_edge=False)
        for name in ("session", "calls", "median sim/real", "pearson", "in the fit: median", "pearson ", "why not"):
            held.add_column(name, justify="left" if name in ("session", "why not") else "right")
        for r in fit.to_dict()["held_out"]:
            held.add_row(str(r["session"]), str(r["calls"]), _fmt(r["median_ratio"], 3), _fmt(r["pearson"], 4),
                         _fmt(r["in_sample_median_ratio"], 3), _fmt(r["in_sample_pearson"], 4), r["reason"] or "")
        console.print(held)
    p = fit.pooled
    console.print(f"all {p['calls']} calls: median sim/real {_fmt(p['median_ratio'], 3)} "
                  f"(p10-p90 {_fmt(p['p10_ratio'], 2)}-{_fmt(p['p90_ratio'], 2)}), Pearson {_fmt(p['pearson'], 4)}",
                  markup=False, highlight=False)
