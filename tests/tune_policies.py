"""Policies of a user's own that declare their tunable options as plain data, for `ctxbench tune`'s tests."""

from ctxbench.strategies.policy import Replace


class KeepLast:
    """Masks every tool result but the last ``keep`` (to one token), declaring ``keep`` tunable as plain data."""

    TUNABLE = {"keep": {"type": "int", "low": 0, "high": 1000, "search": [0, 12], "doc": "results kept"}}

    def __init__(self, keep: int = 2) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= 1000:
            raise ValueError(f"keep must be an integer from 0 to 1000, got {keep!r}")
        self.keep = keep

    def edit(self, items, window):
        results = [i for i in items if i.role == "result"]
        return [Replace((i.id,), min(1, i.tokens), "placeholder") for i in results[:max(0, len(results) - self.keep)]]


class Undeclared(KeepLast):
    """Declares a search range outside the range it says it accepts."""

    TUNABLE = {"keep": {"type": "int", "low": 0, "high": 10, "search": [0, 50]}}


class Opaque(KeepLast):
    """Declares with something that is not data."""

    TUNABLE = {"keep": {"type": "int", "low": 0, "high": 10, "search": [0, 5], "doc": object()}}
