"""The agents' policies, worked by hand on small transcripts, and through the transcript model."""

import pytest

from sim.engine.arm import resolve_arm
from sim.engine.rules import CALL, MESSAGE, OUTPUT, OVERHEAD, READ, ArmStream
from sim.engine.transcript import replay_transcript
from strategies.errors import StrategyInputError
from strategies.policies.compaction import ClaudeCodePolicy, CodexPolicy
from strategies.policies.condensers import AmortizedForgetting, LlmSummarizing
from strategies.policies.masking import ClearToolUses, ObservationMasking
from strategies.policy import Append, Replace, TranscriptItem, Window
from strategies.registry import make


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
    assert edits[1:] == [Append("attached", 20, "a.py:1"), Append("attached", 200, "b.py:0")]
    assert policy.admit(item(0, "result", 30_000, "x:0")) == 25_000 and policy.admit(item(0, "call", 30_000)) == 30_000


def test_codex_keeps_the_overhead_recent_user_messages_and_adds_a_summary():
    policy = CodexPolicy(user_tokens=20, summary_tokens=40)
    assert policy.edit(TRANSCRIPT, Window(2000, 1799, 3)) == []
    edits = policy.edit(TRANSCRIPT, Window(2000, 1800, 3))
    # user messages of 15 (newest) then 20 tokens: only the newest fits in 20
    assert edits == [Replace(tuple(str(i) for i in range(1, 11)), 0), Append("summary", 40)]
    assert policy.admit(item(0, "result", 12_000)) == 10_000


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


def test_openhands_condensers_count_events():
    events = TRANSCRIPT[1:]   # 11 events after the overhead
    summarizing = LlmSummarizing(max_size=10, keep_first=2, summary_tokens=25)
    # more than 10 events: keep the first 2 and the last 10 // 2 - 2 - 1 = 2, summarise the rest
    assert summarizing.edit(TRANSCRIPT, Window(2000, TOTAL, 3)) == [
        Replace(tuple(e.id for e in events[2:-2]), 25, "summary")]
    assert LlmSummarizing(max_size=11, keep_first=2).edit(TRANSCRIPT, Window(2000, TOTAL, 3)) == []
    forgetting = AmortizedForgetting(max_size=10, keep_first=1)
    assert forgetting.edit(TRANSCRIPT, Window(2000, TOTAL, 3)) == [Replace(tuple(e.id for e in events[1:-4]), 0)]
    with pytest.raises(StrategyInputError, match="leaves no room"):
        LlmSummarizing(max_size=4, keep_first=2)


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
