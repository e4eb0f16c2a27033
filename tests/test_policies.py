"""The agents' policies, worked by hand on small transcripts, and through the transcript model."""

import pytest

from ctxbench.sim.engine.arm import resolve_arm
from ctxbench.sim.engine.rules import CALL, MESSAGE, OUTPUT, OVERHEAD, READ, ArmStream
from ctxbench.sim.engine.transcript import replay_transcript
from ctxbench.strategies.errors import StrategyInputError
from ctxbench.strategies.policies.compaction import ClaudeCodePolicy, CodexPolicy, GeminiCliPolicy
from ctxbench.strategies.policies.condensers import AmortizedForgetting, LlmSummarizing
from ctxbench.strategies.policies.masking import ClearToolUses, ObservationMasking
from ctxbench.strategies.policy import Append, Replace, Request, TranscriptItem, Window
from ctxbench.strategies.registry import make


def item(i, role, tokens=10, ref="", path=""):
    return TranscriptItem(str(i), role, "code", tokens, 0, path, ref)


TRANSCRIPT = [item(0, "overhead", 100), item(1, "user", 20), item(2, "call", 5),
              item(3, "result", 300, "a.py:0", "a.py"), item(4, "call", 5), item(5, "result", 50, path="tool://bash/1"),
              item(6, "assistant", 30), item(7, "call", 5), item(8, "result", 200, "b.py:0", "b.py"),
              item(9, "call", 5), item(10, "result", 400, "a.py:1", "a.py"), item(11, "user", 15)]
TOTAL = sum(i.tokens for i in TRANSCRIPT)


def test_claude_code_compacts_at_its_trigger_into_a_summary_and_recent_files():
    policy = ClaudeCodePolicy(trigger_tokens=TOTAL, summary_tokens=50, recent_files=5, file_tokens=350)
    assert policy.edit(TRANSCRIPT, Window(2000, TOTAL - 1, 3)) == []
    edits = policy.edit(TRANSCRIPT, Window(2000, TOTAL, 3))
    assert edits[0] == Replace(tuple(str(i) for i in range(1, 12)), 50, "summary")
    # a.py's newest revision (400 tokens) is over file_tokens: back as a path only; b.py whole
    assert edits[1:] == [Append("attached", 20, "a.py:1"), Append("attached", 200, "b.py:0"), Request(None, 0, True)]
    # before 2.1.85 its compaction request was the whole window, untrimmed
    assert ClaudeCodePolicy(trigger_tokens=TOTAL, overflow="fail").edit(TRANSCRIPT, Window(2000, TOTAL, 3))[-1] != \
        Request(None, 0, True)
    assert policy.admit(item(0, "result", 30_000, "x:0")) == 25_000 and policy.admit(item(0, "call", 30_000)) == 30_000


def test_codex_keeps_the_overhead_recent_user_messages_and_adds_a_summary():
    policy = CodexPolicy(user_tokens=20, summary_tokens=40)
    assert policy.edit(TRANSCRIPT, Window(2000, 1799, 3)) == []
    edits = policy.edit(TRANSCRIPT, Window(2000, 1800, 3))
    # user messages of 15 (newest) then 20 tokens: only the newest fits in 20
    assert edits == [Replace(tuple(str(i) for i in range(1, 11)), 0), Append("summary", 40), Request(None, 110, True)]
    assert policy.admit(item(0, "result", 12_000)) == 10_000


def test_gemini_cli_compresses_up_to_a_user_message_and_keeps_the_newest_part():
    policy = GeminiCliPolicy(summary_tokens=40)
    assert policy.edit(TRANSCRIPT, Window(2000, 999, 3)) == []
    # history 1,035 tokens: the first user message at or past 70% of them is item 11 (1,020 before it)
    replaced = tuple(str(i) for i in range(1, 11))
    assert policy.edit(TRANSCRIPT, Window(2000, 1000, 3)) == [Replace(replaced, 40), Request(replaced, 720)]
    # the task is the only user message and a result ends the history: nothing can be compressed
    assert policy.edit(TRANSCRIPT[:-1], Window(2000, 1500, 3)) == []
    # the model's own text ends it: everything is compressed
    ends_in_text = [*TRANSCRIPT[:-1], item(12, "assistant", 5)]
    everything = tuple(str(i) for i in (*range(1, 11), 12))
    assert policy.edit(ends_in_text, Window(2000, 1500, 3)) == [Replace(everything, 40), Request(everything, 720)]
    # a split point before 70%: the last one seen (item 6 here, as a user message)
    early = [item(i.id, "user", i.tokens) if i.id == "6" else i for i in TRANSCRIPT[:-1]]
    assert policy.edit(early, Window(2000, 1500, 3)) == [Replace(("1", "2", "3", "4", "5"), 40),
                                                         Request(("1", "2", "3", "4", "5"), 720)]


