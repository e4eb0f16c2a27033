"""`ctxbench tune`: fit a policy's (or strategy's) declared options to sessions, judged on held-out sessions."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from ctxbench.sim.analysis.grid import WORKERS_HELP, workers_note
from ctxbench.sim.analysis.prices import PRICES, price_for
from ctxbench.sim.analysis.tune import (DEFAULT_FOLDS, declared_options, DEFAULT_OBJECTIVE, DEFAULT_TRIALS, GRID_UP_TO, MAX_TRIALS, SAMPLERS,
                               WEAK_BELOW, parse_constraint, parse_objective, tune)
from ctxbench.sim.cli.commands import add_evict_timeout, add_max_files, add_token_ratios, evict_timeout, token_ratios
from ctxbench.sim.cli.commands._options import bytes_per_token_option, check_budgets, check_triggers, int_option
from ctxbench.sim.cli.commands.run import add_workload_arguments, load_workload
from ctxbench.sim.engine.measures import CACHE_TTLS, cache_ttl_ms
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN
from ctxbench.sim.folder_lock import folder_lock
from ctxbench.sim.output import check_output_dir
from ctxbench.sim.presentation.results import run_metadata, write_results_dir
from ctxbench.strategies.registry import split_combination
from ctxbench.traces.schema import MAX_VALUE
from ctxbench.traces.tokens import as_ratios

NAME = "tune"
HELP = "fit a policy's options to sessions, judged on sessions the fit did not see"
DESCRIPTION = f"""\
Search the options a context policy (or strategy, or STRATEGY+POLICY) declares tunable, to minimise an
objective over sessions, and judge the choice on sessions the search did not see.

