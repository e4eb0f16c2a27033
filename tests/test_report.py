"""`write_report` and `ctxbench report`: files, tables, a self-contained HTML page, atomic writes."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.sim.analysis.grid import run_grid
from ctxbench.sim.output import MANIFEST
from ctxbench.sim.presentation.report import FIGURES_DIR, REPORT_HTML, REPORT_MD, write_report
from ctxbench.sim.presentation.results import Results, load_results, run_metadata, write_results_dir
from ctxbench.sim.engine.suite import build_suite

SLUGS = ("miss_ratio_curve", "reread_tokens", "latency_cdf", "occupancy", "timeline")
BUDGETS = [25_000, 200_000]


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
    grid = run_grid(build_suite("quick"), ["lru", "importance"], BUDGETS, workers=1, progress=False, bracket=True)
    meta = run_metadata({"workload": {"suite": "quick"}, "strategies": ["lru", "importance"],
                         "budgets_tokens": BUDGETS, "bytes_per_token": 3.8, "lenient": False})
    return write_results_dir(tmp_path_factory.mktemp("run") / "results", grid.results, grid.turns, meta)


@pytest.fixture(scope="module")
def report(results_dir):
    return write_report(results_dir)


def test_report_files(report, results_dir):
    assert report.out_dir == results_dir
    for slug in SLUGS:
        for ext in ("png", "svg"):
            path = results_dir / FIGURES_DIR / f"{slug}.{ext}"
            assert path.is_file() and path.stat().st_size > 1000, path
    assert len(report.figures) == 2 * len(SLUGS)
    assert not list(results_dir.glob(".report.*")), "temporary files left behind"


def test_report_md(report, results_dir):
    md = report.markdown.read_text()
    assert md.startswith("# ctxbench report\n")
    assert "## Configuration" in md and "- workload: {\"suite\": \"quick\"}" in md
    assert "## Decision at 200,000 tokens" in md and "## Misses at 200,000 tokens" in md
    assert "| rank | configuration | model | re-read tokens [95% CI] | cost [95% CI] |" in md
    assert "| rank | configuration | pure | miss rate [95% CI] |" in md
    for name in ("lru", "importance"):
        assert re.search(rf"^\| [12] \| {name} \|", md, re.M), name
    assert "| bound | opt:lower |" in md
    assert "## Miss rate by budget" in md and "| 25K tokens | 200K tokens |" in md
    assert "## Optimal bracket" in md and "× optimal" in md
    for link in re.findall(r"\]\((figures/[^)]+)\)", md):
        assert (results_dir / link).is_file(), link


def test_report_html_is_self_contained(report):
    page = report.html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    for attr, value in re.findall(r"""\b(src|href)\s*=\s*["']?([^"'\s>]*)""", page, re.I):
        assert value.startswith("data:") or value.startswith("#"), f"external {attr}: {value[:60]}"
    assert not re.search(r"<link\b|@import|url\(\s*['\"]?(?!data:)", page, re.I)
    images = re.findall(r"<img\b[^>]*>", page)
    assert len(images) == len(SLUGS)
    for tag in images:
        src = re.search(r'src="([^"]+)"', tag).group(1)
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
        assert re.search(r'alt="[^"]+"', tag)
    assert "<table>" in page and "<th" in page and "<td" in page


def test_report_elsewhere_with_chosen_session_and_strategy_and_atomic_on_failure(results_dir, tmp_path):
    res = load_results(results_dir)
    trace, session = res.results[["trace", "session"]].iloc[-1]
    out = tmp_path / "rep"
    first = write_report(Results(res.results, res.turns, res.meta), out, session=f"{trace}/{session}",
                         strategy="importance")
    md = first.markdown.read_text()
    assert f"Context occupancy, session {trace}/{session}" in md
    assert f"Per-turn timeline: importance, session {trace}/{session}" in md
    before = {p: p.read_bytes() for p in [first.markdown, first.html, *first.figures]}
    with pytest.raises(InputError, match="no session 'nope'"):
        write_report(results_dir, out, session="nope")
    with pytest.raises(InputError, match="no strategy 'nope'"):
        write_report(results_dir, out, strategy="nope")
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, FIGURES_DIR, REPORT_HTML, REPORT_MD]


