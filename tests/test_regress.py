"""The regression gate: baseline round trip, regressions named, bad input, latency ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.sim.analysis.grid import as_sessions
from ctxbench.sim.analysis.latency import LatencySettings, latency_ratio, measure_latency, time_interleaved
from ctxbench.sim.analysis.regress import (DEFAULT_BASELINE, GATED_METRICS, LATENCY_METRIC, Tolerance, load_baseline, run_regress,
                         summarise_suite, traces_digest)
from ctxbench.sim.engine.suite import SUITES, Suite, build_suite, get_suite
from ctxbench.strategies.contract import ContextBudget, ContextEntry, ContextState
from ctxbench.strategies.lru import create_lru_context_strategy
from ctxbench.strategies.registry import builtin_names, register, unregister
from ctxbench.strategies.stateful import StatefulContextStrategy

ROOT = Path(__file__).resolve().parent.parent
TINY = Suite("tiny-regress", "two short sessions for the gate's tests", seed=3,
             presets=(("debug-loop", 1), ("file-walk", 1)), budgets_tokens=(4_000, 20_000),
             overrides={"debug-loop": {"tool_calls": 60}, "file-walk": {"tool_calls": 60}})
FAST = LatencySettings(states=8, repeats=3)
PAIR = ["lru", "importance"]


@pytest.fixture
def tiny_suite(monkeypatch):
    """TINY registered as a named suite, so the command line can run it."""
    monkeypatch.setitem(SUITES, TINY.name, TINY)
    return TINY


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """A baseline written by --update for lru and importance on TINY (read-only for tests)."""
    path = tmp_path_factory.mktemp("regress") / "baseline.json"
    report = run_regress(path, suite=TINY, strategies=PAIR, update=True, workers=1, latency=FAST)
    assert report.updated and report.exit_code == 0 and path.is_file()
    return path


def _copy(src: Path, dst: Path, edit=None) -> Path:
    doc = json.loads(src.read_text())
    if edit is not None:
        edit(doc)
    dst.write_text(json.dumps(doc))
    return dst


def _cell(doc: dict, strategy: str, budget: int = 20_000) -> dict:
    return doc["strategies"][strategy]["budgets"][str(budget)]


# ----- the gate end to end -----------------------------------------------------------------

def test_fresh_baseline_passes_with_exact_replay(fresh):
    report = run_regress(fresh, suite=TINY, strategies=PAIR, workers=1, latency=FAST)
    assert report.exit_code == 0 and report.compared
    assert not report.regressions and not report.new and not report.missing
    deterministic = [c for c in report.checks if c.metric != LATENCY_METRIC]
    assert len(deterministic) == len(PAIR) * len(TINY.budgets_tokens) * len(GATED_METRICS)
    assert all(c.status == "same" for c in deterministic)
    assert report.replay and all(same == n == 2 for same, n in report.replay.values())


def test_baseline_records_suite_version_seed_and_tolerances(fresh):
    doc = json.loads(fresh.read_text())
    assert doc["suite"] == TINY.to_dict() and doc["seed"] == TINY.seed
    assert doc["ctxbench_version"] and doc["traces_digest"] == traces_digest(as_sessions(build_suite(TINY)))
    assert doc["tolerances"]["capacity_misses"] == {"rel": 0.0}
    assert doc["tolerances"][LATENCY_METRIC] == {"factor": 1.5}
    cell = _cell(doc, "importance")
    assert set(GATED_METRICS) <= set(cell["metrics"]) and cell["metrics"][LATENCY_METRIC] > 0
    assert _cell(doc, "lru")["metrics"][LATENCY_METRIC] == 1.0
    assert len(cell["log_hashes"]) == 2


def test_better_baseline_fails_naming_the_metric(fresh, tmp_path, tiny_suite, capsys):
    def better(doc):
        _cell(doc, "importance")["metrics"]["capacity_misses"] -= 1
        _cell(doc, "lru", 4_000)["metrics"]["reread_tokens"] *= 0.5
    path = _copy(fresh, tmp_path / "b.json", better)
    report = run_regress(path, suite=TINY, strategies=PAIR, workers=1, latency=FAST)
    assert report.exit_code == 1
    assert {(c.strategy, c.budget_tokens, c.metric) for c in report.regressions} == {
        ("importance", 20_000, "capacity_misses"), ("lru", 4_000, "reread_tokens")}
    bad = next(c for c in report.regressions if c.metric == "capacity_misses")
    assert bad.now == bad.baseline + 1 and bad.tolerance == "exact"

    assert main(["regress", "--baseline", str(path), "--strategy", *PAIR, "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "Regressions" in out and "capacity_misses" in out and "reread_tokens" in out and "REGRESSED" in out


def test_worse_baseline_is_an_improvement_not_a_failure(fresh, tmp_path):
    path = _copy(fresh, tmp_path / "b.json",
                 lambda d: _cell(d, "importance")["metrics"].__setitem__("evictions", 10**6))
    report = run_regress(path, suite=TINY, strategies=PAIR, workers=1, latency=FAST)
    assert report.exit_code == 0
    assert [(c.strategy, c.metric, c.status) for c in report.improvements] == [
        ("importance", "evictions", "improved")]


def test_tolerance_from_the_file_allows_a_small_worsening(fresh, tmp_path):
    def loosen(doc):
        doc["tolerances"]["capacity_misses"] = {"rel": 0.5, "abs": 2}
        _cell(doc, "importance")["metrics"]["capacity_misses"] -= 2
    report = run_regress(_copy(fresh, tmp_path / "b.json", loosen), suite=TINY, strategies=PAIR, workers=1,
                         latency=FAST)
    assert report.exit_code == 0
    check = next(c for c in report.checks if c.strategy == "importance" and c.budget_tokens == 20_000
                 and c.metric == "capacity_misses")
    assert check.status == "within" and check.tolerance == "+50% or +2"


def test_latency_is_not_gated_across_a_change_of_compiled_kernels(fresh, tmp_path, monkeypatch):
    import ctxbench.strategies.compiled as kernels

    recorded = json.loads(fresh.read_text())["compiled_kernels"]
    assert recorded is kernels.ENABLED
    # A baseline whose importance ratio this run cannot reach: gated, it would regress.
    path = _copy(fresh, tmp_path / "b.json", lambda d: _cell(d, "importance")["metrics"].__setitem__(LATENCY_METRIC, 1e-3))
    assert run_regress(path, suite=TINY, strategies=PAIR, workers=1, latency=FAST).exit_code == 1
    monkeypatch.setattr(kernels, "ENABLED", not recorded)
    report = run_regress(path, suite=TINY, strategies=PAIR, workers=1, latency=FAST)
    assert report.exit_code == 0
    latency = {c.status for c in report.checks if c.metric == LATENCY_METRIC}
    assert latency == {"not comparable"}
    assert any("latency not gated" in note for note in report.notes)
    with pytest.raises(InputError, match="compiled_kernels"):
        load_baseline(_copy(fresh, tmp_path / "c.json", lambda d: d.__setitem__("compiled_kernels", "yes")))


def test_update_rewrites_a_baseline_that_then_passes_and_keeps_tolerances(fresh, tmp_path, tiny_suite, capsys):
    def tamper(doc):
        doc["tolerances"]["evictions"] = {"rel": 0.1}
        _cell(doc, "importance")["metrics"]["capacity_misses"] -= 3
    path = _copy(fresh, tmp_path / "b.json", tamper)
    assert main(["regress", "--baseline", str(path), "--strategy", *PAIR, "--workers", "1", "--update"]) == 0
    out = capsys.readouterr().out
    assert "capacity_misses" in out and "baseline written" in out
    assert json.loads(path.read_text())["tolerances"]["evictions"] == {"rel": 0.1}
    assert not list(tmp_path.glob(".*tmp"))
    assert main(["regress", "--baseline", str(path), "--strategy", *PAIR, "--workers", "1"]) == 0
    assert "ok:" in capsys.readouterr().out


def test_update_creates_a_missing_baseline(tmp_path, tiny_suite):
    path = tmp_path / "sub" / "new.json"
    assert main(["regress", "--baseline", str(path), "--suite", TINY.name, "--strategy", "lru",
                 "--workers", "1", "--update"]) == 0
    assert set(json.loads(path.read_text())["strategies"]) == {"lru"}


def test_new_and_not_run_strategies_are_reported_not_gated(fresh):
    report = run_regress(fresh, suite=TINY, strategies=["importance", "lru?max_entries=5"], workers=1,
                         latency=FAST)
    assert report.exit_code == 0
    assert report.new == ["lru?max_entries=5"] and report.not_run == ["lru"]
    assert {c.strategy for c in report.checks} == {"importance"}


def test_missing_baselined_strategy_fails_the_default_selection(fresh, tmp_path):
    def add(doc):
        doc["strategies"]["lru?no_such_option=1"] = doc["strategies"]["lru"]
        for name in builtin_names():  # keep the run small: every built-in is in the baseline
            doc["strategies"].setdefault(name, doc["strategies"]["lru"])
    path = _copy(fresh, tmp_path / "b.json", add)
    report = run_regress(path, suite=TINY, workers=1, latency=LatencySettings(states=2, repeats=1))
    assert report.exit_code == 1 and list(report.missing) == ["lru?no_such_option=1"]
    assert "no_such_option" in report.missing["lru?no_such_option=1"]
    updated = run_regress(path, suite=TINY, update=True, workers=1, latency=LatencySettings(states=2, repeats=1))
    assert updated.exit_code == 0 and "lru?no_such_option=1" not in json.loads(path.read_text())["strategies"]


def test_json_output_parses(fresh, tiny_suite, capsys):
    assert main(["regress", "--baseline", str(fresh), "--strategy", *PAIR, "--workers", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "ok" and doc["exit_code"] == 0 and doc["regressions"] == []
    assert doc["suite"]["name"] == TINY.name
    ratios = {(r["strategy"], r["budget_tokens"]): r for r in doc["latency"]["ratios"]}
    assert ratios[("lru", 20_000)]["ratio"] == 1.0 and ratios[("importance", 20_000)]["ratio"] > 0


# ----- bad input: exit 2, one clear line, nothing written ----------------------------------------

def _exit2(capsys, *argv) -> str:
    assert main(["regress", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ctxbench regress: error:")
    return err


def test_missing_baseline_exits_2(tmp_path, capsys):
    err = _exit2(capsys, "--baseline", str(tmp_path / "none.json"))
    assert "none.json not found" in err and "--update" in err


@pytest.mark.parametrize("text, expect", [
    ("{not json", "not valid JSON (line 1"),
    ('["a list"]', "not a ctxbench regress baseline"),
    ('{"format": "ctxbench-regress-baseline", "format_version": 99}', "format_version 99"),
])
def test_corrupt_baseline_exits_2_and_update_does_not_overwrite(tmp_path, capsys, text, expect):
    path = tmp_path / "b.json"
    path.write_text(text)
    assert expect in _exit2(capsys, "--baseline", str(path))
    assert expect in _exit2(capsys, "--baseline", str(path), "--update")
    assert path.read_text() == text


@pytest.mark.parametrize("edit, expect", [
    (lambda d: d["tolerances"].__setitem__("evict_ratio", {"factor": 0.5}),
     'tolerances["evict_ratio"]["factor"]: expected a finite number >= 1, got 0.5'),
    (lambda d: d["tolerances"].__setitem__("latency", {"rel": 0}), 'tolerances["latency"]: not a known metric'),
    (lambda d: _cell(d, "lru")["metrics"].pop("evictions"),
     'strategies["lru"]["budgets"]["20000"]["metrics"]: missing "evictions"'),
    (lambda d: _cell(d, "lru")["metrics"].__setitem__("miss_rate", "low"),
     'strategies["lru"]["budgets"]["20000"]["metrics"]["miss_rate"]: expected a finite number >= 0 and <= 1, '
     'got "low"'),
])
def test_malformed_fields_are_named(fresh, tmp_path, tiny_suite, capsys, edit, expect):
    path = _copy(fresh, tmp_path / "b.json", edit)
    assert expect in _exit2(capsys, "--baseline", str(path))


def test_baseline_for_another_suite_definition_exits_2(fresh, tmp_path, tiny_suite, capsys):
    err = _exit2(capsys, "--baseline", str(fresh), "--suite", "quick")
    assert "different definition" in err and "--update" in err
    path = _copy(fresh, tmp_path / "b.json", lambda d: d.update(seed=4, suite={**d["suite"], "seed": 4}))
    assert "differs in: seed" in _exit2(capsys, "--baseline", str(path))


def test_baseline_from_other_traces_exits_2(fresh, tmp_path, tiny_suite, capsys):
    path = _copy(fresh, tmp_path / "b.json", lambda d: d.__setitem__("traces_digest", "0" * 64))
    assert "other traces" in _exit2(capsys, "--baseline", str(path), "--strategy", "lru")


def test_unknown_suite_and_strategy_exit_2(fresh, tiny_suite, capsys):
    assert "unknown suite 'nope'" in _exit2(capsys, "--baseline", str(fresh), "--suite", "nope")
    assert "unknown strategy 'nope'" in _exit2(capsys, "--baseline", str(fresh), "--strategy", "nope")


# ----- latency ratios: same run, same states, injected timings -----------------------------------

def test_latency_ratio_takes_each_states_fastest_repeat():
    ref = np.array([[100, 1000], [100, 1000], [100, 1000], [100, 1000]])
    times = ref * 3
    times[1, :] *= 50       # one disturbed repeat (another process ran)
    times[2, 0] += 10**6
    r = latency_ratio(times, ref)
    assert r.ratio == 3.0 and r.states == 2 and r.repeats == 4
    assert 0 <= r.spread < 0.5
    assert latency_ratio(ref, ref).spread == 0.0


def test_latency_ratio_rejects_mismatched_or_empty_timings():
    with pytest.raises(ValueError):
        latency_ratio([[1, 2]], [[1, 2, 3]])
    with pytest.raises(ValueError):
        latency_ratio([[1]], [[0]])


class FakeClock:
    """A clock that ticks 100 per reading."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 100
        return self.now


