"""Realism: at about 250 tool calls the calibrated presets land in the ranges of real sessions.

The ranges are the docs/design.md §2 facts measured on five real Claude Code sessions. Each check is
on the median over 10 sessions, for several seeds, so one unusual session cannot pass or fail it.
"""

from __future__ import annotations

import pytest

from traces.generate import generate
from traces.stats import stats

SEEDS = (0, 1, 2, 3)
SESSIONS = 10

# (per-session column, low, high): docs/design.md §2
COMMON = (("distinct_files_read", 15, 31), ("reread_fraction", 0.26, 0.52), ("top_path_reads", 4, 8))
CLAUDE_CODE = COMMON + (("reads", 31, 42), ("edits", 22, 67), ("bash_outputs", 67, 120),
                        ("bash_bytes", 45_000, 93_000))


@pytest.fixture(scope="module", params=["mixed", "claude-code-like"])
def runs(request) -> tuple[str, list[dict]]:
    return request.param, [stats(generate(request.param, sessions=SESSIONS, seed=seed)) for seed in SEEDS]


def test_sessions_are_about_250_tool_calls(runs):
    _, results = runs
    for result in results:
        assert (result["sessions"]["events"] == 250).all()


def test_medians_land_in_the_real_ranges(runs):
    preset, results = runs
    checks = CLAUDE_CODE if preset == "claude-code-like" else COMMON
    for seed, result in zip(SEEDS, results):
        medians = result["sessions"].median(numeric_only=True)
        for column, low, high in checks:
            assert low <= medians[column] <= high, (preset, seed, column, medians[column])


def test_outputs_are_a_substantial_share_of_bytes(runs):
    _, results = runs
    for result in results:
        # outputs hold a fifth to a half of what the session touched: files alone would mislead
        assert 0.2 <= result["sessions"]["output_bytes_share"].median() <= 0.6
        assert result["overall"]["events_by_op"]["output"] > result["overall"]["events_by_op"]["read"]


def test_read_sizes_match_real_reads(runs):
    _, results = runs
    for result in results:
        read_bytes = result["overall"]["read_bytes"]
        assert 1_200 <= read_bytes["median"] <= 3_000  # real: ~1.7 KB
        assert 8_000 <= read_bytes["p90"] <= 25_000    # real: ~17 KB


def test_files_and_outputs_alone_stay_under_the_window(runs):
    # docs/design.md §2: in a 250-call session files and outputs rarely fill 200K tokens
    _, results = runs
    for result in results:
        assert result["sessions"]["budget_ratio"].median() < 0.8
