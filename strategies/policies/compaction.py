"""Whole-history compaction: Claude Code's auto-compact and Codex's, each replacing the history by a summary."""

from __future__ import annotations

from collections.abc import Sequence

from strategies.policies.common import fraction, history, positive_int
from strategies.policy import Append, Edit, Replace, TranscriptItem, Window

__all__ = ["ClaudeCodePolicy", "CodexPolicy", "create_claude_code_policy", "create_codex_policy"]


class ClaudeCodePolicy:
    """Claude Code's automatic compaction.

    When the transcript reaches ``trigger_tokens`` (167,000 of a 200,000-token window: the
    bundled sessions compacted automatically at 167.1K-170.3K tokens, their
    ``compact_boundary.compactMetadata.preTokens``), the whole history but the fixed overhead
    (system prompt, tool definitions, project instructions stay) is replaced by one summary of
    ``summary_tokens`` (the bundled sessions' summaries, their ``isCompactSummary`` messages,
    held 12,181-14,518 characters: about 5,000 tokens), followed by the ``recent_files`` files
    read or edited most recently, each re-attached whole when at most ``file_tokens`` and as a
    path only (``path_tokens``) when larger. Its Read tool returns at most ``read_tokens``
    (25,000) of a file. Claude Code is closed source: these rules are taken from its logs and
    its public documentation, not from its code.
    """

    def __init__(self, trigger_tokens: int = 167_000, summary_tokens: int = 5_000, recent_files: int = 5,
                 file_tokens: int = 5_000, path_tokens: int = 20, read_tokens: int = 25_000) -> None:
        self.trigger_tokens = positive_int("trigger_tokens", trigger_tokens)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)
        self.recent_files = positive_int("recent_files", recent_files, 0)
        self.file_tokens = positive_int("file_tokens", file_tokens)
        self.path_tokens = positive_int("path_tokens", path_tokens, 0)
        self.read_tokens = positive_int("read_tokens", read_tokens)

    def admit(self, item: TranscriptItem) -> int:
        """A file read enters at most ``read_tokens``."""
        return min(item.tokens, self.read_tokens) if item.role == "result" and item.ref else item.tokens

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        if window.tokens < self.trigger_tokens:
            return []
        old = history(items)
        if not old:
            return []
        edits: list[Edit] = [Replace(tuple(i.id for i in old), self.summary_tokens, "summary")]
        latest: dict[str, TranscriptItem] = {}   # path -> its newest revision's item, newest paths last
        for item in old:
            if item.ref:
                latest.pop(item.path, None)
                latest[item.path] = item
        for item in list(latest.values())[::-1][:self.recent_files]:
            tokens = item.tokens if item.tokens <= self.file_tokens else self.path_tokens
            edits.append(Append("attached", min(tokens, item.tokens), item.ref))
        return edits

    def managed_compaction(self, window_tokens: int) -> tuple[int, int]:
        """When a managed context's conversation is compacted (the window's tokens in use) and to
        what summary, in tokens: `sim.engine.rules.Context`'s compaction."""
        return self.trigger_tokens, self.summary_tokens

    def __repr__(self) -> str:
        return (f"ClaudeCodePolicy(trigger_tokens={self.trigger_tokens}, summary_tokens={self.summary_tokens}, "
                f"recent_files={self.recent_files}, file_tokens={self.file_tokens})")


class CodexPolicy:
    """Codex's automatic compaction (codex-rs ``core/src/compact.rs``, ``protocol/src/openai_models.rs``,
    ``truncate.rs``).

    When the transcript reaches ``trigger_fraction`` (0.9) of the window, the new history is the
    initial context (the overhead), the most recent user messages up to ``user_tokens`` (20,000),
    and a summary of ``summary_tokens`` after them; tool outputs enter truncated to
    ``output_tokens`` (10,000).
    """

    def __init__(self, trigger_fraction: float = 0.9, user_tokens: int = 20_000, summary_tokens: int = 5_000,
                 output_tokens: int = 10_000) -> None:
        self.trigger_fraction = fraction("trigger_fraction", trigger_fraction)
        self.user_tokens = positive_int("user_tokens", user_tokens, 0)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)
        self.output_tokens = positive_int("output_tokens", output_tokens)

    def admit(self, item: TranscriptItem) -> int:
        """A tool's output enters at most ``output_tokens``."""
        return min(item.tokens, self.output_tokens) if item.role == "result" else item.tokens

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        if window.tokens < self.trigger_fraction * window.max_tokens:
            return []
        kept, budget = set(), self.user_tokens
        for item in reversed(items):
            if item.role == "user" and item.tokens <= budget:
                kept.add(item.id)
                budget -= item.tokens
        dropped = tuple(i.id for i in history(items) if i.id not in kept)
        if not dropped:
            return []
        return [Replace(dropped, 0), Append("summary", self.summary_tokens)]

    def managed_compaction(self, window_tokens: int) -> tuple[int, int]:
        """See `ClaudeCodePolicy.managed_compaction`."""
        return int(self.trigger_fraction * window_tokens), self.summary_tokens

    def __repr__(self) -> str:
        return (f"CodexPolicy(trigger_fraction={self.trigger_fraction}, user_tokens={self.user_tokens}, "
                f"summary_tokens={self.summary_tokens}, output_tokens={self.output_tokens})")


def create_claude_code_policy(**options) -> ClaudeCodePolicy:
    """Claude Code's automatic compaction (see `ClaudeCodePolicy`)."""
    return ClaudeCodePolicy(**options)


def create_codex_policy(**options) -> CodexPolicy:
    """Codex's automatic compaction (see `CodexPolicy`)."""
    return CodexPolicy(**options)
