"""The regression gate: replay a fixed seeded suite and compare every strategy with a baseline file.

The baseline and its file are `sim.analysis.baseline`'s; the report of a run `sim.analysis.regress_report`'s;
the JSON reader that names every bad value by its path `sim.analysis.json_reader`'s. This module selects the
strategies, replays and times them, and compares or records.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from ctxbench.sim import ctxbench_version
from ctxbench.sim.analysis.baseline import (DEFAULT_TOLERANCES, FORMAT, FORMAT_VERSION, LATENCY_METRIC, MAX_BASELINE_BYTES,
                                   MAX_LATENCY_SETTING, Baseline, Tolerance, baseline_document, budget_key,
                                   check_new_baseline, load_baseline, parse_baseline, parse_tolerances,
                                   summarise_suite, traces_digest, write_baseline)
from ctxbench.sim.analysis.grid import as_sessions, run_grid
from ctxbench.sim.analysis.json_reader import Reader, json_path, listed
from ctxbench.sim.analysis.latency import REFERENCE, EndedNote, LatencyRatio, LatencySettings, measure_latency
from ctxbench.sim.analysis.regress_report import Check, RegressReport, compare
from ctxbench.sim.engine.settings import ReplaySettings, settings_of
from ctxbench.sim.engine.measures import GATED_METRICS
from ctxbench.sim.engine.replay import SessionTrace
from ctxbench.sim.engine.suite import SUITES, Suite, build_suite, get_suite
from ctxbench.sim.errors import BAD_INPUT_ERRORS, ContractViolation, InputError
from ctxbench.strategies.builtins import BUILTINS, POLICIES
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.isolation import check_loads
from ctxbench.strategies.registry import builtin_names, parse_spec, split_combination
from ctxbench.traces.tokens import DEFAULT_TOKENS, TokenRatios

__all__ = [
    "FORMAT", "FORMAT_VERSION", "DEFAULT_BASELINE", "DEFAULT_SUITE", "REFERENCE", "GATED_METRICS",
    "LATENCY_METRIC", "DEFAULT_TOLERANCES", "Tolerance", "Baseline", "Check", "RegressReport",
    "MAX_BASELINE_BYTES", "MAX_LATENCY_SETTING", "summarise_suite", "traces_digest", "json_path", "load_baseline",
    "parse_baseline", "parse_tolerances", "shipped_spec", "run_regress",
]

DEFAULT_BASELINE = "tests/baselines/default.json"
DEFAULT_SUITE = "regress"


def _default_strategies(old: Baseline | None) -> list[str]:
    """Every built-in strategy, the context policies (and compacted strategies) of the default suite, and the
    strategies of the baseline."""
    names = builtin_names() + list(SUITES["default"].policies)
    return names + [s for s in (old.strategies if old else ()) if s not in names]


def shipped_spec(spec: str) -> bool:
    """Whether ``spec`` names a strategy shipped with ctxbench, its options plain values: safe to build from a file.

    >>> shipped_spec("lru?max_entries=50"), shipped_spec("cmd:touch pwned"), shipped_spec("os:system")
    (True, False, False)
    >>> shipped_spec("claude-code?trigger_tokens=150000"), shipped_spec("lru+compaction")
    (True, True)
    """
    if ":" in spec:  # import paths and loader schemes (cmd:) run code of the spec's choosing
        return False
    combined = split_combination(spec)
    if combined is not None:
        return all(shipped_spec(part) for part in combined)
    try:
        name, options = parse_spec(spec)
    except (StrategyLoadError, ValueError, RecursionError):
        return False
    ours = {shipped for shipped, _, _ in BUILTINS + POLICIES}
    return name in ours and name in builtin_names(kind=None) and all(_plain(v) for v in options.values())


def _plain(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, bool, int))


def _refuse_foreign_strategies(old: Baseline, path: Path) -> None:
    """A baseline selects only ctxbench's own strategies by itself; any other must come from the command line."""
    foreign = [spec for spec in old.strategies if not shipped_spec(spec)]
    if foreign:
        named = listed([json_path(("strategies", spec)) for spec in foreign], limit=3)
        what = "not ctxbench built-ins" if len(foreign) > 1 else "not a ctxbench built-in"
        raise InputError(f"baseline {path}: {named}: {what}, and a baseline never loads code by itself; name them "
                         "with --strategy to gate them, or remove them from the baseline")


