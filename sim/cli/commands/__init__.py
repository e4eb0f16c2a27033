"""Subcommands of the ctxbench CLI, one module each (see `sim.cli`), and the options they share."""

from __future__ import annotations

import argparse

from sim.errors import InputError

EVICT_TIMEOUT_HELP = (
    "limit each call into an in-process strategy (evict, a stateful strategy's hooks and reset) to MS "
    "milliseconds of wall-clock time; a call past it is a contract violation naming the limit "
    "(default: no limit). It uses SIGALRM, so compiled code (a C kernel) is stopped only when it "
    "returns to Python; cmd: strategies keep their own timeout_ms. Costs about 1 µs per call")


def add_evict_timeout(parser: argparse.ArgumentParser) -> None:
    """The ``--evict-timeout-ms`` option (see `evict_timeout`)."""
    parser.add_argument("--evict-timeout-ms", type=int, default=None, metavar="MS", help=EVICT_TIMEOUT_HELP)


def evict_timeout(args: argparse.Namespace) -> int | None:
    """``--evict-timeout-ms``, checked: a positive number of milliseconds, or None."""
    ms = args.evict_timeout_ms
    if ms is not None and ms < 1:
        raise InputError(f"--evict-timeout-ms must be a positive number of milliseconds, got {ms}")
    return ms
