"""Collect a session's events as compact columns, order them into turns over all arms, build the trace."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traces.importers.report import ImportReport
from traces.schema import DEFAULT_ARM, OPS, validate

__all__ = ["SessionBuilder", "FinishedSession", "assemble", "EXTRA_COLUMNS"]

#: Columns every importer adds to the schema's: the agent's real input tokens for the turn (0 when
#: unknown) and a marker on the first event after the agent compacted its context.
EXTRA_COLUMNS: tuple[str, ...] = ("usage_input_tokens", "compact_before")


@dataclass
class FinishedSession:
    """One session's rows in final order, with its compaction markers and counts."""

    session: str
    columns: dict[str, list]
    compactions: list[dict[str, Any]]
    arms: list[str]
    turns: int
    clamped: int

    def __len__(self) -> int:
        return len(self.columns["turn"])


@dataclass
class SessionBuilder:
    """Events of one session, in any arrival order; `finish` puts them in turn order.

    A turn belongs to one arm and has a start time; turns of all arms are merged by start time
    (ties: arm registration order, then creation order), and a turn's events keep the order in
    which their slots were reserved (`reserve`), so results arriving late still land in place.
    Within one arm, turns keep their creation (file) order even if the log's clock goes backwards.
    Resources added with ``numbered=True`` get ``<n>`` appended, counted per prefix in final order
    (``tool://bash/`` becomes ``tool://bash/1``, ``tool://bash/2``, ...).
    """

    session: str
    arms: list[str] = field(default_factory=list)
    _turn_arm: list[int] = field(default_factory=list)
    _turn_ts: list[int] = field(default_factory=list)
    _turn_usage: list[int] = field(default_factory=list)
    _arm_clock: list[int] = field(default_factory=list)
    _ev_turn: list[int] = field(default_factory=list)
    _ev_seq: list[int] = field(default_factory=list)
    _ev_ts: list[int] = field(default_factory=list)
    _ev_op: list[str] = field(default_factory=list)
    _ev_path: list[str] = field(default_factory=list)
    _ev_numbered: list[bool] = field(default_factory=list)
    _ev_size: list[int] = field(default_factory=list)
    _ev_lines: list[int] = field(default_factory=list)
    _marks: list[tuple[int, int, int | None, dict[str, Any]]] = field(default_factory=list)
    _next_seq: int = 0

    def add_arm(self, name: str = DEFAULT_ARM) -> int:
        """Register an arm and return its index; a repeated name gets a ``~2``, ``~3`` suffix."""
        unique, n = name, 1
        while unique in self.arms:
            n += 1
            unique = f"{name}~{n}"
        self.arms.append(unique)
        self._arm_clock.append(np.iinfo(np.int64).min)
        return len(self.arms) - 1

    def new_turn(self, arm: int, ts: int) -> int:
        """Open a turn of ``arm`` starting at ``ts`` (epoch ms); returns its handle."""
        clock = max(self._arm_clock[arm], ts)
        self._arm_clock[arm] = clock
        self._turn_arm.append(arm)
        self._turn_ts.append(clock)
        self._turn_usage.append(0)
        return len(self._turn_arm) - 1

    def reserve(self) -> int:
        """A slot that orders an event within its turn, taken when the call is seen."""
        self._next_seq += 1
        return self._next_seq

    def add(self, turn: int, op: str, path: str, size: int, ts: int, *, lines: int = 0,
            numbered: bool = False, slot: int | None = None) -> None:
        """Add one event to ``turn``; ``slot`` (from `reserve`) places it, else it goes last so far."""
        self._ev_turn.append(turn)
        self._ev_seq.append(self.reserve() if slot is None else slot)
        self._ev_ts.append(ts)
        self._ev_op.append(op)
        self._ev_path.append(sys.intern(path))  # paths repeat: keep one copy
        self._ev_numbered.append(numbered)
        self._ev_size.append(max(0, int(size)))
        self._ev_lines.append(max(0, int(lines)))

    def set_usage(self, turn: int, tokens: int) -> None:
        """Record the real input tokens the agent's model saw at ``turn``."""
        self._turn_usage[turn] = max(self._turn_usage[turn], int(tokens))

    def compaction(self, arm: int, ts: int | None, **info: Any) -> None:
        """Mark that ``arm`` compacted its context here: before the next turn it opens."""
        self._marks.append((arm, len(self._turn_arm), ts, info))

    @property
    def events(self) -> int:
        """Events added so far."""
        return len(self._ev_turn)

    def finish(self) -> FinishedSession:
        """The rows in turn order with dense turn numbers, clamped times and numbered resources."""
        n_turns = len(self._turn_arm)
        turn_order = sorted(range(n_turns), key=lambda t: (self._turn_ts[t], self._turn_arm[t], t))
        rank = [0] * n_turns
        for r, t in enumerate(turn_order):
            rank[t] = r
        order = sorted(range(self.events), key=lambda i: (rank[self._ev_turn[i]], self._ev_seq[i]))

        turns, ts_out, paths, clamped = [], [], [], 0
        dense, last_rank, running = -1, -1, None
        counters: dict[str, int] = {}
        for i in order:
            r = rank[self._ev_turn[i]]
            if r != last_rank:
                dense, last_rank = dense + 1, r
            turns.append(dense)
            ts = self._ev_ts[i]
            if running is not None and ts < running:
                clamped += 1
                ts = running
            running = ts
            ts_out.append(ts)
            path = self._ev_path[i]
            if self._ev_numbered[i]:
                counters[path] = counters.get(path, 0) + 1
                path = f"{path}{counters[path]}"
            paths.append(path)

        compact = [False] * len(order)
        compactions = []
        for arm, before, ts, info in self._marks:
            hit = next((k for k, i in enumerate(order)
                        if self._turn_arm[self._ev_turn[i]] == arm and self._ev_turn[i] >= before), None)
            if hit is not None:
                compact[hit] = True
            compactions.append({"session": self.session, "arm": self.arms[arm],
                                "turn": None if hit is None else turns[hit], "ts_ms": ts, **info})

        columns = {
            "session": [self.session] * len(order),
            "turn": turns,
            "ts_ms": ts_out,
            "op": [self._ev_op[i] for i in order],
            "path": paths,
            "size_bytes": [self._ev_size[i] for i in order],
            "arm": [self.arms[self._turn_arm[self._ev_turn[i]]] for i in order],
            "lines_changed": [self._ev_lines[i] for i in order],
            "usage_input_tokens": [self._turn_usage[self._ev_turn[i]] for i in order],
            "compact_before": compact,
        }
        return FinishedSession(self.session, columns, compactions, list(self.arms),
                               dense + 1, clamped)


