"""`ctxbench tune`: declared options, the split, the choice, a case whose best setting is known, and the CLI."""

from __future__ import annotations

import json
import math
import signal
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxbench.sim.analysis.tune import (MAX_TRIALS, SearchParam, _Table, choose, declared_options, parse_constraint,
                               parse_objective, search_space, session_folds, settings_to_try, tune, window_tokens,
                               with_options)
from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.strategies.errors import StrategyInputError, StrategyLoadError
from ctxbench.strategies.registry import builtin_names, make
from ctxbench.strategies.tunable import Tunable, read_declaration
from ctxbench.traces.generate import generate

COLUMNS = ["session", "turn", "ts_ms", "op", "path", "size_bytes"]


def cyclic(files: int, sessions: int = 6, turns: int = 40) -> pd.DataFrame:
    """Sessions that read ``files`` files in turn, one a turn: observation masking that keeps the last n results
    re-fetches every re-read when n < files and none when n >= files, and bills more input the larger n is."""
    rows = [(f"s{s}", t, 1_000 * t, "read", f"src/f{t % files}.py", 3_000 + 500 * (t % files) + 100 * s)
            for s in range(sessions) for t in range(turns)]
    return pd.DataFrame(rows, columns=COLUMNS)


KNOWN = "input_tokens + 1000*reread_tokens"


# ----- declarations -----------------------------------------------------------------------------------------

def _outside(t: Tunable) -> list:
    """Values just outside what ``t`` accepts."""
    below = t.low if t.open_low else (t.low - 1 if t.type == "int" else t.low - 0.01)
    above = [] if math.isinf(t.high) else [t.high + 1 if t.type == "int" else t.high + 0.01]
    return [below, *above]


DECLARED = [(name, option) for name in builtin_names(kind=None) for option in type(make(name)).TUNABLE]


def test_every_builtin_declares_the_options_the_issue_names():
    names = set(DECLARED)
    for expected in [("claude-code", "trigger_tokens"), ("claude-code", "recent_files"), ("observation-masking", "n"),
                     ("clear-tool-uses", "keep"), ("clear-tool-uses", "trigger_tokens"),
                     ("openhands-summarizing", "max_size"), ("openhands-summarizing", "keep_first"),
                     ("codex", "trigger_fraction"), ("gemini-cli", "trigger_fraction"),
                     ("gemini-cli", "preserve_fraction"), ("lru", "max_entries")]:
        assert expected in names
    assert all(type(make(name)).TUNABLE for name in builtin_names(kind=None))


@pytest.mark.parametrize("name, option", DECLARED, ids=[f"{n}-{o}" for n, o in DECLARED])
def test_a_declared_range_is_the_range_a_spec_is_held_to(name, option):
    t = type(make(name)).TUNABLE[option]
    assert t.accepts(int(t.low) if t.type == "int" else t.low) != t.open_low
    if math.isfinite(t.high):
        assert t.accepts(int(t.high) if t.type == "int" else t.high)
    for value in _outside(t):
        shown = int(value) if t.type == "int" else value
        assert not t.accepts(shown)
        with pytest.raises(StrategyLoadError, match=option):
            make(f"{name}?{option}={shown}")


def test_a_declaration_is_read_as_data_and_checked():
    good = read_declaration([{"name": "n", "type": "int", "low": 0, "high": 100, "search": [1, 50]}], "mine")
    assert good["n"].check(7) == 7 and good["n"].range_text() == "[0, 100]"
    for entry, message in [({"name": "n", "type": "int", "low": 0, "high": 100}, "missing 'search'"),
                           ({"name": "n", "type": "text", "low": 0, "high": 1, "search": [0, 1]}, "type must be"),
                           ({"name": "n", "type": "int", "low": 0, "high": 10, "search": [1, 50]}, "leaves its range"),
                           ({"name": "n", "type": "int", "low": 5, "high": 1, "search": [1, 2]}, "must be below"),
                           ({"name": "n", "type": "int", "low": 0, "high": 9, "search": [1, 2], "log": "yes"},
                            "log must be true or false"),
                           ({"name": "n", "type": "int", "low": 0, "high": 9, "search": [1, 2], "speed": 1},
                            "unknown key 'speed'"),
                           ({"name": "2n", "type": "int", "low": 0, "high": 9, "search": [1, 2]}, "identifier")]:
        with pytest.raises(StrategyInputError, match=message):
            read_declaration([entry], "mine")


