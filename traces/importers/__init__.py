"""Importers of real agent logs (Claude Code, Codex CLI, Gemini CLI, SWE-agent, mini-swe-agent, OpenHands) into traces, one module per format.

The formats are the table `traces.importers.formats.IMPORTERS`; each module there has the same
protocol (`traces.importers.formats.Importer`), and its readers share `traces.importers.builder`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pandas as pd

from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers.builder import EXTRA_COLUMNS, FinishedSession, assemble
from ctxbench.traces.importers.detect import detect, detect_or_none
from ctxbench.traces.importers.formats import FORMATS, IMPORTERS, Importer
from ctxbench.traces.importers.report import FileReport, ImportReport

__all__ = ["FORMATS", "IMPORTERS", "Importer", "FORMAT_NAMES", "AUTO", "EXTRA_COLUMNS", "ImportReport", "FileReport",
           "collect_files", "detect", "import_paths"]

AUTO = "auto"
#: The names ``ctxbench import`` accepts: every format of the table, then ``auto``.
FORMAT_NAMES: tuple[str, ...] = (*FORMATS, AUTO)


def _walk(directory: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Files under ``directory`` (recursively, hidden ones skipped) whose name ends with a suffix."""
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        """A directory that cannot be listed: `TraceError` naming it."""
        raise TraceError(f"{exc.filename or directory}: cannot read directory: {exc.strerror or exc}")

    for root, dirs, files in os.walk(directory, onerror=fail):
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        found.extend(Path(root, name) for name in sorted(files)   # regular files only: a FIFO would block
                     if not name.startswith(".") and name.lower().endswith(suffixes) and Path(root, name).is_file())
    return found


def collect_files(fmt: str, paths: Iterable[str | os.PathLike], report: ImportReport) -> dict[str, list[Path]]:
    """The input files by format: explicit files as given, directories walked for the format's suffixes.

    With ``auto`` each file's format is detected from its content; a file found in a directory
    that matches no format is listed in ``report.ignored``, a file named explicitly is an error.
    """
    if fmt not in FORMAT_NAMES:
        raise TraceError(f"unknown log format {fmt!r}; expected one of {', '.join(FORMAT_NAMES)}")
    suffixes = (tuple(suffix for importer in IMPORTERS for suffix in importer.SUFFIXES) if fmt == AUTO
                else FORMATS[fmt].SUFFIXES)
    by_format: dict[str, list[Path]] = {}
    seen: set[Path] = set()
    for raw in paths:
        given = Path(raw)
        if given.is_dir():
            candidates, explicit = _walk(given, tuple(dict.fromkeys(suffixes))), False
        elif given.is_file():
            candidates, explicit = [given], True
        elif given.exists():
            raise TraceError(f"{given}: not a regular file (a log is read from a file or a directory of them)")
        else:
            raise TraceError(f"{given}: no such file or directory")
        for file in candidates:
            key = file.resolve()
            if key in seen:
                continue
            seen.add(key)
            if fmt != AUTO:
                found: str | None = fmt
            elif explicit:
                found = detect(file)
            else:
                found = detect_or_none(file)
                if found is None:
                    report.ignored.append(str(file))
                    continue
            by_format.setdefault(found, []).append(file)
    return by_format


def import_paths(format: str, paths: Sequence[str | os.PathLike], conversation: bool = True
                 ) -> tuple[pd.DataFrame, ImportReport]:
    """Import agent logs (files or directories) as one validated trace, with a report of what was read.

    ``format`` is one of `FORMAT_NAMES`. With ``conversation`` (the default) the trace holds the
    whole window: messages, tool calls' inputs and each window's fixed overhead beside the file
    and tool-output events (`traces.importers.builder`); without it, only the latter.
    Malformed records are skipped and counted in the report;
    a missing or unreadable file, or one that is not in the format, raises `TraceError` naming it.
    The trace has the schema's columns plus `EXTRA_COLUMNS`; ``df.attrs["compactions"]`` lists
    where the real agent compacted its context.
    """
    report = ImportReport(format, conversation)
    by_format = collect_files(format, paths, report)
    if not by_format:
        shown = ", ".join(str(path) for path in paths) or "(no paths)"
        what = "agent log" if format == AUTO else format
        raise TraceError(f"{shown}: no {what} files found")

    def sessions() -> Iterator[FinishedSession]:
        """The sessions of every format, formats in name order."""
        for name in sorted(by_format):
            yield from FORMATS[name].read(by_format[name], conversation=conversation, report=report)

    df = assemble(sessions(), report, source=f"{format} import")
    return df, report
