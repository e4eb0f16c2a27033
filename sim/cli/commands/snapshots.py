"""`ctxbench snapshots`: export per-arm context snapshots of a results directory as JSON lines."""

from __future__ import annotations

import argparse

from ctxbench.sim.errors import InputError
from ctxbench.sim.presentation.results import load_results
from ctxbench.sim.output import check_output_file
from ctxbench.sim.presentation.snapshots import context_snapshots, is_snapshots_file, write_snapshots_jsonl

NAME = "snapshots"
HELP = "export per-arm context snapshots (files, tokens, utilization) as JSON lines"
DESCRIPTION = """\
Export the context snapshot time series of a results directory, one JSON object per line:
trace, session, strategy, budget_tokens, [claims,] arm, turn, files, estimated_tokens,
utilization (0-1) and last_updated (epoch ms). Filter with --session/--strategy/--arm.
An existing --out is replaced only if it is a snapshots file (its first line has these keys),
or with --force.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results_dir", metavar="RESULTS_DIR")
    p.add_argument("--out", required=True, metavar="PATH", help="JSON lines file to write")
    p.add_argument("--force", action="store_true", help="replace an existing file that is not a snapshots file")
    p.add_argument("--session", help="only this session")
    p.add_argument("--strategy", help="only this strategy")
    p.add_argument("--arm", help="only this arm")


def run(args) -> int:
    check_output_file(args.out, ours=is_snapshots_file, force=args.force)
    loaded = load_results(args.results_dir)
    snaps = context_snapshots(loaded.turns, loaded.results)
    for column in ("session", "strategy", "arm"):
        wanted = getattr(args, column)
        if wanted is not None:
            snaps = snaps[snaps[column].astype(str) == wanted]
            if snaps.empty:
                raise InputError(f"no snapshots with {column} {wanted!r} in {args.results_dir}")
    n = write_snapshots_jsonl(snaps, args.out, force=args.force)
    print(f"{n} snapshots -> {args.out}")
    return 0