def _check_sessions(old: Baseline, path: Path, suite: Suite, sessions: Sequence[SessionTrace]) -> None:
    """Every cell of the baseline hashes exactly the suite's sessions."""
    expected = {f"{st.trace}/{st.session}" for st in sessions}
    r = Reader(f"baseline {path}")
    for spec, cells in old.strategies.items():
        for key, cell in cells.items():
            where = ("strategies", spec, "budgets", key, "log_hashes")
            for session in cell["log_hashes"]:
                if session not in expected:
                    r.fail(where + (session,), f"not a session of suite {suite.name!r}")
            missing = sorted(expected - set(cell["log_hashes"]))
            if missing:
                r.fail(where, f"missing session {json.dumps(missing[0])} of suite {suite.name!r}")


def _resolve_suite(suite: Suite | str | None, old: Baseline | None, path: Path) -> Suite:
    if isinstance(suite, Suite):
        return suite
    if suite is not None:
        return get_suite(suite)
    if old is not None:
        name = old.suite["name"]
        if name not in SUITES:
            raise InputError(f"baseline {path}: suite[\"name\"]: unknown suite {name!r}; "
                             f"known: {', '.join(sorted(SUITES))}")
        return SUITES[name]
    return get_suite(DEFAULT_SUITE)


def _ratios_text(tokens: TokenRatios) -> str:
    if tokens.is_uniform:
        return f"{tokens.reference:g}"
    return "(" + ", ".join(f"{k} {v:g}" for k, v in tokens.ratios.items()) + ")"


def _definition_problem(old: Baseline, suite: Suite, tokens: TokenRatios) -> str | None:
    now = suite.to_dict()
    differs = sorted(k for k in set(now) | set(old.suite) if old.suite.get(k) != now.get(k))
    if differs:
        return (f"was made for suite {old.suite.get('name')!r} with a different definition than suite "
                f"{suite.name!r} (differs in: {', '.join(differs)})")
    if old.token_ratios != tokens:
        return (f"was made at {_ratios_text(old.token_ratios)} bytes per token, this run counts "
                f"{_ratios_text(tokens)}")
    if old.reference != REFERENCE:
        return f"timed latency against {old.reference!r}, this ctxbench against {REFERENCE!r}"
    return None


