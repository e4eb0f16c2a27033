"""What an import read, skipped and guessed: per-file counts and a printable summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ctxbench.traces.errors import TraceError

__all__ = ["FileReport", "ImportReport", "NOTES", "MAX_LISTED"]

MAX_LISTED = 5

#: Keys of `FileReport.notes`: things an import tolerated, counted rather than fatal.
NOTES: dict[str, str] = {
    "no_result": "tool calls without a result (dropped)",
    "orphan_result": "tool results without their call (dropped)",
    "failed_call": "failed tool calls (imported as outputs)",
    "estimated_size": "edit sizes estimated (the log lacks the file after the edit)",
    "missing_timestamp": "records without a usable timestamp (previous one used)",
    "synthetic_timestamps": "records given synthetic timestamps (step index x 1 s)",
    "unknown_action": "records of an unknown kind (ignored)",
    "default_overhead": "windows given the default overhead (no recorded system prompt or input tokens)",
    "truncated_output": "reads the agent cut to head and tail (imported as outputs)",
    "condensation": "condensations (their summary imported; the events they forgot stay in the trace)",
    "repeated_usage": "usage records repeated or with no call open (not applied)",
    "deleted_file": "files a patch deleted (no event: a trace has no deletion)",
    "unusable_model": "model names that are not text of at most 200 printable characters (not recorded)",
    "unreadable_state": "conversation states that are not JSON (read without their model)",
    "not_counted_exactly": "sessions of an OpenAI model whose text was not counted exactly (pip install "
                           "'ctxbench[tokens]'; its kinds' ratios count it)",
}


@dataclass
class FileReport:
    """One input file: which session and arm it fed, records read, malformed ones skipped, notes."""

    path: str
    format: str
    session: str = ""
    arm: str = ""
    records: int = 0
    malformed: int = 0
    malformed_at: list[int] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def skip(self, where: int) -> None:
        """Count one malformed or truncated record at line (or record) number ``where``."""
        self.malformed += 1
        if len(self.malformed_at) < MAX_LISTED:
            self.malformed_at.append(where)

    def check_recognised(self, recognised: int, problem: str) -> None:
        """`TraceError` "<path>: <problem>" when records were read but none (``recognised``) is in the format."""
        if self.records and not recognised:
            raise TraceError(f"{self.path}: {problem}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view."""
        return {"path": self.path, "format": self.format, "session": self.session, "arm": self.arm,
                "records": self.records, "malformed": self.malformed, "malformed_at": list(self.malformed_at),
                "notes": dict(sorted(self.notes.items()))}


@dataclass
class ImportReport:
    """Everything an import wants to tell: files, sessions with events by op, compactions, clamps."""

    format: str
    conversation: bool = True
    files: list[FileReport] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    sessions: dict[str, dict[str, int]] = field(default_factory=dict)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    clamped: Counter = field(default_factory=Counter)
    renamed: list[tuple[str, str]] = field(default_factory=list)

    def file(self, path: object, fmt: str, session: str = "", arm: str = "") -> FileReport:
        """Start the report of one input file and return it."""
        report = FileReport(str(path), fmt, session, arm)
        self.files.append(report)
        return report

    @property
    def malformed(self) -> int:
        """Malformed or truncated records skipped over all files."""
        return sum(file.malformed for file in self.files)

    def totals(self) -> Counter:
        """Events by op (and ``events``, ``turns``) summed over sessions."""
        total: Counter = Counter()
        for counts in self.sessions.values():
            total.update(counts)
        return total

    def notes(self) -> Counter:
        """Notes summed over files."""
        total: Counter = Counter()
        for file in self.files:
            total.update(file.notes)
        return total

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (what ``ctxbench import --json`` prints)."""
        return {"format": self.format, "conversation": self.conversation,
                "sessions": self.sessions, "totals": dict(self.totals()),
                "compactions": self.compactions, "malformed": self.malformed,
                "timestamps_clamped": dict(self.clamped), "notes": dict(self.notes()),
                "renamed_sessions": [list(pair) for pair in self.renamed], "ignored_files": self.ignored,
                "files": [file.to_dict() for file in self.files]}

    def summary(self) -> str:
        """A short human-readable account, several lines."""
        from ctxbench.traces.schema import OPS

        totals = self.totals()
        arms = sum(counts.get("arms", 0) for counts in self.sessions.values())
        lines = [f"{len(self.sessions)} sessions ({arms} arms) from {len(self.files)} files, "
                 f"{totals.get('turns', 0)} turns, {totals.get('events', 0)} events: "
                 + ", ".join(f"{op} {totals.get(op, 0)}" for op in OPS)]
        for name, counts in self.sessions.items():
            lines.append(f"  {name}: {counts.get('turns', 0)} turns, "
                         + ", ".join(f"{op} {counts.get(op, 0)}" for op in OPS)
                         + (f", {counts['arms']} arms" if counts.get("arms", 1) > 1 else ""))
        if self.compactions:
            lines.append(f"compactions: {len(self.compactions)}")
            for compaction in self.compactions:
                turn = compaction.get("turn")
                where = f"turn {turn}" if turn is not None else "after the last turn"
                lines.append(f"  {compaction['session']} [{compaction['arm']}]: before {where} "
                             f"({compaction.get('trigger') or 'unknown'} trigger, "
                             f"{compaction.get('pre_tokens') or '?'} tokens)")
        bad = [file for file in self.files if file.malformed]
        lines.append(f"malformed records skipped: {self.malformed}")
        for file in bad:
            at = ", ".join(str(where) for where in file.malformed_at)
            more = ", ..." if file.malformed > len(file.malformed_at) else ""
            lines.append(f"  {file.path}: {file.malformed} (at {at}{more})")
        for key, count in sorted(self.notes().items()):
            lines.append(f"{NOTES.get(key, key)}: {count}")
        if self.clamped:
            lines.append(f"timestamps clamped to keep time non-decreasing: {sum(self.clamped.values())}")
        for old, new in self.renamed:
            lines.append(f"session id {old!r} repeated; renamed to {new!r}")
        if self.ignored:
            lines.append(f"ignored (format not recognised): {len(self.ignored)} files")
        return "\n".join(lines)
