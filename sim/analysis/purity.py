"""The price of purity: the best pure strategy against the best stateful one, per trace and budget."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.labels import is_bracket, policy_rows

__all__ = ["ALL_TRACES", "PURITY_COLUMNS", "price_of_purity"]

ALL_TRACES = "(all)"
PURITY_COLUMNS = (
    "trace", "budget_tokens", "sessions",
    "best_pure", "pure_reread_tokens", "pure_miss_rate",
    "best_stateful", "stateful_reread_tokens", "stateful_miss_rate",
    "reread_tokens_diff", "reread_tokens_ratio", "miss_rate_diff", "miss_rate_ratio",
)


def _ratio(num: float, den: float) -> float:
    """``num / den``, with 1 when both are 0 and ``inf`` when only ``den`` is."""
    if den == 0:
        return 1.0 if num == 0 else float("inf")
    return num / den


def _best(means: pd.DataFrame) -> pd.Series:
    """The row with the fewest re-read tokens; ties by miss rate, then by name."""
    return means.sort_values(["reread_tokens", "miss_rate", "strategy"], kind="mergesort").iloc[0]


def price_of_purity(results: pd.DataFrame) -> pd.DataFrame:
    """Per trace and budget, the best pure strategy against the best stateful one.

    ``results`` has one row per (session, strategy, budget), as from `sim.analysis.grid.run_grid`, with
    a boolean ``pure`` column. For each trace and budget (and claim mode, when multi-arm
    sessions ran under claims; single-arm sessions then count in every mode), each strategy's mean re-read tokens and miss rate per session
    are compared; the best of each kind is the one with the fewest mean re-read tokens (ties by
    miss rate, then name). One more row per budget, trace ``"(all)"``, does the same over the
    sessions of every trace. Rows of the optimal bracket are not strategies and are left out, and so are
    context policies and compacted strategies (`sim.analysis.labels.policy_rows`).

    ``reread_tokens_diff`` = pure − stateful: positive is the price the purity rule costs in
    re-read tokens per session, negative means a pure strategy did better. ``*_ratio`` = pure ÷
    stateful (1 when both are 0, ``inf`` when only the stateful one is). Only groups where both
    kinds ran appear; with none, the frame is empty (with the columns of `PURITY_COLUMNS`).
    """
    need = {"trace", "strategy", "pure", "budget_tokens", "reread_tokens", "miss_rate"}
    missing = need - set(results.columns)
    if missing:
        raise ValueError(f"results lack column(s) {', '.join(sorted(missing))}")
    rows = results[~results["strategy"].map(is_bracket) & results["pure"].notna() & ~policy_rows(results)]
    rows = rows.assign(pure=rows["pure"].astype(bool))
    keys = ["budget_tokens"]
    if "claims" in rows.columns and rows["claims"].notna().any():
        keys.append("claims")
        # Single-arm sessions have no claim mode and count in every one of them.
        single = rows["claims"].isna()
        modes = rows.loc[~single, "claims"].unique()
        rows = pd.concat([rows[~single], *(rows[single].assign(claims=m) for m in modes)], ignore_index=True)
    everything = rows.assign(trace=ALL_TRACES)
    out = []
    for frame in (rows, everything):
        for group, at in frame.groupby(["trace", *keys], sort=True, dropna=False, observed=True):
            if at["pure"].nunique() < 2:
                continue
            means = (at.groupby(["strategy", "pure"], observed=True)[["reread_tokens", "miss_rate"]]
                     .mean().reset_index())
            pure, stateful = _best(means[means["pure"]]), _best(means[~means["pure"]])
            sessions = at.drop_duplicates(["trace", "session"]).shape[0] if "session" in at.columns else np.nan
            out.append({
                **dict(zip(["trace", *keys], group)),
                "sessions": sessions,
                "best_pure": pure["strategy"],
                "pure_reread_tokens": float(pure["reread_tokens"]),
                "pure_miss_rate": float(pure["miss_rate"]),
                "best_stateful": stateful["strategy"],
                "stateful_reread_tokens": float(stateful["reread_tokens"]),
                "stateful_miss_rate": float(stateful["miss_rate"]),
                "reread_tokens_diff": float(pure["reread_tokens"] - stateful["reread_tokens"]),
                "reread_tokens_ratio": _ratio(pure["reread_tokens"], stateful["reread_tokens"]),
                "miss_rate_diff": float(pure["miss_rate"] - stateful["miss_rate"]),
                "miss_rate_ratio": _ratio(pure["miss_rate"], stateful["miss_rate"]),
            })
    columns = list(PURITY_COLUMNS) + (["claims"] if "claims" in keys else [])
    return pd.DataFrame(out, columns=columns)