def test_observation_masking_keeps_the_last_n_and_the_first():
    policy = ObservationMasking(n=1, placeholder_tokens=3)
    assert policy.edit(TRANSCRIPT, Window(2000, TOTAL, 3)) == [Replace(("8",), 3, "placeholder"),
                                                                Replace(("5",), 3, "placeholder")]
    masked = [item(i.id, "placeholder", 3) if i.id in ("5", "8") else i for i in TRANSCRIPT]
    assert policy.edit(masked, Window(2000, TOTAL, 4)) == []   # nothing new to mask
    assert policy.edit(masked + [item(12, "result", 9)], Window(2000, TOTAL, 5)) == [
        Replace(("10",), 3, "placeholder")]


def test_clear_tool_uses_clears_all_but_the_last_tool_uses_past_its_trigger():
    policy = ClearToolUses(trigger_tokens=1000, keep=1, placeholder_tokens=2)
    assert policy.edit(TRANSCRIPT, Window(2000, 999, 3)) == []
    assert policy.edit(TRANSCRIPT, Window(2000, 1000, 3)) == [Replace((i,), 2, "placeholder") for i in ("8", "5", "3")]
    assert ClearToolUses(trigger_tokens=1000, keep=1, clear_at_least=600).edit(TRANSCRIPT, Window(2000, 1000, 3)) == []


def turn_item(i, role, tokens, turn):
    return TranscriptItem(str(i), role, "code", tokens, turn)


# The view of OpenHands' SDK: the system prompt 1 event, the task 1, then responses: turn 1 a call (2 events,
# its text in the action), turn 2 a batch of two calls (4), turns 3 and 4 a call each (2), turn 5 a reply (1)
VIEW = [turn_item("o", "overhead", 100, 0), turn_item("u", "user", 20, 0),
        turn_item("a1", "assistant", 5, 1), turn_item("c1", "call", 10, 1), turn_item("r1", "result", 300, 1),
        turn_item("c2", "call", 10, 2), turn_item("c3", "call", 10, 2), turn_item("r2", "result", 200, 2),
        turn_item("r3", "result", 40, 2), turn_item("c4", "call", 10, 3), turn_item("r4", "result", 30, 3),
        turn_item("c5", "call", 10, 4), turn_item("r5", "result", 400, 4), turn_item("a5", "assistant", 8, 5)]
VIEW_TOKENS = sum(i.tokens for i in VIEW)   # 1,153
TURN_IDS = {1: ("a1", "c1", "r1"), 2: ("c2", "c3", "r2", "r3"), 3: ("c4", "r4"), 4: ("c5", "r5"), 5: ("a5",)}


def forgotten_turns(*turns):
    return tuple(i for t in turns for i in TURN_IDS[t])


