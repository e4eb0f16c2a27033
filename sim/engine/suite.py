"""Named, seeded workloads: the default suite of `ctxbench run` and the regression suites."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pandas as pd

from ctxbench.sim.errors import InputError
from ctxbench.traces.presets import PRESETS

__all__ = ["Suite", "SUITES", "DEFAULT_SUITE_TOOL_CALLS", "get_suite", "build_suite", "preset_traces"]


@dataclass(frozen=True)
class Suite:
    """Which presets to generate, how many sessions each, from which seed, at which budgets; and the
    context policies (and compacted strategies) a run of it replays beside the built-in strategies."""

    name: str
    description: str
    seed: int
    presets: tuple[tuple[str, int], ...]
    budgets_tokens: tuple[int, ...] = (200_000,)
    overrides: dict[str, dict] = field(default_factory=dict)
    policies: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready description, recorded in results metadata and baselines (``policies`` only when the
        suite names some, so a suite without them describes itself as it always did)."""
        d = asdict(self)
        d["presets"] = [list(p) for p in self.presets]
        d["budgets_tokens"] = list(self.budgets_tokens)
        if self.policies:
            d["policies"] = list(self.policies)
        else:
            del d["policies"]
        return d


# The default suite's sessions run 450 tool calls, where the presets are calibrated at 250
# (docs/design.md §7, "The default suite"): at 250 the pinned conversation leaves room beside it for
# every file a debug-loop, file-walk or hub-and-spoke session re-reads, so that even the offline optimum
# re-reads nothing at 200K tokens and the bracket gives no multiple for any strategy; at 400, with turns
# of real agents' shape (no 100K-token turn of joined reads), hub-and-spoke still does for one seed.
DEFAULT_SUITE_TOOL_CALLS = 450
_DEFAULT_PRESETS = (("file-walk", 10), ("hub-and-spoke", 10), ("debug-loop", 10), ("refactor", 10), ("mixed", 12),
                    ("claude-code-like", 12), ("long", 6))

SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite("default", f"every preset, a few sessions each of {DEFAULT_SUITE_TOOL_CALLS} tool calls (long: its "
                         "3,000), the real agents' context policies beside the strategies; the main job of "
                         "`ctxbench run`", seed=2026, presets=_DEFAULT_PRESETS,
              overrides={preset: {"tool_calls": DEFAULT_SUITE_TOOL_CALLS} for preset, _ in _DEFAULT_PRESETS
                         if PRESETS[preset].knobs.tool_calls < DEFAULT_SUITE_TOOL_CALLS},
              policies=("claude-code", "codex", "clear-tool-uses", "observation-masking", "openhands-summarizing",
                        "amortized-forgetting", "lru+compaction")),
        Suite("regress", "the fixed suite of the regression gate: small, seeded, every preset", seed=7,
              presets=(("file-walk", 2), ("hub-and-spoke", 2), ("debug-loop", 2), ("refactor", 2),
                       ("mixed", 3), ("claude-code-like", 3), ("long", 1)),
              budgets_tokens=(50_000, 200_000)),
        Suite("quick", "one short session per preset, for notebooks and smoke tests", seed=1,
              presets=(("file-walk", 1), ("hub-and-spoke", 1), ("debug-loop", 1), ("mixed", 2)),
              budgets_tokens=(25_000, 50_000, 100_000, 200_000)),
        Suite("multi-arm", "three arms per session: disjoint directories, contended hubs, a crossing refactor; "
                           "run it with --claims strict,lazy,disabled", seed=10,
              presets=(("parallel-disjoint", 3), ("parallel-hubs", 3), ("parallel-refactor", 3)),
              budgets_tokens=(25_000, 100_000)),
    )
}


def get_suite(name: str) -> Suite:
    """The suite called ``name``; an unknown name lists the known ones."""
    try:
        return SUITES[name]
    except KeyError:
        raise InputError(f"unknown suite {name!r}; known: {', '.join(sorted(SUITES))}") from None


def preset_traces(presets: list[tuple[str, int]], seed: int,
                  overrides: dict[str, dict] | None = None) -> dict[str, pd.DataFrame]:
    """One generated trace per preset, keyed by preset name; preset k uses seed ``seed + k``."""
    from ctxbench.traces.generate import generate

    out: dict[str, pd.DataFrame] = {}
    for k, (preset, sessions) in enumerate(presets):
        try:
            out[preset] = generate(preset, sessions=sessions, seed=seed + k, **(overrides or {}).get(preset, {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"cannot generate preset {preset!r}: {exc}") from None
    return out


def build_suite(suite: Suite | str) -> dict[str, pd.DataFrame]:
    """The suite's traces, keyed by preset name."""
    suite = get_suite(suite) if isinstance(suite, str) else suite
    return preset_traces(list(suite.presets), suite.seed, suite.overrides)
