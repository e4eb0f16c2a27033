"""Presets for parallel work: arms, shares of the repository, and what each claim mode loses on them."""

from __future__ import annotations

import pandas as pd
import pytest

from ctxbench.sim.analysis.claim_modes import compare_claim_modes, parse_claim_modes
from ctxbench.sim.cli import main
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.suite import get_suite
from ctxbench.traces.generate import generate
from ctxbench.traces.io import load
from ctxbench.traces.presets import PRESETS, PresetError, knobs
from ctxbench.traces.schema import find_problems

PARALLEL = ("parallel-disjoint", "parallel-hubs", "parallel-refactor")
HUBS = ("src/app/router.py", "src/app/config.py", "src/app/schema.py")


#: The seed of the traces below (4 until turns took real agents' shape: its refactor then lost no line).
SEED = 5


@pytest.fixture(scope="module")
def traces() -> dict[str, pd.DataFrame]:
    return {name: generate(name, sessions=2, seed=SEED) for name in PARALLEL}


@pytest.fixture(scope="module")
def modes(traces) -> dict[str, pd.DataFrame]:
    """Claim-mode totals per preset: lru at 50K tokens per arm, strict, lazy and disabled."""
    out = {}
    for name, trace in traces.items():
        grid = run_grid(trace, ["lru"], [50_000], claims=parse_claim_modes("strict,lazy,disabled"), workers=1,
                        progress=False, keep_turns=False)
        out[name] = compare_claim_modes(grid.arms).set_index("claims")
    return out


def edits(trace: pd.DataFrame) -> pd.DataFrame:
    changed = trace[trace["op"].isin(["edit", "write"])]
    return pd.DataFrame({"arm": changed["arm"].astype(str), "path": changed["path"].astype(str)})


def directory(path: str) -> str:
    return path.rsplit("/", 1)[0]


@pytest.mark.parametrize("name", PARALLEL)
def test_preset_is_valid_multi_arm_and_deterministic(name, traces):
    trace = traces[name]
    assert PRESETS[name].knobs.arms >= 3
    assert find_problems(trace) == []
    assert set(trace["arm"].astype(str)) == {"main", "arm1", "arm2"}
    for _, session in trace.groupby("session", observed=True):
        tool_events = session[session["op"].isin(["read", "edit", "write", "output"])]
        assert (tool_events["arm"].value_counts() == PRESETS[name].knobs.tool_calls).all()
    again = generate(name, sessions=2, seed=SEED)
    pd.testing.assert_frame_equal(trace, again)
    assert not trace.equals(generate(name, sessions=2, seed=SEED + 1))


def test_disjoint_arms_never_change_the_same_file_but_share_reads(traces):
    trace = traces["parallel-disjoint"]
    for _, session in trace.groupby("session", observed=True):
        changed = edits(session).drop_duplicates()
        assert not changed["path"].duplicated().any(), "two arms changed one file"
        readers = session[session["op"] == "read"].groupby(session["path"].astype(str), observed=True)["arm"]
        assert (readers.nunique() > 1).any(), "no file is read by several arms"
    hub_reads = trace[(trace["op"] == "read") & trace["path"].isin(HUBS)]
    assert set(hub_reads["arm"].astype(str)) == {"main", "arm1", "arm2"}


def test_every_arm_edits_the_shared_hubs(traces):
    changed = edits(traces["parallel-hubs"])
    on_hubs = changed[changed["path"].isin(HUBS)]
    assert set(on_hubs["arm"]) == {"main", "arm1", "arm2"}
    assert on_hubs["path"].nunique() == len(HUBS)
    # away from the hubs each arm keeps to its own files
    elsewhere = changed[~changed["path"].isin(HUBS)].drop_duplicates()
    assert not elsewhere["path"].duplicated().any()


def test_the_refactor_crosses_every_arm_s_directories(traces):
    changed = edits(traces["parallel-refactor"])
    dirs = changed.assign(dir=changed["path"].map(directory)).groupby("arm")["dir"].agg(set)
    for other in ("arm1", "arm2"):
        assert (dirs["main"] & dirs[other]) - {"src/app"}, f"main never edits in {other}'s directories"
    assert not (dirs["arm1"] & dirs["arm2"]) - {"src/app"}  # the other arms stay in their own shares


def test_spanning_arms_is_bounded_by_arms():
    assert knobs("parallel-refactor").spanning_arms == 1
    with pytest.raises(PresetError, match="spanning_arms=4.*between 0 and arms"):
        knobs("parallel-refactor", spanning_arms=4)
    assert knobs("parallel-refactor", arms=1).arms == 1


def test_hubs_lose_lines_without_claims_and_none_with_strict_claims(modes):
    hubs = modes["parallel-hubs"]
    assert hubs.loc["disabled", "lines_lost"] > 0 and hubs.loc["disabled", "thrashing_events"] > 0
    assert hubs.loc["strict", "lines_lost"] == 0 and hubs.loc["strict", "thrashing_events"] == 0
    assert hubs.loc["strict", "blocked_turns"] > 0  # strict pays in waiting instead
    assert hubs.loc["disabled", "blocked_turns"] == 0
    assert hubs.loc["lazy", "lines_lost"] < hubs.loc["disabled", "lines_lost"]


def test_disjoint_work_loses_nothing_in_any_mode(modes):
    disjoint = modes["parallel-disjoint"]
    assert (disjoint["lines_lost"] == 0).all() and (disjoint["thrashing_events"] == 0).all()
    assert (disjoint["blocked_turns"] == 0).all()


def test_refactor_loses_lines_without_claims(modes):
    refactor = modes["parallel-refactor"]
    assert refactor.loc["disabled", "lines_lost"] > 0
    assert refactor.loc["strict", "lines_lost"] == 0


def test_multi_arm_suite_holds_the_parallel_presets():
    suite = get_suite("multi-arm")
    assert tuple(name for name, _ in suite.presets) == PARALLEL


def test_cli_arms_flag_equals_set_arms(tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["generate", "--preset", "parallel-hubs", "--arms", "4", "--seed", "2", "--out", str(a)]) == 0
    assert main(["generate", "--preset", "parallel-hubs", "--set", "arms=4", "--seed", "2", "--out", str(b)]) == 0
    first, second = load(a), load(b)
    pd.testing.assert_frame_equal(first, second)
    assert first["arm"].nunique() == 4
    assert main(["generate", "--preset", "mixed", "--arms", "0", "--out", str(tmp_path / "c.parquet")]) == 2
    assert "arms" in capsys.readouterr().err
