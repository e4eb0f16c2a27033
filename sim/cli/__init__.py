"""The ``ctxbench`` command line: one module per subcommand in `sim.cli.commands`.

A command module defines ``NAME``, ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Exit codes: 0 ok, 1 regression or failed check, 2 bad input; SIGINT and
SIGTERM stop any command with "interrupted" and exit 130 or 143 (128 + the signal).

Repeated options: an option that takes several values (``nargs``, with ``action="extend"``) adds
up when repeated (``--strategy lru --strategy fifo``); ``--set`` adds one knob per use; a flag may
repeat; any other option given twice is an error (exit 2, naming it), applied here to every command.
"""

from __future__ import annotations

import argparse
import re
import importlib
import os
import pkgutil
import signal
import sys
from collections.abc import Sequence

from ctxbench.sim import interrupts   # light: the rest is imported once signals are handled (see `main`)

__all__ = ["main", "command", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _command_modules() -> list:
    import ctxbench.sim.cli.commands

    names = sorted(m.name for m in pkgutil.iter_modules(ctxbench.sim.cli.commands.__path__) if not m.name.startswith("_"))
    return [importlib.import_module(f"ctxbench.sim.cli.commands.{name}") for name in names]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand found in `sim.cli.commands`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("ctxbench")
    except PackageNotFoundError:
        ver = "unknown"
    parser = _Parser(
        prog="ctxbench",
        description="Benchmark context-eviction strategies of coding agents: replay coding sessions "
                    "against strategies under token budgets and report miss rates, re-read cost "
                    "and eviction latency.",
        epilog="Exit codes: 0 ok, 1 regression or failed check, 2 bad input; 130 or 143 when stopped by "
               "SIGINT or SIGTERM. ctxbench replaces only files it wrote (see each command's --out). An option "
               "that takes several values may be repeated (--strategy lru --strategy fifo is --strategy lru "
               "fifo); any other option that takes a value may be given once. Run 'ctxbench COMMAND --help' "
               "for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"ctxbench {ver}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        _refuse_repeats(p)
        p.set_defaults(_run=module.run)
    return parser


class _Parser(argparse.ArgumentParser):
    """A parser whose error is one line (``ctxbench run: error: --max-files must be ...``) and exit 2."""

    def error(self, message: str):
        prefix = re.match(r"argument (\S+): (?=\1 )", message)   # an option type's message names it already
        self.exit(2, f"{self.prog}: error: {message[prefix.end():] if prefix else message}\n")


_GIVEN = "_options_given"


class _Once(argparse.Action):
    """Mixed into an option's action: a second use in one command line is an error naming both."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault(_GIVEN, {})
        shown = option_string if values is None or isinstance(self, argparse.BooleanOptionalAction) \
            else f"{option_string} {' '.join(map(str, values)) if isinstance(values, list) else values}"
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice ({given[self.dest]}, then {shown}); give it once")
        given[self.dest] = shown
        super().__call__(parser, namespace, values, option_string)


_ONCE_CLASSES: dict[type, type] = {}


def _refuse_repeats(parser: argparse.ArgumentParser) -> None:
    """Make every option of ``parser`` that takes a value (or is an on/off pair) refuse a second use."""
    for action in parser._actions:
        if action.option_strings and isinstance(action, (argparse._StoreAction, argparse.BooleanOptionalAction)):
            cls = type(action)
            if cls not in _ONCE_CLASSES:
                _ONCE_CLASSES[cls] = type(f"Once{cls.__name__}", (_Once, cls), {})
            action.__class__ = _ONCE_CLASSES[cls]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns (and, as a script, exits with) the exit code.

    SIGINT and SIGTERM are handled from the first instant, imports included: whenever one arrives, the
    command stops with one line ("interrupted") and 128 + the signal, and nothing is printed after it."""
    return _command_line(argv, own_tree=False)


def command() -> int:
    """The ``ctxbench`` executable (and ``python -m ctxbench.sim.cli``): `main`, after which no process started
    below it, by a strategy's code or a worker, is left running. It is a child subreaper (Linux), so that what
    a worker killed outright leaves is re-parented to it, and it kills whatever is left below it once done."""
    return _command_line(None, own_tree=True)


def _command_line(argv: Sequence[str] | None, own_tree: bool) -> int:
    command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), "")
    owning = False
    try:
        with interrupts.handled():   # the strategies are imported once it is entered
            if own_tree:
                from ctxbench.strategies.supervisor import become_subreaper, kill_tree

                become_subreaper()
                owning = True
            return _main(argv)
    except KeyboardInterrupt as exc:   # what the command did not catch itself, an early signal included
        return _interrupted(command, exc)
    except ImportError:
        # A signal in the middle of an extension module's import comes out as that import's failure.
        from ctxbench.strategies.calls import SignalInterrupt, noted_signal

        if noted_signal() is None:
            raise
        return _interrupted(command, SignalInterrupt(noted_signal()))
    finally:
        if owning:
            with interrupts.ignored():
                kill_tree(reap=False)


def _interrupted(command: str, exc: KeyboardInterrupt) -> int:
    with interrupts.ignored():   # a second signal does not cut the line, nor add a traceback after it
        print(f"ctxbench {command}: interrupted" if command else "ctxbench: interrupted", file=sys.stderr, flush=True)
    return 128 + getattr(exc, "signum", signal.SIGINT)


def _main(argv: Sequence[str] | None) -> int:
    from ctxbench.sim.errors import BAD_INPUT_ERRORS, ContractViolation
    from ctxbench.strategies.calls import SignalInterrupt, noted_signal, raise_noted_signal, recording_interrupts
    from ctxbench.traces.errors import OutOfRoom, no_room

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # bad input on the command line: its one line is printed, its code returned
        if exc.code in (0, None):
            raise   # --help, --version
        return exc.code
    vars(args).pop(_GIVEN, None)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        if noted_signal() is not None:   # one that came while the command's modules were imported, lost there
            raise SignalInterrupt(noted_signal())
        # Signals are noted before they interrupt, so a KeyboardInterrupt without one is a strategy's doing.
        with recording_interrupts(signals=()):
            code = int(args._run(args) or 0)
            raise_noted_signal()
            return code
    except KeyboardInterrupt as exc:
        return _interrupted(args.command, exc)
    except BAD_INPUT_ERRORS as exc:
        print(f"ctxbench {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ContractViolation as exc:
        print(f"ctxbench {args.command}: contract violation: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader went away (``ctxbench ... | head``): stop quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except MemoryError as exc:
        detail = f": {exc}" if str(exc) else ""
        print(f"ctxbench {args.command}: out of memory{detail}; try fewer or smaller sessions", file=sys.stderr)
        return EXIT_FAILED
    except OutOfRoom as exc:
        print(f"ctxbench {args.command}: {exc} (what was there is left as it was)", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if not no_room(exc):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        print(f"ctxbench {args.command}: no room to write{where}: {exc.strerror or exc} (what was there is left "
              "as it was)", file=sys.stderr)
        return EXIT_FAILED


