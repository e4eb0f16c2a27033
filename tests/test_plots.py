"""The figures of sim.presentation.plots and sim.presentation.trace_plots: labels, legends, data, colours, saved files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from ctxbench.sim.presentation import plots, trace_plots
from ctxbench.sim.errors import InputError
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.suite import build_suite
from ctxbench.traces.generate import generate
from ctxbench.traces.stats import stats

BUDGETS = (25_000, 200_000)
STRATEGIES = ("lru", "importance")


@pytest.fixture(scope="module")
def grid():
    return run_grid(build_suite("quick"), STRATEGIES, BUDGETS, workers=1, progress=False, bracket=True)


@pytest.fixture(scope="module")
def trace():
    return generate("mixed", sessions=2, seed=3)


def legend_texts(fig: Figure) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def line_colors(ax) -> dict[str, str]:
    return {line.get_label(): to_hex(line.get_color()) for line in ax.get_lines()}


def bar_colors(ax) -> dict[str, str]:
    return {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in ax.containers if isinstance(c, BarContainer)}


def test_strategy_colors_are_stable_and_distinct():
    names = ["zeta", "lru", "mine", "importance", "opt:lower", "opt:belady-size"]
    colors = plots.strategy_colors(names)
    assert colors == plots.strategy_colors(reversed(names))
    assert colors["lru"] == plots.FIXED_COLORS["lru"] and colors["importance"] == plots.FIXED_COLORS["importance"]
    assert len(set(colors.values())) == len(names)
    # A built-in keeps its colour whatever else is plotted with it.
    assert plots.strategy_colors(["lru"])["lru"] == colors["lru"]


def test_miss_ratio_curve(grid):
    fig = plots.miss_ratio_curve(grid.results)
    ax = fig.axes[0]
    assert "Miss rate vs context budget" in ax.get_title() and "CI band" in ax.get_title()
    assert ax.get_xlabel() == "context budget (tokens)"
    assert "% of accesses" in ax.get_ylabel()
    assert ax.get_xscale() == "log"
    assert set(legend_texts(fig)) == {"lru", "importance", "opt:exact (optimum)", "opt:lower (bound)", "opt:belady-size (bound)"}
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["opt:lower (bound)"].get_linestyle() == "--" and lines["lru"].get_linestyle() == "-"
    lru = grid.results[grid.results["strategy"] == "lru"].groupby("budget_tokens")["miss_rate"].mean()
    np.testing.assert_allclose(lines["lru"].get_ydata(), lru.to_numpy())
    assert len(ax.collections) == 2  # one CI band per strategy, none for the bounds


def test_miss_ratio_curve_with_one_budget(grid):
    one = grid.results[grid.results["budget_tokens"] == 25_000]
    ax = plots.miss_ratio_curve(one).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["25K"]
    assert any("one budget run" in t.get_text() for t in ax.texts)


def test_reread_bars(grid):
    fig = plots.reread_bars(grid.results)
    ax = fig.axes[0]
    assert ax.get_title() == "Re-read cost by budget (fewer is better)"
    assert "re-read tokens per session" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["25K tokens", "200K tokens"]
    assert set(legend_texts(fig)) == {"lru", "importance", "opt:exact (optimum)", "opt:lower (bound)", "opt:belady-size (bound)"}
    heights = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers if isinstance(c, BarContainer)}
    expected = grid.results[grid.results["strategy"] == "lru"].groupby("budget_tokens")["reread_tokens"].mean()
    np.testing.assert_allclose(heights["lru"], expected.to_numpy())
    one = plots.reread_bars(grid.results, budgets=[25_000])
    assert [t.get_text() for t in one.axes[0].get_xticklabels()] == ["25K tokens"]


def test_latency_cdf(grid):
    fig = plots.latency_cdf(grid.turns, 25_000)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "µs" in ax.get_xlabel() and "25K tokens" in ax.get_title()
    names = sorted(t.split(" (")[0] for t in legend_texts(fig))
    assert names == ["importance", "lru"]  # the offline bracket has no latency to show
    for line in ax.get_lines()[:2]:
        y = line.get_ydata()
        assert y[-1] == pytest.approx(1.0) and np.all(np.diff(y) >= 0)


def test_latency_cdf_thins_long_series():
    turns = pd.DataFrame({"strategy": "lru", "budget_tokens": 1000, "evict_ns": np.arange(1, 50_001)})
    line = plots.latency_cdf(turns).axes[0].get_lines()[0]
    assert len(line.get_xdata()) <= plots.MAX_POINTS


def test_occupancy_over_turns(grid):
    trace, session = plots.pick_session(grid.results, budget_tokens=25_000)
    fig = plots.occupancy_over_turns(grid.turns, f"{trace}/{session}", 25_000)
    ax = fig.axes[0]
    assert session in ax.get_title() and "25K tokens" in ax.get_title()
    assert ax.get_xlabel() == "tool turn" and "tokens" in ax.get_ylabel()
    assert "budget (25K tokens)" in legend_texts(fig)
    budget_line = next(line for line in ax.get_lines() if line.get_label().startswith("budget"))
    assert list(budget_line.get_ydata()) == [25_000, 25_000]
    lru = next(line for line in ax.get_lines() if line.get_label() == "lru")
    assert max(lru.get_ydata()) <= 25_000 + 1e-9  # never over budget after eviction


def test_turn_timeline_sums_match_the_log(grid):
    trace, session = plots.pick_session(grid.results, budget_tokens=25_000)
    fig = plots.turn_timeline(grid.turns, session, "lru", 25_000)
    ax = fig.axes[0]
    assert "lru" in ax.get_title() and session in ax.get_title()
    assert legend_texts(fig) == ["hit", "compulsory miss", "capacity miss", "invalidation miss", "eviction"]
    heights = {c.get_label(): sum(p.get_height() for p in c.patches) for c in ax.containers}
    log = grid.turns[(grid.turns["session"] == session) & (grid.turns["strategy"] == "lru")
                     & (grid.turns["budget_tokens"] == 25_000)]
    assert heights["hit"] == log["hits"].sum()
    assert heights["capacity miss"] == log["capacity"].sum()
    assert heights["eviction"] == -log["evictions"].sum()


def test_turn_timeline_bins_long_sessions():
    n = 1000
    turns = pd.DataFrame({"trace": "t", "session": "s", "strategy": "lru", "budget_tokens": 1000,
                          "turn": np.arange(n), "hits": 1, "compulsory": 1, "capacity": np.arange(n) % 3,
                          "invalidation": 0, "evictions": 2})
    fig = plots.turn_timeline(turns)
    ax = fig.axes[0]
    assert "bins of" in ax.get_xlabel()
    for container in ax.containers:
        assert len(container.patches) <= plots.MAX_BARS
    heights = {c.get_label(): sum(p.get_height() for p in c.patches) for c in ax.containers}
    assert heights["hit"] == n and heights["eviction"] == -2 * n and heights["capacity miss"] == turns.capacity.sum()


def test_same_colour_for_a_strategy_in_every_figure(grid):
    colors = plots.strategy_colors(set(grid.results["strategy"]))
    curve = line_colors(plots.miss_ratio_curve(grid.results, colors=colors).axes[0])
    bars = bar_colors(plots.reread_bars(grid.results, colors=colors).axes[0])
    cdf = {k.split(" (")[0]: v for k, v in line_colors(plots.latency_cdf(grid.turns, colors=colors).axes[0]).items()}
    occupancy = line_colors(plots.occupancy_over_turns(grid.turns, budget_tokens=25_000, colors=colors).axes[0])
    for name in STRATEGIES:
        assert curve[name] == bars[name] == cdf[name] == occupancy[name] == colors[name]
    # Without an explicit mapping every figure derives the same one from the data.
    assert line_colors(plots.miss_ratio_curve(grid.results).axes[0])["lru"] == colors["lru"]


def test_save_figure_writes_png_and_svg(grid, tmp_path):
    paths = plots.save_figure(plots.miss_ratio_curve(grid.results), tmp_path / "sub" / "curve")
    assert [p.name for p in paths] == ["curve.png", "curve.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = paths[1].read_text()
    assert "<svg" in svg and "<dc:date>" not in svg


def test_bad_input_is_one_clear_error(grid):
    with pytest.raises(InputError, match="missing column"):
        plots.miss_ratio_curve(grid.results.drop(columns="miss_rate"))
    with pytest.raises(InputError, match="no rows"):
        plots.reread_bars(grid.results.iloc[:0])
    with pytest.raises(InputError, match="no results at budget 12,345"):
        plots.latency_cdf(grid.turns, 12_345)
    with pytest.raises(InputError, match="no session 'nope'"):
        plots.occupancy_over_turns(grid.turns, "nope")
    with pytest.raises(InputError, match="no strategy 'nope'"):
        plots.turn_timeline(grid.turns, strategy="nope")
    twice = pd.concat([grid.results, grid.results.assign(trace="other")])
    session = grid.results["session"].iloc[0]
    with pytest.raises(InputError, match="ambiguous"):
        plots.pick_session(twice, session)
    assert plots.pick_session(twice, f"other/{session}") == ("other", session)


def test_access_heatmap(trace):
    fig = trace_plots.access_heatmap(trace, top=12)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1] == trace_plots.OUTPUTS_ROW and len(labels) == 13
    assert not any(label.startswith(("msg://", "call://", "overhead://")) for label in labels)  # files only
    assert "Accesses by path over turns" in ax.get_title() and ax.get_xlabel().startswith("tool turn")
    assert len(fig.axes) == 2  # the colour bar
    image = ax.get_images()[0].get_array()
    first = trace[trace["session"] == trace["session"].iloc[0]]
    assert image.sum() <= len(first) and image[-1].sum() == (first["op"] == "output").sum()
    files = first.loc[first["op"].isin(["read", "edit", "write"]), "path"].nunique()
    assert f"(top 12 of {files} files)" in ax.get_title()
    with pytest.raises(InputError, match="no session 'nope'"):
        trace_plots.access_heatmap(trace, "nope")


def test_reuse_distance_hist(trace):
    reuse = stats(trace)["overall"]["reuse_distance"]
    fig = trace_plots.reuse_distance_hist(trace)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(reuse["histogram"])
    assert f"{reuse['count']:,} re-accesses" in ax.get_title()
    assert sum(p.get_height() for p in ax.patches) == pytest.approx(1.0)


def test_hub_files_bar(trace):
    top = stats(trace)["overall"]["top_paths"][:5]
    fig = trace_plots.hub_files_bar(trace, top=5)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [t["path"] for t in top]
    assert [p.get_width() for p in ax.patches][:5] == [t["reads"] for t in top]
    assert ax.get_xlabel() == "reads (all sessions)"


def test_outputs_vs_files(trace):
    sessions = stats(trace)["sessions"]
    fig = trace_plots.outputs_vs_files(trace)
    assert legend_texts(fig) == ["files (largest revision of each path)", "tool outputs"]
    ax = fig.axes[0]
    outputs = [c for c in ax.containers if c.get_label() == "tool outputs"][0]
    np.testing.assert_allclose([p.get_width() for p in outputs.patches], sessions["output_bytes"] / 1024)


def test_trace_plots_reject_a_broken_trace(trace):
    broken = trace.copy()
    broken.loc[3, "size_bytes"] = -1
    with pytest.raises(InputError, match="size_bytes"):
        trace_plots.hub_files_bar(broken)


# ----- multi-arm sessions and the price of purity ----------------------------------------------

@pytest.fixture(scope="module")
def multi_arm():
    from ctxbench.sim.analysis.claim_modes import parse_claim_modes
    from ctxbench.sim.engine.suite import preset_traces

    traces = preset_traces([("parallel-hubs", 1), ("parallel-disjoint", 1)], seed=3)
    return run_grid(traces, ["lru", "arc"], (25_000, 100_000), claims=parse_claim_modes("strict,lazy,disabled"),
                    workers=1, progress=False, keep_turns=False)


def bar_heights(ax) -> dict[str, list[float]]:
    return {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers if isinstance(c, BarContainer)}


def test_claim_modes_bars_sum_the_arms(multi_arm):
    arms = multi_arm.arms
    fig = plots.claim_modes_bars(arms, strategy="lru", budget_tokens=25_000)
    ax = fig.axes[0]
    assert "lru at 25K tokens" in fig.get_suptitle() and "2 sessions" in fig.get_suptitle()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["strict", "lazy", "disabled"]
    assert ax.get_yscale() == "symlog" and ax.get_xlabel() == "claim mode"
    assert legend_texts(fig) == ["lines lost", "overwrites", "invalidation re-reads", "blocked turns"]
    heights = bar_heights(ax)
    at = arms[(arms["strategy"] == "lru") & (arms["budget_tokens"] == 25_000)]
    for column, label, _ in plots.CLAIM_METRICS:
        expected = at.groupby("claims")[column].sum().reindex(["strict", "lazy", "disabled"])
        assert heights[label] == expected.tolist(), label
    assert heights["lines lost"][0] == 0 and heights["lines lost"][2] > 0  # strict loses nothing here
    labels = [t.get_text() for t in ax.texts]
    assert f"{int(expected['disabled']):,}" in labels  # exact values printed on the bars


def test_claim_modes_bars_per_arm_and_bad_input(multi_arm):
    fig = plots.claim_modes_bars(multi_arm.arms, by_arm=True)
    assert [ax.get_title() for ax in fig.axes] == ["all arms", "main", "arm1", "arm2"]
    assert "arc at 100K tokens" in fig.get_suptitle()  # defaults: first strategy by name, largest budget
    total = bar_heights(fig.axes[0])["lines lost"]
    per_arm = [bar_heights(ax)["lines lost"] for ax in fig.axes[1:]]
    assert [sum(v) for v in zip(*per_arm)] == total
    with pytest.raises(InputError, match="no strategy 'nope'"):
        plots.claim_modes_bars(multi_arm.arms, strategy="nope")
    with pytest.raises(InputError, match="missing column"):
        plots.claim_modes_bars(multi_arm.arms.drop(columns="blocked_turns"))


def test_purity_bars(multi_arm):
    from ctxbench.sim.analysis.purity import price_of_purity

    purity = price_of_purity(multi_arm.results)
    colors = plots.strategy_colors(["lru", "arc"])
    fig = plots.purity_bars(purity, colors=colors)
    assert len(fig.axes) == 2 and "Price of purity" in fig.get_suptitle()
    assert [ax.get_title() for ax in fig.axes] == ["25K tokens, claim mode disabled",
                                                   "100K tokens, claim mode disabled"]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["parallel-disjoint", "parallel-hubs", "(all)"]
    rows = purity[(purity["claims"] == "disabled") & (purity["budget_tokens"] == 25_000)]
    pure, stateful = [c.patches for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_height() for p in pure] == rows["pure_reread_tokens"].tolist()
    assert [p.get_height() for p in stateful] == rows["stateful_reread_tokens"].tolist()
    assert all(p.get_hatch() == "//" for p in stateful) and not any(p.get_hatch() for p in pure)
    assert to_hex(stateful[0].get_facecolor()) == colors["arc"]  # the only stateful strategy run
    assert any(t.get_text().startswith("arc\n") for t in ax.texts)
    with pytest.raises(InputError, match="no rows"):
        plots.purity_bars(purity.iloc[:0])
