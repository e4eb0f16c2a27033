"""JSON from data files: a value nested too deeply is malformed input (`JSONTooDeep`), never a RecursionError."""

from __future__ import annotations

import json
from typing import IO, Any

__all__ = ["JSONTooDeep", "NumberText", "loads", "load", "raw_decode"]


class JSONTooDeep(json.JSONDecodeError):
    """A JSON value nested deeper than Python's parser can follow (about 1,000 levels)."""

    def __init__(self, doc: str | bytes, pos: int = 0):
        super().__init__("nested too deeply", doc if isinstance(doc, str) else "", pos)
        self.args = ("a value nested too deeply to parse",)


class NumberText(str):
    """A JSON number kept as the text it was written as (``parse_float=NumberText``); shown bare."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)


def loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads(text, **options)``; a value nested too deeply raises `JSONTooDeep` (a ``ValueError``)."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise JSONTooDeep(text) from None


def load(fh: IO[str], **options: Any) -> Any:
    """``json.load(fh, **options)`` with `loads`' handling of deep nesting."""
    return loads(fh.read(), **options)


def raw_decode(decoder: json.JSONDecoder, text: str, pos: int) -> tuple[Any, int]:
    """``decoder.raw_decode(text, pos)`` with `loads`' handling of deep nesting."""
    try:
        return decoder.raw_decode(text, pos)
    except RecursionError:
        raise JSONTooDeep(text, pos) from None
