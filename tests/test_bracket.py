"""The optimal bracket: PFOO-L by hand, lower ≤ every strategy, lower ≤ brute-force optimum ≤ Belady-Size."""

import itertools
import math
from functools import lru_cache

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxbench.sim.analysis.bracket import (BRACKET_EXACT, BRACKET_LOWER, BRACKET_UPPER, belady_size_for, belady_size_replay, bracket_gaps,
                                  pfoo_lower_bound, session_futures)
from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.cli import main
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.engine.turn_by_turn import TurnByTurnContext
from ctxbench.sim.engine.measures import METRIC_COLUMNS
from ctxbench.sim.analysis.ranking import ranked
from ctxbench.sim.engine.replay import SessionTrace, replay_session
from ctxbench.sim.presentation.summary_text import describe_gap
from ctxbench.sim.engine.rules import OP_CODES
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.registry import builtin_names
from ctxbench.traces.tokens import DEFAULT_TOKENS, TokenRatios, kind_of

OPS = OP_CODES
PINNED = ("message", "call", "overhead")


def trace(events, arms=None):
    """A session from ``(turn, op, path, size)`` tuples; ts = event index."""
    return SessionTrace("s", [e[0] for e in events], [OPS[e[1]] for e in events], [e[2] for e in events],
                        [e[3] for e in events], list(range(len(events))), arms=arms)


def bound(events, max_bytes, **kw):
    b = pfoo_lower_bound(trace(events), ContextBudget(max_bytes=max_bytes), **kw)
    return b["capacity_misses"], b["reread_bytes"]


def outcome(row):
    return row["capacity_misses"], row["reread_bytes"]


# ----- hand-worked bounds ------------------------------------------------------------------

ABAB = [(0, "read", "a", 60), (1, "read", "b", 60), (2, "read", "a", 60), (3, "read", "b", 60)]


def test_abab_one_interval_must_miss():
    # Intervals a:[0,2) and b:[1,3), 60 bytes each, 120 byte-turns each. Turn ends 0, 1, 2 hold at
    # most min(cover, 100) = 60 + 100 + 60 = 220 byte-turns: one interval fits, not both.
    # Bytes: shortest first, 120 whole, then 100 byte-turns of the other, 50 bytes → 120 - 110.
    assert bound(ABAB, 100) == (1, 10)
    assert bound(ABAB, 120) == (0, 0)       # both fit at every turn end
    belady = belady_size_replay(trace(ABAB), ContextBudget(100)).row
    assert outcome(belady) == (1, 60)


def test_aba_keeps_a_optimally():
    # a:[0,2) costs 120 byte-turns, cover is 60 at both turn ends: it fits (evict b at turn 1).
    events = ABAB[:3]
    assert bound(events, 100) == (0, 0)
    assert outcome(belady_size_replay(trace(events), ContextBudget(100)).row) == (0, 0)
    assert outcome(replay_session(trace(events), "lru", ContextBudget(100)).row) == (1, 60)


def test_entry_larger_than_the_budget_always_misses():
    events = [(0, "read", "log", 200), (1, "read", "log", 200), (2, "read", "a", 10), (3, "read", "a", 10)]
    assert bound(events, 100) == (1, 200)
    assert outcome(replay_session(trace(events), "lru", ContextBudget(100)).row) == (1, 200)


def test_reuse_within_a_turn_is_free():
    events = [(0, "read", "a", 80), (0, "read", "a", 80), (0, "edit", "a", 90), (1, "read", "b", 50)]
    f = session_futures(trace(events))["main"]
    assert f.same_turn_hits == 2 and f.starts == []
    assert bound(events, 10) == (0, 0)


def test_edit_needs_the_known_revision_and_starts_a_new_one():
    # a:0 (10 bytes) read at 0, edited at 2 (needs a:0: interval [0,2), 10 bytes), a:1 (20 bytes)
    # read at 3 (interval [2,3)). Under 5 bytes nothing spans a turn end.
    events = [(0, "read", "a", 10), (1, "output", "tool://bash/1", 3), (2, "edit", "a", 20), (3, "read", "a", 20)]
    f = session_futures(trace(events))["main"]
    assert (f.starts, f.stops, f.sizes) == ([0, 2], [2, 3], [10, 20])
    assert f.needs == {"a:0": [0, 2], "a:1": [3]}
    assert bound(events, 5) == (2, 30)
    for spec in ("lru", "importance"):
        assert outcome(replay_session(trace(events), spec, ContextBudget(5)).row) == (2, 30)
    # 20 bytes: a:0 and the 3-byte output fit together; a:1 alone.
    assert bound(events, 20) == (0, 0)