def test_a_combination_tunes_its_strategy_and_the_compaction_its_policy_runs():
    declared = declared_options("lru+compaction")
    assert {name: part for name, (_, part) in declared.items()} == {"max_entries": 0, "trigger_tokens": 1}
    space = search_space("lru+compaction", ["max_entries=20:40", "trigger_tokens=150000:180000"])
    spec = with_options("lru+compaction", {"max_entries": 30, "trigger_tokens": 160000}, space)
    assert spec == "lru?max_entries=30+compaction?trigger_tokens=160000"
    assert make(spec).policy.trigger_tokens == 160000 and make(spec).strategy.max_entries == 30


def test_the_window_bounds_a_window_option():
    assert search_space("claude-code", ["trigger_tokens"], 100_000)[0].high == window_tokens(100_000)
    with pytest.raises(InputError, match="more than the 200,000-token window"):
        search_space("claude-code", ["trigger_tokens=150000:300000"])


# ----- parameter validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("param, message", [
    ("x=1:5", "has no tunable option 'x'; it declares: n"),
    ("n=-1:5", "-1 is outside n's declared range"),
    ("n=5:1", "LOW must be below HIGH"),
    ("n=1.5:4", "not a whole number"),
    ("n=1:5:0", "STEP must be above 0"),
    ("n=1:5:9", "STEP must be above 0 and at most"),
    ("n=1", "expected n=LOW:HIGH"),
    ("n=a:5", "'a' is not a number"),
    ("n=1:nan", "not a finite number"),
    ("=1:2", "expected NAME=LOW:HIGH"),
])
def test_a_bad_param_is_refused_naming_it(param, message):
    with pytest.raises(InputError, match=message):
        search_space("observation-masking", [param])


def test_a_param_the_spec_sets_or_given_twice_is_refused():
    with pytest.raises(InputError, match="already sets it"):
        search_space("observation-masking?n=3", ["n=1:5"])
    with pytest.raises(InputError, match="given twice"):
        search_space("observation-masking", ["n=1:5", "n=2:6"])
    with pytest.raises(InputError, match="declares no tunable options"):
        search_space("cmd:python -m nothing?kind=policy")


@pytest.mark.parametrize("text, message", [
    ("miss_rates", "cannot compute 'miss_rates'"), ("evict_p99_ns", "is timed"),
    ("cost_usd", "needs --price"), ("cost_input_tokens + -2*reread_tokens", "weight must be above 0"),
    ("cost_input_tokens + 0*reread_tokens", "weight must be above 0"), ("", "expected METRIC"),
    ("reread_tokens + reread_tokens", "appears twice")])
def test_an_objective_the_results_cannot_compute_is_refused(text, message):
    with pytest.raises(InputError, match=message):
        parse_objective(text)


def test_weights_may_be_written_in_any_float_notation():
    assert parse_objective("cost_input_tokens+1e+3*reread_tokens").terms == ((1.0, "cost_input_tokens"),
                                                                              (1000.0, "reread_tokens"))


def test_constraints_parse_and_hold():
    c = parse_constraint("reread_tokens <= 1.5*default")
    assert (c.metric, c.op, c.factor) == ("reread_tokens", "<=", 1.5)
    assert c.holds(np.array([1.0, 1.5, 1.6, np.nan]), 1.0).tolist() == [True, True, False, False]
    assert parse_constraint("compactions>=2").holds(np.array([1.0, 2.0]), 0.0).tolist() == [False, True]
    for text in ("reread_tokens<default", "reread_tokens<=twice", "evict_p50_ns<=default", "x<=1"):
        with pytest.raises(InputError):
            parse_constraint(text)


