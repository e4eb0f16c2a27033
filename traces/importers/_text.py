"""Text helpers shared by the importers: UTF-8 sizes, line counts, ISO timestamps, window ids."""

from __future__ import annotations

import re
from datetime import datetime, timezone

__all__ = ["nbytes", "redacted", "count_lines", "iso_ms", "window_id", "text_of"]


#: A text a privacy tool replaced by a placeholder that keeps its length ("[REDACTED_TEXT len=13131 sha=036b7e47]").
REDACTED = re.compile(r"\[REDACTED_[A-Z_]+ len=(\d{1,12}) sha=[0-9a-f]{4,64}\]")


def redacted(text: str) -> bool:
    """Whether ``text`` is a placeholder a privacy tool left in place of the text (`REDACTED`)."""
    return text.startswith("[REDACTED_") and REDACTED.fullmatch(text) is not None


def nbytes(text: object) -> int:
    """UTF-8 size of ``text`` in bytes (0 for anything that is not a string); a redaction placeholder that
    keeps the text's length (`REDACTED`) counts as that length.

    >>> nbytes("héllo"), nbytes(None), nbytes("[REDACTED_OUTPUT len=136 sha=b8890189]")
    (6, 0, 136)
    """
    if not isinstance(text, str):
        return 0
    if text.startswith("[REDACTED_"):
        redacted = REDACTED.fullmatch(text)
        if redacted:
            return int(redacted.group(1))
    # JSON may carry lone surrogates ("\\ud83d" alone); count them instead of failing
    return len(text.encode("utf-8", "surrogatepass"))


def count_lines(text: object) -> int:
    """Number of lines in ``text``; a last line without a newline still counts.

    >>> count_lines("a\\nb"), count_lines("a\\nb\\n"), count_lines("")
    (2, 2, 0)
    """
    if not isinstance(text, str) or not text:
        return 0
    return text.count("\n") + (not text.endswith("\n"))


def iso_ms(value: object) -> int | None:
    """Epoch milliseconds of an ISO 8601 timestamp (no zone means UTC), or None if unparsable.

    >>> iso_ms("1970-01-01T00:00:01.5Z"), iso_ms("1970-01-01T01:00:00+01:00"), iso_ms("soon")
    (1500, 0, None)
    """
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return round(moment.timestamp() * 1000)


def window_id(path: str, first: int, last: int) -> str:
    """Resource id of the line window ``first``..``last`` (1-based, inclusive) of ``path``.

    >>> window_id("src/app.py", 10, 60)
    'src/app.py#L10-60'
    """
    return f"{path}#L{first}-{last}"


def text_of(content: object) -> str:
    """The text of a message or tool-result body: a string, or the text parts of a list of blocks.

    Non-text parts (images, documents) contribute nothing.

    >>> text_of([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}])
    'ab'
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""
