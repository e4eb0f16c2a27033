"""Grid runner: identical numbers however it runs (1 or 2 processes, Dask), violations, bootstrap CIs."""

from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctxbench.sim.errors import ContractViolation, InputError
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.measures import DETERMINISTIC_METRICS
from ctxbench.sim.analysis.metrics import aggregate, bootstrap_ci
from ctxbench.strategies.errors import StrategyLoadError

KEYS = ["trace", "session", "strategy", "budget_tokens"]
BUDGETS = (20_000, 200_000)
STRATEGIES = ("lru", "importance", "lru?max_entries=20")
BROKEN = "broken_strategies:raises_on_turn_3"


@pytest.fixture(scope="module")
def traces():
    generate = pytest.importorskip("ctxbench.traces.generate").generate
    return {"mixed": generate("mixed", sessions=3, seed=11),
            "debug-loop": generate("debug-loop", sessions=2, seed=12, arms=2)}


@pytest.fixture
def broken(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    return BROKEN


def deterministic(results: pd.DataFrame) -> pd.DataFrame:
    cols = KEYS + [c for c in DETERMINISTIC_METRICS if c in results.columns]
    return results[cols].sort_values(KEYS).reset_index(drop=True)


def test_one_and_two_workers_give_identical_numbers(traces):
    one = run_grid(traces, STRATEGIES, BUDGETS, workers=1, progress=False)
    two = run_grid(traces, STRATEGIES, BUDGETS, workers=2, progress=False)
    assert len(one.results) == 5 * len(STRATEGIES) * len(BUDGETS)
    assert sorted(one.results["arms"].unique()) == [1, 2]   # single- and multi-arm sessions both run
    pd.testing.assert_frame_equal(deterministic(one.results), deterministic(two.results))
    # Rows come back in task order either way, and the per-turn logs agree too.
    assert one.results[KEYS].equals(two.results[KEYS])
    turn_cols = [c for c in one.turns.columns if c != "evict_ns"]
    pd.testing.assert_frame_equal(one.turns[turn_cols], two.turns[turn_cols])
    assert (one.results["violations"] == 0).all()
    assert one.results["misses"].sum() > 0 and one.results["evictions"].sum() > 0


def test_lenient_sweep_counts_violations_and_leaves_others_alone(traces, broken):
    clean = run_grid(traces, ("lru", "importance"), BUDGETS, workers=1, progress=False)
    mixed = run_grid(traces, ("lru", broken, "importance"), BUDGETS, workers=2, progress=False, strict=False)
    others = mixed.results[mixed.results["strategy"] != broken]
    pd.testing.assert_frame_equal(deterministic(others), deterministic(clean.results))
    bad = mixed.results[mixed.results["strategy"] == broken]
    # One violation per (session, budget) -- per arm in the two-arm sessions.
    assert bad["violations"].tolist() == bad["arms"].tolist()
    assert len(mixed.violations) == int(bad["violations"].sum())
    assert all(f"strategy '{broken}'" in v and "raised RuntimeError" in v for v in mixed.violations)
    assert all("session '" in v and ", turn " in v for v in mixed.violations)


@pytest.mark.parametrize("workers", [1, 2])
def test_strict_sweep_stops_with_a_named_violation(traces, broken, workers):
    with pytest.raises(ContractViolation, match=rf"strategy '{BROKEN}', session '[^']+'.*, turn \d+: raised "
                                                rf"RuntimeError: deliberate failure"):
        run_grid(traces, ("lru", broken), BUDGETS, workers=workers, progress=False)


def test_bad_grid_input_fails_before_any_work(traces):
    for budgets in ([0], [-5], [float("nan")], [1e30], [10**30], []):
        with pytest.raises(InputError):
            run_grid(traces, ("lru",), budgets, workers=1, progress=False)
    with pytest.raises(StrategyLoadError):
        run_grid(traces, ("lru", "no_such_module_xyz:factory"), workers=1, progress=False)
    with pytest.raises(InputError, match="named twice"):
        run_grid(traces, ("lru", "lru"), workers=1, progress=False)
    with pytest.raises(InputError, match="no strategy"):
        run_grid(traces, (), workers=1, progress=False)


@pytest.mark.skipif(find_spec("distributed") is None, reason="dask[distributed] not installed")
def test_dask_local_cluster_gives_the_local_numbers(traces):
    from distributed import LocalCluster

    local = run_grid(traces, ("lru", "importance"), BUDGETS, workers=1, progress=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        remote = run_grid(traces, ("lru", "importance"), BUDGETS, scheduler=cluster.scheduler_address,
                          progress=False)
    pd.testing.assert_frame_equal(deterministic(local.results), deterministic(remote.results))
    assert local.results[KEYS].equals(remote.results[KEYS])


@pytest.mark.slow
@pytest.mark.slow   # waits out the client's 10 s connection timeout
def test_unreachable_dask_scheduler_is_bad_input(traces):
    pytest.importorskip("distributed")
    with pytest.raises(InputError, match="cannot reach Dask scheduler"):
        run_grid(traces, ("lru",), scheduler="tcp://127.0.0.1:9", progress=False)


# ----- bootstrap confidence intervals -------------------------------------------------------

def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    rng = np.random.default_rng(5)
    values = rng.lognormal(0, 1, size=25)
    mean, lo, hi = bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=3) == (mean, lo, hi)
    assert mean == pytest.approx(values.mean())
    assert lo < mean < hi
    _, lo99, hi99 = bootstrap_ci(values, level=0.99, seed=3)
    _, lo80, hi80 = bootstrap_ci(values, level=0.80, seed=3)
    assert lo99 <= lo <= lo80 and hi80 <= hi <= hi99
    _, lo_big, hi_big = bootstrap_ci(np.tile(values, 16), seed=3)   # more sessions, tighter CI
    assert hi_big - lo_big < hi - lo
    assert bootstrap_ci([4.0]) == (4.0, 4.0, 4.0)
    assert all(np.isnan(bootstrap_ci([])))


def test_aggregate_gives_one_row_per_group_with_ordered_bounds(traces):
    results = run_grid(traces, ("lru", "importance"), BUDGETS, workers=1, progress=False).results
    table = aggregate(results, ("miss_rate", "reread_tokens"), seed=1)
    assert len(table) == 2 * len(BUDGETS)
    assert (table["sessions"] == 5).all()
    for metric in ("miss_rate", "reread_tokens"):
        assert (table[f"{metric}_lo"] <= table[metric] + 1e-12).all()
        assert (table[metric] <= table[f"{metric}_hi"] + 1e-12).all()
    pd.testing.assert_frame_equal(table, aggregate(results, ("miss_rate", "reread_tokens"), seed=1))
