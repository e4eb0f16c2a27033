"""What one run of the regression gate found: each metric of each (strategy, budget) against the baseline."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctxbench.sim.analysis.baseline import LATENCY_METRIC, METRICS, Baseline, budget_key
from ctxbench.sim.analysis.latency import REFERENCE, LatencyRatio, LatencySettings
from ctxbench.sim.engine.suite import Suite
from ctxbench.strategies import compiled as kernels

__all__ = ["Check", "RegressReport", "compare"]


@dataclass(frozen=True)
class Check:
    """One metric of one (strategy, budget), against the baseline."""

    strategy: str
    budget_tokens: float
    metric: str
    baseline: float | None
    now: float | None
    status: str        # same, within, improved, regressed, not measured, not comparable
    tolerance: str

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"strategy": self.strategy, "budget_tokens": self.budget_tokens, "metric": self.metric,
                "baseline": self.baseline, "now": self.now, "status": self.status, "tolerance": self.tolerance}


@dataclass
class RegressReport:
    """What one gate run found; `exit_code` is 1 on a regression (unless the baseline was updated)."""

    baseline_path: Path
    suite: Suite
    sessions: int
    checks: list[Check] = field(default_factory=list)
    new: list[str] = field(default_factory=list)          # run, not in the baseline: not gated
    not_run: list[str] = field(default_factory=list)      # in the baseline, not selected
    missing: dict[str, str] = field(default_factory=dict)  # in the baseline, selected, cannot be loaded
    replay: dict[tuple[str, float], tuple[int, int]] = field(default_factory=dict)  # identical, compared
    latency: dict[tuple[str, float], LatencyRatio | str] = field(default_factory=dict)
    latency_settings: LatencySettings = field(default_factory=LatencySettings)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: bool = True
    updated: bool = False
    elapsed_s: float = 0.0

    @property
    def regressions(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if c.status == "regressed"]

    @property
    def improvements(self) -> list[Check]:
        """The checks that got better."""
        return [c for c in self.checks if c.status == "improved"]

    @property
    def exit_code(self) -> int:
        """0, or 1 when a metric regressed or a baselined strategy is missing (and no --update)."""
        return 1 if (self.regressions or self.missing) and not self.updated else 0

    def to_dict(self) -> dict:
        """JSON-ready form of the whole report."""
        return {
            "status": "updated" if self.updated else ("regressed" if self.exit_code else "ok"),
            "exit_code": self.exit_code,
            "baseline": str(self.baseline_path),
            "suite": self.suite.to_dict(),
            "sessions": self.sessions,
            "compared": self.compared,
            "checks": [c.to_dict() for c in self.checks],
            "regressions": [c.to_dict() for c in self.regressions],
            "improvements": [c.to_dict() for c in self.improvements],
            "new_not_gated": self.new,
            "not_run": self.not_run,
            "missing": self.missing,
            "replay": [{"strategy": s, "budget_tokens": b, "identical": i, "compared": n}
                       for (s, b), (i, n) in self.replay.items()],
            "latency": {"reference": REFERENCE, "states": self.latency_settings.states,
                        "repeats": self.latency_settings.repeats,
                        "ratios": [{"strategy": s, "budget_tokens": b,
                                    **(v.to_dict() if isinstance(v, LatencyRatio) else {"error": v})}
                                   for (s, b), v in self.latency.items()]},
            "violations": self.violations[:20],
            "notes": self.notes,
            "updated": self.updated,
            "elapsed_s": round(self.elapsed_s, 3),
        }


def compare(report: RegressReport, old: Baseline, now: dict[tuple[str, float], dict]) -> None:
    """Add to ``report`` a `Check` of every metric of every (strategy, budget) of ``now`` that ``old`` records,
    and how many of its sessions replayed identically."""
    # Latency ratios measured with and without the built-ins' compiled kernels differ several-fold.
    latency_comparable = old.kernels is None or old.kernels == kernels.ENABLED
    if not latency_comparable:
        report.notes.append(
            f"latency not gated: the baseline was measured {'with' if old.kernels else 'without'} the built-in "
            f"strategies' compiled kernels, this run {'has' if kernels.ENABLED else 'lacks'} them "
            "(CTXBENCH_PURE_PYTHON, or a build without a C compiler); re-record with --update to gate it here")
    for (strategy, budget), cell in now.items():
        base = old.strategies.get(strategy, {}).get(budget_key(budget))
        if base is None:
            continue
        for metric in METRICS:
            tol = old.tolerances[metric]
            b, n = base["metrics"].get(metric), cell["metrics"].get(metric)
            if b is None or n is None:
                status = "not measured"
            elif metric == LATENCY_METRIC and not latency_comparable:
                status = "not comparable"
            else:
                status = tol.judge(b, n)
            report.checks.append(Check(strategy, budget, metric, b, n, status, tol.describe()))
        old_hashes = base["log_hashes"]
        shared = [k for k in cell["log_hashes"] if k in old_hashes]
        same = sum(cell["log_hashes"][k] == old_hashes[k] for k in shared)
        report.replay[(strategy, budget)] = (same, len(shared))