class SlowLru:
    """lru's answer, costing 300 extra ticks of ``clock``: it measures 4x lru."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.inner = clock, create_lru_context_strategy()

    def evict(self, state, budget):
        self.clock.now += 300
        return self.inner.evict(state, budget)


class SeenBy:
    """Records which states it was asked about, in order."""

    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def evict(self, state, budget):
        self.log.append((self.name, id(state)))
        return []


def test_time_interleaved_alternates_on_the_same_states():
    from ctxbench.sim.analysis.latency import _Recorded

    states = [_Recorded(ContextState([ContextEntry(f"f{i}:0", f"f{i}", i, 10)]), ContextBudget(5))
              for i in range(3)]
    log: list = []
    clock = FakeClock()
    t, ref = time_interleaved(states, SeenBy(log, "s"), SeenBy(log, "ref"), repeats=2, clock=clock)
    assert t.shape == ref.shape == (2, 3) and (t == 100).all() and (ref == 100).all()
    timed = log[6:]  # after the warm-up pass
    assert [who for who, _ in timed] == ["ref", "s", "s", "ref", "ref", "s", "s", "ref", "ref", "s", "s", "ref"]
    assert all(timed[k][1] == timed[k + 1][1] for k in range(0, 12, 2))


class Fifo(StatefulContextStrategy):
    """First in, first out: a stateful strategy whose evict consumes its queue."""

    def __init__(self) -> None:
        self.queue: list[str] = []

    def reset(self) -> None:
        self.queue = []

    def on_insert(self, entry) -> None:
        self.queue.append(entry.id)

    def on_remove(self, entry_id, evicted) -> None:
        if not evicted:
            self.queue.remove(entry_id)

    def evict(self, state, budget):
        sizes = {e.id: e.size_bytes for e in state}
        total, out = sum(sizes.values()), []
        while total > budget.max_bytes and self.queue:
            victim = self.queue.pop(0)
            out.append(victim)
            total -= sizes[victim]
        return out


@pytest.fixture
def clock():
    """A fake clock, and two test strategies registered for the test's duration."""
    fake = FakeClock()
    register("test-slow-lru", lambda: SlowLru(fake), override=True)
    register("test-fifo", Fifo, override=True)
    yield fake
    unregister("test-slow-lru")
    unregister("test-fifo")


