"""File and directory claims between arms, with thrashing detection and escalation.

The ownership protocol of a multi-arm session, as the workspace applies it:

- A change (``edit``/``write``) by an arm is **unsaved** while that arm keeps changing the file:
  until ``settle_ms`` pass after its last change of it. A file **claim** lasts exactly as long
  (it is taken, or renewed, by every change under enforcement), so a claim covers its holder's
  unsaved work.
- An arm **overwrites** another arm's unsaved change when it changes the file without having
  read it since that change. That is a **thrashing event**; the victim's unsaved lines are lost.
- ``strict``: every change needs the file's claim. A change to a file claimed by another arm
  goes to whoever wins the conflict (higher ``priority``, then the arm whose last access of the
  file is more recent, then the holder); the loser **waits** until the claim expires (its clock
  moves on; blocked turns and milliseconds are counted) or, with ``on_conflict="handoff"``,
  hands the change to the holder. Because the waiting arm must then re-read the file, strict
  mode never loses lines.
- ``lazy``: changes proceed; once a path's overwrites reach ``thrashing_threshold`` (with
  ``thrashing_detection``) the response escalates, one step per further overwrite: ``notify``,
  then ``enable_claims`` (the path is enforced as in strict mode from then on), then
  ``pause_arm`` (the overwriting arm waits ``pause_ms``).
- ``disabled``: no claims and no escalation; overwrites are still measured.
- Directory claims ``(arm, glob)`` hold for the whole session: other arms may read matching
  files, and their changes are handed to the claiming arm (they cannot wait for a claim that
  never expires).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from ctxbench.sim.errors import InputError
from ctxbench.traces.schema import MAX_VALUE

__all__ = ["ClaimConfig", "ThrashingEvent", "Escalation", "ClaimTable", "MODES"]

MODES = ("strict", "lazy", "disabled")
ESCALATION_STEPS = ("notify", "enable_claims", "pause_arm")


@dataclass(frozen=True)
class ClaimConfig:
    """How a multi-arm session coordinates changes (see the module docstring)."""

    mode: str = "disabled"
    thrashing_detection: bool = True
    thrashing_threshold: int = 2
    settle_ms: int = 300_000
    on_conflict: str = "wait"
    pause_ms: int = 60_000
    priorities: tuple[tuple[str, int], ...] = ()
    directory_claims: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"claim mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.on_conflict not in ("wait", "handoff"):
            raise InputError(f"on_conflict must be 'wait' or 'handoff', got {self.on_conflict!r}")
        if self.thrashing_threshold < 1:
            raise InputError(f"thrashing_threshold must be >= 1, got {self.thrashing_threshold}")
        for name in ("settle_ms", "pause_ms"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_VALUE:
                raise InputError(f"{name} must be between 0 and {MAX_VALUE:,} (2**50), got {value}")

    def priority(self, arm: str) -> int:
        """The arm's priority (default 0)."""
        return dict(self.priorities).get(arm, 0)


@dataclass(frozen=True)
class ThrashingEvent:
    """One overwrite of another arm's unsaved change."""

    path: str
    victim_arm: str
    overwriter_arm: str
    victim_change_at: int
    overwrite_at: int
    lines_lost: int


@dataclass(frozen=True)
class Escalation:
    """One escalation step taken when a path's overwrites reached the threshold."""

    path: str
    arm: str
    step: str
    at: int
    overwrites: int


@dataclass
class _Change:
    arm: str
    at: int
    lines: int
    revision: int


@dataclass
class ClaimTable:
    """Claims, unsaved changes and escalation state of one session's shared workspace."""

    config: ClaimConfig
    holders: dict[str, tuple[str, int]] = field(default_factory=dict)   # path -> (arm, expires_at)
    enforced_paths: set[str] = field(default_factory=set)
    unsaved: dict[str, list[_Change]] = field(default_factory=dict)
    overwrites: dict[str, int] = field(default_factory=dict)
    events: list[ThrashingEvent] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)

    def enforced(self, path: str) -> bool:
        """Whether changes of ``path`` need its claim now."""
        return self.config.mode == "strict" or path in self.enforced_paths

    def directory_holder(self, path: str, arm: str) -> str | None:
        """Another arm whose directory claim covers ``path``, if any (first in config order)."""
        if self.config.mode == "disabled":
            return None
        for holder, pattern in self.config.directory_claims:
            if holder != arm and fnmatch.fnmatchcase(path, pattern):
                return holder
        return None

    def holder(self, path: str, now: int) -> tuple[str, int] | None:
        """The live file claim on ``path`` at ``now``: ``(arm, expires_at)``."""
        claim = self.holders.get(path)
        if claim is not None and claim[1] > now:
            return claim
        return None

    def winner(self, path: str, requester: str, holder: str, last_access: dict[tuple[str, str], int]) -> str:
        """Who gets a contested claim: priority, then more recent access of the path, then the holder."""
        pr, ph = self.config.priority(requester), self.config.priority(holder)
        if pr != ph:
            return requester if pr > ph else holder
        if last_access.get((requester, path), -1) > last_access.get((holder, path), -1):
            return requester
        return holder

    def take(self, path: str, arm: str, now: int) -> None:
        """Give (or renew) ``arm``'s claim on ``path`` until ``now + settle_ms``."""
        self.holders[path] = (arm, now + self.config.settle_ms)

    def settle(self, path: str, arm: str | None = None) -> None:
        """Mark unsaved changes of ``path`` (by ``arm``, or all) as saved."""
        if arm is None:
            self.unsaved.pop(path, None)
        else:
            left = [c for c in self.unsaved.get(path, ()) if c.arm != arm]
            if left:
                self.unsaved[path] = left
            else:
                self.unsaved.pop(path, None)

    def record_change(self, path: str, arm: str, now: int, lines: int, revision: int,
                      last_read_revision: int) -> list[ThrashingEvent]:
        """Register ``arm``'s change; return the overwrites of others' unsaved changes it caused."""
        settle = self.config.settle_ms
        lost: list[ThrashingEvent] = []
        kept: list[_Change] = []
        for change in self.unsaved.get(path, ()):
            if change.arm == arm or now - change.at >= settle:
                continue  # own work, or saved by now
            if change.revision <= last_read_revision:
                kept.append(change)  # the overwriting arm read this change first: merged, not lost
                continue
            lost.append(ThrashingEvent(path, change.arm, arm, change.at, now, change.lines))
        # A newer change of the same arm supersedes its older ones in the list.
        kept = [c for c in kept if c.arm != arm]
        kept.append(_Change(arm, now, lines, revision))
        self.unsaved[path] = kept
        self.events.extend(lost)
        return lost

    def escalate(self, path: str, arm: str, now: int) -> str | None:
        """Count an overwrite of ``path`` by ``arm``; return the escalation step taken, if any."""
        count = self.overwrites[path] = self.overwrites.get(path, 0) + 1
        cfg = self.config
        if cfg.mode != "lazy" or not cfg.thrashing_detection or count < cfg.thrashing_threshold:
            return None
        step = ESCALATION_STEPS[min(count - cfg.thrashing_threshold, len(ESCALATION_STEPS) - 1)]
        if step == "enable_claims":
            # The overwriter's change is the unsaved one now: its claim protects it from here on.
            self.enforced_paths.add(path)
            self.take(path, arm, now)
        self.escalations.append(Escalation(path, arm, step, now, count))
        return step