# ----- the settings tried -----------------------------------------------------------------------------------

def _param(name="a", kind="int", low=0, high=100, log=False, step=None):
    return SearchParam(Tunable(name, kind, low, high, (low, high), log=log), 0, low, high, step)


def test_a_grid_for_one_and_two_options_every_step_when_given():
    one = settings_to_try([_param(high=10)], trials=64)
    assert [s["a"] for s in one] == list(range(11))
    two = settings_to_try([_param(), _param("b", "float", 0, 1)], trials=16)
    assert len(two) == 16 and {s["b"] for s in two} == {0.0, 1 / 3, 2 / 3, 1.0} or len({s["b"] for s in two}) == 4
    stepped = settings_to_try([_param(step=25), _param("b", "float", 0.5, 1.0, step=0.25)], trials=1)
    assert sorted({s["a"] for s in stepped}) == [0, 25, 50, 75, 100] and sorted({s["b"] for s in stepped}) == [0.5, 0.75, 1.0]
    with pytest.raises(InputError, match="more than 10,000"):
        settings_to_try([_param(high=10**6, step=1), _param("b", high=10**6, step=1)])
    with pytest.raises(InputError, match="--trials"):
        settings_to_try([_param()], trials=MAX_TRIALS + 1)


def test_log_spacing_and_whole_numbers():
    values = [s["a"] for s in settings_to_try([_param(low=10, high=1000, log=True)], trials=3)]
    assert values == [10, 100, 1000]


def test_beyond_two_options_a_seeded_latin_hypercube():
    space = [_param("a", "float", 0, 1), _param("b", "float", 0, 1), _param("c", "float", 0, 1)]
    first = settings_to_try(space, 20, np.random.default_rng(3))
    assert first == settings_to_try(space, 20, np.random.default_rng(3))
    assert first != settings_to_try(space, 20, np.random.default_rng(4))
    for name in "abc":   # one value in each twentieth of every option's range
        assert sorted(int(s[name] * 20) for s in first) == list(range(20))


# ----- the split and the choice -----------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a.csv", "b.csv", "c.csv"]), min_size=1, max_size=40), st.integers(2, 8),
       st.integers(0, 2**32 - 1))
def test_folds_partition_the_sessions_evenly_within_every_trace(traces, k, seed):
    folds = session_folds(traces, k, np.random.default_rng(seed))
    assert np.array_equal(folds, session_folds(traces, k, np.random.default_rng(seed)))
    used = min(k, len(traces))
    assert set(folds) <= set(range(used))
    counts = np.bincount(folds, minlength=used)
    assert counts.max() - counts.min() <= 1   # so each session is held out once, and in no training part then
    for label in set(traces):
        per = np.bincount(folds[np.array(traces) == label], minlength=used)
        assert per.max() - per.min() <= 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(3, 10), st.integers(0, 2**32 - 1))
def test_a_choice_never_reads_the_sessions_held_out(trials, sessions, seed):
    rng = np.random.default_rng(seed)
    value = rng.random((trials, sessions)) * 100
    feasible = rng.random((trials, sessions)) > 0.2
    train = rng.random(sessions) > 0.4
    table = _Table(np.where(feasible, value, np.nan), feasible, {"reread_tokens": value})
    c = [parse_constraint("reread_tokens<=1.2*default")]
    before = choose(table, train, c)
    # whatever happens on the held-out sessions, the choice made on the others is the same
    scrambled = value.copy()
    scrambled[:, ~train] = rng.random((trials, (~train).sum())) * 1e6
    worse = feasible.copy()
    worse[:, ~train] = False
    after = choose(_Table(np.where(worse, scrambled, np.nan), worse, {"reread_tokens": scrambled}), train, c)
    assert before == after or (math.isnan(before.objective) and before.index == after.index)