def test_changed_size_is_a_new_revision_and_a_write_is_a_touch():
    events = [(0, "read", "a", 10), (1, "read", "a", 12), (2, "write", "b", 7), (4, "read", "b", 7)]
    f = session_futures(trace(events))["main"]
    assert f.compulsory == 2                      # a:0, then a:1 (a formatter changed it)
    assert (f.starts, f.stops, f.sizes) == ([2], [3], [7])   # b:0 written at turn 2, read at turn 3
    assert bound(events, 6) == (1, 7)


def test_zero_bound_when_everything_fits_and_exact_classes():
    events = ABAB + [(4, "edit", "a", 70), (5, "read", "c", 5)]
    b = pfoo_lower_bound(trace(events), ContextBudget(10_000))
    assert (b["capacity_misses"], b["reread_bytes"], b["reread_tokens"]) == (0, 0, 0.0)
    lru = replay_session(trace(events), "lru", ContextBudget(10_000)).row
    for key in ("accesses", "compulsory_misses", "invalidation_misses", "misses", "miss_rate", "turns",
                "byte_miss_rate"):
        assert b[key] == lru[key], key


def test_huge_sizes_use_exact_integers():
    scale = 2**56   # byte-turns beyond 2**62: int64 sums could overflow
    events = [(t, op, p, s * scale) for t, op, p, s in ABAB]
    b = pfoo_lower_bound(trace(events), ContextBudget(max_bytes=100 * scale))
    assert (b["capacity_misses"], b["reread_bytes"]) == (1, 10 * scale)


# ----- Belady-Size -------------------------------------------------------------------------

def test_belady_prefers_largest_size_times_distance_and_drops_dead_entries():
    # After turn 2, {a 40 (next 3), b 30 (next 5), c 50 (next 4), d 10 (never)} under 80 bytes:
    # d goes (dead), then the largest size × distance: c (50 × 2 = 100) before b (30 × 3 = 90)
    # and a (40 × 1); 70 bytes are left, which fits.
    events = [(0, "read", "a", 40), (1, "read", "b", 30), (2, "read", "c", 50), (2, "read", "d", 10),
              (3, "read", "a", 40), (4, "read", "c", 50), (5, "read", "b", 30)]
    m = TurnByTurnContext(belady_size_for(trace(events)), ContextBudget(80))
    for turn, group in itertools.groupby(events[:4], key=lambda e: e[0]):
        m.apply_turn(turn, [(op, path, size, turn) for _, op, path, size in group])
    assert m.log.evicted_ids[2] == ["d:0", "c:0"]
    assert m.resident_ids() == ["a:0", "b:0"]


def test_belady_is_deterministic_and_flagged_stateful():
    st_ = trace([(t, "read", f"f{(t * 7) % 5}", 10 + (t * 7) % 5) for t in range(40)])
    one = belady_size_replay(st_, ContextBudget(35))
    two = belady_size_replay(st_, ContextBudget(35))
    assert one.row["log_hash"] == two.row["log_hash"]
    assert one.row["pure"] is False and one.row["strategy"] == BRACKET_UPPER
    assert one.row["violations"] == 0


# ----- lower ≤ every strategy, on random traces --------------------------------------------

PATHS = ["a.py", "b.py", "c.py", "d.py", "e.py", "tool://bash/1", "tool://grep/2"]


@st.composite
def random_session(draw, multi_arm=False):
    n_turns = draw(st.integers(1, 30))
    events, arms = [], []
    sizes: dict[str, int] = {}
    window = draw(st.booleans())   # with conversation, tool inputs and overhead pinned in the window
    for turn in range(n_turns):
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(PATHS))
            op = "output" if path.startswith("tool://") else draw(st.sampled_from(["read"] * 5 + ["edit", "write"]))
            if window and draw(st.integers(0, 3)) == 0:
                op = draw(st.sampled_from(PINNED))
                path = f"msg://{op}/{len(events)}"
            if op == "read" and path in sizes and draw(st.integers(0, 9)):
                size = sizes[path]                # usually the known size; sometimes a changed file
            else:
                size = draw(st.integers(0, 60))
            sizes[path] = size
            events.append((turn, op, path, size))
            arms.append(draw(st.sampled_from(["main", "helper"])) if multi_arm else "main")
    if multi_arm and len(set(arms)) > 1:
        return SessionTrace("s", [e[0] for e in events], [OPS[e[1]] for e in events], [e[2] for e in events],
                            [e[3] for e in events], list(range(len(events))), arms=arms,
                            lines_changed=[3] * len(events))
    return trace(events)


