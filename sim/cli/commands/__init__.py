"""Subcommands of the ctxbench CLI, one module each (see `sim.cli`), and the options they share."""

from __future__ import annotations

import argparse

from ctxbench.sim.errors import InputError
from ctxbench.strategies.limits import MAX_TIME_LIMIT_MS
from ctxbench.traces.tokens import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN

EVICT_TIMEOUT_HELP = (
    "limit each call into an in-process strategy (evict, a stateful strategy's hooks and reset; a policy's edit) to MS "
    "milliseconds of wall-clock time; a call past it is a contract violation naming the limit "
    f"(default: no limit; 1 to {MAX_TIME_LIMIT_MS:,}, one day). It uses SIGALRM, so compiled code (a C kernel) is "
    "stopped only when it returns to Python; cmd: strategies keep their own timeout_ms. Costs about 1 µs per call")


TOKEN_RATIOS_HELP = (
    "bytes per token of each content kind from a JSON file: what 'ctxbench calibrate --out' writes (ratios by model "
    "family: each session counted with its model's family's, a family the file does not name with the built-in "
    "ones), or an object of kind -> bytes per token for every session (kinds: code, output, prose, thinking, json, "
    "overhead; a kind not named keeps its default). An unknown family or kind, a value that is not a number or lies "
    f"outside {MIN_BYTES_PER_TOKEN:g}-{MAX_BYTES_PER_TOKEN:,} is bad input (exit 2) naming the key; not with "
    "--bytes-per-token")


def add_token_ratios(parser: argparse.ArgumentParser) -> None:
    """The ``--token-ratios FILE`` option (see `token_ratios`)."""
    parser.add_argument("--token-ratios", default=None, metavar="FILE", help=TOKEN_RATIOS_HELP)


def token_ratios(args: argparse.Namespace):
    """What the replay counts tokens with: ``--token-ratios FILE`` (read and checked: ratios for every session, or
    a table by model family), else ``--bytes-per-token`` (one ratio), else None (each session its model family's,
    `traces.model_ratios.FAMILY_RATIOS`); both is `InputError`."""
    if args.token_ratios is None:
        return args.bytes_per_token
    if args.bytes_per_token is not None:
        raise InputError("--token-ratios and --bytes-per-token: give one (a file of ratios by kind, or one ratio)")
    from ctxbench.sim.analysis.calibrate import read_token_ratios

    return read_token_ratios(args.token_ratios)


def add_evict_timeout(parser: argparse.ArgumentParser) -> None:
    """The ``--evict-timeout-ms`` option (see `evict_timeout`)."""
    from ctxbench.sim.cli.commands._options import time_limit_option

    parser.add_argument("--evict-timeout-ms", type=time_limit_option(), default=None, metavar="MS",
                        help=EVICT_TIMEOUT_HELP)


def add_max_files(parser: argparse.ArgumentParser, help_more: str = "") -> None:
    """The ``--max-files`` option: the budget's ``max_entries``, 1 to 2**50."""
    from ctxbench.sim.cli.commands._options import int_option
    from ctxbench.traces.schema import MAX_VALUE

    parser.add_argument("--max-files", type=int_option("--max-files", 1, MAX_VALUE), metavar="N",
                        help="cap on resident entries per context (the budget's max_entries), 1 to 2**50" + help_more)


def evict_timeout(args: argparse.Namespace) -> int | None:
    """``--evict-timeout-ms`` (checked when parsed: `sim.cli.commands._options.time_limit_option`), or None."""
    return args.evict_timeout_ms
