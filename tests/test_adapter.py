"""One way in: the adapter's declared kind and its one forwarding proxy, the replay's settings object and the option types."""

import argparse
import dataclasses

import pytest

from ctxbench.sim.cli.commands._options import bytes_per_token_option, int_option, time_limit_option
from ctxbench.sim.engine.compiled import NATIVE_LRU, NATIVE_NONE, native_kernel
from ctxbench.sim.engine.replay import SessionTrace, replay_session
from ctxbench.sim.engine.settings import ReplaySettings
from ctxbench.sim.errors import InputError
from ctxbench.strategies.adapter import COMBINED, POLICY, STATEFUL, STRATEGY, adapt
from ctxbench.strategies.calls import CallLimit
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.registry import make, register, unregister
from ctxbench.traces.tokens import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN, TokenRatios


def _session() -> SessionTrace:
    n = 40
    return SessionTrace("s", turns=list(range(n)), ops=[0] * n, paths=[f"f{i % 7}.py" for i in range(n)],
                        sizes=[100 + 10 * (i % 7) for i in range(n)], ts_ms=list(range(0, 1000 * n, 1000)))


@pytest.mark.parametrize("spec, kind, stateful, method", [
    ("lru", STRATEGY, False, "evict"), ("fifo", STATEFUL, True, "evict"), ("claude-code", POLICY, False, "edit"),
    ("lru+compaction", COMBINED, False, "evict"), ("fifo+codex", COMBINED, True, "evict")])
def test_each_spec_states_its_kind_statefulness_and_call(spec, kind, stateful, method):
    adapter = adapt(spec)
    assert (adapter.kind, adapter.stateful, adapter.method, adapter.label) == (kind, stateful, method, spec)
    assert adapter.noun == ("policy" if kind == POLICY else "strategy")
    assert (adapter.hooks is adapter.target) == stateful
    assert (adapter.policy is not None) == (kind == COMBINED)
    assert adapt(adapter) is adapter


def test_a_function_is_a_strategy_and_an_object_keeps_its_repr_as_label():
    assert adapt(lambda state, budget: []).kind == STRATEGY
    lru = make("lru")
    assert adapt(lru).label == repr(lru) and adapt(lru).target is lru


def test_a_registered_policy_without_edit_is_refused():
    register("test-no-edit", lambda: make("lru"), kind="policy")
    try:
        with pytest.raises(StrategyLoadError, match="registered as a policy but has no edit"):
            adapt("test-no-edit")
    finally:
        unregister("test-no-edit")


def test_the_proxy_forwards_the_kinds_call_through_its_hook_and_keeps_the_results():
    seen = []

    def counting(call, *args):
        seen.append(len(args[0]))
        return call(*args)

    plain = replay_session(_session(), "lru", budget=None)
    counted = replay_session(_session(), adapt("lru").through(counting))
    assert len(seen) == 40 and counted.row["log_hash"] == plain.row["log_hash"]
    assert native_kernel(adapt("lru").through(counting))["native"] == NATIVE_NONE   # every call seen
    assert native_kernel(adapt("lru").limited(CallLimit(1000)))["native"] == NATIVE_LRU   # a limit is not observed


def test_the_limit_goes_through_hooks_and_the_others_do_not():
    through = []
    adapter = adapt("fifo").through(lambda call, *args: through.append(call) or call(*args), every=True)
    adapter.hooks.reset()
    assert len(through) == 1
    counted = adapt("fifo").through(lambda call, *args: call(*args))
    assert counted.hooks is counted.target


@pytest.mark.parametrize("changes, message", [
    ({"max_files": 0}, "max_files must be a positive integer"), ({"max_directories": True}, "max_directories"),
    ({"evict_timeout_ms": 86_400_001}, "evict_timeout_ms"), ({"cache_ttl_ms": -2}, "cache_ttl_ms must be -1"),
    ({"tokens": MAX_BYTES_PER_TOKEN * 2}, "is absurd"), ({"tokens": True}, "positive number"),
    ({"strict": 1}, "strict must be true or false")])
def test_the_settings_check_their_own_invariants(changes, message):
    with pytest.raises(InputError, match=message):
        ReplaySettings(**changes)


def test_the_settings_are_frozen_and_the_keywords_of_replay_session_change_them():
    settings = ReplaySettings(strict=False, cache_ttl_ms=-1, tokens=TokenRatios.uniform(1.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.strict = True
    given = replay_session(_session(), "lru", None, settings)
    keywords = replay_session(_session(), "lru", strict=False, cache_ttl_ms=-1, bytes_per_token=TokenRatios.uniform(1.0))
    assert given.row["log_hash"] == keywords.row["log_hash"]
    assert given.row["cost_input_tokens"] == keywords.row["cost_input_tokens"]
    assert given.row["cache_read_input_tokens"] == 0 < given.row["uncached_input_tokens"]   # no cache


def test_option_types_name_their_option_and_share_the_domain_range():
    ratio = bytes_per_token_option()
    assert ratio(str(MIN_BYTES_PER_TOKEN)) == MIN_BYTES_PER_TOKEN and ratio(str(MAX_BYTES_PER_TOKEN)) == MAX_BYTES_PER_TOKEN
    with pytest.raises(argparse.ArgumentTypeError, match=r"^--bytes-per-token 2e\+06 is absurd"):
        ratio("2e6")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^--max-files must be between 1 and 10, got 11"):
        int_option("--max-files", 1, 10)("11")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^--evict-timeout-ms must be a whole number"):
        time_limit_option()("1.5")
