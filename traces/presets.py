"""Named generator presets: frozen sets of documented knobs, each overridable by name.

The conversation knobs (``conversation`` and below) are fitted to the two full Claude Code sessions
bundled in ``data/real-sessions`` (claude-code) (258c7280, 8463c716: 363 tool calls in 295 model calls,
main windows only; sizes are characters, which are bytes for this mostly ASCII text):

- overhead: 25.8-25.9K tokens on the first call of every bundled session
  (`traces.tokens.DEFAULT_OVERHEAD_TOKENS`), in bytes at the ``overhead`` kind's ratio;
- user messages: the two sessions' 6 prompts have median 292, p90 448 characters; besides the
  opening prompt a user spoke about once every 70 tool calls (at tool calls 45, 57, 185 and 177),
  which is about once per task phase (``follow_up`` per phase);
- assistant text: 166 of the 295 model calls carry text, per call median 82, p90 176 (mean 106);
- thinking: 38 of the 295 calls carry thinking, per call median 306, p90 1,476, mean 1,329 (one
  block of 28,058); the lognormal keeps the median and the mean (its p90 is then 2,750), since
  the window's growth follows the mean;
- tool-call inputs (JSON with the tool's name): Read, Bash, Grep, Glob, Task and TaskOutput
  inputs, 285 calls, median 110, p90 209 (mean 156); an Edit adds its old and new strings (real
  bodies median 504, p90 2,295; here 2 x lines changed x 38 bytes, neither string longer than the
  file: median 456, p90 3,040 at the default edit sizes), a Write its whole content (real median 3,320, p90 9,989; here the written
  file's size);
- per tool call a further 75 tokens of framing that the transcript does not show (tool-use and
  tool-result blocks, hook reminders): the per-tool-call constant of the step regression of the
  real input tokens on the characters added between consecutive calls (both sessions pooled,
  one ratio for all non-thinking text), in bytes at the ``json`` kind's ratio.

The shape of a turn (the tool calls one call to the model answers; docs/design.md §2) is fitted to the
real sessions of ``real-sessions`` as imported (``ctxbench import``, then ``ctxbench stats``: tool calls
and tool bytes per turn, pooled over each format's sessions):

- tool calls per turn: Claude Code (5 sessions, 320 turns) median 1, p99 4, max 8, mean 1.51 (60 %
  of turns one call, 34 % two, 4 % three, 2 % four or more); Codex (253 turns) p99 4, max 4, mean
  1.44; mini-swe-agent p99 2, max 2, mean 1.19; OpenHands p99 2, max 2, mean 1.11;
- tool bytes per turn (file content and tool output entering the window): Claude Code median 971,
  p99 41.5K, max 78K (a WebFetch); Codex median 231, p99 30K, max 87K (an MCP listing);
  mini-swe-agent and OpenHands p99 11-31K, max 11-32K;
- the agents' caps on one result: Claude Code's Read returns at most 2,000 lines (``read_max``
  76,000 bytes at `traces.generate.BYTES_PER_LINE`; past 25,000 tokens, about as much code, a
  whole-file read returns its first page marked as a partial view) and its Bash output is cut at
  30,000 characters (``output_max``); Codex keeps 10,000 tokens of an output, head and tail.

So a read of a walk or search joins the read before it with chance ``parallel`` and any other read or
output that follows no edit or write of its segment (a hub read, a jump, a command, a search's output)
joins the call before it with chance ``parallel_calls`` (0.4 by default: a mean of 1.01-1.36 calls per
turn over the presets); a turn holds at most ``turn_calls_max`` = 8 calls and ``turn_bytes_max`` =
80,000 bytes of tool results (the real maximum, 78-87K); a result over its cap is cut to it and marked
``truncated``. On every preset, a few seeds, the p99 of calls per turn is 1-4 and no turn holds more
than 80K (tests/test_realism.py). Turns of files read at the cap keep the p99 of tool bytes per turn of
the read-heavy presets (file-walk, hub-and-spoke, refactor) at about 76K, above the real 30-42K: their
repository's sizes (p90 17K, up to 120K) are kept. The knobs' old values (``parallel=1
parallel_calls=0 turn_calls_max=0 turn_bytes_max=0 read_max=0``) give back the turns of earlier
versions: a file-walk turn of up to 28 reads and 456 KB on the default suite, single reads of 120 KB.

Every preset takes these figures but claude-code-like (its thinking, below). With them the whole
window of every preset's median session outgrows 200K tokens within its 250 tool calls, and the
pinned content of ``long`` alone passes 200K tokens after about 350-600 of its 3,000: a real
agent compacts there, and a replay counts those turns (``over_window_calls``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ctxbench.traces.tokens import DEFAULT_OVERHEAD_TOKENS

__all__ = ["Knobs", "Preset", "PresetError", "PRESETS", "DEFAULT_PRESET", "knobs", "knob_help", "parse_override"]

DEFAULT_PRESET = "mixed"
MIXES = ("mix_hub", "mix_walk", "mix_jump", "mix_edit_loop", "mix_edit_burst", "mix_search", "mix_command",
         "mix_write", "mix_subtask")


class PresetError(ValueError):
    """An unknown preset or knob, or a knob value out of range; the message names it."""


def _knob(default: Any, help: str) -> Any:
    """A knob's field: its default and its one-line meaning."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Knobs:
    """Every parameter of the session generator; a preset is one set of values.

    A session is a sequence of behaviour *segments* drawn with the ``mix_*`` weights: a hub
    revisit (one read of a hub file), a walk (consecutive files of one directory), a jump (one
    file of the working set, or anywhere with ``cold_jump``), an edit loop (edit, run the
    tests, maybe re-read, again), an edit burst (several edits of one file), a search (a
    grep/glob output, then reads), a command (a bash output), a write (a new file, then maybe a
    command) and a subtask (a large delegated-task output). The session is split into task
    *phases*; each phase has focus directories and a working set of files that reads and
    edits favour (Zipf-ranked), and that moves from phase to phase.
    """

    # session shape
    tool_calls: int = _knob(250, "tool calls (events) per session and arm")
    arms: int = _knob(1, "agents working in the session; arm names are main, arm1, ...")
    spanning_arms: int = _knob(0, "arms (main first) whose work spans every arm's directories, as a refactor does; "
                               "the others keep to their own share")
    think_ms_median: float = _knob(7000.0, "median time between tool turns, ms")
    think_ms_p90: float = _knob(40000.0, "90th percentile of the time between tool turns, ms")
    parallel: float = _knob(0.3, "chance a read of a walk or search joins the previous read's turn (1: every "
                            "one does, as before this knob was honoured)")
    parallel_calls: float = _knob(0.4, "chance a read or tool output outside an edit loop, edit burst or write "
                                  "joins the previous call's turn when that is one too, as parallel calls do (0: "
                                  "none, as before this knob)")
    turn_calls_max: int = _knob(8, "most tool calls in one turn: a longer run of joined calls starts a new "
                                "turn (0: no limit)")
    turn_bytes_max: int = _knob(80_000, "most bytes of tool results in one turn: a joined call that would pass "
                                "it starts a new turn (0: no limit)")
    # repository (ignored with a real checkout, except hub_files)
    repo_files: int = _knob(400, "files in the synthetic repository")
    hub_files: int = _knob(6, "hub files (router, config, schema, ...)")
    file_size_median: float = _knob(1700.0, "median file size, bytes")
    file_size_p90: float = _knob(17000.0, "90th percentile file size, bytes")
    file_size_max: int = _knob(120_000, "largest file, bytes")
    # behaviour mix: relative weights of segments
    mix_hub: float = _knob(0.5, "weight of hub revisits (one read of a hub)")
    mix_walk: float = _knob(0.25, "weight of file-by-file walks through a directory")
    mix_jump: float = _knob(0.4, "weight of jumps (one read from the working set or anywhere)")
    mix_edit_loop: float = _knob(1.5, "weight of edit loops (edit, test run, re-read, ...)")
    mix_edit_burst: float = _knob(1.0, "weight of edit bursts (consecutive edits of one file)")
    mix_search: float = _knob(2.5, "weight of searches (grep/glob output, then reads)")
    mix_command: float = _knob(5.5, "weight of commands (one bash output)")
    mix_write: float = _knob(0.6, "weight of new-file writes")
    mix_subtask: float = _knob(0.3, "weight of delegated subtasks (one large output)")
    # behaviour shapes
    walk_files: float = _knob(3.0, "mean files per walk")
    edit_rounds: float = _knob(2.0, "mean edit/test rounds per edit loop")
    loop_reread: float = _knob(0.3, "chance an edit loop re-reads its file between rounds")
    burst_edits: float = _knob(2.0, "mean edits per edit burst")
    search_reads: float = _knob(0.2, "mean reads after a search")
    hub_edit: float = _knob(0.1, "chance an edit loop or burst targets a hub")
    read_before_edit: bool = _knob(True, "read a file before its first edit in a session, as agents must")
    # task phases and working set
    phase_calls: float = _knob(80.0, "mean tool calls per task phase")
    working_set: int = _knob(7, "files in a phase's working set")
    focus_dirs: int = _knob(2, "focus directories per phase")
    locality: float = _knob(0.8, "chance a working-set file comes from the focus directories")
    carry_over: float = _knob(0.25, "chance a working-set slot keeps the previous phase's file")
    zipf: float = _knob(1.0, "Zipf exponent of file popularity within the working set")
    hub_zipf: float = _knob(1.2, "Zipf exponent of popularity among hubs")
    cold_jump: float = _knob(0.15, "chance a jump reads a random repository file")
    # sizes
    edit_lines_median: float = _knob(6.0, "median lines changed per edit")
    edit_lines_p90: float = _knob(40.0, "90th percentile of lines changed per edit")
    bash_median: float = _knob(220.0, "median bash output, bytes")
    bash_p90: float = _knob(1800.0, "90th percentile bash output, bytes")
    search_median: float = _knob(150.0, "median grep/glob output, bytes")
    search_p90: float = _knob(900.0, "90th percentile grep/glob output, bytes")
    task_median: float = _knob(8000.0, "median subtask output, bytes")
    task_p90: float = _knob(16000.0, "90th percentile subtask output, bytes")
    output_max: int = _knob(30_000, "largest tool output, bytes: a longer one is cut to it and marked "
                            "truncated (Claude Code's Bash: 30,000 characters)")
    read_max: int = _knob(76_000, "largest read of a file, bytes: a read or edit of a larger file shows its "
                          "first read_max bytes, marked truncated, and no write is larger (Claude Code's Read: "
                          "2,000 lines; 0: no cap)")
    # the rest of the window: conversation, tool-call inputs, fixed overhead (module docstring)
    conversation: bool = _knob(True, "put the whole window in the trace: the fixed overhead, user and assistant "
                               "messages, thinking and every tool call's input (false: files and tool outputs "
                               "only, exactly the events of earlier versions)")
    overhead_tokens: float = _knob(float(DEFAULT_OVERHEAD_TOKENS), "fixed overhead at each arm's start (system "
                                   "prompt, tool definitions, project instructions), tokens")
    follow_up: float = _knob(0.8, "chance a task phase after the first starts with a user message (each arm's "
                             "start always has one)")
    user_median: float = _knob(290.0, "median user message, bytes")
    user_p90: float = _knob(450.0, "90th percentile user message, bytes")
    text_chance: float = _knob(0.56, "chance a turn's assistant response has text")
    text_median: float = _knob(82.0, "median assistant text of a turn, bytes")
    text_p90: float = _knob(176.0, "90th percentile assistant text of a turn, bytes")
    thinking_chance: float = _knob(0.13, "chance a turn's assistant response has thinking")
    thinking_median: float = _knob(306.0, "median thinking of a turn, bytes")
    thinking_p90: float = _knob(2750.0, "90th percentile thinking of a turn, bytes (keeps the real mean)")
    call_median: float = _knob(110.0, "median tool-call input (JSON), bytes; an edit adds its old and new "
                               "strings, a write its content")
    call_p90: float = _knob(209.0, "90th percentile tool-call input (JSON), bytes")
    call_framing_tokens: float = _knob(75.0, "tokens per tool call the transcript does not show (block framing, "
                                       "hook reminders), added to each call's input")

    def __post_init__(self) -> None:
        """Every knob of its declared type, then within its range."""
        for knob in dataclasses.fields(self):
            value = getattr(self, knob.name)
            kind = bool if knob.type in (bool, "bool") else int if knob.type in (int, "int") else float
            if kind is bool:
                ok = isinstance(value, bool)
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            else:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok:
                raise PresetError(f"knob {knob.name}: expected {kind.__name__}, got {value!r}")
        self._check()

    def _check(self) -> None:
        """Every knob within its range; `PresetError` naming the first that is not."""
        def need(cond: bool, name: str, rule: str) -> None:
            """`PresetError` saying that knob ``name`` must be ``rule``, unless ``cond`` holds."""
            if not cond:
                raise PresetError(f"knob {name}={getattr(self, name)!r}: must be {rule}")

        for name in ("tool_calls", "arms", "repo_files", "working_set", "focus_dirs", "file_size_max", "output_max"):
            need(getattr(self, name) >= 1, name, ">= 1")
        need(self.tool_calls <= 100_000_000, "tool_calls", "<= 100,000,000")
        need(self.arms <= 64, "arms", "<= 64")
        for name in ("turn_calls_max", "turn_bytes_max", "read_max"):
            need(0 <= getattr(self, name) <= 2**50, name, "between 0 (no limit) and 2**50")
        need(0 <= self.spanning_arms <= self.arms, "spanning_arms", "between 0 and arms")
        need(self.repo_files >= 2 and self.repo_files <= 2_000_000, "repo_files", "between 2 and 2,000,000")
        need(0 <= self.hub_files <= self.repo_files // 2, "hub_files", "between 0 and repo_files/2")
        need(self.working_set <= 10_000, "working_set", "<= 10,000")
        need(self.focus_dirs <= 1000, "focus_dirs", "<= 1000")
        for name in ("parallel", "parallel_calls", "loop_reread", "hub_edit", "locality", "carry_over", "cold_jump",
                     "follow_up", "text_chance", "thinking_chance"):
            need(0.0 <= getattr(self, name) <= 1.0, name, "a probability in [0, 1]")
        for name in MIXES + ("zipf", "hub_zipf"):
            need(0.0 <= getattr(self, name) <= 1e6, name, ">= 0")
        need(sum(getattr(self, mix) for mix in MIXES) > 0, MIXES[0], "such that the mix_* weights sum to more than 0")
        for name in ("walk_files", "edit_rounds", "burst_edits", "phase_calls"):
            need(1.0 <= getattr(self, name) <= 1e9, name, ">= 1")
        need(0.0 <= self.search_reads <= 1000, "search_reads", "between 0 and 1000")
        need(0.0 <= self.overhead_tokens <= 1e7, "overhead_tokens", "between 0 and 10,000,000")
        need(0.0 <= self.call_framing_tokens <= 1e5, "call_framing_tokens", "between 0 and 100,000")
        for median, p90 in (("think_ms_median", "think_ms_p90"), ("file_size_median", "file_size_p90"),
                            ("edit_lines_median", "edit_lines_p90"), ("bash_median", "bash_p90"),
                            ("search_median", "search_p90"), ("task_median", "task_p90"),
                            ("user_median", "user_p90"), ("text_median", "text_p90"),
                            ("thinking_median", "thinking_p90"), ("call_median", "call_p90")):
            need(getattr(self, median) > 0, median, "> 0")
            need(getattr(self, p90) > getattr(self, median), p90, f"greater than {median}")
            need(getattr(self, p90) < 1e12, p90, "< 1e12")


@dataclass(frozen=True)
class Preset:
    """A named, described set of knob values."""

    name: str
    description: str
    knobs: Knobs


def _preset(name: str, description: str, **values: Any) -> Preset:
    """A preset of the default knobs changed by ``values``."""
    return Preset(name, description, Knobs(**values))


_CLAUDE_CODE_LIKE = """\
calibrated to five real Claude Code sessions (docs/design.md §2) at about 250 tool calls: 31-42 reads over
15-31 distinct files, 26-52% of reads re-reads, most-read file 4-8 reads, 22-67 edits, 67-120 bash
outputs totalling 45-93 KB, reads of median ~1.7 KB and p90 ~17 KB, 6-8 s median between calls; its whole
window reaches 167K tokens after about as many tool calls as the bundled sessions' (with session 8463's
thinking)"""

# claude-code-like's thinking is session 8463's (19 of its 143 model calls, per call median 381, mean 2,284
# characters; the lognormal keeps both, p90 4,310) rather than the two sessions pooled: its files and outputs
# (kept as they were, so that earlier results stay reproducible) hold fewer bytes per tool call than the
# bundled sessions' (reads 0.9K against 1.2K, outputs 0.5K against 0.7K by the compaction point), and with
# the heavier of the two sessions' thinking its whole window grows as theirs did (tests/test_realism.py).
_SESSION_8463_THINKING = {"thinking_median": 381.0, "thinking_p90": 4310.0}

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (
    _preset("mixed", "every behaviour in proportion (the knobs' defaults); lands in the real-session ranges "
                     "at 250 tool calls"),
    _preset("file-walk", "reads file after file through directories, few edits: scans defeat recency",
            mix_hub=0.4, mix_walk=4.0, mix_jump=0.6, mix_edit_loop=0.3, mix_edit_burst=0.3, mix_search=1.0,
            mix_command=1.5, mix_write=0.1, mix_subtask=0.0, walk_files=8.0, parallel=0.3, parallel_calls=0.3,
            phase_calls=50.0,
            working_set=12, repo_files=800),
    _preset("hub-and-spoke", "a few hub files revisited between short trips to other files",
            mix_hub=4.0, mix_walk=0.3, mix_jump=2.5, mix_edit_loop=0.6, mix_edit_burst=0.4, mix_search=1.0,
            mix_command=2.0, mix_write=0.1, mix_subtask=0.0, hub_files=5, hub_zipf=1.3, cold_jump=0.5,
            working_set=20, zipf=0.6, parallel_calls=0.3),
    _preset("debug-loop", "edit, run the tests, re-read, repeat, on a small working set",
            mix_hub=0.3, mix_walk=0.1, mix_jump=0.6, mix_edit_loop=4.0, mix_edit_burst=0.5, mix_search=0.8,
            mix_command=1.5, mix_write=0.05, mix_subtask=0.0, edit_rounds=4.0, loop_reread=0.7, working_set=4,
            phase_calls=120.0, bash_median=900.0, bash_p90=8000.0, zipf=1.4),
    _preset("refactor", "edits spread over many files across several directories, phases move fast",
            mix_hub=0.6, mix_walk=1.5, mix_jump=1.0, mix_edit_loop=0.6, mix_edit_burst=3.0, mix_search=1.5,
            mix_command=1.5, mix_write=0.4, mix_subtask=0.0, burst_edits=3.0, working_set=30, focus_dirs=4,
            phase_calls=40.0, carry_over=0.1, zipf=0.5, hub_edit=0.2),
    _preset("long", "a multi-hour session over a large repository that overflows a 200K-token window",
            tool_calls=3000, repo_files=3000, think_ms_median=5000.0, think_ms_p90=30000.0, mix_hub=0.8,
            mix_walk=1.0, mix_jump=1.2, mix_search=2.0, mix_command=4.0, walk_files=4.0, phase_calls=80.0,
            working_set=12, carry_over=0.15, cold_jump=0.35, parallel_calls=0.35),
    _preset("claude-code-like", _CLAUDE_CODE_LIKE,
            mix_walk=0.1, mix_search=3.6, mix_command=7.0, mix_write=0.8, working_set=9, carry_over=0.2,
            phase_calls=70.0, hub_zipf=1.5, cold_jump=0.2, bash_median=190.0, bash_p90=1600.0, parallel_calls=0.35,
            task_median=9000.0, task_p90=15000.0, **_SESSION_8463_THINKING),
)}


