"""Whole-history compaction: Claude Code's auto-compact, Codex's and Gemini CLI's, each replacing history by a summary."""

from __future__ import annotations

from collections.abc import Sequence

from ctxbench.strategies.limits import MAX_OPTION_INT
from ctxbench.strategies.policies.common import history, positive_int
from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.policy import Append, Edit, Replace, Request, TranscriptItem, Window
from ctxbench.strategies.tunable import Tunable, declare

__all__ = ["ClaudeCodePolicy", "CodexPolicy", "GeminiCliPolicy", "OVERFLOWS", "create_claude_code_policy",
           "create_codex_policy", "create_gemini_cli_policy"]

#: What Claude Code does when its compaction request is larger than the window: ``trim`` its oldest
#: history (2.1.85 and later), or ``fail`` (earlier versions: the replay is infeasible).
OVERFLOWS = ("trim", "fail")

#: Everything in the window is the summarization call's prompt; while it is larger than the window its
#: oldest history leaves it (the request Claude Code and Codex retry with).
TRIMMED_WHOLE_WINDOW = Request(None, 0, True)


class ClaudeCodePolicy:
    """Claude Code's automatic compaction.

    When the transcript reaches the trigger, the whole history but the fixed overhead (system
    prompt, tool definitions, project instructions stay) is replaced by one summary of
    ``summary_tokens``, followed by the ``recent_files`` files read or edited most recently, each
    re-attached whole when at most ``file_tokens`` (5,000) and as a path only (``path_tokens``)
    when larger. Its Read tool returns at most ``read_tokens`` (25,000) of a file.

    The trigger is ``trigger_tokens`` when given, else the window less ``buffer_tokens``: 33,000
    (20,000 kept for the model's output and a 13,000-token margin, as public analyses of Claude
    Code describe it), which at a 200,000-token window is the 167,000 where the bundled sessions
    compacted (their ``compact_boundary`` records' ``preTokens``: 167,094 and 167,731); the buffer
    is at most 16.5% of a smaller window (its share at 200K), so a small window keeps the proportion.
    The summary is 4,000 tokens: the bundled sessions' ``isCompactSummary`` messages held 14,518
    and 12,181 characters, about 3,000-4,100 tokens at 3.5-4 characters per token.

    The summary is written by a call whose prompt is the whole window. When that prompt is larger
    than the window (a turn that adds more than the buffer past the trigger), ``overflow="trim"``
    (the default) drops the oldest history from it until it fits and summarizes the rest, as Claude
    Code does since 2.1.85 (its changelog: "Fixed /compact failing with 'context exceeded' when the
    conversation has grown too large for the compact request itself to fit"; the published source's
    ``truncateHeadForPTLRetry`` drops the oldest API rounds until the reported gap is covered; here
    the oldest items, one at a time); what it drops is counted (``summary_dropped_tokens``).
    ``overflow="fail"`` is the earlier versions, whose compaction then failed ("Error during
    compaction: Conversation too long", anthropics/claude-code issues 2964, 14274, 23047): the call
    is over the window and the replay infeasible. Its instructions (appended after the history) are
    not counted: their size is not published.

    Claude Code is closed source: these rules are taken from its logs (calibration of the bundled
    sessions), its documentation, changelog and public reports, not from its code.
    """

    TUNABLE = declare(
        Tunable("trigger_tokens", "int", 1, MAX_OPTION_INT, (0.5, 1.0), none=True, window=True,
                doc="tokens at which it compacts (default: the window less buffer_tokens)"),
        Tunable("recent_files", "int", 0, MAX_OPTION_INT, (0, 10), managed=False,
                doc="files read or edited last, re-attached after the summary"))

    def __init__(self, trigger_tokens: int | None = None, buffer_tokens: int = 33_000, summary_tokens: int = 4_000,
                 recent_files: int = 5, file_tokens: int = 5_000, path_tokens: int = 20,
                 read_tokens: int = 25_000, overflow: str = "trim") -> None:
        if overflow not in OVERFLOWS:
            raise StrategyInputError(f"overflow must be one of {', '.join(OVERFLOWS)}, got {overflow!r}")
        self.overflow = overflow
        self.trigger_tokens = self.TUNABLE["trigger_tokens"].check(trigger_tokens)
        self.buffer_tokens = positive_int("buffer_tokens", buffer_tokens, 0)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)
        self.recent_files = self.TUNABLE["recent_files"].check(recent_files)
        self.file_tokens = positive_int("file_tokens", file_tokens)
        self.path_tokens = positive_int("path_tokens", path_tokens, 0)
        self.read_tokens = positive_int("read_tokens", read_tokens)

    def trigger(self, window_tokens: int) -> int:
        """Where it compacts in a window of ``window_tokens``.

        >>> ClaudeCodePolicy().trigger(200_000), ClaudeCodePolicy().trigger(50_000)
        (167000, 41750)
        """
        if self.trigger_tokens is not None:
            return self.trigger_tokens
        return window_tokens - min(self.buffer_tokens, int(window_tokens * 0.165))

    def admit(self, item: TranscriptItem) -> int:
        """A file read enters at most ``read_tokens``."""
        return min(item.tokens, self.read_tokens) if item.role == "result" and item.ref else item.tokens

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        if window.tokens < self.trigger(window.max_tokens):
            return []
        old = history(items)
        if not old:
            return []
        latest: dict[str, TranscriptItem] = {}   # file -> its newest revision's item, newest files last
        for item in old:
            if item.ref and "://" not in item.path:
                latest.pop(item.path, None)
                latest[item.path] = item
        attached = [Append("attached", item.tokens if item.tokens <= self.file_tokens
                           else min(self.path_tokens, item.tokens), item.ref)
                    for item in list(latest.values())[::-1][:self.recent_files]]
        # The summary and the files re-attached never take more than the history they replace.
        room = sum(i.tokens for i in old) - sum(a.tokens for a in attached)
        summary = min(self.summary_tokens, room)
        request = [TRIMMED_WHOLE_WINDOW] if self.overflow == "trim" and summary > 0 else []
        return [Replace(tuple(i.id for i in old), summary, "summary"), *attached, *request]

    def managed_compaction(self, window_tokens: int) -> tuple[int, int, bool]:
        """When a managed context's conversation is compacted (the pinned content's tokens), into what summary,
        in tokens, and whether a summarization call larger than the window is trimmed (`sim.engine.rules.Compaction`)."""
        return self.trigger(window_tokens), self.summary_tokens, self.overflow == "trim"

    def compaction_schedule(self) -> tuple[int, int | None, bool] | None:
        """The summary's and a file read's tokens of the whole-history compaction schedules it is measured
        against (``opt:schedule``, `sim.analysis.schedule`), and whether its own compactions are one of them
        (no files re-attached; a trimmed summarization call is not); None with no summary."""
        return (self.summary_tokens, self.read_tokens, self.recent_files == 0) if self.summary_tokens > 0 else None

    def __repr__(self) -> str:
        trigger = "" if self.trigger_tokens is None else f"trigger_tokens={self.trigger_tokens}, "
        overflow = "" if self.overflow == "trim" else f", overflow={self.overflow!r}"
        return (f"ClaudeCodePolicy({trigger}buffer_tokens={self.buffer_tokens}, summary_tokens={self.summary_tokens}, "
                f"recent_files={self.recent_files}, file_tokens={self.file_tokens}{overflow})")


