"""A workspace shared by the arms of a multi-arm session: one context per arm, claims between them.

The workspace turns a session's events into one `ArmStream` per arm, whatever the strategy: each
arm later replays its stream in its own context (own strategy instance and budget). Events are
applied in trace order. A change of a path by one arm makes every other arm's resident
revision stale (an ``INVALIDATE`` in their streams), so its next access is an invalidation
miss. Claims and thrashing follow
`sim.engine.claims` (see its docstring). An arm that waits for a claim or is paused has its clock
moved on by the wait: its later events happen that much later (``blocked_ms``), and each turn
in which it waited counts once in ``blocked_turns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ctxbench.sim.engine.claims import ClaimConfig, ClaimTable
from ctxbench.sim.engine.rules import ArmStream
from ctxbench.traces.vocabulary import EDIT, INVALIDATE, READ, WRITE, kind_codes

__all__ = ["ArmStats", "ARM_STAT_FIELDS", "Workspace"]


@dataclass
class ArmStats:
    """What the protocol cost one arm."""

    lines_lost: int = 0          # its unsaved lines overwritten by others
    lines_overwritten: int = 0   # others' unsaved lines it overwrote
    thrashing_events: int = 0    # overwrites it suffered
    blocked_turns: int = 0
    blocked_ms: int = 0
    handoffs: int = 0            # changes it handed to a claim holder
    pauses: int = 0


ARM_STAT_FIELDS = tuple(ArmStats.__dataclass_fields__)


@dataclass
class Workspace:
    """Applies one multi-arm session's events through a `ClaimTable`, into per-arm streams."""

    claims: ClaimConfig = field(default_factory=ClaimConfig)
    streams: dict[str, ArmStream] = field(default_factory=dict)
    stats: dict[str, ArmStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.table = ClaimTable(self.claims)
        self._offset: dict[str, int] = {}
        self._paused_until: dict[str, int] = {}
        self._revision: dict[str, int] = {}
        self._read_revision: dict[tuple[str, str], int] = {}
        self._last_access: dict[tuple[str, str], int] = {}

    def _arm(self, arm: str) -> ArmStream:
        stream = self.streams.get(arm)
        if stream is None:
            stream = self.streams[arm] = ArmStream(arm, [], [], [], [], costs=[], kinds=[])
            self.stats[arm] = ArmStats()
            self._offset[arm] = 0
        return stream

    @staticmethod
    def _append(stream: ArmStream, op: int, path: str, size: int, now: int, cost: int, kind: int) -> None:
        stream.ops.append(op)
        stream.paths.append(path)
        stream.sizes.append(size)
        stream.ts_ms.append(now)
        stream.costs.append(cost)
        stream.kinds.append(kind)

    def _wait(self, arm: str, now: int, until: int, blocked: set[str]) -> int:
        delay = until - now
        if delay > 0:
            self._offset[arm] += delay
            self.stats[arm].blocked_ms += delay
            blocked.add(arm)
            return until
        return now

    def replay(self, turns, ops, paths, sizes, ts, arms, lines, costs=None, kinds=None) -> None:
        """Apply every event; ``turns`` yields ``(turn, start, stop)`` slices of the arrays;
        ``costs``: what each event takes of the window (its size unless given); ``kinds``: each event's
        content kind (an index into `traces.vocabulary.KINDS`; the op's own unless given), which every
        arm's stream keeps."""
        ops, sizes, ts = (list(c) if not hasattr(c, "tolist") else c.tolist() for c in (ops, sizes, ts))
        costs = sizes if costs is None else (costs.tolist() if hasattr(costs, "tolist") else list(costs))
        kinds = (kind_codes(ops, paths) if kinds is None else np.asarray(kinds)).tolist()
        if lines is not None and hasattr(lines, "tolist"):
            lines = lines.tolist()
        for turn, start, stop in turns:
            acting: dict[str, int] = {}
            blocked: set[str] = set()
            for i in range(start, stop):
                arm, path, op = arms[i], paths[i], ops[i]
                self._arm(arm)
                now = ts[i] + self._offset[arm]
                paused = self._paused_until.get(arm, 0)
                if paused > now:
                    now = self._wait(arm, now, paused, blocked)
                actor = arm
                if op == EDIT or op == WRITE:
                    actor, now = self._claim(arm, path, now, blocked)
                    self._arm(actor)
                self._apply(actor, op, path, sizes[i], costs[i], kinds[i], now, lines[i] if lines is not None else 0,
                            acting)
            for arm in blocked:
                self.stats[arm].blocked_turns += 1
            for arm, last in acting.items():
                stream = self.streams[arm]
                stream.end_turn(len(stream.ops), turn, last)

    def _claim(self, arm: str, path: str, now: int, blocked: set[str]) -> tuple[str, int]:
        """Resolve who makes a change of ``path`` requested by ``arm`` at ``now``, and when."""
        table = self.table
        dir_holder = table.directory_holder(path, arm)
        if dir_holder is not None:
            self.stats[arm].handoffs += 1
            return dir_holder, now
        if not table.enforced(path):
            return arm, now
        live = table.holder(path, now)
        if live is not None and live[0] != arm:
            holder, expires = live
            if table.winner(path, arm, holder, self._last_access) == arm:
                table.settle(path, holder)  # the holder saves before handing the file over
            elif self.claims.on_conflict == "handoff":
                self.stats[arm].handoffs += 1
                table.take(path, holder, now)
                return holder, now
            else:
                now = self._wait(arm, now, expires, blocked)
        table.take(path, arm, now)
        return arm, now

    def _apply(self, arm: str, op: int, path: str, size: int, cost: int, kind: int, now: int, lines: int,
               acting: dict[str, int]) -> None:
        self._append(self.streams[arm], op, path, size, now, cost, kind)
        acting[arm] = max(acting.get(arm, now), now)
        self._last_access[(arm, path)] = now
        if op == READ:
            self._read_revision[(arm, path)] = self._revision.get(path, 0)
            return
        if op != EDIT and op != WRITE:
            return
        revision = self._revision[path] = self._revision.get(path, 0) + 1
        lost = self.table.record_change(path, arm, now, lines, revision,
                                        self._read_revision.get((arm, path), 0))
        self._read_revision[(arm, path)] = revision
        for event in lost:
            self.stats[event.victim_arm].lines_lost += event.lines_lost
            self.stats[event.victim_arm].thrashing_events += 1
            self.stats[arm].lines_overwritten += event.lines_lost
            step = self.table.escalate(path, arm, now)
            if step == "pause_arm":
                self.stats[arm].pauses += 1
                self._paused_until[arm] = now + self.claims.pause_ms
        for other, stream in self.streams.items():
            if other != arm:
                self._append(stream, INVALIDATE, path, size, now, cost, kind)