def run_regress(baseline: str | Path = DEFAULT_BASELINE, *, suite: Suite | str | None = None,
                strategies: Sequence[str] | None = None, update: bool = False, allow_violations: bool = False,
                workers: int | None = None,
                latency: LatencySettings | None = None, clock: Callable[[], int] = perf_counter_ns,
                progress: bool | None = None, settings: ReplaySettings | None = None) -> RegressReport:
    """Replay the suite and compare each (strategy, budget) with the baseline file.

    ``suite`` defaults to the baseline's suite (else `DEFAULT_SUITE`); ``strategies`` to every
    built-in plus every strategy of the baseline, which must then be built-ins (`shipped_spec`:
    a baseline never makes ctxbench load code; import paths, entry points and ``cmd:`` specs run
    only when ``strategies`` names them). A strategy run but not in the baseline is reported as
    new and not gated; one in the baseline but not selected as not run; one in the baseline,
    selected by default, that cannot be built fails the gate. With ``update`` the baseline is
    rewritten atomically (strategies not run keep their entries when the suite is unchanged) and
    nothing fails. ``settings`` (`sim.engine.settings.ReplaySettings`; its ``evict_timeout_ms`` limits each call
    into an in-process strategy, in the replay and in the latency measurement) are the replay's, lenient, with
    the token ratios this ctxbench counts with and no per-turn log.

    The baseline file is JSON: ``format``, ``format_version``, ``ctxbench_version``, ``suite``
    (`Suite.to_dict`), ``seed``, ``bytes_per_token``, ``traces_digest`` (SHA-256 of the
    generated traces, so a changed generator is caught rather than reported as a regression),
    ``reference`` (the latency reference strategy), ``compiled_kernels`` (whether the built-ins ran
    their compiled kernels; latency is not gated across a difference), ``latency_settings`` (`LatencySettings`;
    ``latency`` defaults to them, so ratios are compared as they were measured), ``tolerances``
    (metric -> ``{"rel", "abs"}`` or ``{"factor"}``, see `Tolerance`; edit them by hand,
    ``--update`` keeps them) and ``strategies``: spec -> ``{"budgets": {tokens: {"pure",
    "sessions", "accesses", "metrics", "latency", "log_hashes"}}}``, every budget of the suite
    under every strategy. `parse_baseline` checks every key and value before anything runs.

    A missing or invalid baseline, an unknown suite or strategy, a strategy only the baseline
    names that is not a built-in, or a baseline made for another suite definition, other traces
    or another latency reference raise `InputError` (exit 2); ``update`` accepts the last three
    (the file is replaced whole) and refuses the others, leaving the file as it was.
    """
    started = time.perf_counter()
    path = Path(baseline)
    old = load_baseline(path) if path.exists() or not update else None
    explicit = strategies is not None
    if old is not None and not explicit:
        _refuse_foreign_strategies(old, path)
    suite_obj = _resolve_suite(suite, old, path)
    tokens = DEFAULT_TOKENS   # what this ctxbench counts with: a baseline made otherwise is re-made
    if latency is None:
        latency = old.latency if old is not None else LatencySettings()
    report = RegressReport(path, suite_obj, 0, latency_settings=latency, updated=update)
    comparable = old is not None and _same_definition(report, old, tokens)
    runnable = _runnable(report, old, strategies)

    sessions = as_sessions(build_suite(suite_obj))
    report.sessions = len(sessions)
    digest = traces_digest(sessions)
    comparable = comparable and _same_traces(report, old, digest)
    if comparable:
        _check_sessions(old, path, suite_obj, sessions)
    report.compared = comparable

    settings = settings_of(settings).replace(strict=False, tokens=tokens, keep_turns=False)
    now = _measure(report, sessions, runnable, settings, workers=workers, clock=clock, progress=progress)
    if comparable:
        compare(report, old, now)
        report.new = [s for s in runnable if s not in old.strategies]
        report.not_run = [s for s in old.strategies if s not in runnable and s not in report.missing]
    else:
        report.new = list(runnable)
    _refuse_ended_processes(report)
    if comparable:
        _note_baselined_violations(report, old)
    if update:
        _refuse_violations(report, allow_violations)
        _update_baseline(report, old, now, digest, tokens)
    report.elapsed_s = time.perf_counter() - started
    return report


def _same_definition(report: RegressReport, old: Baseline, tokens: TokenRatios) -> bool:
    """Whether ``old`` was made for this suite definition (else, with --update, a note; without, `InputError`)."""
    problem = _definition_problem(old, report.suite, tokens)
    if problem and not report.updated:
        raise InputError(f"baseline {report.baseline_path} {problem}; pass the matching --suite, or re-baseline "
                         "with --update")
    if problem:
        report.notes.append(f"the old baseline {problem}; it is replaced whole")
        return False
    if old.ctxbench_version != ctxbench_version():
        report.notes.append(f"baseline made with ctxbench {old.ctxbench_version}, running {ctxbench_version()}")
    return True


def _runnable(report: RegressReport, old: Baseline | None, strategies: Sequence[str] | None) -> list[str]:
    """The selected strategies that can be built; a baselined one selected by default that cannot is missing."""
    explicit = strategies is not None
    specs = list(dict.fromkeys(strategies)) if explicit else _default_strategies(old)
    if not specs:
        raise InputError("no strategy to run")
    runnable = []
    for spec in specs:
        try:
            check_loads(spec)   # code ctxbench does not ship is built in a process of its own
            runnable.append(spec)
        except BAD_INPUT_ERRORS as exc:
            if explicit or old is None or spec not in old.strategies:
                raise
            report.missing[spec] = str(exc)
    return runnable