SPECS = [*builtin_names(), "lru?max_entries=2", "importance?max_entries=none"]


def check_bracket(session, max_bytes, claims=None):
    budget = ContextBudget(max_bytes)
    lower = pfoo_lower_bound(session, budget, claims=claims)
    upper = belady_size_replay(session, budget, claims=claims).row
    assert upper["violations"] == 0
    for row in [upper] + [replay_session(session, spec, budget, claims=claims).row for spec in SPECS]:
        assert lower["capacity_misses"] <= row["capacity_misses"], row["strategy"]
        assert lower["reread_bytes"] <= row["reread_bytes"], row["strategy"]
        assert lower["misses"] <= row["misses"]
        for key in ("accesses", "compulsory_misses", "invalidation_misses", "invalidation_bytes", "turns"):
            assert lower[key] == row[key], (key, row["strategy"])
    return lower, upper


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_session(), st.integers(0, 200))
def test_lower_bound_below_every_strategy(session, max_bytes):
    check_bracket(session, max_bytes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_session(multi_arm=True), st.integers(0, 200), st.sampled_from(["disabled", "strict", "lazy"]))
def test_lower_bound_below_every_strategy_multi_arm(session, max_bytes, mode):
    check_bracket(session, max_bytes, ClaimConfig(mode=mode, settle_ms=5))


def test_seeded_generated_traces_sweep():
    from ctxbench.traces.generate import generate
    from ctxbench.sim.engine.replay import split_sessions

    checked = 0
    for preset, seed in (("mixed", 0), ("debug-loop", 1), ("file-walk", 2)):
        for session in split_sessions(generate(preset, sessions=1, seed=seed, tool_calls=120)):
            for tokens in (1_000, 5_000, 20_000):
                lower, upper = check_bracket(session, int(tokens * 3.8))
                checked += lower["capacity_misses"] > 0
    assert checked > 0   # the sweep reached budgets where the bound is not trivial


# ----- brute force: lower ≤ optimum ≤ Belady-Size ------------------------------------------

def brute_force_optimum(events, max_bytes, tokens=DEFAULT_TOKENS):
    """Fewest capacity misses and fewest re-read bytes over every eviction schedule.

    An independent model of docs/design.md §3 for one arm: a need of a path's current revision
    hits when resident, is a capacity miss when that revision was evicted, else compulsory; a
    read of a new size is a new revision; edits need the known revision then make a new one;
    writes and outputs make a new one; messages stay pinned. At each turn end any subset of the
    context that fits the window less what is pinned may stay. Outputs and pinned content take
    what ``tokens`` says of the window (files are of the reference kind: their sizes).
    """
    turns = [list(g) for _, g in itertools.groupby(events, key=lambda e: e[0])]

    def apply(state, turn_events):
        resident, evicted, rev, size = (dict(x) for x in state[:4])
        pinned = state[4]
        misses = missed = 0
        for _, op, path, s in turn_events:
            if op in PINNED or op == "output":   # what they take of the window under the default ratios
                s = int(tokens.costs([s], [kind_of(op, path)])[0])
            if op in PINNED:
                pinned += s
                continue
            if op in ("read", "edit"):
                need = s if op == "read" or path not in size else size[path]
                if path not in rev or (op == "read" and size[path] != s):
                    rev[path] = rev.get(path, -1) + 1
                    size[path] = need
                    evicted.pop(path, None)
                current = (rev[path], size[path])
                if resident.get(path) != current and evicted.pop(path, None) == current:
                    misses += 1
                    missed += size[path]
                resident[path] = current
            if op != "read":
                rev[path] = rev.get(path, -1) + 1
                size[path] = s
                evicted.pop(path, None)
                resident[path] = (rev[path], s)
        return resident, evicted, rev, size, pinned, misses, missed

    def freeze(*dicts, pinned):
        return (*(tuple(sorted(d.items())) for d in dicts), pinned)

    @lru_cache(maxsize=None)
    def best(k, state, by_bytes):
        if k == len(turns):
            return 0
        resident, evicted, rev, size, pinned, misses, missed = apply(state, turns[k])
        cost = missed if by_bytes else misses
        paths = sorted(resident)
        options = []
        for keep in itertools.product((True, False), repeat=len(paths)):
            kept = {p: resident[p] for p, on in zip(paths, keep) if on}
            if sum(v[1] for v in kept.values()) > max(0, max_bytes - pinned):
                continue
            gone = dict(evicted)
            gone.update({p: resident[p] for p, on in zip(paths, keep) if not on})
            options.append(best(k + 1, freeze(kept, gone, rev, size, pinned=pinned), by_bytes))
        return cost + min(options)

    empty = freeze({}, {}, {}, {}, pinned=0)
    return best(0, empty, False), best(0, empty, True)


