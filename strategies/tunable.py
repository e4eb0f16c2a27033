"""Tunable options: what a strategy or policy declares a search (``ctxbench tune``) may set, with ranges and types.

A class declares its tunable options in the class attribute ``TUNABLE``: a mapping of option name to
`Tunable` (`declare` builds one), or plain data of the same shape (``{"n": {"type": "int", "low": 0,
"high": 1000, "search": [1, 50]}}``, or a list of such mappings with a ``"name"``), so that a user's
policy needs nothing from ctxbench to declare its own. A declaration is read as data (`as_data`, then
`read_declaration`), never called.

Each `Tunable` carries the range the option accepts and `Tunable.check`, the check its constructor
runs on the option when a spec is parsed (`strategies.limits.option_int` or `option_number`), so the
range a search is held to and the range a spec is held to are one and the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.limits import MAX_OPTION_INT, option_int, option_number

__all__ = ["Tunable", "TYPES", "declare", "as_data", "read_declaration"]

#: The kinds of value an option takes.
TYPES = ("int", "float")


@dataclass(frozen=True)
class Tunable:
    """A numeric option that a search may set.

    ``low`` and ``high`` bound what the option accepts (``low`` itself refused when ``open_low``;
    ``high`` may be infinite for a ``float``); ``none`` accepts None too (no cap: never searched).
    ``search`` is the range searched when none is given, in the option's units, or in fractions of
    the window's tokens when ``window`` (a trigger in tokens: the same share of any window).
    ``log`` spaces the search logarithmically. ``managed`` says whether a managed context's
    compaction (``STRATEGY+POLICY``) reads it, for a policy's option.
    """

    name: str
    type: str
    low: float
    high: float
    search: tuple[float, float]
    open_low: bool = False
    none: bool = False
    window: bool = False
    log: bool = False
    managed: bool = True
    doc: str = ""

    def check(self, value: Any) -> Any:
        """``value`` if the option accepts it (an int for ``int``, a float for ``float``), else
        `StrategyInputError` naming the option."""
        if self.type == "int":
            return option_int(self.name, value, int(self.low), int(self.high), none=self.none)
        if self.none and value is None:
            return None
        return option_number(self.name, value, self.low, self.high, open_minimum=self.open_low)

    def accepts(self, value: Any) -> bool:
        """Whether `check` takes ``value``."""
        try:
            self.check(value)
        except StrategyInputError:
            return False
        return True

    def range_text(self) -> str:
        """The accepted range as an interval: ``[0, 2**50]``, ``(0, 1]``, ``[0, inf)``."""
        def shown(x: float) -> str:
            if x == MAX_OPTION_INT:
                return "2**50"
            return "inf" if math.isinf(x) else (f"{int(x)}" if self.type == "int" else f"{x:g}")
        close = ")" if math.isinf(self.high) else "]"
        return f"{'(' if self.open_low else '['}{shown(self.low)}, {shown(self.high)}{close}"


def declare(*tunables: Tunable) -> Mapping[str, Tunable]:
    """A read-only ``TUNABLE`` mapping of the given options, checked as any declaration is."""
    return MappingProxyType(read_declaration([asdict(t) for t in tunables], "declare()"))


_FIELDS = {f.name for f in fields(Tunable)}
_REQUIRED = ("type", "low", "high", "search")
_FLAGS = ("open_low", "none", "window", "log", "managed")


def as_data(declaration: Any, origin: str) -> list[dict]:
    """A ``TUNABLE`` attribute as plain data (a list of mappings with a ``name``): what crosses from the
    process that read it; anything but `Tunable`, mappings, lists, strings, numbers, booleans and None is
    `StrategyInputError`."""
    if declaration is None:
        return []
    if isinstance(declaration, Mapping):
        entries = [(name, entry) for name, entry in declaration.items()]
    elif isinstance(declaration, (list, tuple)):
        entries = [(None, entry) for entry in declaration]
    else:
        raise StrategyInputError(f"{origin}: TUNABLE must be a mapping of option name to its declaration, or a "
                                 f"list of declarations, got {type(declaration).__name__}")
    out = []
    for name, entry in entries:
        if isinstance(entry, Tunable):
            entry = asdict(entry)
        if not isinstance(entry, Mapping):
            raise StrategyInputError(f"{origin}: TUNABLE[{name!r}] must be a mapping or a Tunable, got "
                                     f"{type(entry).__name__}")
        data = {key: _plain(value, f"{origin}: TUNABLE[{name!r}][{key!r}]") for key, value in entry.items()}
        if name is not None:
            if "name" in data and data["name"] != name:
                raise StrategyInputError(f"{origin}: TUNABLE[{name!r}] names itself {data['name']!r}")
            data["name"] = name
        out.append(data)
    return out


def _plain(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    raise StrategyInputError(f"{where}: expected a number, a string, true/false or a list, got {type(value).__name__}")


def read_declaration(data: list, origin: str) -> dict[str, Tunable]:
    """Each declared option by name, from plain data (`as_data`); anything malformed is `StrategyInputError`
    naming ``origin``, the option and the key."""
    out: dict[str, Tunable] = {}
    for entry in data:
        name = entry.get("name")
        where = f"{origin}: tunable option {name!r}"
        if not isinstance(name, str) or not name.isidentifier():
            raise StrategyInputError(f"{origin}: a tunable option's name must be an identifier, got {name!r}")
        if name in out:
            raise StrategyInputError(f"{where} is declared twice")
        unknown = sorted(set(entry) - _FIELDS)
        if unknown:
            raise StrategyInputError(f"{where}: unknown key {unknown[0]!r}; keys: {', '.join(sorted(_FIELDS))}")
        missing = [key for key in _REQUIRED if key not in entry]
        if missing:
            raise StrategyInputError(f"{where}: missing {missing[0]!r}")
        kind = entry["type"]
        if kind not in TYPES:
            raise StrategyInputError(f"{where}: type must be one of {', '.join(TYPES)}, got {kind!r}")
        for flag in _FLAGS:
            if flag in entry and not isinstance(entry[flag], bool):
                raise StrategyInputError(f"{where}: {flag} must be true or false, got {entry[flag]!r}")
        if not isinstance(entry.get("doc", ""), str):
            raise StrategyInputError(f"{where}: doc must be a string")
        low, high = _bound(entry["low"], f"{where}: low", kind), _bound(entry["high"], f"{where}: high", kind)
        if not low < high:
            raise StrategyInputError(f"{where}: low {low:g} must be below high {high:g}")
        search = entry["search"]
        if not isinstance(search, (list, tuple)) or len(search) != 2:
            raise StrategyInputError(f"{where}: search must be a pair [low, high], got {search!r}")
        lo, hi = (_bound(v, f"{where}: search", "float", finite=True) for v in search)
        if not lo < hi:
            raise StrategyInputError(f"{where}: search {lo:g}..{hi:g} must run from a smaller to a larger value")
        tunable = Tunable(name, kind, low, high, (lo, hi), **{k: entry[k] for k in (*_FLAGS, "doc") if k in entry})
        if tunable.window:
            if not 0 < lo < hi <= 1:
                raise StrategyInputError(f"{where}: a search in fractions of the window must lie in (0, 1], got "
                                         f"{lo:g}..{hi:g}")
        else:
            for value in (lo, hi):
                shown = int(value) if kind == "int" and float(value).is_integer() else value
                if not tunable.accepts(shown):
                    raise StrategyInputError(f"{where}: search {lo:g}..{hi:g} leaves its range {tunable.range_text()}")
        if tunable.log and not tunable.window and lo <= 0:
            raise StrategyInputError(f"{where}: a logarithmic search must start above 0, got {lo:g}")
        out[name] = tunable
    return out


def _bound(value: Any, where: str, kind: str, finite: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise StrategyInputError(f"{where} must be a number, got {value!r}")
    if kind == "int" and not (isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())):
        raise StrategyInputError(f"{where} of an integer option must be a whole number, got {value!r}")
    if (finite or kind == "int") and math.isinf(value):
        raise StrategyInputError(f"{where} must be finite, got {value!r}")
    if abs(value) > MAX_OPTION_INT and not math.isinf(value):
        raise StrategyInputError(f"{where} must be at most 2**50 in magnitude, got {value!r}")
    return int(value) if kind == "int" else float(value)