def _derived(name: str, base: str, description: str, **values: Any) -> Preset:
    """A preset of the knobs of preset ``base`` changed by ``values``."""
    return Preset(name, description, dataclasses.replace(PRESETS[base].knobs, **values))


# Parallel work: three arms, each in its own share of the directories unless a knob says otherwise.
PRESETS.update({preset.name: preset for preset in (
    _derived("parallel-disjoint", "mixed", "three arms in disjoint directories; they read the hubs and the odd "
                                           "file of another arm, but each file is changed by one arm only",
             arms=3, locality=1.0, hub_edit=0.0, cold_jump=0.05),
    _derived("parallel-hubs", "mixed", "three arms in disjoint directories that all edit the same three hub "
                                       "files (router, config, schema)",
             arms=3, locality=1.0, hub_files=3, mix_hub=1.0, hub_edit=0.5),
    _derived("parallel-refactor", "refactor", "three arms in a small package: main refactors across every "
                                              "arm's directories while the others edit their own",
             arms=3, spanning_arms=1, locality=1.0, repo_files=120, working_set=12, hub_edit=0.05),
)})


def knob_help() -> dict[str, str]:
    """Each knob's one-line meaning, in declaration order."""
    return {knob.name: knob.metadata["help"] for knob in dataclasses.fields(Knobs)}