def _same_traces(report: RegressReport, old: Baseline, digest: str) -> bool:
    """Whether ``old`` was made from these traces (else, with --update, a note; without, `InputError`)."""
    if old.traces_digest == digest:
        return True
    problem = (f"was made from other traces of suite {report.suite.name!r} (the trace generator or its "
               f"dependencies changed: traces digest {old.traces_digest[:12]} != {digest[:12]})")
    if not report.updated:
        raise InputError(f"baseline {report.baseline_path} {problem}; review and re-baseline with --update")
    report.notes.append(f"the old baseline {problem}; it is replaced whole")
    return False


def _measure(report: RegressReport, sessions: Sequence[SessionTrace], runnable: list[str], settings: ReplaySettings,
             **options) -> dict[tuple[str, float], dict]:
    """Replay the suite under ``settings`` and time each strategy: `summarise_suite`'s cells with their latency."""
    budgets = report.suite.budgets_tokens
    grid = run_grid(sessions, runnable, budgets, settings, workers=options["workers"], progress=options["progress"])
    report.violations = grid.violations
    now = summarise_suite(grid.results, settings.tokens.reference)
    report.latency = measure_latency(sessions, runnable, budgets, report.latency_settings, settings,
                                     clock=options["clock"])
    for key, cell in now.items():
        measured = report.latency.get(key)
        # Rounded, and never to 0: a baseline's ratios are positive.
        cell["metrics"][LATENCY_METRIC] = max(round(measured.ratio, 3), 0.001) \
            if isinstance(measured, LatencyRatio) else None
        cell["latency"] = measured.to_dict() if isinstance(measured, LatencyRatio) else {"error": measured}
    return now


def _refuse_ended_processes(report: RegressReport) -> None:
    """A strategy that ended the process measuring its latency: a `ContractViolation` (exit 2, nothing written),
    unless this gate run fails on one of its metrics (exit 1, the report naming it)."""
    regressed = set() if report.updated else {c.strategy for c in report.regressions}
    for (spec, _), measured in report.latency.items():
        if isinstance(measured, EndedNote) and spec not in regressed:
            prefix = f"strategy {spec!r}, "
            first = next((v for v in report.violations if v.startswith(prefix)), None)
            replay = f"; in its replay, {first[len(prefix):]}" if first else ""
            raise ContractViolation(f"strategy {spec!r}: latency {measured}{replay}")


def _refuse_violations(report: RegressReport, allowed: bool) -> None:
    """A baseline never records a strategy whose calls broke the contract (raised, left, timed out), unless
    ``allowed``: then the violations are its numbers (``violations`` is gated) and the report says so."""
    if not report.violations:
        return
    if not allowed:
        raise InputError(f"--update refuses to record contract violations ({len(report.violations)}; first: "
                         f"{report.violations[0]}): fix the strategy, leave it out of --strategy, or pass "
                         "--allow-violations to record them")
    report.notes.append(f"recorded with {len(report.violations)} contract violations (--allow-violations)")


def _note_baselined_violations(report: RegressReport, old: Baseline) -> None:
    """Say which baselined strategies were recorded with contract violations (the gate holds them to that count)."""
    for spec, entry in old.strategies.items():
        count = sum(cell.get("metrics", {}).get("violations") or 0 for cell in entry.values())
        if count:
            report.notes.append(f"{spec} was baselined with {count:,.0f} contract violations")


def _update_baseline(report: RegressReport, old: Baseline | None, now: dict[tuple[str, float], dict], digest: str,
                     tokens: TokenRatios) -> None:
    """Write this run's numbers as the baseline, with ``old``'s tolerances and its entries of the strategies not run."""
    tolerances = old.tolerances if old is not None else parse_tolerances({}, "defaults")
    entries: dict[str, dict] = {}
    for (strategy, budget), cell in now.items():
        entries.setdefault(strategy, {"budgets": {}})["budgets"][budget_key(budget)] = cell
    # Strategies not selected this time (only when the old baseline is comparable) keep their numbers;
    # missing ones are dropped.
    entries.update({s: {"budgets": old.strategies[s]} for s in report.not_run})
    if report.missing:
        report.notes.append(f"dropped from the baseline (cannot be loaded): {', '.join(report.missing)}")
    doc = baseline_document(report.suite, digest, tokens, tolerances, report.latency_settings, entries)
    check_new_baseline(report.baseline_path, doc)
    write_baseline(report.baseline_path, doc)
