"""Tell which agent wrote a log file, from its content (the `auto` import format)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxbench.traces import safejson
from ctxbench.traces.errors import TraceError
from ctxbench.traces.importers._jsonstream import CHUNK, read_head
from ctxbench.traces.importers.formats import IMPORTERS

__all__ = ["Head", "heads", "detect", "detect_or_none"]

LINES = 5


@dataclass(frozen=True)
class Head:
    """What detection shows an importer's ``sniff``: the log's head, and a JSON object parsed from it.

    ``text`` is the file's first 64 KiB without leading blanks. ``record`` is one of its first
    complete lines, or the whole file when it is small, parsed; None when only ``text`` is shown
    (to be judged by its patterns: the file is too large to parse, or no line parsed into a match).
    """

    text: str
    record: dict | None = None


def _object(text: str) -> dict | None:
    """The JSON object ``text`` holds, or None."""
    try:
        value = safejson.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def heads(path: str | os.PathLike) -> Iterator[Head]:
    """What a log shows, strongest evidence first: each of its first lines that is a JSON object, then
    the whole file when it is small and spans lines, then its text alone; nothing unless it starts as JSON."""
    head = read_head(path, CHUNK)
    text = head.lstrip()
    if not text or text[0] not in "[{":
        return
    if text[0] == "{":
        lines = text.split("\n")
        if len(head) == CHUNK:
            lines.pop()  # the last line may be cut
        for line in lines[:LINES]:
            if (record := _object(line)) is not None:
                yield Head(text, record)
        if len(head) < CHUNK and len(lines) > 1 and (record := _object(text)) is not None:  # small, pretty-printed
            yield Head(text, record)
    yield Head(text)


def detect_or_none(path: str | os.PathLike) -> str | None:
    """The format name of a log file (``claude-code``, ``swe-agent``, ``openhands``), or None.

    Only the first 64 KiB are read. Each piece of evidence (`heads`) is shown to every importer
    in table order; the first that recognises one names the format.
    """
    for head in heads(path):
        for importer in IMPORTERS:
            if importer.sniff(head):
                return importer.FORMAT
    return None


def detect(path: str | os.PathLike) -> str:
    """The format name of a log file; `TraceError` naming the file when it is none of them."""
    found = detect_or_none(path)
    if found is None:
        kinds = [importer.KIND for importer in IMPORTERS]
        expected = ", ".join(kinds[:-1]) + " or " + kinds[-1] if len(kinds) > 1 else kinds[0]
        raise TraceError(f"{Path(path)}: format not recognised (expected {expected})")
    return found
