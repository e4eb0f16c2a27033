"""The ``ctxbench`` command line: one module per subcommand in `sim.commands`.

A command module defines ``NAME``, ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Exit codes: 0 ok, 1 regression or failed check, 2 bad input; SIGINT and
SIGTERM stop any command with "interrupted" and exit 130 or 143 (128 + the signal).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
from collections.abc import Sequence

import sim.commands
from sim import interrupts
from sim.errors import BAD_INPUT_ERRORS, ContractViolation
from strategies.calls import recording_interrupts

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _command_modules() -> list:
    names = sorted(m.name for m in pkgutil.iter_modules(sim.commands.__path__) if not m.name.startswith("_"))
    return [importlib.import_module(f"sim.commands.{name}") for name in names]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand found in `sim.commands`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("ctxbench")
    except PackageNotFoundError:
        ver = "unknown"
    parser = argparse.ArgumentParser(
        prog="ctxbench",
        description="Benchmark context-eviction strategies of coding agents: replay coding sessions "
                    "against strategies under token budgets and report miss rates, re-read cost "
                    "and eviction latency.",
        epilog="Exit codes: 0 ok, 1 regression or failed check, 2 bad input; 130 or 143 when stopped by "
               "SIGINT or SIGTERM. ctxbench replaces only files it wrote (see each command's --out). "
               "Run 'ctxbench COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"ctxbench {ver}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns (and, as a script, exits with) the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        # Signals are noted before they interrupt, so a KeyboardInterrupt without one is a strategy's doing.
        with interrupts.handled(), recording_interrupts(signals=()):
            return int(args._run(args) or 0)
    except BAD_INPUT_ERRORS as exc:
        print(f"ctxbench {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ContractViolation as exc:
        print(f"ctxbench {args.command}: contract violation: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        print(f"ctxbench {args.command}: interrupted", file=sys.stderr)
        return 128 + getattr(exc, "signum", signal.SIGINT)
    except BrokenPipeError:
        # The reader went away (``ctxbench ... | head``): stop quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