@st.composite
def tiny_session(draw):
    events = []
    sizes: dict[str, int] = {}
    for turn in range(draw(st.integers(1, 8))):
        for _ in range(draw(st.integers(1, 2))):
            path = draw(st.sampled_from(["a", "b", "c", "tool://t/1", "msg://m"]))
            op = ("output" if path.startswith("tool") else "message" if path.startswith("msg")
                  else draw(st.sampled_from(["read"] * 4 + ["edit", "write"])))
            size = sizes.get(path, 0) if op == "read" and path in sizes and draw(st.booleans()) else \
                draw(st.integers(0, 8))
            sizes[path] = size
            events.append((turn, op, path, size))
    return events


def test_brute_force_model_agrees_with_manager_on_a_fixed_schedule():
    # Sanity of the independent model: with room for everything it has no capacity misses, and on
    # ABAB under 100 bytes its optimum is Belady's one miss of 60 bytes.
    assert brute_force_optimum(ABAB, 1_000) == (0, 0)
    assert brute_force_optimum(ABAB, 100) == (1, 60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_session(), st.integers(0, 20))
def test_brute_force_optimum_inside_the_bracket(events, max_bytes):
    session = trace(events)
    budget = ContextBudget(max_bytes)
    lower = pfoo_lower_bound(session, budget)
    upper = belady_size_replay(session, budget).row
    best_misses, best_bytes = brute_force_optimum(events, max_bytes)
    assert lower["capacity_misses"] <= best_misses <= upper["capacity_misses"]
    assert lower["reread_bytes"] <= best_bytes <= upper["reread_bytes"]
    for spec in SPECS:
        row = replay_session(session, spec, budget).row
        assert best_misses <= row["capacity_misses"] and best_bytes <= row["reread_bytes"]


# ----- results, gaps, ranking, CLI ---------------------------------------------------------

def test_grid_adds_bracket_rows_with_undefined_metrics_nan():
    df = pd.DataFrame({"session": ["s"] * 4, "turn": [0, 1, 2, 3], "ts_ms": [0, 1, 2, 3],
                       "op": ["read"] * 4, "path": ["a", "b", "a", "b"], "size_bytes": [600] * 4})
    grid = run_grid(df, ["lru"], [200, 1_000], workers=1, bracket=True, bytes_per_token=3.8)
    res = grid.results
    assert list(res["strategy"]) == ["lru", BRACKET_LOWER, BRACKET_UPPER, BRACKET_EXACT] * 2
    lower = res[res["strategy"] == BRACKET_LOWER].iloc[0]
    # The optimum keeps one interval whole (600 re-read) where the lower bound takes 980 bytes fractionally.
    exact = res[res["strategy"] == BRACKET_EXACT].iloc[0]
    assert (exact["capacity_misses"], exact["reread_bytes"], exact["opt_exact"]) == (1, 600, True)
    assert math.isnan(lower["evictions"]) and math.isnan(lower["evict_p99_ns"]) and lower["pure"] is None
    # 760 bytes: turn ends hold 600 + 760 + 600 byte-turns; one 1,200 interval whole, 380 bytes of the other.
    assert lower["capacity_misses"] == 1 and lower["reread_bytes"] == 1_200 - 980
    assert set(METRIC_COLUMNS) <= set(res.columns)
    assert set(grid.turns["strategy"]) == {"lru", BRACKET_UPPER}
    assert BRACKET_LOWER not in set(run_grid(df, ["lru"], [200], workers=1).results["strategy"])