def knobs(preset: str | Knobs = DEFAULT_PRESET, **overrides: Any) -> Knobs:
    """The knobs of ``preset`` with ``overrides`` applied; unknown names raise `PresetError`.

    >>> knobs("long", arms=2).arms
    2
    >>> knobs("mixed", bogus=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ctxbench.traces.presets.PresetError: unknown knob 'bogus'; knobs: tool_calls, arms, ...
    """
    if isinstance(preset, Knobs):
        base = preset
    elif preset in PRESETS:
        base = PRESETS[preset].knobs
    else:
        raise PresetError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    names = knob_help()
    for name in overrides:
        if name not in names:
            raise PresetError(f"unknown knob {name!r}; knobs: {', '.join(names)}")
    # ints are accepted where floats are expected
    fixed = {name: float(value) if isinstance(value, int) and not isinstance(value, bool) and
             isinstance(getattr(base, name), float) else value for name, value in overrides.items()}
    return dataclasses.replace(base, **fixed)


def parse_override(text: str) -> tuple[str, Any]:
    """``"knob=value"`` with the value converted to the knob's type.

    >>> parse_override("tool_calls=300"), parse_override("read_before_edit=no")
    (('tool_calls', 300), ('read_before_edit', False))
    """
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name:
        raise PresetError(f"expected knob=value, got {text!r}")
    default = getattr(Knobs(), name, None) if name in knob_help() else None
    if default is None:
        raise PresetError(f"unknown knob {name!r}; knobs: {', '.join(knob_help())}")
    try:
        if isinstance(default, bool):
            lowered = raw.lower()
            if lowered not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
                raise ValueError(raw)
            return name, lowered in ("true", "yes", "1", "on")
        if isinstance(default, int):
            value = float(raw.replace("_", ""))
            if value != int(value):
                raise ValueError(raw)
            return name, int(value)
        return name, float(raw.replace("_", ""))
    except (ValueError, OverflowError):
        raise PresetError(f"knob {name}: cannot read {raw!r} as {type(default).__name__}") from None
