"""A contract-test mixin: every strategy's tests subclass it to get the docs/design.md §1 properties.

Usage (in a ``test_*.py`` file)::

    class TestMyStrategy(StrategyContract):
        spec = "mypkg.mod:factory?max_entries=50"
        entry_cap = 50          # the strategy's own cap, if it has one

or override ``make_strategy`` to build the strategy some other way.

Each property is the conformance checker's own (`strategies.check.check_request`, the checks
`check_strategy` makes on each request), on requests hypothesis draws here: a test fails with the
checker's message. Every test also fails when the call raises, leaves or answers with something
other than a list or tuple of at most as many ids as the state has entries.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings

from ctxbench.strategies.check import Request, check_request, check_strategy, context_requests
from ctxbench.strategies.contract import ContextBudget, ContextEntry, ContextStrategy
from ctxbench.strategies.registry import make

# differing_executors: the same property runs for every subclass, which is the point of a mixin.
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])

#: Checked by every test: without an answer that can be read, no other property can be judged.
ANSWERS = ("raises", "leaves", "bad-return")


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

    def assert_keeps(self, req: Request, *kinds: str) -> None:
        """A fresh strategy shows none of ``kinds`` (nor a call that raises, leaves or answers badly) on ``req``."""
        found = check_request(self.make_strategy(), req, entry_cap=self.entry_cap)
        broken = {kind: message for kind, message in found.items() if kind in ANSWERS + kinds}
        assert not broken, broken

    @PROPERTY
    @given(context_requests())
    def test_ids_come_from_the_state(self, req: Request) -> None:
        self.assert_keeps(req, "unknown-id")

    @PROPERTY
    @given(context_requests())
    def test_no_duplicate_ids(self, req: Request) -> None:
        self.assert_keeps(req, "duplicate")

    @PROPERTY
    @given(context_requests())
    def test_ids_are_strings(self, req: Request) -> None:
        self.assert_keeps(req, "non-string")

    @PROPERTY
    @given(context_requests())
    def test_deterministic_across_calls_and_instances(self, req: Request) -> None:
        self.assert_keeps(req, "nondeterministic")
        answers = [self.evict([copy.copy(e) for e in req.state], req.budget) for _ in range(2)]   # two instances
        assert answers[0] == answers[1], answers

    @PROPERTY
    @given(context_requests())
    def test_input_untouched(self, req: Request) -> None:
        self.assert_keeps(req, "mutates-input")

    @PROPERTY
    @given(context_requests())
    def test_remaining_fits_budget_bytes_and_tighter_entry_cap(self, req: Request) -> None:
        self.assert_keeps(req, "over-budget", "over-entries")

    @PROPERTY
    @given(context_requests())
    def test_order_independent(self, req: Request) -> None:
        self.assert_keeps(req, "order-dependent")

    @PROPERTY
    @given(context_requests())
    def test_tuple_list_and_context_state_agree(self, req: Request) -> None:
        # The checker repeats each call on the state as the request's container (a list, a tuple or a
        # ContextState), and once more as a recency-sorted ContextState.
        self.assert_keeps(req, "nondeterministic", "order-dependent")

    def test_empty_state(self) -> None:
        for budget, container in ((ContextBudget(0), "list"), (ContextBudget(0, 0), "tuple")):
            self.assert_keeps(Request((), budget, (), container))   # an answer with any id fails bad-return

    def test_conformance_checker_passes(self) -> None:
        subject = self.spec if self.spec is not None else self.make_strategy()
        report = check_strategy(subject, examples=30, latency=False)
        assert report.ok, [f"{f.kind}: {f.message} {f.example}" for f in report.failures]
