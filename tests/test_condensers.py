"""OpenHands' condensers counted in the SDK's View events: hand-built sessions, the window's edge, and the
bundled V1 conversations' real condensation points."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbench.sim.analysis.compaction_points import compaction_points
from ctxbench.strategies.policies.condensers import (EVENT_FRAME_CHARS, PREVIEW_CHARS, TEMPLATE_CHARS,
                                                     AmortizedForgetting, LlmSummarizing, manipulation_indices,
                                                     summary_prompt_tokens, view_events)
from ctxbench.strategies.policy import Replace, Request, TranscriptItem, Window
from ctxbench.traces.importers import import_paths
from ctxbench.traces.tokens import DEFAULT_RATIOS
from real_data import REAL_DATA

BIG = 10**9


def session(turns, text=True, tokens=10):
    """An overhead, a user message, then one LLM response per entry of ``turns``: that many tool calls
    (each with one result; the first call's response starts with the assistant's text), 0 for a reply."""
    items = [TranscriptItem("sys", "overhead", "overhead", 100, 0), TranscriptItem("u", "user", "prose", 20, 0)]
    for t, calls in enumerate(turns, start=1):
        if text or not calls:
            items.append(TranscriptItem(f"a{t}", "assistant", "prose", tokens, t))
        for c in range(calls):
            items.append(TranscriptItem(f"c{t}.{c}", "call", "json", tokens, t))
            items.append(TranscriptItem(f"r{t}.{c}", "result", "output", tokens, t))
    return items


def window(items, max_tokens=BIG, turn=1):
    return Window(max_tokens, sum(i.tokens for i in items), turn)


def test_a_turn_of_k_calls_is_2k_events_and_a_reply_one():
    items = session([1, 3, 0, 2])
    kinds = [e.kind for e in view_events(items)]
    assert kinds == ["system", "message"] + ["action", "observation"] + ["action", "observation"] * 3 \
        + ["message"] + ["action", "observation"] * 2
    first = view_events(items)[2]
    assert [i.id for i in first.items] == ["a1", "c1.0"]   # the response's text is the first action's thought


def test_results_of_one_call_are_one_observation_and_a_call_without_one_still_has_one():
    items = session([1])[:-1] + [TranscriptItem("r", "result", "output", 30, 1), TranscriptItem("e", "result", "output", 5, 1)]
    events = view_events(items)
    assert [e.kind for e in events] == ["system", "message", "action", "observation"]
    assert [i.id for i in events[3].items] == ["r", "e"]
    bare = session([2])[:-1]   # the second call's result is missing
    assert [e.kind for e in view_events(bare)] == ["system", "message"] + ["action", "observation"] * 2
    assert view_events(bare)[-1].items == []


def test_results_without_calls_are_an_action_and_an_observation():
    items = [TranscriptItem("sys", "overhead", "overhead", 100, 0), TranscriptItem("r", "result", "output", 5, 1)]
    assert [e.kind for e in view_events(items)] == ["system", "action", "observation"]


def test_manipulation_indices_never_part_a_response():
    events = view_events(session([1, 2, 0]))
    # system 0, user 1, response 1: 2-3, response 2: 4-7, the reply 8
    assert manipulation_indices(events) == [0, 1, 2, 4, 8, 9]


def test_condenses_once_there_are_more_than_max_size_events():
    policy = LlmSummarizing(max_size=10, keep_first=2, summary_tokens=25)
    four = session([1] * 4)   # 2 + 8 = 10 events: not more than 10
    assert policy.edit(four, window(four)) == []
    five = session([1] * 5)   # 12 events: keep 2 and the last 10 // 2 - 2 - 1 = 2 (response 5), forget 8
    edits = policy.edit(five, window(five))
    forgotten = [i.id for i in five[2:-3]]
    assert edits[1] == Replace(tuple(forgotten), 25, "summary")
    assert len(policy.forgotten(five, window(five))) == 8


def test_the_forgotten_range_snaps_forward_to_whole_responses():
    policy = LlmSummarizing(max_size=10, keep_first=3, summary_tokens=25)
    items = session([1, 1, 1, 3])   # 2 + 6 + 6 = 14 events; keep_first 3 ends inside response 1
    forgotten = policy.forgotten(items, window(items))
    # start 3 moves to 4 (response 2), the tail of 10 // 2 - 3 - 1 = 1 would split response 4 (events 8-13):
    # the end moves forward to 14, all of it forgotten
    assert [e.kind for e in forgotten] == ["action", "observation"] * 5
    assert forgotten[0].items[0].id == "a2"


def test_nothing_to_forget_is_no_condensation():
    items = session([1, 5])   # 14 events, responses at 2-3 and 4-13: the end moves from 12 to 14
    assert len(LlmSummarizing(max_size=10, keep_first=2).forgotten(items, window(items))) == 12
    one = session([6])   # 14 events, one response from 2 to 13: keep_first 3 moves the start to 14, the end
    assert LlmSummarizing(max_size=10, keep_first=3).forgotten(one, window(one)) == []
    assert LlmSummarizing(max_size=10, keep_first=3).edit(one, window(one)) == []


def test_over_the_window_it_condenses_hard_to_half_the_window():
    policy = LlmSummarizing(max_size=80, keep_first=2, summary_tokens=5)
    items = session([1] * 10, tokens=100)   # 22 events of 3,120 tokens (each response 300): under 80 events
    assert policy.edit(items, window(items, max_tokens=3_120)) == []
    # over a window of 3,000: reduce by 3,120 - 1,500 = 1,620 tokens; more than 1,620 from the third event is
    # reached at the sixth response's action (1,700), the end moves past its observation: 6 responses go
    forgotten = policy.forgotten(items, window(items, max_tokens=3_000))
    assert len(forgotten) == 12 and forgotten[0].items[0].id == "a1"
    assert sum(i.tokens for e in forgotten for i in e.items) == 1_800


def test_over_the_window_with_nothing_to_forget_it_summarises_everything():
    policy = LlmSummarizing(max_size=80, keep_first=4, summary_tokens=5)
    items = session([20], tokens=100)   # one response: no place to end a range after keep_first but the end
    events = view_events(items)
    assert policy.forgotten(items, window(items, max_tokens=1_000)) == events   # hard_context_reset
    assert policy.forgotten(items, window(items)) == []   # within the window: 42 events, none to condense
    edits = policy.edit(items, window(items, max_tokens=1_000))
    assert edits[1].ids[0] == "u" and edits[1].ids[-1] == items[-1].id


def test_the_summarization_prompt_is_the_template_and_previews():
    policy = LlmSummarizing(max_size=4, keep_first=1, summary_tokens=50)
    small = [TranscriptItem("sys", "overhead", "overhead", 100, 0), TranscriptItem("u", "user", "prose", 20, 0)] \
        + [TranscriptItem("m", "assistant", "prose", 30, 1), TranscriptItem("n", "user", "prose", 40, 2),
           TranscriptItem("o", "assistant", "prose", 7, 3)]
    edits = policy.edit(small, window(small))
    # 5 events, keep 1 and the last 4 // 2 - 1 - 1 = 0: forgets the user, the reply and the user (20 + 30 + 40)
    # plus the last reply (7): each under 500 characters, shown whole
    expected = round((TEMPLATE_CHARS + 4 * EVENT_FRAME_CHARS) / DEFAULT_RATIOS["prose"] + 20 + 30 + 40 + 7)
    assert edits[0] == Request((), expected) and edits[1] == Replace(("u", "m", "n", "o"), 50, "summary")


def test_previews_are_cut_to_500_characters_and_an_action_shows_its_thought_only():
    items = session([1], tokens=10_000)
    events = view_events(items)[2:]   # the action (text 10,000, call 10,000) and the observation (10,000)
    cut = PREVIEW_CHARS / DEFAULT_RATIOS["prose"] + PREVIEW_CHARS / DEFAULT_RATIOS["output"]
    assert summary_prompt_tokens(events) == round((TEMPLATE_CHARS + 2 * EVENT_FRAME_CHARS) / DEFAULT_RATIOS["prose"] + cut)
    no_thought = session([1], text=False, tokens=10_000)
    assert summary_prompt_tokens(view_events(no_thought)[2:]) == round(
        (TEMPLATE_CHARS + 2 * EVENT_FRAME_CHARS) / DEFAULT_RATIOS["prose"] + PREVIEW_CHARS / DEFAULT_RATIOS["output"])


def test_v0_forgets_down_to_half_and_halves_over_the_window():
    policy = AmortizedForgetting(max_size=10, keep_first=1)
    items = session([1] * 5)   # 12 events: keep 1 and the last 10 // 2 - 1 = 4
    assert policy.edit(items, window(items)) == [Replace(tuple(i.id for i in items[1:-6]), 0)]
    few = session([1] * 2)   # 6 events, over the window: keep 1 and the last 6 // 2 - 1 = 2
    assert policy.edit(few, window(few, max_tokens=10)) == [Replace(tuple(i.id for i in few[1:-3]), 0)]
    assert policy.edit(few, window(few)) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(10, 40), st.integers(0, 4))
def test_events_and_condensations_keep_responses_whole(turns, max_size, keep_first):
    items = session(turns)
    events = view_events(items)
    assert len(events) == 2 + sum(2 * k if k else 1 for k in turns)
    assert sorted(i.id for e in events for i in e.items) == sorted(i.id for i in items)
    policy = LlmSummarizing(max_size=max_size, keep_first=keep_first)
    forgotten = policy.forgotten(items, window(items))
    assert forgotten == [] if len(events) <= max_size else True
    units = {e.unit for e in forgotten}
    assert all(e in forgotten for e in events if e.unit in units)   # a response is forgotten whole or not at all
    if forgotten:
        assert len(events) - events.index(forgotten[-1]) - 1 <= max_size // 2 - keep_first - 1


@pytest.fixture(scope="module")
def openhands_v1():
    return import_paths("openhands", [REAL_DATA / "openhands-v1"])[0]


def test_the_bundled_v1_conversations_condense_when_the_agent_did(openhands_v1):
    rows = compaction_points(openhands_v1, "openhands-summarizing").set_index("session")
    condensed = rows[rows["compactions_real"].map(len) > 0]
    assert len(condensed) == 2 and condensed["compactions_real"].map(tuple).tolist() == [(41,), (41,)]
    assert condensed["calls_apart"].abs().max() <= 3   # 0 on both
    # the two that did not condense ran 38 and 40 calls (78 and 82 events): none before their last call
    for turns in rows[rows["compactions_real"].map(len) == 0]["compactions_sim"]:
        assert all(t >= 41 for t in turns)