def test_openhands_counts_the_events_of_its_view():
    from ctxbench.strategies.policies.condensers import view_units
    assert [u.events for u in view_units(VIEW)] == [1, 1, 2, 4, 2, 2, 1]
    # 13 events > 12: keep the first 2 and a tail of 12 // 2 - 2 - 1 = 3 events; the end (event 10) is turn 4's
    # start. The summarization call: its 520-token prompt, and per event at most 125 tokens and 15 of framing
    edits = LlmSummarizing(max_size=12, keep_first=2, summary_tokens=25).edit(VIEW, Window(2000, VIEW_TOKENS, 3))
    assert edits == [Replace(forgotten_turns(1, 2, 3), 25, "summary"), Request((), 520 + 160 + 225 + 60)]
    # keep_first 3 falls inside turn 1's pair and the end (13 - (6 - 3 - 1) = 11) inside turn 4's: both cuts
    # move forward, to turn 2's start and turn 5's
    assert LlmSummarizing(max_size=12, keep_first=3, summary_tokens=25).edit(VIEW, Window(2000, VIEW_TOKENS, 3))[0] \
        == Replace(forgotten_turns(2, 3, 4), 25, "summary")
    assert LlmSummarizing(max_size=13, keep_first=2).edit(VIEW, Window(2000, VIEW_TOKENS, 3)) == []
    # more than a tenth of the view must go (minimum_progress)
    assert LlmSummarizing(max_size=12, keep_first=2, minimum_progress=0.7).edit(VIEW, Window(2000, VIEW_TOKENS, 3)) == []
    forgetting = AmortizedForgetting(max_size=12, keep_first=1)
    # a tail of 12 // 2 - 1 = 5 events: the end (event 8) is turn 3's start; the task goes, the overhead stays
    assert forgetting.edit(VIEW, Window(2000, VIEW_TOKENS, 3)) == [Replace(("u",) + forgotten_turns(1, 2), 0)]
    with pytest.raises(StrategyInputError, match="leaves no room"):
        LlmSummarizing(max_size=4, keep_first=2)


def test_openhands_condenses_a_view_larger_than_the_window_first():
    summarizing = LlmSummarizing(max_size=100, keep_first=2, summary_tokens=25)
    # 1,153 tokens in a 1,000-token window: lose more than 1,153 - 500 from turn 1 on: turns 1-4 (1,025)
    assert summarizing.edit(VIEW, Window(1000, VIEW_TOKENS, 3)) == [
        Replace(forgotten_turns(1, 2, 3, 4), 25, "summary"), Request((), 520 + 160 + 225 + 60 + 155)]
    # in 140 tokens even all the responses leave 145: the hard reset summarizes all the history
    edits = summarizing.edit(VIEW, Window(140, VIEW_TOKENS, 3))
    assert edits[0] == Replace(("u",) + forgotten_turns(1, 2, 3, 4, 5), 25, "summary")
    # max_tokens condenses before the window does
    assert LlmSummarizing(max_size=100, keep_first=2, max_tokens=1100).edit(VIEW, Window(2000, VIEW_TOKENS, 3))
    assert LlmSummarizing(max_size=100, keep_first=2).edit(VIEW, Window(2000, VIEW_TOKENS, 3)) == []
    # V0's request forgets by events alone: 13 events leave nothing to forget below a tail of 49
    assert AmortizedForgetting(max_size=100, keep_first=1).edit(VIEW, Window(1000, VIEW_TOKENS, 3)) == []
    # with max_size 20 its tail is 9 events: the task and turn 1 go
    assert AmortizedForgetting(max_size=20, keep_first=1).edit(VIEW, Window(1000, VIEW_TOKENS, 3)) == [
        Replace(("u",) + forgotten_turns(1), 0)]


@pytest.mark.parametrize("spec, message", [("claude-code?trigger_tokens=0", "trigger_tokens"),
                                           ("codex?trigger_fraction=1.5", "trigger_fraction"),
                                           ("observation-masking?n=-1", "n must be"),
                                           ("clear-tool-uses?keep=x", "keep must be")])
def test_options_are_checked(spec, message):
    with pytest.raises(Exception, match=message):
        make(spec)


def session_stream():
    """Overhead, a user message, then 6 turns each with a call and a result (reads of a and b, outputs)."""
    ops, paths, sizes, turns = [OVERHEAD, MESSAGE], ["overhead://system", "msg://user/0"], [1000, 100], [0, 0]
    for t, (op, path, size) in enumerate([(READ, "a", 3000), (OUTPUT, "tool://bash/1", 500), (READ, "b", 2000),
                                          (OUTPUT, "tool://bash/2", 800), (READ, "a", 3000), (READ, "b", 2000)]):
        ops += [CALL, op]
        paths += [f"call://t/{t}", path]
        sizes += [50, size]
        turns += [t, t]
    return ArmStream.from_turns(ops, paths, sizes, [t * 1000 for t in turns], turns)


