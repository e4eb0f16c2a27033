"""`ctxbench generate`: write a seeded synthetic trace from a named preset."""

from __future__ import annotations

import argparse
import time
from dataclasses import fields

from rich.console import Console
from rich.table import Table

from ctxbench.sim.presentation.console import console as make_console
from ctxbench.sim.errors import InputError
from ctxbench.sim.output import check_output_file, output_file
from ctxbench.traces.generate import check_size, generate
from ctxbench.traces.io import save, trace_format
from ctxbench.traces.presets import DEFAULT_PRESET, PRESETS, PresetError, knob_help, knobs, parse_override
from ctxbench.traces.repo import RepoError

NAME = "generate"
HELP = "write a seeded synthetic trace from a named preset"
DESCRIPTION = """\
Write a synthetic trace: SESSIONS sessions of the preset's behaviour (hub revisits, directory
walks, jumps, edit/test loops, searches, commands, writes, task phases), reproducible from SEED.
Session k is the same whatever --sessions is. Each session holds the whole window: the fixed
overhead, user and assistant messages, thinking and every tool call's input around the files and
tool outputs (--set conversation=false: files and tool outputs only, exactly as earlier versions
wrote them). The output format follows the suffix of --out
(.parquet, .csv, .csv.gz, .jsonl, .jsonl.gz); Parquet files also keep the recipe (preset,
seed, overrides). Use --list for the presets and every knob, --set to change knobs.
An existing --out is replaced only if it is a Parquet trace ctxbench wrote (exit 2 otherwise),
or with --force; files are written with the permissions the umask gives.

examples:
  ctxbench generate --preset mixed --sessions 20 --seed 1 --out traces/mixed.parquet
  ctxbench generate --preset long --set arms=2 --out long2.parquet
  ctxbench generate --preset parallel-hubs --arms 4 --sessions 5 --out hubs4.parquet
  ctxbench generate --preset claude-code-like --repo ~/src/myproject --out mine.jsonl
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `ctxbench generate`."""
    parser.add_argument("--preset", default=DEFAULT_PRESET, metavar="NAME",
                        help=f"preset name (default {DEFAULT_PRESET}); see --list")
    parser.add_argument("--sessions", type=int, default=1, metavar="N", help="number of sessions (default 1)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    parser.add_argument("--out", metavar="PATH", help="output trace file; the suffix picks the format")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing file that ctxbench cannot tell it wrote (a CSV or JSON-lines file, "
                             "or one written by another program)")
    parser.add_argument("--repo", metavar="PATH", help="use a real checkout's files (paths and sizes)")
    parser.add_argument("--arms", type=int, metavar="N",
                        help="agents working in each session (same as --set arms=N; default: the preset's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KNOB=VALUE",
                        help="change a knob of the preset (repeatable)")
    parser.add_argument("--list", action="store_true", help="list presets and their knobs, then exit")


def _value(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _list(console: Console) -> None:
    base = PRESETS[DEFAULT_PRESET].knobs
    presets = Table(title="presets (knobs that differ from the defaults)")
    presets.add_column("preset", style="bold", no_wrap=True)
    presets.add_column("description and knobs")
    for p in PRESETS.values():
        changed = [f"{f.name}={_value(getattr(p.knobs, f.name))}" for f in fields(p.knobs)
                   if getattr(p.knobs, f.name) != getattr(base, f.name)]
        text = " ".join(p.description.split()) + ("\n[dim]" + ", ".join(changed) + "[/dim]" if changed else "")
        presets.add_row(p.name, text)
    console.print(presets)
    table = Table(title="knobs (override with --set KNOB=VALUE)")
    table.add_column("knob", style="bold", no_wrap=True)
    table.add_column("default", justify="right", no_wrap=True)
    table.add_column("meaning")
    for f in fields(base):
        table.add_row(f.name, _value(getattr(base, f.name)), knob_help()[f.name])
    console.print(table)


def _console() -> Console:
    """A console; wide when the output is not a terminal, so piped tables stay readable."""
    return make_console()


def run(args: argparse.Namespace) -> int:
    """Generate the trace and write it atomically; bad presets, knobs or paths exit 2."""
    console = _console()
    if args.list:
        _list(console)
        return 0
    if not args.out:
        raise InputError("--out PATH is required (or --list)")
    trace_format(args.out)  # an unknown suffix fails before any work
    check_output_file(args.out, force=args.force)   # so does a file that is not ctxbench's
    try:
        overrides = dict(parse_override(text) for text in args.overrides)
        if args.arms is not None:
            overrides["arms"] = args.arms
        k = knobs(args.preset, **overrides)
    except PresetError as exc:
        raise InputError(str(exc)) from None
    if args.sessions < 1:
        raise InputError(f"--sessions must be >= 1, got {args.sessions}")
    if args.seed < 0:
        raise InputError(f"--seed must be >= 0, got {args.seed}")
    try:
        check_size(k, args.sessions)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    started = time.perf_counter()
    try:
        df = generate(args.preset, sessions=args.sessions, seed=args.seed, repo=args.repo, **overrides)
    except RepoError as exc:
        raise InputError(f"--repo: {exc}") from None
    with output_file(args.out, force=args.force) as tmp:
        save(df, tmp, check=False, format_of=args.out)  # generate already validated it
    elapsed = time.perf_counter() - started
    console.print(f"wrote {len(df):,} events ({args.sessions} session{'s' * (args.sessions != 1)}, "
                  f"preset {args.preset}, seed {args.seed}) to {args.out} in {elapsed:.2f} s")
    return 0
