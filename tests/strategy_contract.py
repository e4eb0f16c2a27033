"""A contract-test mixin: every strategy's tests subclass it to get the DESIGN §1 properties.

Usage (in a ``test_*.py`` file)::

    class TestMyStrategy(StrategyContract):
        spec = "mypkg.mod:factory?max_entries=50"
        entry_cap = 50          # the strategy's own cap, if it has one

or override ``make_strategy`` to build the strategy some other way.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies.check import Request, check_strategy, context_requests
from strategies.contract import ContextBudget, ContextEntry, ContextState, ContextStrategy, remaining_fits
from strategies.registry import make

# differing_executors: the same property runs for every subclass, which is the point of a mixin.
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])


def _plain(state: Sequence[ContextEntry]) -> list[ContextEntry]:
    return [copy.copy(e) for e in state]


class StrategyContract:
    """Properties every strategy must have; a subclass sets ``spec`` or overrides ``make_strategy``."""

    spec: str | None = None
    entry_cap: int | None = None  # the strategy's own entry cap, on top of budget.max_entries

    def make_strategy(self) -> ContextStrategy:
        """The strategy under test (by default built from ``spec``)."""
        assert self.spec is not None, "set spec or override make_strategy"
        return make(self.spec)

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list:
        return list(self.make_strategy().evict(state, budget))

    @PROPERTY
    @given(context_requests())
    def test_ids_come_from_the_state(self, req: Request) -> None:
        known = {e.id for e in req.state}
        assert set(self.evict(_plain(req.state), req.budget)) <= known

    @PROPERTY
    @given(context_requests())
    def test_no_duplicate_ids(self, req: Request) -> None:
        ids = self.evict(_plain(req.state), req.budget)
        assert len(ids) == len(set(ids))

    @PROPERTY
    @given(context_requests())
    def test_ids_are_strings(self, req: Request) -> None:
        assert all(isinstance(i, str) for i in self.evict(_plain(req.state), req.budget))

    @PROPERTY
    @given(context_requests())
    def test_deterministic_across_calls_and_instances(self, req: Request) -> None:
        first = self.evict(_plain(req.state), req.budget)
        assert self.evict(_plain(req.state), req.budget) == first
        assert list(self.make_strategy().evict(_plain(req.state), req.budget)) == first

    @PROPERTY
    @given(context_requests())
    def test_input_untouched(self, req: Request) -> None:
        state = _plain(req.state)
        before, budget = copy.deepcopy(state), copy.copy(req.budget)
        self.make_strategy().evict(state, budget)
        assert state == before and [e.id for e in state] == [e.id for e in before]
        assert budget == req.budget

    @PROPERTY
    @given(context_requests())
    def test_remaining_fits_budget_bytes_and_tighter_entry_cap(self, req: Request) -> None:
        ids = self.evict(_plain(req.state), req.budget)
        assert remaining_fits(req.state, req.budget, ids, self.entry_cap)

    @PROPERTY
    @given(context_requests(), st.randoms(use_true_random=False))
    def test_order_independent(self, req: Request, rnd: random.Random) -> None:
        shuffled = _plain(req.state)
        rnd.shuffle(shuffled)
        assert self.evict(shuffled, req.budget) == self.evict(_plain(req.state), req.budget)

    @PROPERTY
    @given(context_requests())
    def test_tuple_list_and_context_state_agree(self, req: Request) -> None:
        expected = self.evict(tuple(_plain(req.state)), req.budget)
        assert self.evict(_plain(req.state), req.budget) == expected
        assert self.evict(ContextState(_plain(req.state)), req.budget) == expected
        ordered = sorted(_plain(req.state), key=lambda e: (e.last_accessed_at, e.id))
        assert self.evict(ContextState(ordered, recency_sorted=True), req.budget) == expected

    def test_empty_state(self) -> None:
        assert self.evict([], ContextBudget(0)) == []
        assert self.evict((), ContextBudget(0, 0)) == []

    def test_conformance_checker_passes(self) -> None:
        subject = self.spec if self.spec is not None else self.make_strategy()
        report = check_strategy(subject, examples=30, latency=False)
        assert report.ok, [f"{f.kind}: {f.message} {f.example}" for f in report.failures]