def test_the_choice_is_the_least_feasible_mean_ties_to_the_earlier():
    feasible = np.array([[True, True], [True, True], [True, False], [True, True]])
    value = np.array([[5.0, 5.0], [3.0, 3.0], [1.0, 1.0], [2.0, 4.0]])
    table = _Table(np.where(feasible, value, np.nan), feasible, {})
    assert choose(table, np.array([True, True]), []).index == 1   # 2 is infeasible on one session; 1 and 3 tie
    assert choose(table, np.array([True, False]), []).index == 2
    none = choose(_Table(value, np.zeros_like(feasible), {}), np.array([True, True]), [])
    assert none.index is None and "no setting is feasible" in none.reason


# ----- a case whose best setting is known -------------------------------------------------------------------

@pytest.mark.parametrize("files", [3, 7])
def test_the_known_best_setting_is_found_on_every_fold(files):
    result = tune({"cyclic.csv": cyclic(files)}, "observation-masking", ["n=0:12"], objective=KNOWN, workers=1,
                  progress=False)
    best = f"observation-masking?n={files}"
    assert result.chosen == best and list(result.folds["chosen"]) == [best] * 5
    assert result.heldout_chosen < result.heldout_default   # the default keeps 5
    assert result.heldout["chosen_feasible"].all() and len(result.heldout) == 6
    assert set(zip(result.heldout["trace"], result.heldout["session"])) == {("cyclic.csv", f"s{s}") for s in range(6)}
    assert result.weak.startswith("only 6 sessions")


def test_same_seed_same_search_another_seed_another_split():
    traces = {"a.csv": cyclic(4, sessions=8, turns=20), "b.csv": cyclic(6, sessions=8, turns=20)}
    one, again = (tune(traces, "observation-masking", ["n=0:8"], objective=KNOWN, seed=5, workers=1, progress=False)
                  for _ in range(2))
    other = tune(traces, "observation-masking", ["n=0:8"], objective=KNOWN, seed=6, workers=1, progress=False)
    pd.testing.assert_frame_equal(one.heldout, again.heldout)
    pd.testing.assert_frame_equal(one.trials, again.trials)
    assert one.to_json() == again.to_json()
    assert not one.heldout.set_index(["trace", "session"])["fold"].equals(
        other.heldout.set_index(["trace", "session"])["fold"])
    assert one.weak == ""   # 16 sessions


def test_nothing_feasible_chooses_nothing_and_says_why():
    result = tune({"c.csv": cyclic(3, sessions=3, turns=30)}, "observation-masking", ["n=0:4"], budget_tokens=1_000,
                  workers=1, progress=False)
    assert result.chosen is None and "no setting is feasible" in result.chosen_reason
    assert result.heldout_chosen is None and result.to_json()["chosen"] is None
    assert not result.trials["feasible"].any()


def test_one_session_has_no_held_out_estimate():
    result = tune({"c.csv": cyclic(3, sessions=1)}, "observation-masking", ["n=0:5"], objective=KNOWN, workers=1,
                  progress=False)
    assert result.chosen == "observation-masking?n=3" and result.heldout_chosen is None
    assert "nothing is held out" in result.weak


# ----- the command --------------------------------------------------------------------------------------------

def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("args, message", [
    (["--param", "x=1:2"], "has no tunable option 'x'"),
    (["--param", "n=0:2000000000000000000"], "outside n's declared range"),
    (["--objective", "hits_per_dollar"], "cannot compute 'hits_per_dollar'"),
    (["--objective", "cost_usd"], "needs --price"),
    (["--constraint", "reread_tokens<=often"], "--constraint"),
    (["--folds", "1"], "--folds must be between 2"),
    (["--max-files", "0"], "--max-files"),
    (["--evict-timeout-ms", "0"], "--evict-timeout-ms"),
])
def test_the_command_refuses_bad_input_in_one_line(tmp_path, capsys, args, message):
    trace = tmp_path / "t.csv"
    cyclic(3, sessions=2, turns=10).to_csv(trace, index=False)
    out = tmp_path / "out"
    assert main(["tune", "observation-masking", "--traces", str(trace), "--out", str(out), "--workers", "1",
                 *args]) == 2
    assert message in _one_line(capsys)
    assert not out.exists()