def test_ratios_come_from_the_same_run(clock, tmp_path):
    sessions = as_sessions(build_suite(TINY))
    ratios = measure_latency(sessions, ["lru", "test-slow-lru", "test-fifo"], [4_000], FAST, clock=clock)
    assert ratios[("lru", 4_000)].ratio == 1.0
    slow = ratios[("test-slow-lru", 4_000)]
    assert slow.ratio == 4.0 and slow.spread == 0.0 and slow.states >= 2 and slow.repeats == FAST.repeats
    assert ratios[("test-fifo", 4_000)].ratio == 1.0  # timed on copies: no clock cost, and no error

    path = tmp_path / "b.json"
    run_regress(path, suite=TINY, strategies=["lru", "test-slow-lru"], update=True, workers=1, latency=FAST,
                clock=clock)
    doc = json.loads(path.read_text())
    assert _cell(doc, "test-slow-lru", 4_000)["metrics"][LATENCY_METRIC] == 4.0
    _cell(doc, "test-slow-lru", 4_000)["metrics"][LATENCY_METRIC] = 2.0  # 4.0 > 2.0 x 1.5
    _cell(doc, "test-slow-lru")["metrics"][LATENCY_METRIC] = 3.0        # 4.0 <= 3.0 x 1.5
    path.write_text(json.dumps(doc))
    report = run_regress(path, suite=TINY, strategies=["lru", "test-slow-lru"], workers=1, latency=FAST,
                         clock=clock)
    assert [(c.strategy, c.budget_tokens, c.metric, c.status) for c in report.regressions] == [
        ("test-slow-lru", 4_000, LATENCY_METRIC, "regressed")]


