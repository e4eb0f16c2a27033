"""Prompt-cache accounting of the managed context, worked by hand: what each call reads from the cache."""

from engine_paths import compiled_or_not, replay_turns
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.registry import make


def cached(turns, budget, compiled, **options):
    log = replay_turns(make("lru?max_entries=none"), ContextBudget(budget), turns, compiled=compiled, **options).log
    return log.cache_read_bytes.tolist(), (log.occupancy_bytes + log.pinned_bytes).tolist()


@compiled_or_not
def test_a_call_reads_the_previous_prompt_when_nothing_left_it(compiled):
    turns = [[("read", "a", 60, 0)], [("read", "b", 40, 1000)], [("read", "a", 60, 2000)]]
    # prompts 60, 100, 100 (the hit on a does not move it); each call reads all of the previous one
    assert cached(turns, 1000, compiled) == ([0, 60, 100], [60, 100, 100])


@compiled_or_not
def test_an_eviction_ends_the_cached_prefix_where_the_entry_was(compiled):
    turns = [[("message", "msg://user/0", 30, 0), ("read", "a", 60, 0)], [("read", "b", 40, 1000)]]
    # window 100, 30 pinned: a and b (100) do not fit in 70, lru evicts a (it entered after the message)
    assert cached(turns, 100, compiled) == ([0, 30], [90, 70])


@compiled_or_not
def test_a_new_revision_leaves_its_place_and_enters_at_the_end(compiled):
    turns = [[("read", "a", 50, 0), ("read", "b", 20, 0)], [("edit", "a", 55, 1000)]]
    # the prompt was [a:0, b:0]; the edit removes a:0 (first in it) and appends a:1: nothing cached
    assert cached(turns, 1000, compiled) == ([0, 0], [70, 75])
    turns = [[("read", "a", 50, 0), ("read", "b", 20, 0)], [("edit", "b", 25, 1000)]]
    assert cached(turns, 1000, compiled) == ([0, 50], [70, 75])


@compiled_or_not
def test_nothing_is_cached_past_the_cache_lifetime(compiled):
    turns = [[("read", "a", 60, 0)], [("read", "b", 40, 300_001)], [("read", "c", 10, 300_002)]]
    assert cached(turns, 1000, compiled) == ([0, 0, 100], [60, 100, 110])
    assert cached(turns, 1000, compiled, cache_ttl_ms=3_600_000) == ([0, 60, 100], [60, 100, 110])
