"""A contract-test mixin for context policies (`strategies.policy`): each policy's tests subclass it.

Usage (in a ``test_*.py`` file)::

    class TestMyPolicy(PolicyContract):
        spec = "mypkg.mod:factory?n=5"

Each property is the policy checker's own (`strategies.check_policy.check_policy_request`, the checks
`check_policy` makes on each request) on transcripts hypothesis draws here, so a test fails with the
checker's message; every test also fails when the call raises, leaves or answers with something other
than a list or tuple of edits. A last test replays a generated session through the transcript model twice
and asks for the same numbers.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from ctxbench.strategies.check_policy import PolicyRequest, check_policy, check_policy_request, transcript_requests
from ctxbench.strategies.registry import make

# differing_executors: the same property runs for every subclass, which is the point of a mixin.
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])

#: Checked by every test: without an answer that can be read, no other property can be judged.
ANSWERS = ("raises", "leaves", "bad-return")


class PolicyContract:
    """Properties every context policy must have; a subclass sets ``spec`` or overrides ``make_policy``."""

    spec: str | None = None

    def make_policy(self):
        """The policy under test (by default built from ``spec``)."""
        assert self.spec is not None, "set spec or override make_policy"
        return make(self.spec)

    def assert_keeps(self, req: PolicyRequest, *kinds: str) -> None:
        """A fresh policy shows none of ``kinds`` (nor a call that raises, leaves or answers badly) on ``req``."""
        found = check_policy_request(self.make_policy(), req)
        broken = {kind: message for kind, message in found.items() if kind in ANSWERS + kinds}
        assert not broken, broken

    @PROPERTY
    @given(transcript_requests())
    def test_edits_are_well_formed(self, req: PolicyRequest) -> None:
        self.assert_keeps(req, "bad-edit", "unknown-item", "duplicate")

    @PROPERTY
    @given(transcript_requests())
    def test_the_overhead_stays(self, req: PolicyRequest) -> None:
        self.assert_keeps(req, "overhead")

    @PROPERTY
    @given(transcript_requests())
    def test_never_grows_what_it_replaces_nor_the_window(self, req: PolicyRequest) -> None:
        self.assert_keeps(req, "grows", "bad-attach", "window-grows", "admit")

    @PROPERTY
    @given(transcript_requests())
    def test_deterministic_and_input_untouched(self, req: PolicyRequest) -> None:
        self.assert_keeps(req, "nondeterministic", "mutates-input")
        assert check_policy_request(self.make_policy(), req) == check_policy_request(self.make_policy(), req)

    def test_checker_finds_nothing(self) -> None:
        report = check_policy(self.spec if self.spec is not None else self.make_policy(), examples=60,
                              latency=False, hash_seed=self.spec is not None)
        assert report.ok, [(f.kind, f.message, f.example) for f in report.failures]

    def test_a_replay_is_deterministic(self) -> None:
        from ctxbench.sim.engine.replay import replay_session, split_sessions
        from ctxbench.traces.generate import generate

        (st,) = split_sessions(generate("claude-code-like", sessions=1, seed=3))
        first, second = (replay_session(st, self.make_policy()) for _ in range(2))
        timed = ("replay_s", "evict_p50_ns", "evict_p90_ns", "evict_p99_ns", "evict_max_ns")
        assert {k: v for k, v in first.row.items() if k not in timed} == \
            {k: v for k, v in second.row.items() if k not in timed}
        assert first.row["model"] == "transcript"
