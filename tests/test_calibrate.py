"""Calibration of bytes per token by kind: known ratios recovered, unidentifiable kinds kept, the CLI and
its ratios file, and the shipped defaults as the fit on the bundled session they were calibrated on."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.analysis.calibrate import MIN_SHARE, calibrate, read_token_ratios
from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.traces.importers.claude_code import call_size
from ctxbench.traces.tokens import DEFAULT_RATIOS, DEFAULT_TOKENS, TokenRatios
from real_data import REAL_DATA

DATA = REAL_DATA
PRIOR = TokenRatios({"code": 2.5, "output": 2.5, "prose": 4.0, "thinking": 1.0, "json": 2.5, "overhead": 2.0})
TRUE = {"code": 2.0, "output": 3.0, "json": 1.5}


def synthetic(turns=12, true=TRUE, overhead_bytes=2000):
    """A window whose real tokens are exactly overhead + Σ bytes / true ratio, growth varied per kind."""
    rows, window = [(0, "overhead", "overhead://system", overhead_bytes)], overhead_bytes / PRIOR.ratios["overhead"]
    usage = {}
    for t in range(1, turns + 1):
        usage[t] = round(window)
        for op, path, size, kind in (("read", f"f{t}.py", 100 * (t % 5 + 1), "code"),
                                     ("output", f"tool://bash/{t}", 70 * (t % 3 + 1) + 13 * t, "output"),
                                     ("call", f"call://bash/{t}", 40 + 9 * (t % 4), "json")):
            rows.append((t, op, path, size))
            window += size / true[kind]
    return pd.DataFrame({"session": "s", "turn": [r[0] for r in rows], "ts_ms": [1000 * r[0] for r in rows],
                         "op": [r[1] for r in rows], "path": [r[2] for r in rows], "size_bytes": [r[3] for r in rows],
                         "usage_input_tokens": [usage.get(r[0], 0) for r in rows], "compact_before": False})


def test_known_ratios_are_recovered_and_absent_kinds_kept():
    fit = calibrate(synthetic(), PRIOR)
    for kind, value in TRUE.items():
        assert fit.ratios.ratios[kind] == pytest.approx(value, rel=0.02)
    assert fit.kept == {"prose": "absent", "thinking": "absent"}
    assert fit.ratios.ratios["prose"] == 4.0 and fit.ratios.ratios["overhead"] == 2.0   # the prior's
    assert set(fit.fitted) == set(TRUE)
    assert fit.pooled["calls"] == 12 and fit.pooled["median_ratio"] == pytest.approx(1.0, abs=0.01)
    [window] = fit.windows.to_dict(orient="records")
    assert window["overhead_tokens"] == 1000 and window["pearson"] > 0.999


def test_a_kind_below_the_share_or_implausible_keeps_its_prior():
    df = synthetic()
    small = df[df["op"] == "call"].assign(op="message", path=lambda d: "msg://user/" + d["turn"].astype(str),
                                          size_bytes=1)
    fit = calibrate(pd.concat([df, small]).sort_values("turn", kind="stable"), PRIOR)
    assert fit.kept["prose"] == f"under {MIN_SHARE:.0%} of the content"
    odd = calibrate(synthetic(true={**TRUE, "json": 40.0}), PRIOR)   # 40 bytes per token: not plausible
    assert odd.kept["json"].startswith("fit ") and odd.kept["json"].endswith("outside 0.3-12")
    assert odd.ratios.ratios["json"] == PRIOR.ratios["json"]


def test_without_recorded_tokens_or_growth_it_is_bad_input():
    with pytest.raises(InputError, match="no recorded input tokens"):
        calibrate(synthetic().assign(usage_input_tokens=0), PRIOR)
    with pytest.raises(InputError, match="two calls"):
        calibrate(synthetic(turns=1), PRIOR)


def transcript(path: Path, true=TRUE, calls=10) -> Path:
    """A Claude Code transcript whose usage follows ``true`` ratios exactly (overhead 20,000 tokens)."""
    lines, window = [], 20_000.0
    lines.append({"type": "user", "uuid": "u0", "timestamp": "2026-01-05T10:00:00.000Z",
                  "message": {"role": "user", "content": "Go."}})
    window += len("Go.") / DEFAULT_RATIOS["prose"]
    for k in range(calls):
        block = {"type": "tool_use", "id": f"toolu_{k:03d}", "name": "Bash", "input": {"command": "x" * (5 + 7 * k)}}
        usage = {"input_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": round(window) - 1}
        lines.append({"type": "assistant", "uuid": f"a{k}", "timestamp": f"2026-01-05T10:{k + 1:02d}:00.000Z",
                      "message": {"id": f"m{k}", "role": "assistant", "content": [block], "usage": usage}})
        result = "y" * (200 + 150 * (k % 4))
        lines.append({"type": "user", "uuid": f"r{k}", "timestamp": f"2026-01-05T10:{k + 1:02d}:30.000Z",
                      "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"],
                                                                "content": result}]}})
        window += call_size(block) / true["json"] + len(result) / true["output"]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_cli_fits_a_transcript_and_writes_ratios_that_run_and_fidelity_read(tmp_path, capsys):
    log = transcript(tmp_path / "s.jsonl")
    out = tmp_path / "ratios.json"
    assert main(["calibrate", str(log), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bytes per token by content kind" in text and "kept: absent" in text and "wrote" in text
    ratios = read_token_ratios(out)
    assert ratios.ratios["json"] == pytest.approx(1.5, rel=0.02)
    assert ratios.ratios["output"] == pytest.approx(3.0, rel=0.02)
    assert ratios.ratios["code"] == DEFAULT_TOKENS.ratios["code"]   # no file content: the default kept
    assert main(["calibrate", str(log), "--out", str(out), "--json"]) == 0   # its own file is replaced
    report = json.loads(capsys.readouterr().out)
    assert report["windows"][0]["calls"] == 10 and report["windows"][0]["overhead_tokens"] == pytest.approx(20_000, abs=1)
    trace = tmp_path / "t.parquet"
    assert main(["import", "claude-code", str(log), "--out", str(trace)]) == 0
    capsys.readouterr()
    assert main(["fidelity", str(trace), "--token-ratios", str(out), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["median_ratio"] == pytest.approx(1.0, abs=0.01) and row["pearson"] > 0.999
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--workers", "1", "--no-report",
                 "--budget-tokens", "30000", "--token-ratios", str(out), "--out", str(tmp_path / "res")]) == 0
    meta = json.loads((tmp_path / "res" / "meta.json").read_text())
    assert meta["config"]["token_ratios"]["json"] == pytest.approx(1.5, rel=0.02)


def test_cli_refuses_a_foreign_out_and_logs_without_usage(tmp_path, capsys):
    log = transcript(tmp_path / "s.jsonl")
    foreign = tmp_path / "mine.json"
    foreign.write_text('{"mine": true}\n')
    assert main(["calibrate", str(log), "--out", str(foreign)]) == 2
    assert "ctxbench cannot tell that it wrote it" in capsys.readouterr().err
    assert foreign.read_text() == '{"mine": true}\n'
    bare = tmp_path / "bare.jsonl"
    bare.write_text(log.read_text().replace('"usage"', '"nothing"'))
    assert main(["calibrate", str(bare)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxbench calibrate: error: no recorded input tokens") and "\n" not in err
    assert main(["calibrate", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.real_sessions
def test_the_shipped_defaults_are_the_fit_on_the_session_they_were_calibrated_on():
    from ctxbench.traces.importers import import_paths

    log = DATA / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    fit = calibrate(import_paths("claude-code", [log, log.with_suffix("")])[0])   # the session and its subagents
    for kind, value in DEFAULT_RATIOS.items():
        assert fit.ratios.ratios[kind] == pytest.approx(value, abs=0.006), kind   # shipped rounded to 0.01
    assert fit.kept == {"thinking": "under 2% of the content"}   # 1.5 % of the growth
    assert 0.99 < fit.pooled["median_ratio"] < 1.02 and fit.pooled["pearson"] > 0.995


def test_each_session_left_out_is_predicted_by_the_others():
    both = pd.concat([synthetic(), synthetic(turns=9).assign(session="t")], ignore_index=True)
    fit = calibrate(both, PRIOR)
    held = fit.held_out.set_index("session")
    assert list(held.index) == ["s", "t"] and (held["reason"] == "").all()
    # the same true ratios in both sessions: each is predicted as well from the other alone
    assert held["median_ratio"].tolist() == pytest.approx([1.0, 1.0], abs=0.01)
    other = calibrate(pd.concat([synthetic(), synthetic(true={**TRUE, "code": 4.0}).assign(session="t")],
                                ignore_index=True), PRIOR).held_out.set_index("session")
    # t's code takes half the tokens s's does: fitted on s alone, t is over-predicted, and s under-predicted
    assert other.loc["t", "median_ratio"] > 1.05 and other.loc["s", "median_ratio"] < 0.95
    assert calibrate(synthetic(), PRIOR).held_out.empty            # one session: nothing to leave out


def test_the_bundled_claude_sessions_left_out_of_the_fit():
    from ctxbench.traces.importers import import_paths

    trace, _ = import_paths("claude-code", [DATA / "claude-code"])
    held = calibrate(trace).held_out.set_index("session")
    large = held[held["calls"] > 100]
    assert len(large) == 2
    assert large["median_ratio"].between(0.9, 1.1).all() and (large["pearson"] >= 0.98).all()


def test_a_ratios_document_of_another_format_version_is_refused(tmp_path):
    doc = tmp_path / "r.json"
    doc.write_text(json.dumps({"format": "ctxbench-token-ratios/9", "ratios": {"code": 2.0}}))
    with pytest.raises(InputError, match=r"r.json: format 'ctxbench-token-ratios/9' is not one this version reads"):
        read_token_ratios(doc)
    doc.write_text(json.dumps({"format": "ctxbench-token-ratios/1", "ratios": {"code": 2.0}}))
    assert read_token_ratios(doc).ratios["code"] == 2.0


def test_a_ratios_file_that_is_huge_or_not_a_file_is_refused(tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"code": 2.0' + " " * (1 << 20) + "}")
    with pytest.raises(InputError, match="big.json: a token-ratios file is at most 1024 KiB"):
        read_token_ratios(big)
    with pytest.raises(InputError, match="/dev/zero: cannot read token ratios: not a regular file"):
        read_token_ratios("/dev/zero")