def test_masking_in_the_transcript_model_refetches_what_it_masked():
    stream = session_stream()
    resolved = resolve_arm(stream, compiled=False)
    kept = replay_transcript(stream, resolved, make("observation-masking?n=1&placeholder_tokens=10"), 10**6, 1.0)
    log = kept.log
    # a is the first result (never masked): its re-read hits; b was masked: re-fetched (2000 bytes)
    assert log.capacity.tolist() == [0, 0, 0, 0, 0, 1] and log.capacity_bytes.sum() == 2000
    assert log.hits.tolist() == [0, 0, 0, 0, 1, 0]
    whole = replay_transcript(stream, resolved, make("observation-masking?n=100"), 10**6, 1.0).log
    assert whole.capacity.sum() == 0 and whole.hits.sum() == 2   # nothing masked: both re-reads hit
    assert log.turn_bytes[-1] < whole.turn_bytes[-1]


def test_compaction_in_the_transcript_model_counts_and_shrinks_the_window():
    stream = session_stream()
    resolved = resolve_arm(stream, compiled=False)
    policy = make("claude-code?trigger_tokens=5000&summary_tokens=100&file_tokens=2500")
    log = replay_transcript(stream, resolved, policy, 10**6, 1.0).log
    window = (log.occupancy_bytes + log.pinned_bytes).tolist()
    assert log.compactions.sum() >= 1 and max(window) < 5000 + 3000   # compacted right after crossing 5000
    first = log.compactions.tolist().index(1)
    assert log.turn_bytes[first] >= 5000 and window[first] < log.turn_bytes[first]
    assert log.cache_read_bytes[first] <= 1000   # after a compaction only the overhead is cached


# ----- the summarization call a compaction makes first, in both engines -----------------------------------

from engine_paths import PATHS, engine_options  # noqa: E402
from ctxbench.sim.engine.settings import ReplaySettings  # noqa: E402

SUMMARY_FIELDS = ("summary_calls", "summary_prompt_bytes", "summary_cache_read_bytes", "summary_output_bytes")


def compacting_stream(late: int = 0) -> ArmStream:
    """Overhead 1,000 and a user message 100, then four turns of a tool call (50) and a result: a 3,000, an output
    500, b 2,000, a again; the third turn ``late`` ms after the second."""
    ops, paths, sizes, turns, ts = [OVERHEAD, MESSAGE], ["overhead://system", "msg://user/0"], [1000, 100], [0, 0], [0, 0]
    for t, (op, path, size) in enumerate([(READ, "a", 3000), (OUTPUT, "tool://bash/1", 500), (READ, "b", 2000),
                                          (READ, "a", 3000)]):
        ops += [CALL, op]
        paths += [f"call://t/{t}", path]
        sizes += [50, size]
        turns += [t, t]
        ts += [t * 1000 + (late if t >= 2 else 0)] * 2
    return ArmStream.from_turns(ops, paths, sizes, ts, turns)


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("late, ttl, reads", [
    (0, 300_000, [0, 4150, 1000, 1100]),      # the summarization call reads the previous prompt, 4,700
    (400_000, 300_000, [0, 4150, 1000, 1100]),  # past the lifetime it reads nothing, then writes the overhead
    (0, -1, [0, 0, 0, 0])])                   # no cache
def test_a_compaction_first_makes_a_summarization_call_on_the_window_before_it(compiled, late, ttl, reads):
    stream = compacting_stream(late)
    policy = make("claude-code?trigger_tokens=6000&summary_tokens=100&recent_files=0")
    log = replay_transcript(stream, resolve_arm(stream, compiled=compiled), policy, 10**6, 1.0,
                            ReplaySettings(cache_ttl_ms=ttl), compiled=compiled).log
    # windows 4,150, 4,700, 6,750 (>= 6,000: all but the overhead become a 100-token summary), then 1,100 + 3,050
    assert log.window_bytes.tolist() == [4150, 4700, 6750, 4150] and log.compactions.tolist() == [0, 0, 1, 0]
    summary_read = 4700 if ttl > 0 and not late else 0
    assert [log.columns[f].tolist() for f in SUMMARY_FIELDS] == [[0, 0, 1, 0], [0, 0, 6750, 0],
                                                                 [0, 0, summary_read, 0], [0, 0, 100, 0]]
    # the turn end's own call reads the summarization call's prompt up to the summary: the overhead
    assert log.cache_read_bytes.tolist() == reads
    row = summarise(log, 10**6, 1.0, cache_ttl_ms=ttl)
    prompts, read = 4150 + 4700 + 1100 + 4150 + 6750, sum(reads) + summary_read
    assert row["input_tokens"] == prompts and row["summary_input_tokens"] == 6750 and row["summary_calls"] == 1
    assert row["summary_output_tokens"] == 100 and row["input_tokens_per_call"] == prompts / 5
    assert row["peak_input_tokens"] == 6750
    cost = prompts if ttl < 0 else 0.1 * read + 1.25 * (prompts - read)
    assert row["cost_input_tokens"] == pytest.approx(cost) and row["cost_tokens"] == pytest.approx(cost + 5 * 100)