def test_the_chosen_spec_replays_through_run_to_the_reported_number(tmp_path, capsys):
    trace = tmp_path / "mixed.parquet"
    generate("mixed", sessions=5, seed=4, tool_calls=80).to_parquet(trace)
    out = tmp_path / "tuned"
    assert main(["tune", "claude-code", "--traces", str(trace), "--out", str(out), "--workers", "1", "--trials", "9",
                 "--budget-tokens", "60000", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"chosen", "objective", "heldout_chosen", "heldout_default"}
    assert report["objective"] == "cost_tokens" and report["chosen"] == (out / "chosen.txt").read_text().strip()
    for name in ("trials.csv", "trials.parquet", "results.parquet", "folds.csv", "heldout.csv", "summary.md",
                 "meta.json", "figures/objective.png", ".ctxbench.json"):
        assert (out / name).is_file(), name
    assert main(["run", "--traces", str(trace), "--strategy", report["chosen"], "--budget-tokens", "60000",
                 "--out", str(tmp_path / "run"), "--workers", "1", "--no-bracket", "--no-report", "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranking"]
    row = next(r for r in ranked if r["strategy"] == report["chosen"])
    assert row["cost_tokens"] == report["chosen_objective"]   # exactly: the same replays, the same mean
    trials = pd.read_csv(out / "trials.csv")
    assert trials.loc[trials["chosen"], "spec"].tolist() == [report["chosen"]]
    # the folder is ctxbench's: a second search replaces it; a folder that is not is refused
    assert main(["tune", "claude-code", "--traces", str(trace), "--out", str(out), "--workers", "1", "--trials", "4",
                 "--budget-tokens", "60000", "--json"]) == 0
    capsys.readouterr()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["tune", "claude-code", "--traces", str(trace), "--out", str(foreign), "--workers", "1"]) == 2
    _one_line(capsys)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_max_files_caps_every_replay_and_the_chosen_spec_replays_through_run_with_it(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    cyclic(5, sessions=4, turns=30).to_csv(trace, index=False)
    common = ["tune", "lru", "--traces", str(trace), "--workers", "1", "--param", "max_entries=2:8",
              "--objective", "reread_tokens", "--json"]
    assert main([*common, "--out", str(tmp_path / "free")]) == 0
    free = json.loads(capsys.readouterr().out)
    assert main([*common, "--out", str(tmp_path / "capped"), "--max-files", "3"]) == 0
    capped = json.loads(capsys.readouterr().out)
    # five files read in turn: kept whole without the cap, re-read every turn with three at most
    assert free["chosen_objective"] == 0 < capped["chosen_objective"]
    assert json.loads((tmp_path / "capped" / "meta.json").read_text())["config"]["max_files"] == 3
    assert main(["run", "--traces", str(trace), "--strategy", capped["chosen"], "--max-files", "3",
                 "--out", str(tmp_path / "run"), "--workers", "1", "--no-bracket", "--no-report", "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranking"]
    row = next(r for r in ranked if r["strategy"] == capped["chosen"])
    assert row["reread_tokens"] == capped["chosen_objective"]


def test_list_shows_each_declared_option_and_its_ranges(capsys):
    assert main(["tune", "lru+compaction", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("max_entries (strategy): int in [0, 2**50], or none; searched 10..1000 (log)")
    assert lines[1].startswith("trigger_tokens (policy): int in [1, 2**50], or none; searched 0.5-1 of the window")
    assert len(lines) == 2


def test_nothing_feasible_is_exit_1_with_the_folder_and_no_chosen_spec(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    cyclic(3, sessions=3, turns=30).to_csv(trace, index=False)
    out = tmp_path / "out"
    assert main(["tune", "observation-masking", "--traces", str(trace), "--out", str(out), "--workers", "1",
                 "--param", "n=0:3", "--budget-tokens", "1000"]) == 1
    assert "chosen: none (no setting is feasible" in capsys.readouterr().out
    assert (out / "trials.csv").is_file() and not (out / "chosen.txt").exists()


# ----- a user's own policy --------------------------------------------------------------------------------------

def test_a_users_policy_declares_its_own_options_as_data_read_in_a_process_of_its_own():
    declared = declared_options("tune_policies:KeepLast")
    assert list(declared) == ["keep"] and declared["keep"][0].range_text() == "[0, 1000]"
    with pytest.raises(StrategyInputError, match="search 0..50 leaves its range"):
        declared_options("tune_policies:Undeclared")
    with pytest.raises(StrategyInputError, match=r"TUNABLE\['keep'\]\['doc'\]: expected a number"):
        declared_options("tune_policies:Opaque")


@pytest.mark.slow   # replays in worker processes: a user's code never runs in ctxbench's own
def test_a_users_policy_is_tuned_to_its_known_best_setting(tmp_path, capsys):
    trace = tmp_path / "cyclic.csv"
    cyclic(4).to_csv(trace, index=False)
    assert main(["tune", "tune_policies:KeepLast", "--traces", str(trace), "--out", str(tmp_path / "out"),
                 "--objective", KNOWN, "--workers", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chosen"] == "tune_policies:KeepLast?keep=4" and report["heldout_chosen"] < report["heldout_default"]
    assert main(["tune", "tune_policies:Undeclared", "--traces", str(trace), "--out", str(tmp_path / "o2")]) == 2
    assert "leaves its range" in _one_line(capsys)


SLOW_POLICY = '''
import os, time


class SlowKeep:
    """Keeps everything, a quarter of a second per call; each call appends the process id to ./pids."""

    TUNABLE = {"keep": {"type": "int", "low": 0, "high": 10, "search": [0, 10]}}

    def __init__(self, keep=1):
        self.keep = keep

    def edit(self, items, window):
        with open("pids", "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(0.25)
        return []
'''


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_signal_stops_the_search_and_its_workers_and_keeps_the_previous_folder(tmp_path):
    from processes import group_members, pids_in, running, start_ctxbench, wait_until

    cyclic(3, sessions=4, turns=30).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "slowpolicy.py").write_text(SLOW_POLICY)
    assert main(["tune", "observation-masking", "--traces", str(tmp_path / "t.csv"), "--param", "n=0:3",
                 "--out", str(tmp_path / "res"), "--workers", "1"]) == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "res").rglob("*") if p.is_file()}
    proc = start_ctxbench(["tune", "slowpolicy:SlowKeep", "--traces", "t.csv", "--workers", "2", "--out", "res"],
                          tmp_path)
    try:
        assert wait_until(lambda: len(pids_in(tmp_path / "pids")) >= 2, 60), "the workers never started"
        workers = pids_in(tmp_path / "pids")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "ctxbench tune: interrupted"
    assert wait_until(lambda: not any(running(p) for p in workers), 10), "a worker survived"
    assert group_members(proc.pid) == []
    assert {p.name: p.read_bytes() for p in (tmp_path / "res").rglob("*") if p.is_file()} == before


@pytest.mark.slow   # replays in worker processes: a user's code never runs in ctxbench's own
def test_a_policy_past_the_time_limit_stops_the_search_naming_it(tmp_path, capsys, monkeypatch):
    cyclic(3, sessions=2, turns=10).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "slowpolicy.py").write_text(SLOW_POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["tune", "slowpolicy:SlowKeep", "--traces", "t.csv", "--param", "keep=0:1", "--workers", "1",
                 "--evict-timeout-ms", "20", "--out", "res"]) == 2
    line = _one_line(capsys)
    assert "SlowKeep" in line and "time limit of 20 ms" in line, line
    assert not (tmp_path / "res").exists()