class CodexPolicy:
    """Codex's automatic compaction (codex-rs ``core/src/compact.rs``, ``protocol/src/openai_models.rs``,
    ``truncate.rs``).

    When the transcript reaches ``trigger_fraction`` (0.9) of the window, the new history is the
    initial context (the overhead), the most recent user messages up to ``user_tokens`` (20,000),
    and a summary of ``summary_tokens`` after them; tool outputs enter truncated to
    ``output_tokens`` (10,000). The summary's size is not a Codex setting (the model writes it):
    4,000 tokens, as Claude Code's.

    The summarization call's prompt is the whole window and then the compaction instructions
    (``templates/compact/prompt.md``, about 470 characters: ``prompt_tokens``, 110). When it is larger
    than the window, Codex removes the oldest history item and retries until it fits ("Trimmed N
    older thread item(s) before compacting so the prompt fits the model context window";
    ``history.remove_first_item``), so its summary is written without them; here the oldest items
    leave one at a time, and what they held is counted (``summary_dropped_tokens``). That is the
    local compaction; the remote one of OpenAI's own models (``/responses/compact``) is not modelled.
    """

    TUNABLE = declare(Tunable("trigger_fraction", "float", 0, 1, (0.5, 1.0), open_low=True,
                              doc="share of the window at which it compacts"))

    def __init__(self, trigger_fraction: float = 0.9, user_tokens: int = 20_000, summary_tokens: int = 4_000,
                 output_tokens: int = 10_000, prompt_tokens: int = 110) -> None:
        self.trigger_fraction = self.TUNABLE["trigger_fraction"].check(trigger_fraction)
        self.prompt_tokens = positive_int("prompt_tokens", prompt_tokens, 0)
        self.user_tokens = positive_int("user_tokens", user_tokens, 0)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)
        self.output_tokens = positive_int("output_tokens", output_tokens)

    def trigger(self, window_tokens: int) -> float:
        """Where it compacts in a window of ``window_tokens``: ``trigger_fraction`` of it, never above it."""
        return self.trigger_fraction * window_tokens

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
        dropped = [i for i in history(items) if i.id not in kept]
        if not dropped:
            return []
        summary = min(self.summary_tokens, sum(i.tokens for i in dropped))
        request = [Request(None, self.prompt_tokens, True)] if summary > 0 else []
        return [Replace(tuple(i.id for i in dropped), 0), Append("summary", summary), *request]

    def managed_compaction(self, window_tokens: int) -> tuple[int, int, bool]:
        """See `ClaudeCodePolicy.managed_compaction`."""
        return int(self.trigger_fraction * window_tokens), self.summary_tokens, True

    def __repr__(self) -> str:
        return (f"CodexPolicy(trigger_fraction={self.trigger_fraction}, user_tokens={self.user_tokens}, "
                f"summary_tokens={self.summary_tokens}, output_tokens={self.output_tokens}, "
                f"prompt_tokens={self.prompt_tokens})")