@pytest.mark.parametrize("compiled", PATHS)
def test_an_appended_summary_is_written_by_a_summarization_call_too(compiled):
    stream = compacting_stream()
    log = replay_transcript(stream, resolve_arm(stream, compiled=compiled),
                            make("codex?trigger_fraction=0.6&summary_tokens=40"), 10_000, 1.0, compiled=compiled).log
    # at 6,750 of 10,000 (>= 6,000) codex drops all but the overhead and the user message and appends a summary,
    # written by a call on the whole window and its 110 tokens of instructions
    assert [log.columns[f].tolist() for f in SUMMARY_FIELDS] == [[0, 0, 1, 0], [0, 0, 6860, 0], [0, 0, 4700, 0],
                                                                 [0, 0, 40, 0]]
    assert log.cache_read_bytes.tolist() == [0, 4150, 1100, 1140]   # up to the first item dropped


@pytest.mark.parametrize("spec", ["observation-masking?n=1", "clear-tool-uses?trigger_tokens=1000&keep=1",
                                  "amortized-forgetting?max_size=4&keep_first=1"])
def test_masking_and_forgetting_make_no_summarization_call(spec):
    stream = compacting_stream()
    for compiled in PATHS:
        log = replay_transcript(stream, resolve_arm(stream, compiled=compiled), make(spec), 10**6, 1.0,
                                compiled=compiled).log
        assert log.evictions.sum() > 0   # the policy did edit the window
        assert not any(log.columns[f].any() for f in SUMMARY_FIELDS)


# ----- the managed context's compaction (STRATEGY+POLICY), in both engines -------------------------------

from engine_paths import compiled_or_not, replay_turns  # noqa: E402
from ctxbench.sim.engine.measures import summarise  # noqa: E402
from ctxbench.sim.engine.rules import Compaction  # noqa: E402
from ctxbench.strategies.contract import ContextBudget  # noqa: E402

COMPACTED_TURNS = [[("overhead", "overhead://system", 100, 0), ("message", "msg://user/0", 120, 0),
                    ("read", "a", 200, 0)],
                   [("message", "msg://assistant/1", 100, 1000)],
                   [("read", "b", 50, 2000)]]
CONVERSATION = [0, 1, 0, 1, 0]   # the messages


@compiled_or_not
def test_a_managed_conversation_is_compacted_once_the_pinned_content_reaches_the_trigger(compiled):
    log = replay_turns(make("lru?max_entries=none"), ContextBudget(1000), COMPACTED_TURNS, compiled=compiled,
                       compaction=Compaction(300, 50, CONVERSATION)).log
    # 100 + 120 + 100 = 320 pinned >= 300: both messages become one 50-byte summary at the end
    assert log.compactions.tolist() == [0, 1, 0]
    assert log.pinned_bytes.tolist() == [220, 150, 150]
    assert log.window_bytes.tolist() == [420, 520, 400]
    # call 1 reads only the overhead (the first message left); call 2 all of call 1's prompt
    assert log.cache_read_bytes.tolist() == [0, 100, 350]
    # before call 1, the summarization call: its prompt the window before compaction (520), of which call 0's
    # prompt (420) is cached; it writes the 50-byte summary
    assert [log.columns[f].tolist() for f in SUMMARY_FIELDS] == [[0, 1, 0], [0, 520, 0], [0, 420, 0], [0, 50, 0]]


