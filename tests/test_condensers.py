"""OpenHands' view events as the condensers count them: what a response of tool calls counts for, whatever
result items its tools added, and condensations that never split a response (properties)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbench.strategies.policies.condensers import LlmSummarizing, view_units
from ctxbench.strategies.policy import Replace, TranscriptItem, Window

OVERHEAD = TranscriptItem("sys", "overhead", "overhead", 100, 0)
TASK = TranscriptItem("u", "user", "prose", 20, 0)


def session(turns, tokens=10):
    """The overhead, a user message, then one LLM response per entry of ``turns``: that many tool calls, each
    with one result, after the assistant's text; 0 for a reply with no call."""
    items = [OVERHEAD, TASK]
    for t, calls in enumerate(turns, start=1):
        items.append(TranscriptItem(f"a{t}", "assistant", "prose", tokens, t))
        for c in range(calls):
            items += [TranscriptItem(f"c{t}.{c}", "call", "json", tokens, t),
                      TranscriptItem(f"r{t}.{c}", "result", "output", tokens, t)]
    return items


def test_a_response_of_k_calls_is_2k_events_and_a_reply_one():
    assert [u.events for u in view_units(session([1, 3, 0, 2]))] == [1, 1, 2, 6, 1, 4]


def test_the_result_items_of_one_call_are_one_observation():
    # an edit's confirmation and its (here empty) output are two result items of one tool call
    items = [OVERHEAD, TASK, TranscriptItem("c", "call", "json", 50, 1), TranscriptItem("r", "result", "output", 8, 1),
             TranscriptItem("e", "result", "output", 0, 1)]
    assert [u.events for u in view_units(items)] == [1, 1, 2]


def test_a_call_without_a_result_still_has_its_observation_and_a_result_without_a_call_its_action():
    no_result = [OVERHEAD, TASK, TranscriptItem("c1", "call", "json", 5, 1), TranscriptItem("r1", "result", "code", 9, 1),
                 TranscriptItem("c2", "call", "json", 5, 1)]
    assert [u.events for u in view_units(no_result)] == [1, 1, 4]
    no_call = [OVERHEAD, TranscriptItem("r", "result", "output", 5, 1), TranscriptItem("s", "result", "output", 5, 2)]
    assert [u.events for u in view_units(no_call)] == [1, 2, 2]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(10, 40), st.integers(0, 4))
def test_a_condensation_forgets_whole_responses_and_keeps_at_most_its_tail(turns, max_size, keep_first):
    items = session(turns)
    units = view_units(items)
    total = 2 + sum(2 * k if k else 1 for k in turns)
    assert sum(u.events for u in units) == total
    assert [i for u in units for i in u.items] == items   # every item once, in order
    edits = LlmSummarizing(max_size=max_size, keep_first=keep_first, summary_tokens=5).edit(
        items, Window(10**9, sum(i.tokens for i in items), len(turns)))
    if total <= max_size:
        assert edits == []
        return
    forgotten = set(next((e.ids for e in edits if type(e) is Replace), ()))
    assert "sys" not in forgotten
    for unit in units:   # a response goes whole or stays whole
        assert {i.id in forgotten for i in unit.items} in ({True}, {False})
    if forgotten:
        last = max(k for k, u in enumerate(units) if u.items[0].id in forgotten)
        kept_tail = sum(u.events for u in units[last + 1:])
        assert kept_tail <= max_size // 2 - keep_first - 1
        assert sum(u.events for u in units[:next(k for k, u in enumerate(units) if u.items[0].id in forgotten)]) \
            >= keep_first
