"""The rich console every command prints through."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console"]

PIPE_WIDTH = 140


def console(**options) -> Console:
    """A console as wide as the terminal, or `PIPE_WIDTH` columns when stdout is a file or pipe.

    A fixed width off the terminal keeps logs, CI output and captured text from wrapping at
    rich's default of 80 columns, whatever ``COLUMNS`` says.
    """
    probe = Console(**options)
    return probe if probe.is_terminal else Console(width=PIPE_WIDTH, **options)