Each built-in policy and strategy declares its tunable options with their ranges ('ctxbench tune
POLICY --list' lists them); a policy of your own declares its own in a TUNABLE class attribute
(see README). --param NAME=LOW:HIGH[:STEP] searches one option over a range (inside its declared
one), --param NAME over its declared search range; with no --param every declared option is searched.
One or two options are searched on a grid (--trials points for one, about sqrt(--trials) a side for
two, every STEP when given), more by a seeded Latin hypercube of --trials settings (--sampler picks
either). The spec as given (the default) is always tried too, and wins ties.

The objective (--objective) is a mean per session: {DEFAULT_OBJECTIVE} (the default: the cost of every
call with the prompt cache, in input-token equivalents, the summarization call a compaction makes and the
summary it writes, at 5x input, included), cost_input_tokens (the input alone), reread_tokens,
input_tokens (billed input), cost_usd (with --price), or a weighted sum such as
'cost_tokens + 20*reread_tokens'. --constraint 'reread_tokens<=default'
(or '<=1.1*default', '<=50000', '>=') keeps only settings that meet it. Only feasible settings count:
one with any call whose prompt is larger than the window, on any session, is never priced nor chosen.

Honest evaluation, nested: the sessions are split into --folds folds (seeded by --search-seed,
stratified by trace file); for each fold the setting is chosen on the other folds' sessions and
scored on its own; the held-out objective pools those scores over every session, beside the default's
on the same sessions, each with a 95% bootstrap CI. The setting reported as chosen is then chosen on
all sessions (its objective there is in-sample: what 'ctxbench run --strategy CHOSEN' reports). With
fewer than {WEAK_BELOW} sessions the estimate is said to be weak. Every setting is replayed once per
session (each session resolved once), in --workers processes or on Dask (--scheduler). --max-files
and --evict-timeout-ms hold every replay as they hold 'ctxbench run's; a contract violation (a call past
the limit) stops the search, exit 2.

Writes a results folder (--out, the rules of 'ctxbench run --out'): trials.csv/.parquet (every
setting), results.parquet/.csv (every replay), folds.csv, heldout.csv, chosen.txt (the chosen spec,
as 'ctxbench run --strategy' takes it), figures/objective.png, summary.md, meta.json. Exit 0 with a
setting chosen; 1 when no setting is feasible (and meets the constraints) on all sessions (the folder
is written, chosen.txt left out); 2 for bad input: an unknown option, a range outside the declared
one, an objective or constraint the results cannot compute.

Examples:
  ctxbench tune claude-code --traces real.parquet
  ctxbench tune observation-masking --preset file-walk debug-loop --sessions 10 --param n=0:60:2
  ctxbench tune claude-code --traces real.parquet --constraint 'reread_tokens<=default' --json
  ctxbench tune lru+compaction --param trigger_tokens=120000:200000 --objective 'cost_tokens + 10*reread_tokens'
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="POLICY",
                   help="the policy, strategy or STRATEGY+POLICY to tune, with any options it keeps fixed "
                        "('claude-code', 'codex?summary_tokens=3000', 'lru+compaction')")
    add_workload_arguments(p)
    p.add_argument("--param", nargs="+", action="extend", metavar="NAME[=LOW:HIGH[:STEP]]",
                   help="an option to search, over a range inside its declared one (default: every declared "
                        "option over its declared search range)")
    p.add_argument("--list", action="store_true",
                   help="list the options POLICY declares tunable (type, accepted range, searched range) and exit")
    p.add_argument("--objective", default=DEFAULT_OBJECTIVE, metavar="EXPR",
                   help=f"what to minimise, a mean per session: a metric of the results or a weighted sum "
                        f"('cost_tokens + 20*reread_tokens') (default {DEFAULT_OBJECTIVE})")
    p.add_argument("--constraint", nargs="+", action="extend", metavar="EXPR",
                   help="keep settings meeting METRIC<=BOUND or METRIC>=BOUND, BOUND a number, 'default' or "
                        "'X*default' (the default setting's mean on the same sessions)")
    p.add_argument("--folds", type=int_option("--folds", 2, MAX_VALUE), default=DEFAULT_FOLDS, metavar="K",
                   help=f"folds of the held-out evaluation, at least 2 (default {DEFAULT_FOLDS}; at most one per "
                        "session)")
    p.add_argument("--trials", type=int_option("--trials", 1, MAX_TRIALS), default=DEFAULT_TRIALS, metavar="N",
                   help=f"settings to try (default {DEFAULT_TRIALS}, at most {MAX_TRIALS:,}): grid points for "
                        f"up to {GRID_UP_TO} options, sampled settings beyond")
    p.add_argument("--sampler", choices=SAMPLERS, default="auto",
                   help=f"grid, lhs (a seeded Latin hypercube of --trials settings) or auto: a grid for up to "
                        f"{GRID_UP_TO} options, lhs beyond (default auto)")
    p.add_argument("--search-seed", type=int_option("--search-seed", 0, MAX_VALUE), default=0, metavar="S",
                   help="seed of the folds and the sampler (default 0)")
    p.add_argument("--budget-tokens", type=float, default=200_000, metavar="N",
                   help="the window in tokens (default 200000)")
    p.add_argument("--bytes-per-token", type=bytes_per_token_option(), default=None, metavar="X",
                   help=f"one bytes-per-token ratio for every content kind, between {MIN_BYTES_PER_TOKEN:g} and "
                        f"{MAX_BYTES_PER_TOKEN:,} (default: the calibrated ratio of each kind)")
    add_token_ratios(p)
    p.add_argument("--cache-ttl", choices=tuple(CACHE_TTLS), default="5m",
                   help="the prompt cache's lifetime in trace time: 5m, 1h or off (default 5m)")
    p.add_argument("--price", metavar="MODEL", default=None,
                   help=f"add cost_usd at this model's input and output prices ({', '.join(PRICES)})")
    p.add_argument("--out", default="tune-results", metavar="DIR",
                   help="results directory (default tune-results/); one ctxbench did not write is refused unless "
                        "--force")
    p.add_argument("--force", action="store_true",
                   help="write into a directory ctxbench did not write, beside the files already there")
    add_max_files(p, "; give 'ctxbench run' the same to replay the chosen spec to the same numbers")
    add_evict_timeout(p)
    p.add_argument("--workers", type=int, default=None, metavar="N", help=WORKERS_HELP)
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on a Dask cluster (needs ctxbench[dask])")
    p.add_argument("--json", action="store_true",
                   help="print chosen, objective, heldout_chosen, heldout_default (and their intervals, the folds' "
                        "choices, notes and results_dir) as JSON")


def _check_options(args) -> None:
    chosen = token_ratios(args)
    check_budgets([args.budget_tokens], chosen)
    args.tokens = as_ratios(chosen)
    args.price_model = price_for(args.price) if args.price is not None else None
    args.objective_parsed = parse_objective(args.objective, args.price_model)
    args.constraints = [parse_constraint(text, args.price_model) for text in args.constraint or ()]


