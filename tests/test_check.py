"""The conformance checker catches each class of violation, passes the built-ins, and its CLI."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxbench.sim.cli import main
from strategy_contract import StrategyContract
from ctxbench.strategies import CheckReport, check_strategy
from ctxbench.strategies.check import KINDS, Request
from ctxbench.strategies.contract import ContextBudget, load_request
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.lru import create_lru_context_strategy
from ctxbench.strategies.registry import register, unregister
from ctxbench.strategies.stateful import StatefulContextStrategy

EXAMPLES = 30
_LRU = create_lru_context_strategy(max_entries=None)


def _lru(state, budget):
    """A correct answer to build the broken strategies on."""
    return list(_LRU.evict(state, budget))


# --- deliberately broken strategies, one per kind (importable as test_check:NAME) ------------

def returns_unknown_id(state, budget):
    return [*_lru(state, budget), "ghost.py:0"] if state else []


def returns_duplicate(state, budget):
    ids = _lru(state, budget)
    return ids + ids[:1]


def returns_non_string(state, budget):
    return [*_lru(state, budget), len(state)] if state else []


def raises_on_two(state, budget):
    if len(state) >= 2:
        raise RuntimeError("cannot cope with two entries")
    return _lru(state, budget)


def returns_a_set(state, budget):
    return set(_lru(state, budget))


def exits_on_one(state, budget):
    if state:
        sys.exit(0)
    return []


def sleeps_on_one(state, budget):
    if state:
        time.sleep(10)
    return []


class Alternating:
    """Hidden state: every other call evicts everything."""

    def __init__(self):
        self.calls = 0

    def evict(self, state, budget):
        self.calls += 1
        return [e.id for e in state] if self.calls % 2 else _lru(state, budget)


def reverses_its_input(state, budget):
    if isinstance(state, list):
        state.reverse()
    return _lru(state, budget)


def zeroes_a_size(state, budget):
    ids = _lru(state, budget)
    if state:
        object.__setattr__(state[0], "size_bytes", 0)
    return ids


def evicts_one_at_most(state, budget):
    return _lru(state, budget)[:1]


def ignores_max_entries(state, budget):
    return _lru(state, ContextBudget(budget.max_bytes))


def evicts_in_input_order(state, budget):
    total, out = sum(e.size_bytes for e in state), []
    for e in state:
        if total <= budget.max_bytes and (budget.max_entries is None or len(state) - len(out) <= budget.max_entries):
            break
        out.append(e.id)
        total -= e.size_bytes
    return out


def evicts_by_hash(state, budget):
    return sorted((e.id for e in state), key=hash)


class FreshEachReset(StatefulContextStrategy):
    """Stateful: correct on the first call after reset(), evicts everything afterwards."""

    def __init__(self):
        self.calls = 0

    def reset(self):
        self.calls = 0

    def evict(self, state, budget):
        self.calls += 1
        return _lru(state, budget) if self.calls == 1 else [e.id for e in state]


BROKEN = {
    "unknown-id": "test_check:returns_unknown_id",
    "duplicate": "test_check:returns_duplicate",
    "non-string": "test_check:returns_non_string",
    "raises": "test_check:raises_on_two",
    "bad-return": "test_check:returns_a_set",
    "leaves": "test_check:exits_on_one",
    "time-limit": "test_check:sleeps_on_one",
    "nondeterministic": "test_check:Alternating",
    "mutates-input": "test_check:reverses_its_input",
    "over-budget": "test_check:evicts_one_at_most",
    "over-entries": "test_check:ignores_max_entries",
    "order-dependent": "test_check:evicts_in_input_order",
    "hash-seed": "test_check:evicts_by_hash",
}


# Entries in the smallest state that shows each violation: the shrunk example must have as many.
# A duplicate needs two entries: [a, a] for a state of one is longer than the state (bad-return).
MINIMAL_ENTRIES = {"bad-return": 0, "unknown-id": 1, "duplicate": 2, "non-string": 1, "raises": 2,
                   "leaves": 1, "time-limit": 1, "nondeterministic": 1, "mutates-input": 2, "over-budget": 2,
                   "over-entries": 1, "order-dependent": 2, "hash-seed": 2}
TIME_LIMIT_MS = 20


@functools.cache
def report_of(spec: str, seed: int = 0) -> CheckReport:
    """Each broken strategy is checked once per test run; several tests read its report.

    The subprocess of the hash-seed check runs only for the strategy that needs it.
    """
    return check_strategy(spec, examples=EXAMPLES, latency=False, seed=seed,
                          hash_seed=spec == BROKEN["hash-seed"],
                          evict_timeout_ms=TIME_LIMIT_MS if spec == BROKEN["time-limit"] else None)


def test_every_kind_has_a_broken_strategy():
    assert set(BROKEN) == set(KINDS) == set(MINIMAL_ENTRIES)


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_checker_catches_each_kind_with_a_minimal_example(kind):
    report = report_of(BROKEN[kind])
    assert not report.ok
    failure = report.failure(kind)
    assert failure is not None, f"{kind} not caught; found {[f.kind for f in report.failures]}"
    state, budget = load_request(failure.example)  # a TypeScript-form request
    assert failure.message
    # Shrunk: the smallest state that can show each violation.
    assert len(state) == MINIMAL_ENTRIES[kind], (kind, failure.example)


# The contract-test mixin runs the checker's own checks: over a broken strategy, on the checker's minimal
# example of its kind, the mixin's test of that property fails with the checker's finding (raises and
# bad-return fail every test of the mixin).
MIXIN_TESTS = {
    "unknown-id": "test_ids_come_from_the_state", "duplicate": "test_no_duplicate_ids",
    "non-string": "test_ids_are_strings", "nondeterministic": "test_deterministic_across_calls_and_instances",
    "mutates-input": "test_input_untouched", "over-budget": "test_remaining_fits_budget_bytes_and_tighter_entry_cap",
    "over-entries": "test_remaining_fits_budget_bytes_and_tighter_entry_cap",
    "order-dependent": "test_order_independent", "raises": "test_no_duplicate_ids", "bad-return": "test_input_untouched",
}


@pytest.mark.parametrize("kind", sorted(MIXIN_TESTS))
def test_the_contract_mixin_fails_each_property_with_the_checkers_finding(kind):
    class Contract(StrategyContract):
        spec = BROKEN[kind]

    state, budget = load_request(report_of(BROKEN[kind]).failure(kind).example)
    req = Request(tuple(state), budget, tuple(reversed(range(len(state)))))   # reversed: a reordering to try
    test = getattr(Contract, MIXIN_TESTS[kind]).hypothesis.inner_test   # the test on one given request
    with pytest.raises(AssertionError, match=f"'{kind}': "):
        test(Contract(), req)


def test_the_contract_mixin_holds_a_strategy_to_its_own_entry_cap():
    class Contract(StrategyContract):
        spec, entry_cap = "lru", 1   # lru's own cap is 100: the mixin is told a tighter one

    with pytest.raises(AssertionError, match="entries remain > the strategy's entry cap 1"):
        Contract().test_remaining_fits_budget_bytes_and_tighter_entry_cap()


def test_hash_seed_example_really_differs_in_another_process():
    failure = report_of(BROKEN["hash-seed"]).failure("hash-seed")
    other_seed = re.search(r"with PYTHONHASHSEED=(\d+)", failure.message).group(1)
    here = evicts_by_hash(*load_request(failure.example))
    code = ("import json,sys; from ctxbench.strategies.contract import load_request; import test_check;"
            "print(json.dumps(test_check.evicts_by_hash(*load_request(sys.argv[1]))))")
    env = dict(os.environ, PYTHONHASHSEED=other_seed,
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    there = json.loads(subprocess.run([sys.executable, "-c", code, failure.example], env=env, check=True,
                                      capture_output=True, text=True).stdout)
    assert sorted(here) == sorted(there) and here != there


def test_entry_mutation_is_named():
    failure = check_strategy(zeroes_a_size, examples=EXAMPLES, latency=False, hash_seed=False).failure("mutates-input")
    assert failure is not None and "changed entry" in failure.message


def test_checker_passes_builtins_and_reports_latency():
    report = check_strategy("importance", examples=EXAMPLES, latency=True)
    assert report.ok, report.failures
    assert "hash-seed" in report.checked and not report.skipped
    assert [lat.entries for lat in report.latency] == [100, 10_000]
    for lat in report.latency:
        assert lat.error is None and lat.calls >= 3 and 0 < lat.p50_ns <= lat.p99_ns <= lat.max_ns
        assert lat.evicted and lat.evicted >= lat.entries - 100  # the default entry cap binds


def test_report_says_when_a_compiled_kernel_was_checked(capsys):
    from ctxbench.strategies import compiled as kernels
    from ctxbench.strategies.importance import ImportanceStrategy

    assert check_strategy("lru", examples=5, latency=False, hash_seed=False).compiled is kernels.ENABLED
    assert not check_strategy(ImportanceStrategy(compiled=False), examples=5, latency=False).compiled
    assert not check_strategy(BROKEN["duplicate"], examples=5, latency=False, hash_seed=False).compiled
    assert main(["check", "lru", "--examples", "5", "--json", "--no-latency"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled"] is kernels.ENABLED


def test_report_is_reproducible_for_a_seed():
    a = check_strategy(BROKEN["non-string"], examples=EXAMPLES, latency=False, seed=3, hash_seed=False)
    assert a.to_dict() == report_of(BROKEN["non-string"], seed=3).to_dict()


def test_hash_seed_check_can_be_left_out():
    report = report_of(BROKEN["duplicate"])
    assert "hash-seed" not in report.checked and "not requested" in report.skipped["hash-seed"]


def test_stateful_strategy_is_checked_from_a_fresh_history(capsys):
    report = check_strategy("test_check:FreshEachReset", examples=EXAMPLES, latency=False)
    assert report.ok and not report.pure and "hash-seed" in report.checked
    assert main(["check", "test_check:FreshEachReset", "--examples", "5", "--no-latency"]) == 0
    assert "stateful" in capsys.readouterr().out


def test_object_without_a_spec_skips_hash_seed_and_says_why():
    report = check_strategy(create_lru_context_strategy(), examples=10, latency=False)
    assert report.ok
    assert "hash-seed" not in report.checked
    assert "spec string" in report.skipped["hash-seed"]


def test_importable_function_gets_its_spec():
    report = check_strategy(_lru, examples=5, latency=False)
    assert report.strategy == "test_check:_lru"
    assert report.ok and "hash-seed" in report.checked and not report.skipped


def test_nested_function_skip_is_explained():
    def local(state, budget):
        return _lru(state, budget)

    report = check_strategy(local, examples=10, latency=False)
    assert report.ok and "cannot be imported" in report.skipped["hash-seed"]


def test_name_registered_only_here_skips_hash_seed_and_says_why():
    register("only-here-lru", create_lru_context_strategy)
    try:
        report = check_strategy("only-here-lru", examples=5, latency=False)
    finally:
        unregister("only-here-lru")
    assert report.ok and "hash-seed" not in report.checked
    assert "could not run 'only-here-lru' in a subprocess" in report.skipped["hash-seed"]
    assert "unknown strategy" in report.skipped["hash-seed"]


def test_bad_spec_and_bad_examples_raise():
    with pytest.raises(StrategyLoadError, match="unknown strategy"):
        check_strategy("no-such-strategy")
    with pytest.raises(ValueError, match="examples"):
        check_strategy("lru", examples=0)


def test_report_to_dict_is_json():
    report = report_of(BROKEN["duplicate"])
    assert isinstance(report, CheckReport)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is False
    assert data["failures"][0]["example"]["state"][0]["sizeBytes"] >= 1


# --- the CLI ----------------------------------------------------------------------------------

def test_cli_check_ok_with_latency_table(capsys):
    assert main(["check", "lru", "--examples", "10"]) == 0
    out = capsys.readouterr().out
    assert "conforms" in out and "hash-seed" in out
    assert "p99 µs" in out and "10,000" in out


def test_cli_check_failure_prints_minimal_example(capsys):
    assert main(["check", BROKEN["duplicate"], "--examples", "10", "--no-latency"]) == 1
    out = capsys.readouterr().out
    assert "FAIL duplicate" in out and '{"state":[{"id":' in out and "p99" not in out


def test_cli_check_json(capsys):
    assert main(["check", BROKEN["non-string"], "--examples", "10", "--no-latency", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    # Its extra id makes the answer longer than the state when every entry is evicted: bad-return.
    assert data["ok"] is False and [f["kind"] for f in data["failures"]] == ["bad-return", "non-string"]
    assert data["failures"][0]["example"]["budget"] == {"maxBytes": 0} and data["latency"] == []


def test_cli_check_unknown_spec_exits_2(capsys):
    assert main(["check", "no-such-strategy"]) == 2
    err = capsys.readouterr().err
    assert "unknown strategy" in err and "lru" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["0", "-3", "10000001"])
def test_cli_check_absurd_examples_exits_2(capsys, value):
    assert main(["check", "lru", "--examples", value]) == 2
    assert "--examples" in capsys.readouterr().err


def test_console_script_exit_codes():
    exe = str(Path(sys.executable).with_name("ctxbench"))
    ok = subprocess.run([exe, "check", "lru", "--examples", "5", "--no-latency"], capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([exe, "check", "lru?colour=blue"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "colour" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_strategies_lists_builtins(capsys):
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "lru" in out and "importance" in out and "least recently" in out


def test_cli_strategies_json(capsys):
    assert main(["strategies", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [s["name"] for s in data]
    assert {"lru", "importance"} <= set(names) and names == sorted(names)
    assert next(s for s in data if s["name"] == "lru")["default"] is True
    assert all(s["description"] for s in data if s["name"] in {"lru", "importance"})