@compiled_or_not
def test_a_managed_summarization_call_past_the_cache_lifetime_or_without_a_cache(compiled):
    late = [COMPACTED_TURNS[0], [("message", "msg://assistant/1", 100, 400_000)], [("read", "b", 50, 401_000)]]
    for turns, ttl, summary_read, reads in ((late, 300_000, 0, [0, 100, 350]), (COMPACTED_TURNS, -1, 0, [0, 0, 0])):
        log = replay_turns(make("lru?max_entries=none"), ContextBudget(1000), turns, compiled=compiled,
                           compaction=Compaction(300, 50, CONVERSATION), cache_ttl_ms=ttl).log
        assert log.summary_cache_read_bytes.tolist() == [0, summary_read, 0]
        assert log.summary_prompt_bytes.tolist() == [0, 520, 0] and log.cache_read_bytes.tolist() == reads
    none = replay_turns(make("lru?max_entries=none"), ContextBudget(1000), COMPACTED_TURNS, compiled=compiled,
                        compaction=Compaction(300, 0, CONVERSATION)).log
    assert none.compactions.tolist() == [0, 1, 0] and not none.summary_calls.any()   # no summary: no call


@compiled_or_not
def test_no_compaction_without_a_trigger_or_when_it_would_not_shrink(compiled):
    plain = replay_turns(make("lru?max_entries=none"), ContextBudget(1000), COMPACTED_TURNS, compiled=compiled).log
    assert plain.compactions.tolist() == [0, 0, 0] and plain.pinned_bytes.tolist() == [220, 320, 320]
    big_summary = replay_turns(make("lru?max_entries=none"), ContextBudget(1000), COMPACTED_TURNS,
                               compiled=compiled, compaction=Compaction(300, 220, CONVERSATION)).log
    assert big_summary.compactions.tolist() == [0, 0, 0]   # 220 of conversation is no more than the summary


def test_cost_counts_reads_writes_and_the_cache_lifetime():
    log = replay_turns(make("lru?max_entries=none"), ContextBudget(1000), COMPACTED_TURNS, compiled=False,
                       compaction=Compaction(300, 50, CONVERSATION)).log
    # prompts 420, 520 (the summarization call), 350, 400; read 0, 420, 100, 350; written the rest: 420, 100, 250, 50
    five = summarise(log, 1000, 1.0)
    assert five["input_tokens"] == 1690 and five["cache_read_input_tokens"] == 870
    assert five["cache_write_input_tokens"] == 820 and five["uncached_input_tokens"] == 0
    assert five["cost_input_tokens"] == pytest.approx(0.1 * 870 + 1.25 * 820)
    assert five["cost_tokens"] == pytest.approx(0.1 * 870 + 1.25 * 820 + 5 * 50)   # the summary's output at 5
    assert summarise(log, 1000, 1.0, cache_ttl_ms=3_600_000)["cost_input_tokens"] == pytest.approx(87 + 2 * 820)
    off = summarise(log, 1000, 1.0, cache_ttl_ms=-1)
    assert off["cost_input_tokens"] == off["uncached_input_tokens"] == 1690 and off["cache_write_input_tokens"] == 0
    assert off["cost_tokens"] == 1690 + 5 * 50
    assert five["compactions"] == five["summary_calls"] == 1 and five["peak_window_tokens"] == 520
    assert five["peak_input_tokens"] == 520 and five["input_tokens_per_call"] == 1690 / 4


def test_strategy_plus_policy_compacts_the_managed_conversation_of_a_session():
    from ctxbench.sim.engine.replay import SessionTrace, budget_for_tokens, replay_session
    from ctxbench.traces.schema import OPS

    turns, ops, paths, sizes = [], [], [], []
    for t in range(40):   # a growing conversation, a file read now and then
        for op, path, size in (("message", f"msg://assistant/{t}", 9_000), ("read", f"f{t % 3}.py", 2_000)):
            turns.append(t), ops.append(OPS.index(op)), paths.append(path), sizes.append(size)
    st = SessionTrace("s", turns, ops, paths, sizes, [t * 1000 for t in turns])
    budget = budget_for_tokens(100_000, 1.0)
    plain = replay_session(st, "lru", budget, bytes_per_token=1.0).row
    compacted = replay_session(st, "lru+compaction", budget, bytes_per_token=1.0).row
    assert plain["compactions"] == 0 and plain["over_window_calls"] > 0 and plain["feasible"] is False
    # Claude Code's rule at a 100K window: compact at 100K - 16.5K of pinned content, into 4,000 tokens
    assert compacted["compactions"] >= 3 and compacted["over_window_calls"] == 0 and compacted["feasible"] is True
    assert compacted["model"] == plain["model"] == "managed" and compacted["strategy"] == "lru+compaction"