def test_stateful_strategy_is_gated_and_replays_exactly(clock, tmp_path):
    path = tmp_path / "b.json"
    first = run_regress(path, suite=TINY, strategies=["test-fifo"], update=True, workers=1, latency=FAST)
    assert _cell(json.loads(path.read_text()), "test-fifo")["pure"] is False
    assert isinstance(first.latency[("test-fifo", 4_000)].ratio, float)
    again = run_regress(path, suite=TINY, strategies=["test-fifo"], workers=1, latency=FAST)
    assert again.exit_code == 0 and all(s == n for s, n in again.replay.values())


# ----- pieces --------------------------------------------------------------------------------

def test_summarise_suite_sums_counts_and_pools_the_miss_rate():
    rows = pd.DataFrame({
        "trace": ["t", "t"], "session": ["a", "b"], "strategy": ["x", "x"], "pure": [True, True],
        "budget_tokens": [100, 100], "accesses": [10, 30], "misses": [5, 3], "compulsory_misses": [4, 2],
        "capacity_misses": [1, 1], "invalidation_misses": [0, 0], "reread_bytes": [38, 0],
        "evictions": [2, 3], "violations": [0, 0], "log_hash": ["a" * 64, "b" * 64],
    })
    cell = summarise_suite(rows, bytes_per_token=3.8)[("x", 100)]
    assert cell["metrics"]["miss_rate"] == 8 / 40 and cell["metrics"]["reread_tokens"] == 10.0
    assert cell["metrics"]["capacity_misses"] == 2 and cell["metrics"]["evictions"] == 5
    assert cell["log_hashes"] == {"t/a": "a" * 16, "t/b": "b" * 16} and cell["sessions"] == 2