class GeminiCliPolicy:
    """Gemini CLI's chat compression (gemini-cli ``packages/core/src/services/chatCompressionService.ts``,
    ``findCompressSplitPoint``).

    When the history reaches ``trigger_fraction`` (0.5) of the window, the oldest part of it is
    replaced by one summary (the model's ``<state_snapshot>``) of ``summary_tokens`` and the newest
    ``preserve_fraction`` (0.3) is kept. The split falls on a user message, never inside a call and
    its result: the first user message at or past ``1 - preserve_fraction`` of the history's tokens;
    when none comes that late, everything when the history ends with the model's own text, else the
    last user message before that point. A history whose only user message is its first one cannot
    be compressed, as in Gemini CLI. The summary's size is not a setting (the model writes it):
    4,000 tokens, as Claude Code's.

    The summary is written by a call of its own: the history it replaces under the compression
    instructions (``getCompressionPrompt`` in ``packages/core/src/core/prompts.ts``, about 2,900
    characters, and a one-line request: ``prompt_tokens``, 720), which shares no prefix with the agent's
    prompt. Gemini CLI does not trim that call: larger than the window, it is over the window.

    >>> from ctxbench.strategies.policy import TranscriptItem as I, Window
    >>> items = [I("u1", "user", "prose", 10, 0), I("r1", "result", "output", 60, 1),
    ...          I("u2", "user", "prose", 10, 2), I("r2", "result", "output", 20, 3)]
    >>> GeminiCliPolicy(summary_tokens=5).edit(items, Window(150, 100, 3))
    [Replace(ids=('u1', 'r1'), tokens=5, role='summary'), Request(ids=('u1', 'r1'), tokens=720, fit=False)]
    """

    TUNABLE = declare(
        Tunable("trigger_fraction", "float", 0, 1, (0.2, 1.0), open_low=True,
                doc="share of the window at which it compresses"),
        Tunable("preserve_fraction", "float", 0, 1, (0.1, 0.7), open_low=True, managed=False,
                doc="newest share of the history kept through a compression"))

    def __init__(self, trigger_fraction: float = 0.5, preserve_fraction: float = 0.3,
                 summary_tokens: int = 4_000, prompt_tokens: int = 720) -> None:
        self.trigger_fraction = self.TUNABLE["trigger_fraction"].check(trigger_fraction)
        self.prompt_tokens = positive_int("prompt_tokens", prompt_tokens, 0)
        self.preserve_fraction = self.TUNABLE["preserve_fraction"].check(preserve_fraction)
        self.summary_tokens = positive_int("summary_tokens", summary_tokens, 0)

    def split(self, old: Sequence[TranscriptItem]) -> int:
        """How many of the oldest history items a compression replaces (0: none can be)."""
        target = (1 - self.preserve_fraction) * sum(item.tokens for item in old)
        seen, last = 0, 0
        for index, item in enumerate(old):
            if item.role == "user":
                if seen >= target:
                    return index
                last = index
            seen += item.tokens
        return len(old) if old and old[-1].role == "assistant" else last

    def edit(self, items: Sequence[TranscriptItem], window: Window) -> list[Edit]:
        if window.tokens < self.trigger_fraction * window.max_tokens:
            return []
        old = history(items)
        cut = self.split(old)
        if cut == 0:
            return []
        replaced = tuple(i.id for i in old[:cut])
        summary = min(self.summary_tokens, sum(i.tokens for i in old[:cut]))
        return [Replace(replaced, summary, "summary"), *([Request(replaced, self.prompt_tokens)] if summary > 0 else [])]

    def managed_compaction(self, window_tokens: int) -> tuple[int, int]:
        """See `ClaudeCodePolicy.managed_compaction`."""
        return int(self.trigger_fraction * window_tokens), self.summary_tokens

    def __repr__(self) -> str:
        return (f"GeminiCliPolicy(trigger_fraction={self.trigger_fraction}, preserve_fraction={self.preserve_fraction}, "
                f"summary_tokens={self.summary_tokens}, prompt_tokens={self.prompt_tokens})")


def create_claude_code_policy(**options) -> ClaudeCodePolicy:
    """Claude Code's automatic compaction (see `ClaudeCodePolicy`)."""
    return ClaudeCodePolicy(**options)


def create_codex_policy(**options) -> CodexPolicy:
    """Codex's automatic compaction (see `CodexPolicy`)."""
    return CodexPolicy(**options)


def create_gemini_cli_policy(**options) -> GeminiCliPolicy:
    """Gemini CLI's chat compression (see `GeminiCliPolicy`)."""
    return GeminiCliPolicy(**options)
