"""The table of log formats: one importer module per format, in the order they are listed and detected.

Adding a format is one module with the `Importer` attributes and one entry in `IMPORTERS`:
``ctxbench import`` (its choices and --help), ``auto`` detection and directory walks follow it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ctxbench.traces.importers import claude_code, codex, gemini, mini_swe_agent, openhands, swe_agent

if TYPE_CHECKING:
    from ctxbench.traces.importers.builder import FinishedSession
    from ctxbench.traces.importers.detect import Head
    from ctxbench.traces.importers.report import ImportReport

__all__ = ["Importer", "IMPORTERS", "FORMATS"]


class Importer(Protocol):
    """What every importer module provides."""

    FORMAT: str                  # its name on the command line: ``claude-code``
    LABEL: str                   # the agent's name: ``Claude Code``
    KIND: str                    # what one of its logs is, for messages: ``a Claude Code transcript``
    SUFFIXES: tuple[str, ...]    # file names a directory walk picks up: ``(".jsonl",)``
    HELP: str                    # its paragraph in ``ctxbench import --help``

    def sniff(self, head: Head) -> bool:
        """Whether a log's head (`traces.importers.detect.Head`) is in this format."""

    def read(self, files: Iterable[Path], *, conversation: bool,
             report: ImportReport) -> Iterator[FinishedSession]:
        """The sessions of ``files``, one at a time, each file's counts in ``report``."""


#: Every format, in the order of the command line's choices; `detect` tries them in this order too.
IMPORTERS: tuple[Importer, ...] = (claude_code, codex, gemini, swe_agent, mini_swe_agent, openhands)
FORMATS: dict[str, Importer] = {importer.FORMAT: importer for importer in IMPORTERS}
