"""Names in report.md and summary.md: escaped so that any name renders as its own text, in one cell or line."""

import html
import json

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from ctxbench.sim.cli import main
from ctxbench.sim.presentation.markdown import escape, frame_to_markdown, inline_html, split_row
from ctxbench.sim.analysis.ranking import ranked
from ctxbench.sim.presentation.summary_text import decision_markdown, ranking_markdown
from test_cli_run import FAST

# CommonMark with GitHub tables (markdown-it-py comes with rich). Control characters other than tab
# and line breaks are written as character references too, which CommonMark decodes but markdown-it
# shows as U+FFFD: they are left out of the round trip and checked apart.
MD = MarkdownIt("commonmark").enable("table")
CONTROLS = "".join(map(chr, [*range(0, 9), 0x0B, *range(0x0E, 0x20), *range(0x7F, 0xA0)]))
names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=CONTROLS), min_size=1, max_size=40)
HOSTILE = "a|b *c* _d_ `e` <i>f</i> [g](h) ~~i~~ &amp; # j\\ \nk\r\tl  "


def _inline_texts(markdown: str, container: str) -> list[str]:
    """The text of each inline element inside ``container`` tokens (``td``, ``th``, ``li``, ``h3``);
    fails when any of them renders as something other than plain text."""
    tokens = MD.parse(markdown)
    out, depth = [], 0
    for token in tokens:
        if token.tag == container and token.nesting:
            depth += token.nesting
        elif token.type == "inline" and depth:
            kinds = {child.type for child in token.children}
            assert kinds <= {"text"}, (markdown, kinds)
            out.append("".join(child.content for child in token.children))
        elif depth and token.type not in ("paragraph_open", "paragraph_close"):
            raise AssertionError(f"a {container} holds a {token.type}: {markdown!r}")
    return out


@settings(max_examples=300, deadline=None)
@given(name=names)
def test_any_name_renders_as_one_table_cell_with_its_text(name):
    table = frame_to_markdown(pd.DataFrame([[name, 1]], columns=[name, "n"]))
    assert _inline_texts(table, "th") == [name, "n"]
    assert _inline_texts(table, "td") == [name, "1"]
    row = table.splitlines()[2]
    assert len(split_row(row)) == 2
    assert html.unescape(inline_html(split_row(row)[0])) == name  # report.html shows the same text


@settings(max_examples=300, deadline=None)
@given(name=names)
def test_any_name_renders_as_its_text_in_a_list_item_and_a_heading(name):
    assert _inline_texts(f"- {escape(name, line_start=True)}: 5\n", "li") == [f"{name}: 5"]
    assert _inline_texts(f"### Timeline: {escape(name)}\n", "h3") == [f"Timeline: {name}"]


def test_control_characters_keep_a_name_in_its_cell_and_line():
    name = "a\x1fb\x0bc\x85d\x1b"
    table = frame_to_markdown(pd.DataFrame({"s": [name], "n": [1]}))
    assert len(table.splitlines()) == 3 and len(split_row(table.splitlines()[2])) == 2
    assert _inline_texts(table, "td") == ["a\ufffdb\ufffdc\ufffdd\ufffd", "1"]
    assert html.unescape(inline_html(split_row(table.splitlines()[2])[0])) == name


def test_hostile_names_render_as_text():
    assert _inline_texts(frame_to_markdown(pd.DataFrame({"s": [HOSTILE]})), "td") == [HOSTILE]
    assert "<i>" not in MD.render(f"- {escape(HOSTILE, line_start=True)}\n")


def _results(name: str) -> pd.DataFrame:
    rows = [{"trace": "t", "session": f"s{i}", "strategy": name, "budget_tokens": 1000.0, "reread_tokens": 5.0 + i,
             "miss_rate": 0.5, "capacity_miss_rate": 0.1, "evict_p99_ns": 100.0, "pure": True} for i in range(2)]
    return pd.DataFrame(rows)


def test_ranking_markdown_escapes_strategy_names():
    table = ranking_markdown(ranked(_results(HOSTILE), 1000.0))
    assert _inline_texts(table, "td")[1] == HOSTILE
    assert split_row(table.splitlines()[2])[3:5] == ["50.0% [50.0%–50.0%]", "10.0% [10.0%–10.0%]"]
    assert len(split_row(table.splitlines()[2])) == 5   # rank, name, pure, miss rate, capacity
    decision = decision_markdown(ranked(_results(HOSTILE), 1000.0))
    assert _inline_texts(decision, "td")[1] == HOSTILE
    assert split_row(decision.splitlines()[2])[3] == "6 [5–6]"


def test_summary_and_report_escape_session_trace_and_strategy_names(tmp_path, capsys):
    session = "s|x *bold* <b>html</b> [l](u) `c`"
    trace = tmp_path / "w|a_b.csv"
    rows = [(session, t, t, "read", f"f{t % 3}.py", 5_000) for t in range(12)]
    pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes"]).to_csv(trace, index=False)
    out = tmp_path / "r"
    fast = [a for a in FAST if a != "--no-report"]
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--budget-tokens", "2000", "--out", str(out),
                 *fast]) == 0
    capsys.readouterr()
    summary = (out / "summary.md").read_text()
    report = (out / "report.md").read_text()
    for text in (summary, report):
        rendered = MD.render(text)
        assert "<b>html</b>" not in rendered and "<strong>" not in rendered and "<em>" not in rendered
        assert '<a href="u">' not in rendered
    workload = json.dumps({"traces": [str(trace.resolve())]})
    assert any(t.startswith("workload: ") and t[len("workload: "):] == workload
               for t in _inline_texts(summary, "li"))
    titles = _inline_texts(report, "h3")
    assert any(f"session w|a_b.csv/{session}" in t for t in titles), titles
    page = (out / "report.html").read_text()
    assert html.escape(f"w|a_b.csv/{session}") in page and "<b>html</b>" not in page
