"""Plain GitHub-markdown tables from DataFrames (no extra dependency), and escaping of names in Markdown.

Every name that comes from data (strategies, sessions, traces, paths, anything read from
``meta.json``) goes through `escape` wherever it appears in Markdown, so that it renders as its
own text: one table cell, no emphasis, link, HTML or code span. `inline_html` renders the same
inline subset (escapes, character references, fixed ``code`` spans) as HTML for report.html.
"""

from __future__ import annotations

import html
import re

import pandas as pd

__all__ = ["frame_to_markdown", "escape", "inline_html", "split_row"]

# Characters with inline meaning in CommonMark or GitHub tables, escaped everywhere in a name.
_SPECIAL = re.compile(r"[\\`*_\[\]<>|~&#]")
# Block syntax that only counts at the start of a line (a list item's text, say): "-", "+", "=", "1." ...
_LEADING = re.compile(r"^([-+=]|[0-9]+[.)])")
# Characters a cell or line cannot hold as they are: line breaks and other controls, and whitespace at
# either end (a cell is trimmed); written as numeric character references.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_EDGE_SPACE = re.compile(r"^\s+|\s+$")
_INLINE = re.compile(r"\\([!-/:-@\[-`{-~])|`([^`]+)`|&#([0-9]{1,7});|([^\\`&]+|.)", re.S)


def _reference(match: re.Match) -> str:
    return "".join(f"&#{ord(c)};" for c in match.group(0))


def escape(value: object, *, line_start: bool = False) -> str:
    """``str(value)`` as literal Markdown inline text that stays on one line and in one table cell;
    ``line_start`` when it begins a line (a list item's text), where ``-``, ``+``, ``=`` and ``1.``
    would start a block.

    >>> escape("a|b*c_d")
    'a\\\\|b\\\\*c\\\\_d'
    >>> escape("two\\nlines"), escape("1. x", line_start=True)
    ('two&#10;lines', '1\\\\. x')
    """
    text = _SPECIAL.sub(lambda m: "\\" + m.group(0), str(value))
    if line_start:
        text = _LEADING.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], text)
    return _EDGE_SPACE.sub(_reference, _CONTROL.sub(_reference, text))


def inline_html(text: str) -> str:
    """HTML for Markdown inline text made of plain text, `escape` output and ``code`` spans.

    >>> inline_html(escape("<b>&") + " in `x<y`")
    '&lt;b&gt;&amp; in <code>x&lt;y</code>'
    """
    out = []
    for escaped, code, reference, plain in _INLINE.findall(text):
        if code:
            out.append(f"<code>{html.escape(code)}</code>")
        elif reference:
            number = int(reference)
            out.append(html.escape(chr(number) if 0 < number <= 0x10FFFF else "\ufffd"))
        else:
            out.append(html.escape(escaped or plain))
    return "".join(out)


def split_row(line: str) -> list[str]:
    """The cells of one Markdown table row, still escaped (a ``\\|`` stays inside its cell).

    >>> split_row("| a\\\\|b | c |")
    ['a\\\\|b', 'c']
    """
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    cells, cell, i = [], [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            cell.append(body[i:i + 2])
            i += 2
            continue
        if body[i] == "|":
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(body[i])
        i += 1
    if "".join(cell).strip():
        cells.append("".join(cell).strip())
    return cells


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return escape(value)


def frame_to_markdown(frame: pd.DataFrame) -> str:
    """``frame`` as a markdown table; numbers right-aligned, names escaped (`escape`).

    >>> print(frame_to_markdown(pd.DataFrame({"mode": ["strict"], "lines_lost": [0]})))
    | mode | lines\\_lost |
    |---|---:|
    | strict | 0 |
    """
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    lines = ["| " + " | ".join(escape(c) for c in frame.columns) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v.item() if hasattr(v, "item") else v) for v in row) + " |")
    return "\n".join(lines)