def test_report_without_turns_leaves_out_the_turn_figures(results_dir, tmp_path, capsys):
    res = load_results(results_dir)
    no_turns = write_results_dir(tmp_path / "no-turns", res.results, pd.DataFrame(), res.meta)
    assert main(["report", str(no_turns), "--out", str(tmp_path / "cli")]) == 0
    assert f"report: {tmp_path / 'cli' / REPORT_HTML}" in capsys.readouterr().out
    figures = sorted(p.stem for p in (tmp_path / "cli" / FIGURES_DIR).iterdir())
    assert figures == sorted(2 * ["miss_ratio_curve", "reread_tokens"])
    assert "per-turn log was not kept" in (tmp_path / "cli" / REPORT_MD).read_text()


def test_results_without_required_columns_are_bad_input(results_dir):
    res = load_results(results_dir)
    with pytest.raises(InputError, match="missing column"):
        write_report(Results(res.results.drop(columns="reread_tokens"), res.turns, res.meta, res.path))
    with pytest.raises(InputError, match="no out_dir"):
        write_report(Results(res.results, res.turns, res.meta))


@pytest.mark.parametrize("make_bad", ["missing", "corrupt", "empty"])
def test_cli_report_bad_results_dir(make_bad, tmp_path, capsys):
    bad = tmp_path / "bad"
    if make_bad != "missing":
        bad.mkdir()
    if make_bad == "corrupt":
        (bad / "results.parquet").write_bytes(b"not parquet at all")
    out = tmp_path / "out"
    assert main(["report", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxbench report: error:") and "\n" not in err and str(bad) in err
    assert not out.exists()


def test_run_writes_the_report_unless_told_not_to(tmp_path, capsys):
    args = ["run", "--suite", "quick", "--strategy", "lru", "--budget-tokens", "50000", "--workers", "1"]
    assert main(args + ["--out", str(tmp_path / "with")]) == 0
    assert (tmp_path / "with" / REPORT_HTML).is_file() and (tmp_path / "with" / REPORT_MD).is_file()
    figures = sorted(p.stem for p in (tmp_path / "with" / FIGURES_DIR).glob("*.png"))
    assert figures == ["latency_cdf", "occupancy", "reread_tokens", "timeline"]  # one budget: no curve
    assert "One budget was run" in (tmp_path / "with" / REPORT_MD).read_text()
    assert "report: " in capsys.readouterr().out
    assert main(args + ["--out", str(tmp_path / "without"), "--no-report"]) == 0
    written = {p.name for p in (tmp_path / "without").iterdir()}
    assert "results.parquet" in written and not written & {REPORT_HTML, REPORT_MD, FIGURES_DIR}


def test_multi_arm_run_reports_claim_modes_and_the_price_of_purity(tmp_path, capsys):
    out = tmp_path / "multi"
    assert main(["run", "--suite", "multi-arm", "--claims", "strict,lazy,disabled", "--strategy", "lru", "arc",
                 "--budget-tokens", "50000", "--workers", "1", "--no-bracket", "--no-turns", "--out", str(out),
                 "--bytes-per-token", "3.8"]) == 0
    capsys.readouterr()
    figures = sorted(p.stem for p in (out / FIGURES_DIR).glob("*.png"))
    assert figures == ["claim_modes", "price_of_purity", "reread_tokens"]
    md = (out / REPORT_MD).read_text()
    claims = md[md.index("## Claim modes"):]
    assert re.search(r"with (lru|arc) at 50,000 tokens", claims)  # the strategy that ranks first
    assert "| claim mode | lines lost | overwrites | invalidation re-reads | blocked turns |" in claims
    rows = {line.split(" | ")[0].strip("| "): line for line in claims.splitlines()
            if re.match(r"^\| (strict|lazy|disabled) \| [\d,]", line)}
    assert rows["strict"].startswith("| strict | 0 | 0 |")  # strict never loses lines
    assert not rows["disabled"].startswith("| disabled | 0 |")
    assert "| strict | main |" in claims and "](figures/claim_modes.png)" in claims
    purity = md[md.index("## Price of purity"):md.index("## Claim modes")]
    assert "| parallel-hubs | 50k |" in purity and "](figures/price_of_purity.png)" in purity
    page = (out / REPORT_HTML).read_text()
    assert len(re.findall(r"<img\b", page)) == 3 and 'id="claim_modes"' in page


def test_report_without_arms_or_stateful_strategies_has_neither_section(report):
    md = report.markdown.read_text()
    assert "## Claim modes" not in md and "## Price of purity" not in md
