"""The regression gate: replay a fixed seeded suite and compare every strategy with a baseline file."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import BAD_INPUT_ERRORS, InputError
from sim.grid import as_sessions, run_grid
from sim.latency import REFERENCE, LatencyRatio, LatencySettings, measure_latency
from sim.metrics import DEFAULT_BYTES_PER_TOKEN
from sim.replay import SessionTrace
from sim.results import ctxbench_version
from sim.suite import Suite, build_suite, get_suite
from strategies import compiled as kernels
from strategies.registry import builtin_names, make
from traces.io import atomic_path

__all__ = [
    "FORMAT", "FORMAT_VERSION", "DEFAULT_BASELINE", "DEFAULT_SUITE", "REFERENCE", "GATED_METRICS",
    "LATENCY_METRIC", "DEFAULT_TOLERANCES", "Tolerance", "Baseline", "Check", "RegressReport",
    "summarise_suite", "traces_digest", "load_baseline", "run_regress",
]

FORMAT, FORMAT_VERSION = "ctxbench-regress-baseline", 1
DEFAULT_BASELINE = "tests/baselines/default.json"
DEFAULT_SUITE = "regress"

# Deterministic metrics, summed over the suite's sessions per (strategy, budget); lower is better.
GATED_METRICS = ("compulsory_misses", "capacity_misses", "invalidation_misses", "miss_rate", "reread_tokens",
                 "evictions", "violations")
LATENCY_METRIC = "evict_ratio"
METRICS = GATED_METRICS + (LATENCY_METRIC,)
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    **{m: {"rel": 0.0} for m in GATED_METRICS},
    LATENCY_METRIC: {"factor": 1.5},
}


# ----- tolerances --------------------------------------------------------------------------

@dataclass(frozen=True)
class Tolerance:
    """How much worse a metric may get: ``rel``/``abs`` slack, or a ``factor`` for ratios.

    With slack, a value above ``baseline + max(abs, rel * |baseline|)`` regressed and any value
    below the baseline improved. With a factor, a value above ``baseline * factor`` regressed
    and one below ``baseline / factor`` improved; anything between is noise.

    >>> Tolerance().judge(10, 10), Tolerance().judge(10, 11), Tolerance().judge(10, 9)
    ('same', 'regressed', 'improved')
    >>> Tolerance(factor=1.5).judge(2.0, 2.9), Tolerance(factor=1.5).judge(2.0, 3.1)
    ('within', 'regressed')
    """

    rel: float = 0.0
    abs: float = 0.0
    factor: float | None = None

    def judge(self, baseline: float, now: float) -> str:
        """``same``, ``within`` (changed, within tolerance), ``improved`` or ``regressed``."""
        if now == baseline:
            return "same"
        if self.factor is not None:
            if now > baseline * self.factor:
                return "regressed"
            return "improved" if now * self.factor < baseline else "within"
        if now < baseline:
            return "improved"
        return "regressed" if now > baseline + max(self.abs, self.rel * abs(baseline)) else "within"

    def describe(self) -> str:
        """Short human form: ``exact``, ``+5%``, ``+3``, ``x1.5``."""
        if self.factor is not None:
            return f"x{self.factor:g}"
        parts = ([f"+{self.rel * 100:g}%"] if self.rel else []) + ([f"+{self.abs:g}"] if self.abs else [])
        return " or ".join(parts) if parts else "exact"

    def to_dict(self) -> dict[str, float]:
        """The baseline-file form."""
        if self.factor is not None:
            return {"factor": self.factor}
        out = {"rel": self.rel}
        if self.abs:
            out["abs"] = self.abs
        return out

    @classmethod
    def parse(cls, obj: Any, where: str) -> "Tolerance":
        """From ``{"rel": r, "abs": a}`` (either may be absent) or ``{"factor": f}``."""
        if not isinstance(obj, Mapping) or not obj:
            raise InputError(f"{where}: expected an object like {{\"rel\": 0}} or {{\"factor\": 1.5}}")
        keys = set(obj)
        if keys != {"factor"} and not keys <= {"rel", "abs"}:
            raise InputError(f"{where}: use 'rel' and/or 'abs', or 'factor' alone; got {sorted(keys)}")
        values = {}
        for key, value in obj.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < (1 if key == "factor" else 0):
                bound = ">= 1" if key == "factor" else ">= 0"
                raise InputError(f"{where}.{key}: expected a number {bound}, got {value!r}")
            values[key] = float(value)
        return cls(**values)


# ----- the suite's deterministic numbers -----------------------------------------------------

def _budget_key(budget: float) -> str:
    return str(int(budget)) if float(budget).is_integer() else repr(float(budget))


def traces_digest(sessions: Sequence[SessionTrace]) -> str:
    """SHA-256 over every event of every session: equal digests mean the same traces were replayed."""
    h = hashlib.sha256()
    for st in sessions:
        h.update(f"{st.trace}\0{st.session}\0{len(st)}\n".encode())
        h.update(np.asarray([st.turns, st.ops, st.sizes, st.ts_ms], dtype="<i8").tobytes())
        h.update("\0".join(st.paths).encode())
        h.update("\0".join(st.arms or ()).encode())
    return h.hexdigest()


def summarise_suite(results: pd.DataFrame, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN) -> dict:
    """Per (strategy, budget): the gated metrics over all sessions, and each session's log hash.

    Counts are summed; ``miss_rate`` is all misses over all accesses; ``reread_tokens`` is the
    summed re-read bytes over ``bytes_per_token``.
    """
    out: dict[tuple[str, float], dict] = {}
    for (strategy, budget), g in results.groupby(["strategy", "budget_tokens"], sort=False):
        accesses, misses = int(g["accesses"].sum()), int(g["misses"].sum())
        metrics = {m: int(g[m].sum()) for m in ("compulsory_misses", "capacity_misses", "invalidation_misses")}
        metrics["miss_rate"] = misses / accesses if accesses else 0.0
        metrics["reread_tokens"] = int(g["reread_bytes"].sum()) / bytes_per_token
        metrics["evictions"] = int(g["evictions"].sum())
        metrics["violations"] = int(g["violations"].sum())
        budget = budget.item() if isinstance(budget, np.generic) else budget
        out[(str(strategy), budget)] = {
            "pure": bool(g["pure"].all()),
            "sessions": len(g),
            "accesses": accesses,
            "metrics": metrics,
            "log_hashes": {f"{t}/{s}": h[:16] for t, s, h in zip(g["trace"], g["session"], g["log_hash"])},
        }
    return out


# ----- the baseline file ------------------------------------------------------------------------

@dataclass
class Baseline:
    """A baseline file in memory (see `run_regress` for the file's layout)."""

    suite: dict
    traces_digest: str
    bytes_per_token: float
    ctxbench_version: str
    tolerances: dict[str, Tolerance]
    latency: LatencySettings
    # strategy -> budget key -> {"pure", "sessions", "accesses", "metrics", "latency", "log_hashes"}
    strategies: dict[str, dict[str, dict]]
    # whether the built-ins ran their compiled kernels when the latencies were measured (None: not recorded)
    kernels: bool | None = None


def _need(obj: Mapping, key: str, kind, where: str):
    if key not in obj:
        raise InputError(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InputError(f"{where}.{key}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value


def parse_tolerances(obj: Any, where: str) -> dict[str, Tolerance]:
    """Tolerances per metric from a baseline file; metrics it omits get `DEFAULT_TOLERANCES`."""
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: expected an object of metric -> tolerance")
    unknown = sorted(set(obj) - set(METRICS))
    if unknown:
        raise InputError(f"{where}: unknown metric {unknown[0]!r}; known: {', '.join(METRICS)}")
    out = {m: Tolerance.parse(v, f"{where}.{m}") for m, v in DEFAULT_TOLERANCES.items()}
    out.update({m: Tolerance.parse(v, f"{where}.{m}") for m, v in obj.items()})
    return out


def load_baseline(path: str | Path) -> Baseline:
    """Read and check a baseline file; anything wrong raises `InputError` naming file and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"baseline {p} not found; create it with: ctxbench regress --update --baseline {p}") \
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"baseline {p}: cannot read: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"baseline {p}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") \
            from None
    w = f"baseline {p}"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"{w}: not a ctxbench regress baseline (expected \"format\": \"{FORMAT}\")")
    if doc.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{w}: format_version {doc.get('format_version')!r} is not supported "
                         f"(this ctxbench reads {FORMAT_VERSION}); rewrite it with --update")
    suite = _need(doc, "suite", dict, w)
    digest = _need(doc, "traces_digest", str, w)
    bpt = float(_need(doc, "bytes_per_token", (int, float), w))
    tolerances = parse_tolerances(doc.get("tolerances", {}), f"{w}: tolerances")
    latency = _parse_latency_settings(doc.get("latency_settings", {}), f"{w}: latency_settings")
    strategies: dict[str, dict[str, dict]] = {}
    for name, entry in _need(doc, "strategies", dict, w).items():
        ws = f"{w}: strategies.{name}"
        budgets = _need(entry, "budgets", dict, ws) if isinstance(entry, dict) else None
        if budgets is None:
            raise InputError(f"{ws}: expected an object with 'budgets'")
        strategies[name] = {}
        for key, cell in budgets.items():
            wb = f"{ws}.budgets.{key}"
            if not isinstance(cell, dict):
                raise InputError(f"{wb}: expected an object")
            metrics = _need(cell, "metrics", dict, wb)
            for m in GATED_METRICS:
                _need(metrics, m, (int, float), f"{wb}.metrics")
            ratio = metrics.get(LATENCY_METRIC)
            if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0):
                raise InputError(f"{wb}.metrics.{LATENCY_METRIC}: expected a positive number or null, got {ratio!r}")
            hashes = cell.get("log_hashes", {})
            if not isinstance(hashes, dict):
                raise InputError(f"{wb}.log_hashes: expected an object of session -> hash")
            strategies[name][key] = {**cell, "log_hashes": hashes}
    kernels = doc.get("compiled_kernels")
    if kernels is not None and not isinstance(kernels, bool):
        raise InputError(f"{w}.compiled_kernels: expected true, false or null, got {kernels!r}")
    return Baseline(suite, digest, bpt, str(doc.get("ctxbench_version", "unknown")), tolerances, latency,
                    strategies, kernels)


def _parse_latency_settings(obj: Any, where: str) -> LatencySettings:
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: expected an object like {{\"states\": 64, \"repeats\": 15}}")
    known = LatencySettings.__dataclass_fields__
    values = {}
    for key, value in obj.items():
        if key not in known:
            raise InputError(f"{where}: unknown setting {key!r}; known: {', '.join(known)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{where}.{key}: expected an integer >= 1, got {value!r}")
        values[key] = value
    return LatencySettings(**values)


def _baseline_document(suite: Suite, digest: str, bytes_per_token: float, tolerances: dict[str, Tolerance],
                       latency: LatencySettings, strategies: dict[str, dict[str, dict]]) -> dict:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "ctxbench_version": ctxbench_version(),
        "suite": suite.to_dict(),
        "seed": suite.seed,
        "bytes_per_token": bytes_per_token,
        "traces_digest": digest,
        "reference": REFERENCE,
        "compiled_kernels": kernels.ENABLED,
        "latency_settings": asdict(latency),
        "tolerances": {m: t.to_dict() for m, t in tolerances.items()},
        "strategies": strategies,
    }


def _write_baseline(path: Path, doc: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        tmp.chmod(0o644)  # a file to commit and share, not a private temporary


# ----- comparison ----------------------------------------------------------------------------------

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


def _compare(report: RegressReport, old: Baseline, now: dict[tuple[str, float], dict]) -> None:
    # Latency ratios measured with and without the built-ins' compiled kernels differ several-fold.
    latency_comparable = old.kernels is None or old.kernels == kernels.ENABLED
    if not latency_comparable:
        report.notes.append(
            f"latency not gated: the baseline was measured {'with' if old.kernels else 'without'} the built-in "
            f"strategies' compiled kernels, this run {'has' if kernels.ENABLED else 'lacks'} them "
            "(CTXBENCH_PURE_PYTHON, or a build without a C compiler); re-record with --update to gate it here")
    for (strategy, budget), cell in now.items():
        base = old.strategies.get(strategy, {}).get(_budget_key(budget))
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


def _default_strategies(old: Baseline | None) -> list[str]:
    names = builtin_names()
    return names + [s for s in (old.strategies if old else ()) if s not in names]


def _resolve_suite(suite: Suite | str | None, old: Baseline | None) -> Suite:
    if isinstance(suite, Suite):
        return suite
    if suite is not None:
        return get_suite(suite)
    if old is not None and isinstance(old.suite.get("name"), str):
        return get_suite(old.suite["name"])
    return get_suite(DEFAULT_SUITE)


def _definition_problem(old: Baseline, suite: Suite, bytes_per_token: float) -> str | None:
    now = suite.to_dict()
    differs = sorted(k for k in set(now) | set(old.suite) if old.suite.get(k) != now.get(k))
    if differs:
        return (f"was made for suite {old.suite.get('name')!r} with a different definition than suite "
                f"{suite.name!r} (differs in: {', '.join(differs)})")
    if old.bytes_per_token != bytes_per_token:
        return f"was made at {old.bytes_per_token} bytes per token, this run uses {bytes_per_token}"
    return None


def run_regress(baseline: str | Path = DEFAULT_BASELINE, *, suite: Suite | str | None = None,
                strategies: Sequence[str] | None = None, update: bool = False, workers: int | None = None,
                latency: LatencySettings | None = None, clock: Callable[[], int] = perf_counter_ns,
                progress: bool | None = None, evict_timeout_ms: int | None = None) -> RegressReport:
    """Replay the suite and compare each (strategy, budget) with the baseline file.

    ``suite`` defaults to the baseline's suite (else `DEFAULT_SUITE`); ``strategies`` to every
    built-in plus every strategy of the baseline. A strategy run but not in the baseline is
    reported as new and not gated; one in the baseline but not selected as not run; one in the
    baseline, selected by default, that cannot be loaded fails the gate. With ``update`` the
    baseline is rewritten atomically (strategies not run keep their entries when the suite is
    unchanged) and nothing fails. ``evict_timeout_ms`` limits each call into an in-process
    strategy, in the replay and in the latency measurement (`sim.manager`).

    The baseline file is JSON: ``format``, ``format_version``, ``ctxbench_version``, ``suite``
    (`Suite.to_dict`), ``seed``, ``bytes_per_token``, ``traces_digest`` (SHA-256 of the
    generated traces, so a changed generator is caught rather than reported as a regression),
    ``reference`` (the latency reference strategy), ``compiled_kernels`` (whether the built-ins ran
    their compiled kernels; latency is not gated across a difference), ``latency_settings`` (`LatencySettings`;
    ``latency`` defaults to them, so ratios are compared as they were measured), ``tolerances``
    (metric -> ``{"rel", "abs"}`` or ``{"factor"}``, see `Tolerance`; edit them by hand,
    ``--update`` keeps them) and ``strategies``: spec -> ``{"budgets": {tokens: {"pure",
    "sessions", "accesses", "metrics", "latency", "log_hashes"}}}``.

    A missing or corrupt baseline, an unknown suite or strategy, or a baseline made for another
    suite definition or other traces raise `InputError` (exit 2); ``update`` accepts the last two.
    """
    started = time.perf_counter()
    path = Path(baseline)
    old: Baseline | None = None
    if path.exists() or not update:
        old = load_baseline(path)
    suite_obj = _resolve_suite(suite, old)
    bpt = DEFAULT_BYTES_PER_TOKEN
    if latency is None:
        latency = old.latency if old is not None else LatencySettings()
    report = RegressReport(path, suite_obj, 0, latency_settings=latency, updated=update)
    comparable = old is not None
    if old is not None:
        problem = _definition_problem(old, suite_obj, bpt)
        if problem and not update:
            raise InputError(f"baseline {path} {problem}; pass the matching --suite, or re-baseline with --update")
        if problem:
            report.notes.append(f"the old baseline {problem}; it is replaced whole")
            comparable = False
        elif old.ctxbench_version != ctxbench_version():
            report.notes.append(f"baseline made with ctxbench {old.ctxbench_version}, running {ctxbench_version()}")

    explicit = strategies is not None
    specs = list(dict.fromkeys(strategies)) if explicit else _default_strategies(old)
    if not specs:
        raise InputError("no strategy to run")
    runnable = []
    for spec in specs:
        try:
            make(spec)
            runnable.append(spec)
        except BAD_INPUT_ERRORS as exc:
            if explicit or old is None or spec not in old.strategies:
                raise
            report.missing[spec] = str(exc)

    traces = build_suite(suite_obj)
    sessions = as_sessions(traces)
    report.sessions = len(sessions)
    digest = traces_digest(sessions)
    if comparable and old.traces_digest != digest:
        problem = (f"was made from other traces of suite {suite_obj.name!r} (the trace generator or its "
                   f"dependencies changed: traces digest {old.traces_digest[:12]} != {digest[:12]})")
        if not update:
            raise InputError(f"baseline {path} {problem}; review and re-baseline with --update")
        report.notes.append(f"the old baseline {problem}; it is replaced whole")
        comparable = False
    report.compared = comparable

    budgets = suite_obj.budgets_tokens
    grid = run_grid(sessions, runnable, budgets, bytes_per_token=bpt, strict=False, workers=workers,
                    progress=progress, keep_turns=False, evict_timeout_ms=evict_timeout_ms)
    report.violations = grid.violations
    now = summarise_suite(grid.results, bpt)
    report.latency = measure_latency(sessions, runnable, budgets, latency, bytes_per_token=bpt, clock=clock,
                                     evict_timeout_ms=evict_timeout_ms)
    for key, cell in now.items():
        measured = report.latency.get(key)
        cell["metrics"][LATENCY_METRIC] = round(measured.ratio, 3) if isinstance(measured, LatencyRatio) else None
        cell["latency"] = measured.to_dict() if isinstance(measured, LatencyRatio) else {"error": measured}

    if comparable:
        _compare(report, old, now)
        report.new = [s for s in runnable if s not in old.strategies]
        report.not_run = [s for s in old.strategies if s not in runnable and s not in report.missing]
    else:
        report.new = list(runnable)

    if update:
        tolerances = old.tolerances if old is not None else parse_tolerances({}, "defaults")
        entries: dict[str, dict] = {}
        for (strategy, budget), cell in now.items():
            entries.setdefault(strategy, {"budgets": {}})["budgets"][_budget_key(budget)] = cell
        if comparable:  # strategies not selected this time keep their numbers; missing ones are dropped
            entries.update({s: {"budgets": old.strategies[s]} for s in report.not_run})
        if report.missing:
            report.notes.append(f"dropped from the baseline (cannot be loaded): {', '.join(report.missing)}")
        _write_baseline(path, _baseline_document(suite_obj, digest, bpt, tolerances, latency, entries))
    report.elapsed_s = time.perf_counter() - started
    return report
