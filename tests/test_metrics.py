"""`sim.analysis.metrics`: the summary row of a per-turn log, checked against plain numpy."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ctxbench.sim.engine.measures import TURN_FIELDS, TurnLog, nearest_rank, summarise


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=300),
       st.lists(st.floats(0, 100), min_size=1, max_size=5))
def test_nearest_rank_is_numpys_nearest_percentile(values, percents):
    arr = np.array(values, dtype=np.int64)
    expected = np.percentile(arr, percents, method="nearest").astype(np.int64).tolist()
    assert nearest_rank(arr, percents) == expected


@given(st.lists(st.lists(st.integers(0, 10**9), min_size=len(TURN_FIELDS), max_size=len(TURN_FIELDS)),
                max_size=40))
def test_summary_sums_and_peaks_match_the_columns(rows):
    log = TurnLog(np.array(rows, dtype=np.int64).reshape(-1, len(TURN_FIELDS)), {})
    row = summarise(log, max_bytes=1000)
    c = {name: np.array([r[i] for r in rows], dtype=np.int64) for i, name in enumerate(TURN_FIELDS)}
    assert row["accesses"] == c["accesses"].sum() and row["hits"] == c["hits"].sum()
    assert row["misses"] == c["compulsory"].sum() + c["capacity"].sum() + c["invalidation"].sum()
    assert row["reread_bytes"] == c["capacity_bytes"].sum() and row["evictions"] == c["evictions"].sum()
    assert row["violations"] == c["violations"].sum() and row["turns"] == len(rows)
    assert row["peak_bytes"] == (c["occupancy_bytes"].max() if rows else 0)
    assert row["evict_p99_ns"] == (int(np.percentile(c["evict_ns"], 99, method="nearest")) if rows else 0)
    assert row["evict_max_ns"] == (c["evict_ns"].max() if rows else 0)
    assert row["mean_occupancy"] == (float(c["occupancy_bytes"].mean() / 1000) if rows else 0.0)   # bit for bit
    assert all(type(row[k]) is int for k in ("accesses", "hits", "misses", "evictions", "evict_p50_ns"))
