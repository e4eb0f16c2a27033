"""Plain GitHub-markdown tables from DataFrames (no extra dependency)."""

from __future__ import annotations

import pandas as pd

__all__ = ["frame_to_markdown"]


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def frame_to_markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a markdown table; numbers right-aligned.

    >>> print(frame_to_markdown(pd.DataFrame({"mode": ["strict"], "lines_lost": [0]})))
    | mode | lines_lost |
    |---|---:|
    | strict | 0 |
    """
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    lines = ["| " + " | ".join(str(c) for c in frame.columns) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v.item() if hasattr(v, "item") else v) for v in row) + " |")
    return "\n".join(lines)
