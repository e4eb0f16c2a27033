"""Reading JSON data a person may have edited: every value checked, every problem named by its JSON path."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from ctxbench.sim.errors import InputError

__all__ = ["MAX_COUNT", "JsonObject", "Reader", "json_path", "shown", "listed", "clip"]

MAX_COUNT = 2**63 - 1            # what the results' int64 columns hold


class JsonObject(dict):
    """A parsed JSON object that remembers the keys its text gave more than once."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> "JsonObject":
        """The ``object_pairs_hook`` of `json.loads`."""
        obj = cls(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            obj.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))
        return obj


def clip(text: str, limit: int = 60) -> str:
    """``text``, cut to ``limit`` characters with "..." when longer."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def listed(names: Sequence[str], limit: int = 8) -> str:
    """The first ``limit`` of ``names``, joined, and how many more."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def shown(value: Any) -> str:
    """A value as a message quotes it: JSON, clipped, on one line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    try:
        return clip(json.dumps(value))
    except ValueError:  # an integer too long to print
        return "a number too long"


def json_path(path: Sequence[str | int]) -> str:
    """A JSON path as messages write it: ``strategies["lru"]["budgets"]["50000"]``."""
    if not path:
        return "the top level"
    head, *rest = path
    parts = [head if isinstance(head, str) and head.isidentifier() else f"[{_step(head)}]"]
    return "".join(parts + [f"[{_step(p)}]" for p in rest])


def _step(part: str | int) -> str:
    return str(part) if isinstance(part, int) else clip(json.dumps(part), 80)


class Reader:
    """Checks parsed JSON values; a bad one raises `InputError` naming ``where`` and its JSON path."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: Sequence[str | int], problem: str) -> NoReturn:
        """Raise `InputError` for the value at ``path``."""
        raise InputError(f"{self.where}: {json_path(path)}: {problem}" if path else f"{self.where}: {problem}")

    def object(self, value: Any, path: tuple, required: Sequence[str] = (), optional: Sequence[str] = (), *,
               noun: str = "known key") -> dict:
        """An object; with ``required`` or ``optional``, exactly those keys (the optional ones may be absent)."""
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {shown(value)}")
        for key in getattr(value, "duplicates", ()):
            self.fail(path + (key,), "appears twice in the object")
        known = tuple(required) + tuple(optional)
        if known:
            allowed = set(known)
            for key in value:
                if key not in allowed:
                    self.fail(path + (key,), f"not a {noun}; expected one of: {listed(known)}")
            for key in required:
                if key not in value:
                    self.fail(path, f"missing {json.dumps(key)}")
        return value

    def array(self, value: Any, path: tuple, *, nonempty: bool = True) -> list:
        """A list, non-empty unless told."""
        if not isinstance(value, list) or nonempty and not value:
            self.fail(path, f"expected a {'non-empty ' if nonempty else ''}list, got {shown(value)}")
        return value

    def count(self, value: Any, path: tuple, low: int = 0, high: int = MAX_COUNT) -> int:
        """An integer in ``[low, high]`` (not a float, not a boolean)."""
        if type(value) is not int or not low <= value <= high:
            bounds = f">= {low}" if high == MAX_COUNT else f"from {low} to {high}"
            self.fail(path, f"expected an integer {bounds}, got {shown(value)}")
        return value

    def number(self, value: Any, path: tuple, low: float = 0.0, high: float | None = None, *,
               above: bool = False) -> float:
        """A finite number ``>= low`` (``> low`` if ``above``) and ``<= high``, as a float."""
        try:
            number = float(value) if type(value) in (int, float) else math.nan
        except OverflowError:
            number = math.nan
        if not math.isfinite(number) or number < low or above and number == low \
                or high is not None and number > high:
            bounds = f"{'>' if above else '>='} {low:g}" + ("" if high is None else f" and <= {high:g}")
            self.fail(path, f"expected a finite number {bounds}, got {shown(value)}")
        return number

    def text(self, value: Any, path: tuple, *, pattern: re.Pattern | None = None, what: str = "a non-empty string",
             empty: bool = False) -> str:
        """A string of printable characters (matching ``pattern`` when given)."""
        if not isinstance(value, str) or not (value or empty) or not value.isprintable() \
                or pattern is not None and not pattern.fullmatch(value):
            self.fail(path, f"expected {what}, got {shown(value)}")
        return value

    def flag(self, value: Any, path: tuple, *, nullable: bool = False) -> bool | None:
        """``true`` or ``false`` (or ``null`` when ``nullable``)."""
        if not (isinstance(value, bool) or nullable and value is None):
            self.fail(path, f"expected true{', false or null' if nullable else ' or false'}, got {shown(value)}")
        return value

    def scalar(self, value: Any, path: tuple) -> Any:
        """A string, boolean, null or finite number."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.number(value, path, low=-math.inf)
        if not (value is None or isinstance(value, (str, bool))):
            self.fail(path, f"expected a string, number, boolean or null, got {shown(value)}")
        return value