def test_a_metric_marked_gated_in_the_declaration_is_gated_with_no_other_edit(tmp_path):
    # In a process of its own: the declaration is read when the modules are imported.
    code = f"""
import dataclasses, json, sys
import ctxbench.sim.engine.measures as measures
measures.METRICS = tuple(dataclasses.replace(m, gated=m.gated or m.name == "capacity_miss_rate")
                         for m in measures.METRICS)
measures.GATED_METRICS = tuple(m.name for m in measures.METRICS if m.gated)
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_regress import FAST, TINY
from ctxbench.sim.analysis.regress import run_regress
path = {str(tmp_path / "b.json")!r}
run_regress(path, suite=TINY, strategies=["lru"], update=True, workers=1, latency=FAST)
report = run_regress(path, suite=TINY, strategies=["lru"], workers=1, latency=FAST)
cell = json.load(open(path))["strategies"]["lru"]["budgets"]["4000"]
print(json.dumps({{"checks": [[c.metric, c.status] for c in report.checks], "cell": cell}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert ["capacity_miss_rate", "same"] in out["checks"]
    assert len(out["checks"]) == len(TINY.budgets_tokens) * (len(GATED_METRICS) + 2)   # + it + latency
    metrics = out["cell"]["metrics"]
    assert metrics["capacity_miss_rate"] == metrics["capacity_misses"] / out["cell"]["accesses"] > 0


def test_tolerance_judgement():
    exact, loose, ratio = Tolerance(), Tolerance(rel=0.1), Tolerance(factor=1.5)
    assert [exact.judge(100, v) for v in (100, 99, 101)] == ["same", "improved", "regressed"]
    assert [loose.judge(100, v) for v in (110, 111)] == ["within", "regressed"]
    assert [ratio.judge(2.0, v) for v in (1.2, 1.5, 3.0, 3.01)] == ["improved", "within", "within", "regressed"]
    with pytest.raises(InputError, match="factor"):
        Tolerance.parse({"factor": 0.9}, "t")
    with pytest.raises(InputError, match="'rel' and/or 'abs'"):
        Tolerance.parse({"rel": 0.1, "factor": 2}, "t")


def test_committed_baseline_matches_the_regress_suite():
    path = ROOT / DEFAULT_BASELINE
    baseline = load_baseline(path)
    suite = get_suite(baseline.suite["name"])
    hint = f"{path} is stale: rerun 'ctxbench regress --update', review the diff and commit it"
    assert baseline.suite == suite.to_dict(), hint
    assert baseline.traces_digest == traces_digest(as_sessions(build_suite(suite))), hint
    assert set(builtin_names()) <= set(baseline.strategies), hint


@pytest.mark.slow
@pytest.mark.slow
def test_gate_passes_on_the_committed_baseline():
    report = run_regress(ROOT / DEFAULT_BASELINE)
    assert report.exit_code == 0, [(c.strategy, c.budget_tokens, c.metric, c.baseline, c.now) for c in report.checks
                                   if c.status == "regressed"]