def _list(args) -> int:
    declared = declared_options(args.spec)
    if not declared:
        print(f"{args.spec} declares no tunable options")
    for name, (tunable, part) in declared.items():
        low, high = tunable.search
        searched = (f"{low:g}-{high:g} of the window" if tunable.window else f"{low:g}..{high:g}") + \
            (" (log)" if tunable.log else "")
        where = "" if not split_combination(args.spec) else (" (strategy)" if part == 0 else " (policy)")
        print(f"{name}{where}: {tunable.type} in {tunable.range_text()}{', or none' if tunable.none else ''}; "
              f"searched {searched}{'; ' + tunable.doc if tunable.doc else ''}")
    return 0


def run(args) -> int:
    if args.list:
        return _list(args)
    _check_options(args)
    with folder_lock(args.out):
        return _run(args)


def _run(args) -> int:
    # the drawing code (and matplotlib) is imported only by the command that draws: every command's
    # parser is built at start, and `ctxbench run` would pay for it
    from ctxbench.sim.presentation.plots import save_figure
    from ctxbench.sim.presentation.tune import headline, objective_figure, trials_table, tune_markdown

    started = time.perf_counter()
    check_output_dir(args.out, force=args.force)
    note = workers_note(args.workers)
    if note:
        print(f"ctxbench tune: note: {note}", file=sys.stderr)
    for trigger_note in check_triggers([args.spec], [args.budget_tokens], args.tokens):
        print(f"ctxbench tune: note: {trigger_note} (a call past the window makes it infeasible)", file=sys.stderr)
    traces, workload, _, _ = load_workload(args)
    result = tune(traces, args.spec, args.param or (), objective=args.objective_parsed, constraints=args.constraints,
                  budget_tokens=args.budget_tokens, bytes_per_token=args.tokens,
                  cache_ttl_ms=cache_ttl_ms(args.cache_ttl), price=args.price_model, folds=args.folds,
                  trials=args.trials, seed=args.search_seed, sampler=args.sampler, workers=args.workers,
                  scheduler=args.scheduler, evict_timeout_ms=evict_timeout(args), max_files=args.max_files)
    config = {"command": "tune", "workload": workload, "strategies": [args.spec],
              "budgets_tokens": [float(args.budget_tokens)], "bytes_per_token": args.tokens.reference,
              "token_ratios": args.tokens.to_dict(), "cache_ttl": args.cache_ttl,
              "price": None if args.price_model is None else vars(args.price_model),
              "tune": {"spec": result.spec, "parameters": [p.describe() for p in result.space],
                       "sampler": result.sampler, "trials": args.trials, "folds": args.folds,
                       "search_seed": args.search_seed, "objective": result.objective.text,
                       "constraints": [c.text for c in result.constraints]},
              "max_files": args.max_files, "evict_timeout_ms": args.evict_timeout_ms,
              "workers": args.workers, "scheduler": args.scheduler}
    meta = run_metadata(config)
    meta["elapsed_s"] = round(time.perf_counter() - started, 3)
    meta["tune"] = result.to_json()

    def extra(tmp: Path) -> None:
        result.trials.to_parquet(tmp / "trials.parquet", index=False)
        result.trials.to_csv(tmp / "trials.csv", index=False)
        result.folds.to_csv(tmp / "folds.csv", index=False)
        result.heldout.to_csv(tmp / "heldout.csv", index=False)
        if result.chosen is not None:
            (tmp / "chosen.txt").write_text(result.chosen + "\n")
        (tmp / "summary.md").write_text(tune_markdown(result))
        save_figure(objective_figure(result), tmp / "figures" / "objective", formats=("png",))

    out = write_results_dir(args.out, result.results, pd.DataFrame(), meta, extra, force=args.force)
    if args.json:
        json.dump({"results_dir": str(out), **result.to_json()}, sys.stdout, indent=2)
        print()
    else:
        for line in headline(result):
            print(line)
        print()
        print(trials_table(result).to_string(index=False))
        print(f"\nresults: {out}/ ({len(result.trials)} settings, {len(result.results)} replays) in "
              f"{meta['elapsed_s']:.1f}s")
    return 0 if result.chosen is not None else 1
