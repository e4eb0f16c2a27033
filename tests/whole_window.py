"""Generated sessions with the whole window (an overhead, a message per turn, each tool call's input), for the tests
and benchmarks of the transcript model until the generator makes them itself."""

from __future__ import annotations

import pandas as pd


def conversational(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the whole window: an overhead first, an assistant message per turn, a tool call's input before
    each tool event."""
    rows = []
    for session, g in df.groupby("session", sort=False, observed=True):
        first = g.iloc[0]
        rows.append((session, 0, int(first.ts_ms), "overhead", "overhead://system", 20_000))
        last = None
        for k, r in enumerate(g.itertuples()):
            if r.turn != last:
                rows.append((session, r.turn, r.ts_ms, "message", f"msg://assistant/{k}", 300))
                last = r.turn
            rows.append((session, r.turn, r.ts_ms, "call", f"call://{k}", 900 if r.op in ("edit", "write") else 150))
            rows.append((session, r.turn, r.ts_ms, r.op, r.path, r.size_bytes))
    return pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes"])
