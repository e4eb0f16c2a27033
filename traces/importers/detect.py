"""Tell which agent wrote a log file, from its content (the `auto` import format)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from traces import safejson
from traces.errors import TraceError
from traces.importers import claude_code, openhands, swe_agent
from traces.importers._jsonstream import CHUNK, read_head

__all__ = ["detect", "detect_or_none"]

LINES = 5
_OPENHANDS = re.compile(r'"(?:action|observation)"\s*:\s*"')
_OPENHANDS_EVENT = re.compile(r'"source"\s*:\s*"(?:agent|user|environment)"|"cause"\s*:')
_SWE_TRAJECTORY = re.compile(r'"trajectory"\s*:\s*\[')
_SWE_HISTORY = re.compile(r'"history"\s*:\s*\[\s*\{\s*"(?:role|agent|content|message_type)"')


def _classify(record: object) -> str | None:
    if not isinstance(record, dict):
        return None
    if claude_code.looks_like(record):
        return claude_code.FORMAT
    if openhands.looks_like_record(record):
        return openhands.FORMAT
    if swe_agent.looks_like(record):
        return swe_agent.FORMAT
    return None


def _classify_text(text: str) -> str | None:
    try:
        return _classify(safejson.loads(text))
    except ValueError:
        return None


def detect_or_none(path: str | os.PathLike) -> str | None:
    """The format name of a log file (``claude-code``, ``swe-agent``, ``openhands``), or None.

    Only the first 64 KiB are read: its first complete lines as JSON records, else key patterns.
    """
    head = read_head(path, CHUNK)
    body = head.lstrip()
    if not body:
        return None
    if body[0] == "[":
        return openhands.FORMAT if _OPENHANDS.search(body) and _OPENHANDS_EVENT.search(body) else None
    if body[0] != "{":
        return None
    lines = body.split("\n")
    if len(head) == CHUNK:
        lines.pop()  # the last line may be cut
    for line in lines[:LINES]:
        if found := _classify_text(line):
            return found
    if len(head) < CHUNK and len(lines) > 1 and (found := _classify_text(body)):  # a small pretty-printed file
        return found
    if _SWE_TRAJECTORY.search(body) or _SWE_HISTORY.search(body):
        return swe_agent.FORMAT
    if '"history"' in body and _OPENHANDS.search(body) and _OPENHANDS_EVENT.search(body):
        return openhands.FORMAT
    return None


def detect(path: str | os.PathLike) -> str:
    """The format name of a log file; `TraceError` naming the file when it is none of them."""
    found = detect_or_none(path)
    if found is None:
        p = Path(path)
        raise TraceError(f"{p}: format not recognised (expected a Claude Code transcript, "
                         "a SWE-agent trajectory or OpenHands events)")
    return found