def assemble(sessions: Iterable[FinishedSession], report: ImportReport, source: str = "import") -> pd.DataFrame:
    """One validated trace of ``sessions`` (sorted by id, repeated ids renamed), filling ``report``.

    ``df.attrs["compactions"]`` lists where the real agent compacted its context.
    """
    by_id: dict[str, FinishedSession] = {}
    for s in sessions:
        name, n = s.session, 1
        while name in by_id:
            n += 1
            name = f"{s.session}#{n}"
        if name != s.session:
            report.renamed.append((s.session, name))
            s.session = name
            s.columns["session"] = [name] * len(s)
            for c in s.compactions:
                c["session"] = name
        by_id[name] = s

    columns: dict[str, list] = {}
    compactions: list[dict[str, Any]] = []
    for name in sorted(by_id):
        s = by_id[name]
        for key, values in s.columns.items():
            columns.setdefault(key, []).extend(values)
        compactions.extend(s.compactions)
        counts = {op: 0 for op in OPS}
        for op in s.columns["op"]:
            counts[op] += 1
        report.sessions[name] = {"turns": s.turns, "events": len(s), **counts, "arms": len(s.arms)}
        if s.clamped:
            report.clamped[name] = s.clamped
    report.compactions = compactions

    if not columns:
        columns = {key: [] for key in ("session", "turn", "ts_ms", "op", "path", "size_bytes", "arm",
                                       "lines_changed", *EXTRA_COLUMNS)}
    df = pd.DataFrame({
        **{key: values for key, values in columns.items() if key not in ("turn", "ts_ms", "size_bytes",
                                                                          "lines_changed", *EXTRA_COLUMNS)},
        "turn": np.asarray(columns["turn"], dtype=np.int64),
        "ts_ms": np.asarray(columns["ts_ms"], dtype=np.int64),
        "size_bytes": np.asarray(columns["size_bytes"], dtype=np.int64),
        "lines_changed": np.asarray(columns["lines_changed"], dtype=np.int64),
        "usage_input_tokens": np.asarray(columns["usage_input_tokens"], dtype=np.int64),
        "compact_before": np.asarray(columns["compact_before"], dtype=bool),
    })
    df = validate(df, source=source)
    df.attrs["compactions"] = compactions
    df.attrs["import"] = {"format": report.format, "include_messages": report.include_messages,
                          "files": len(report.files), "malformed_records": report.malformed}
    return df