# ----- the transcript model, worked by hand -------------------------------------------------------------

class Nothing:
    def edit(self, items, window):
        return []


def transcript(turns, policy, max_bytes=10**6, **options):
    stream = ArmStream("main", [], [], [], [])
    for number, events in enumerate(turns):
        for op, path, size, ts in events:
            stream.ops.append({"read": READ, "output": OUTPUT, "message": MESSAGE, "call": CALL,
                               "overhead": OVERHEAD, "edit": 1, "write": 2}[op])
            stream.paths.append(path)
            stream.sizes.append(size)
            stream.ts_ms.append(ts)
        stream.end_turn(len(stream.ops), number, events[-1][3])
    settings, options = engine_options(options)
    return replay_transcript(stream, resolve_arm(stream, compiled=False), policy, max_bytes, 1.0, settings, **options)


def test_a_re_read_adds_a_copy_and_hits():
    log = transcript([[("read", "a", 100, 0)], [("read", "a", 100, 1)]], Nothing()).log
    assert log.hits.tolist() == [0, 1] and log.window_bytes.tolist() == [100, 200]
    assert log.entries.tolist() == [1, 2] and log.cache_read_bytes.tolist() == [0, 100]


def test_an_edit_adds_its_confirmation_and_an_overwrite_the_file():
    log = transcript([[("write", "a", 900, 0)], [("edit", "a", 950, 1)], [("write", "a", 1000, 2)]], Nothing(),
                     confirmation=7).log
    # a new file: the confirmation; an edit: the confirmation; a write over a: the file
    assert log.window_bytes.tolist() == [7, 14, 1014]


def test_masking_ends_the_cached_prefix_at_the_masked_result():
    turns = [[("overhead", "o", 50, 0), ("read", "a", 100, 0)], [("read", "b", 200, 1)], [("read", "c", 300, 2)]]
    log = transcript(turns, make("observation-masking?n=1&placeholder_tokens=5")).log
    # call 1 masks nothing (a is the first result); call 2 masks b: the prefix ends at b's place
    assert log.evictions.tolist() == [0, 0, 1]
    assert log.cache_read_bytes.tolist() == [0, 150, 150]
    assert log.window_bytes.tolist() == [150, 350, 650] and (log.occupancy_bytes + log.pinned_bytes)[-1] == 455


def test_a_path_only_attachment_does_not_hold_the_file():
    policy = make("claude-code?trigger_tokens=300&file_tokens=100&path_tokens=2&summary_tokens=10")
    turns = [[("read", "big", 400, 0)], [("read", "big", 400, 1)]]
    log = transcript(turns, policy).log
    # compacted at call 0: big (400 > file_tokens) comes back as its path only, so its re-read is re-fetched
    assert log.compactions.tolist()[0] == 1 and log.capacity.tolist() == [0, 1]
    small = transcript(turns, make("claude-code?trigger_tokens=300&file_tokens=500&summary_tokens=10")).log
    assert small.capacity.tolist() == [0, 0] and small.hits.tolist() == [0, 1]


@pytest.mark.parametrize("broken, message", [("Grows", "more than it removes"), ("Unknown", "not in the transcript"),
                                             ("ReplacesOverhead", "the overhead"),
                                             ("AttachesUnseen", "no earlier item held"), ("Raises", "raised"),
                                             ("Exits", "SystemExit"), ("BadAnswer", "not a list or tuple")])
def test_a_policy_that_breaks_the_contract_is_a_violation(broken, message):
    import broken_policies
    from ctxbench.sim.errors import ContractViolation

    turns = [[("overhead", "o", 50, 0), ("read", "a", 100, 0)], [("read", "b", 100, 1)]]
    with pytest.raises(ContractViolation, match=message):
        transcript(turns, getattr(broken_policies, broken)(), session="s")
    lenient = transcript(turns, getattr(broken_policies, broken)(), strict=False)
    assert lenient.log.violations.sum() >= 1 and message in lenient.violation_messages[0]
    assert lenient.log.window_bytes.tolist() == [150, 250]   # nothing of a bad answer is applied