def test_bracket_gaps_ratios_and_zero_bound():
    rows = []
    for session, (s, lo, up) in {"x": (30.0, 10.0, 15.0), "y": (10.0, 0.0, 5.0), "z": (0.0, 0.0, 0.0)}.items():
        for strategy, value in (("lru", s), (BRACKET_LOWER, lo), (BRACKET_UPPER, up)):
            rows.append({"trace": "t", "session": session, "budget_tokens": 100, "strategy": strategy,
                         "reread_tokens": value})
    frame = pd.DataFrame(rows)
    g = bracket_gaps(frame).iloc[0]
    assert (g["sessions"], g["reread_tokens"], g["lower_tokens"], g["belady_tokens"]) == (3, 40.0, 10.0, 20.0)
    assert (g["x_lower"], g["x_belady"], g["excess_tokens"]) == (4.0, 2.0, 30.0)
    zero = bracket_gaps(frame[frame["session"] == "z"]).iloc[0]
    assert zero["x_lower"] == 1.0                              # 0 over a 0 bound: on the bound
    only_y = bracket_gaps(frame[frame["session"] == "y"]).iloc[0]
    assert math.isinf(only_y["x_lower"]) and only_y["x_belady"] == 2.0 and only_y["excess_tokens"] == 10.0
    assert describe_gap(only_y) == "+10 tokens over lower (zero), 2.00× Belady"   # no ∞: the excess in tokens
    assert "∞" not in describe_gap({"x_lower": math.inf, "x_belady": math.inf, "excess_tokens": 3.0})
    assert bracket_gaps(frame[frame["strategy"] == "lru"]).empty


def test_ranking_shows_bounds_unranked_with_gaps():
    df = pd.DataFrame({"session": ["s"] * 6, "turn": range(6), "ts_ms": range(6), "op": ["read"] * 6,
                       "path": ["a", "b", "c", "a", "b", "c"], "size_bytes": [500] * 6})
    table = ranked(run_grid(df, ["lru", "importance"], [300], workers=1, bracket=True).results, 300)
    assert list(table["bound"].iloc[-3:]) == ["optimum", "lower", "upper"]
    assert table["rank"].iloc[:2].tolist() == [1, 2] and table["rank"].iloc[-3:].isna().all()
    lru = table[table["strategy"] == "lru"].iloc[0]
    assert lru["x_lower"] >= lru["x_belady"] >= 1.0
    # 621 bytes hold one 500-byte file: the optimum keeps one of the three intervals (1,000 bytes re-read),
    # lru none (1,500).
    assert describe_gap(lru) == "1.50× optimal"
    assert describe_gap({**lru.to_dict(), "x_opt": None}).endswith("Belady")


def test_run_cli_bracket_flag(tmp_path, capsys):
    args = ["run", "--preset", "debug-loop", "--sessions", "1", "--budget-tokens", "3000", "--workers", "1",
            "--no-report", "--strategy", "lru"]
    assert main(args + ["--out", str(tmp_path / "on")]) == 0
    out = capsys.readouterr().out
    assert "opt:lower" in out and "bound" in out     # the terminal table wraps long cells
    on = pd.read_parquet(tmp_path / "on" / "results.parquet")
    assert {BRACKET_LOWER, BRACKET_UPPER} <= set(on["strategy"])
    assert main(args + ["--out", str(tmp_path / "off"), "--no-bracket"]) == 0
    off = pd.read_parquet(tmp_path / "off" / "results.parquet")
    assert set(off["strategy"]) == {"lru"}
    assert "opt:lower" not in (tmp_path / "off" / "summary.md").read_text()
    assert "lower bound (PFOO-L)" in (tmp_path / "on" / "summary.md").read_text()


def test_pinned_content_takes_capacity_from_the_bound():
    # a, b, a, b (60 bytes each), one per turn, window 200: both reuse intervals fit alone, but a
    # 100-byte message pinned from the first turn leaves 100 per turn end: one of them must miss.
    reads = [(0, "read", "a", 60), (1, "read", "b", 60), (2, "read", "a", 60), (3, "read", "b", 60)]
    assert bound(reads, 200) == (0, 0)
    with_message = [(0, "message", "msg://user/0", 100)] + reads
    one = TokenRatios.uniform(1.0)   # the message takes its 100 bytes
    # 220 byte-turns usable: one interval whole (120), the other's 60 bytes for 100 of its 120 byte-turns.
    assert bound(with_message, 200, bytes_per_token=one) == (1, 10)
    assert brute_force_optimum(with_message, 200, tokens=one) == (1, 60)
    assert outcome(belady_size_replay(trace(with_message), ContextBudget(200), bytes_per_token=one).row) == (1, 60)
    assert outcome(replay_session(trace(with_message), "lru", ContextBudget(200), bytes_per_token=one).row) == (2, 120)
