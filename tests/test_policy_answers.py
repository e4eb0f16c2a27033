"""A policy's answer is read once into plain values, which are both judged and applied, and the items it is shown
cannot be changed: in both engines alike, a policy that mutates an item or answers with a sequence that reads
differently the second time gets a contract violation or exactly what its answer held, never a traceback and
never a window the judge did not see."""

import numpy as np
import pytest

from ctxbench.sim.engine.compiled import BUILT
from ctxbench.sim.engine.replay import budget_for_tokens, replay_session, split_sessions
from ctxbench.sim.errors import ContractViolation
from ctxbench.strategies.policy import ITEM_SLOTS, Replace, TranscriptItem, read_edits
from ctxbench.traces.generate import generate

ENGINES = [False, True] if BUILT else [False]
BUDGET = budget_for_tokens(200_000)


@pytest.fixture(scope="module")
def session():
    (st,) = split_sessions(generate("debug-loop", sessions=1, seed=3, tool_calls=40))
    return st


def replay(session, policy, compiled, strict=True):
    return replay_session(session, policy, BUDGET, strict=strict, strategy_name="p", compiled=compiled)


def outcome(session, make, compiled, strict=True):
    """What a replay gives but timings, or the violation that stopped it."""
    try:
        result = replay(session, make(), compiled, strict)
    except ContractViolation as exc:
        return f"violation: {exc}"
    table = result.log.table.copy()
    table[:, list(result.log.columns).index("evict_ns")] = 0
    return table.tolist(), dict(result.log.evicted_ids), result.violation_messages


class MutatesThenAnswers:
    """Makes the overhead look like a large result through `object.__setattr__`, then replaces it by a summary."""

    def edit(self, items, window):
        overhead = items[0]
        object.__setattr__(overhead, "role", "result")
        object.__setattr__(overhead, "tokens", 10**9)
        return [Replace((overhead.id,), 10**8, "summary")]


@pytest.mark.parametrize("compiled", ENGINES)
def test_an_item_cannot_be_mutated(session, compiled):
    with pytest.raises(ContractViolation, match=r"^policy 'p'.*turn 0: raised AttributeError: "
                                                r"(readonly attribute|property .*has no setter)"):
        replay(session, MutatesThenAnswers(), compiled)


def test_mutating_an_item_breaks_the_contract_alike_in_both_engines(session):
    results = [outcome(session, MutatesThenAnswers, c, strict=False) for c in ENGINES]
    assert all(r == results[0] for r in results)
    table, evicted, messages = results[0]
    assert len(messages) == len(table) and not evicted   # every call a violation, nothing applied
    assert all("readonly attribute" in m or "has no setter" in m for m in messages)


def test_items_stay_readable_and_are_copied_through_their_constructor():
    import copy
    import pickle

    item = TranscriptItem("7", "result", "code", 12, 3, "a.py", "a.py:0")
    assert (item.id, item.role, item.tokens, item.ref) == ("7", "result", 12, "a.py:0")
    assert copy.copy(item) == item == pickle.loads(pickle.dumps(item))
    for name in ITEM_SLOTS:
        with pytest.raises(AttributeError):
            object.__setattr__(item, name, "x")
    assert item.role == "result"


class Shifty(list):
    """A list whose iteration shows other edits than it holds."""

    def __init__(self, held, shown):
        super().__init__(held)
        self.shown = shown

    def __iter__(self):
        return iter(self.shown)

    def __len__(self):
        return len(self.shown)


class Alternates(list):
    """A list that reads as what it holds once, then as other edits."""

    def __init__(self, held, later):
        super().__init__(held)
        self.later, self.reads = later, 0

    def __iter__(self):
        self.reads += 1
        return iter(list.__iter__(self) if self.reads == 1 else self.later)


def _results(items):
    return [i for i in items if i.role == "result" and i.tokens > 2]


class MasksOldest:
    """Masks the oldest large result once the window passes 20,000 tokens: what each shifty policy below holds."""

    def __init__(self, wrap=None):
        self.wrap = wrap

    def edit(self, items, window):
        results = _results(items)
        if window.tokens < 20_000 or not results:
            return []
        honest = [Replace((results[0].id,), 2, "placeholder")]
        if self.wrap is None:
            return honest
        overhead = [Replace((items[0].id,), 0)]                       # against the contract
        growing = [Replace((results[0].id,), results[0].tokens + 50, "summary")]
        return self.wrap(honest, overhead if self.wrap is Shifty else growing)


@pytest.mark.parametrize("wrap", [Shifty, Alternates])
def test_an_answer_is_read_once_and_what_it_holds_is_judged_and_applied(session, wrap):
    honest = outcome(session, MasksOldest, ENGINES[0])
    assert not isinstance(honest, str) and honest[1]   # it masks something
    for compiled in ENGINES:
        assert outcome(session, lambda: MasksOldest(wrap), compiled) == honest


class HoldsTheBadEdit(list):
    """A list that holds an edit against the contract but iterates as if it held nothing."""

    def __iter__(self):
        return iter(())


class HidesAGrowingEdit:
    def edit(self, items, window):
        results = _results(items)
        return HoldsTheBadEdit([Replace((results[-1].id,), results[-1].tokens + 1)]) if results else []


def test_what_a_list_holds_is_judged_not_what_it_iterates(session):
    messages = {c: outcome(session, HidesAGrowingEdit, c) for c in ENGINES}
    assert all(m == messages[ENGINES[0]] for m in messages.values())
    assert messages[ENGINES[0]].startswith("violation: ") and "more than it removes" in messages[ENGINES[0]]


class ShiftyIds(tuple):
    def __iter__(self):
        return iter(("not", "these"))


def test_read_edits_reads_subclasses_through_their_base_types():
    read = read_edits(Shifty([Replace(ShiftyIds(("a", "b")), 3, "summary")], shown=[]))
    assert read == [Replace(("a", "b"), 3, "summary")] and type(read[0].ids) is tuple
    assert read_edits({"edits": []}) == {"edits": []}   # refused unread by the judge


def test_both_engines_agree_on_every_shifty_policy(session):
    for make in (lambda: MasksOldest(Shifty), lambda: MasksOldest(Alternates), HidesAGrowingEdit, MutatesThenAnswers):
        for strict in (True, False):
            results = [outcome(session, make, c, strict) for c in ENGINES]
            assert all(np.array_equal(np.asarray(r[0], dtype=object), np.asarray(results[0][0], dtype=object))
                       if not isinstance(r, str) else r == results[0] for r in results)
