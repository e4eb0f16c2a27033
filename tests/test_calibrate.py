"""Calibration of bytes per token by kind: known ratios recovered, unidentifiable kinds kept, the CLI and
its ratios file, and the shipped defaults as the fit on the bundled session they were calibrated on."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ctxbench.sim.analysis.calibrate import BY_KIND, MIN_SHARE, ONE_RATIO, calibrate, calibrate_families, read_token_ratios
from ctxbench.sim.cli import main
from ctxbench.sim.errors import InputError
from ctxbench.traces.importers.claude_code import call_size
from ctxbench.traces.model_ratios import FAMILY_RATIOS
from ctxbench.traces.tokens import DEFAULT_RATIOS, DEFAULT_TOKENS, TokenRatios
from real_data import REAL_DATA

DATA = REAL_DATA
PRIOR = TokenRatios({"code": 2.5, "output": 2.5, "prose": 4.0, "thinking": 1.0, "json": 2.5, "overhead": 2.0})
TRUE = {"code": 2.0, "output": 3.0, "json": 1.5}


def synthetic(turns=12, true=TRUE, overhead_bytes=2000, kinds=("code", "output", "json")):
    """A window whose real tokens are exactly overhead + Σ bytes / true ratio, growth varied per kind."""
    rows, window = [(0, "overhead", "overhead://system", overhead_bytes)], overhead_bytes / PRIOR.ratios["overhead"]
    usage = {}
    for t in range(1, turns + 1):
        usage[t] = round(window)
        for op, path, size, kind in (("read", f"f{t}.py", 100 * (t % 5 + 1), "code"),
                                     ("output", f"tool://bash/{t}", 70 * (t % 3 + 1) + 13 * t, "output"),
                                     ("call", f"call://bash/{t}", 40 + 9 * (t % 4), "json")):
            if kind not in kinds:
                continue
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


def transcript(path: Path, true=TRUE, calls=10, model=None) -> Path:
    """A Claude Code transcript whose usage follows ``true`` ratios exactly (overhead 20,000 tokens), its
    messages naming ``model`` where given."""
    lines, window = [], 20_000.0
    lines.append({"type": "user", "uuid": "u0", "timestamp": "2026-01-05T10:00:00.000Z",
                  "message": {"role": "user", "content": "Go."}})
    window += len("Go.") / DEFAULT_RATIOS["prose"]
    for k in range(calls):
        block = {"type": "tool_use", "id": f"toolu_{k:03d}", "name": "Bash", "input": {"command": "x" * (5 + 7 * k)}}
        usage = {"input_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": round(window) - 1}
        message = {"id": f"m{k}", "role": "assistant", "content": [block], "usage": usage,
                   **({"model": model} if model else {})}
        lines.append({"type": "assistant", "uuid": f"a{k}", "timestamp": f"2026-01-05T10:{k + 1:02d}:00.000Z",
                      "message": message})
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
    ratios = read_token_ratios(out)["claude"]   # no model named: the default family
    assert ratios.ratios["json"] == pytest.approx(1.5, rel=0.02)
    assert ratios.ratios["output"] == pytest.approx(3.0, rel=0.02)
    assert ratios.ratios["code"] == DEFAULT_TOKENS.ratios["code"]   # no file content: the default kept
    assert main(["calibrate", str(log), "--out", str(out), "--json"]) == 0   # its own file is replaced
    report = json.loads(capsys.readouterr().out)["families"]["claude"]
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
    assert meta["config"]["ratios_by"] == "model family"
    [(label, used)] = meta["config"]["session_ratios"].items()
    assert label == "claude" and used["sessions"] == ["t.parquet/s"]
    assert used["ratios"]["json"] == pytest.approx(1.5, rel=0.02)


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
def test_the_shipped_ratios_of_each_family_are_the_fit_on_the_sessions_they_were_calibrated_on():
    from ctxbench.traces.importers import import_paths

    log = DATA / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    # what make calibrate fits: the Claude session and its subagents, and the two DeepSeek sessions
    fits, skipped = calibrate_families(import_paths("auto", [log, log.with_suffix(""), DATA / "mini-swe-agent"])[0])
    assert list(fits) == ["claude", "deepseek"] and skipped == {}
    claude, deepseek = fits["claude"], fits["deepseek"]
    for kind, value in DEFAULT_RATIOS.items():
        assert claude.ratios.ratios[kind] == pytest.approx(value, abs=0.006), kind   # shipped rounded to 0.01
    assert claude.fit == BY_KIND and claude.kept == {"thinking": "under 2% of the content"}   # 1.5 % of the growth
    assert 0.99 < claude.pooled["median_ratio"] < 1.02 and claude.pooled["pearson"] > 0.995
    assert deepseek.fit == ONE_RATIO and deepseek.why.startswith("one ratio: the worst session left out")
    for kind, value in FAMILY_RATIOS["deepseek"].ratios.items():
        assert deepseek.ratios.ratios[kind] == pytest.approx(value, abs=0.006), kind
    assert FAMILY_RATIOS["claude"] == DEFAULT_TOKENS


@pytest.mark.real_sessions
def test_the_deepseek_sessions_left_out_carry_with_one_ratio_and_not_by_kind():
    from ctxbench.traces.importers import import_paths

    trace = import_paths("mini-swe-agent", [DATA / "mini-swe-agent"])[0]
    by_kind = calibrate(trace, FAMILY_RATIOS["deepseek"], fit=BY_KIND).held_out.set_index("session")
    one = calibrate(trace, FAMILY_RATIOS["deepseek"]).held_out.set_index("session")
    # each fitted by kind on the other alone (its absent kinds at the family's ratio): 1.33 and 1.12
    assert (by_kind["median_ratio"] > 1.1).all() and by_kind["median_ratio"].max() > 1.3
    assert one["median_ratio"].between(0.9, 1.1).all() and (one["pearson"] >= 0.98).all()   # 1.047, 0.955


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


def test_one_ratio_is_chosen_when_it_carries_to_the_sessions_left_out_better():
    same = dict.fromkeys(("code", "output", "json"), 3.6)
    # a session of files and outputs, and one of outputs and tool calls: by kind, each leaves the kind it
    # lacks at the prior (2.5) and over-predicts the other; one ratio predicts both exactly
    both = pd.concat([synthetic(true=same, kinds=("code", "output")),
                      synthetic(true=same, kinds=("output", "json")).assign(session="t")], ignore_index=True)
    fit = calibrate(both, PRIOR)
    assert fit.fit == ONE_RATIO and fit.why.startswith("one ratio: the worst session left out is off by")
    assert fit.ratios.ratios["code"] == fit.ratios.ratios["json"] == pytest.approx(3.6, rel=0.01)
    assert fit.ratios.ratios["overhead"] == PRIOR.ratios["overhead"]   # the unit, never fitted
    assert fit.held_out["median_ratio"].tolist() == pytest.approx([1.0, 1.0], abs=0.01)
    by_kind = calibrate(both, PRIOR, fit=BY_KIND)
    assert by_kind.held_out["median_ratio"].min() > 1.02 and by_kind.held_out["median_ratio"].max() > 1.1
    # ratios that differ by kind carry by kind, which is kept
    distinct = pd.concat([synthetic(), synthetic(turns=9).assign(session="t")], ignore_index=True)
    kept = calibrate(distinct, PRIOR)
    assert kept.fit == BY_KIND and kept.why.startswith("by kind: the worst session left out is off by")


def test_each_family_is_fitted_apart_and_each_session_replayed_with_its_own(tmp_path, capsys):
    deepseek = dict.fromkeys(("code", "output", "json"), 3.6)
    claude_log = transcript(tmp_path / "c.jsonl", model="claude-opus-4-6")
    deepseek_log = transcript(tmp_path / "d.jsonl", true=deepseek, model="deepseek-chat")
    out = tmp_path / "ratios.json"
    assert main(["calibrate", str(claude_log), str(deepseek_log), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "model family claude: 1 session" in text and "model family deepseek: 1 session" in text
    doc = json.loads(out.read_text())
    assert doc["format"] == "ctxbench-token-ratios/2" and list(doc["families"]) == ["claude", "deepseek"]
    assert doc["families"]["deepseek"]["sessions"] == ["d"]
    table = read_token_ratios(out)
    assert table["claude"].ratios["json"] == pytest.approx(1.5, rel=0.02)
    assert table["deepseek"].ratios["json"] == pytest.approx(3.6, rel=0.02)
    trace = tmp_path / "t.parquet"
    assert main(["import", "claude-code", str(claude_log), str(deepseek_log), "--out", str(trace)]) == 0
    capsys.readouterr()
    assert main(["fidelity", str(trace), "--token-ratios", str(out), "--json"]) == 0
    rows = {r["session"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["c"]["token_ratios"] == "claude" and rows["d"]["token_ratios"] == "deepseek"
    assert rows["c"]["median_ratio"] == pytest.approx(1.0, abs=0.01)
    assert rows["d"]["median_ratio"] == pytest.approx(1.0, abs=0.01)
    # the built-in table: the DeepSeek session at the deepseek family's 3.66, close to its true 3.6
    assert main(["fidelity", str(trace), "--json"]) == 0
    rows = {r["session"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["d"]["token_ratios"] == "deepseek" and 0.97 < rows["d"]["median_ratio"] < 1.0
    # one ratio given for every session replaces the choice by model
    assert main(["fidelity", str(trace), "--bytes-per-token", "3.6", "--json"]) == 0
    assert {r["token_ratios"] for r in json.loads(capsys.readouterr().out)} == {"given"}
    res = tmp_path / "res"
    assert main(["run", "--traces", str(trace), "--strategy", "lru", "--workers", "1", "--no-report",
                 "--budget-tokens", "30000", "--out", str(res)]) == 0
    config = json.loads((res / "meta.json").read_text())["config"]
    assert config["ratios_by"] == "model family"
    assert {label: used["sessions"] for label, used in config["session_ratios"].items()} == {
        "claude": ["t.parquet/c"], "deepseek": ["t.parquet/d"]}
    results = pd.read_parquet(res / "results.parquet")
    budget_bytes = results.groupby("session")["budget_bytes"].unique()   # each session's budget in its own unit
    assert budget_bytes["d"].tolist() == [int(30_000 * FAMILY_RATIOS["deepseek"].reference)]
    assert budget_bytes["c"].tolist() == [int(30_000 * DEFAULT_TOKENS.reference)]
    assert "token ratios (model family): claude (1 session), deepseek (1 session)" in (res / "summary.md").read_text()


def test_a_ratios_document_by_family_is_checked(tmp_path):
    doc = tmp_path / "r.json"
    for families, message in (({"llama": {"ratios": {"code": 2.0}}}, "families.llama: unknown model family"),
                              ({"claude": {"ratios": {"code": -1}}}, "families.claude.ratios.code: bytes per token"),
                              ({"claude": {"ratios": {"bogus": 2.0}}}, "families.claude.ratios.bogus: unknown content"),
                              ({"claude": []}, "families.claude.ratios.token ratios must be a JSON object"),
                              ({}, "families: expected an object of model family")):
        doc.write_text(json.dumps({"format": "ctxbench-token-ratios/2", "families": families}))
        with pytest.raises(InputError, match=message):
            read_token_ratios(doc)
    doc.write_text(json.dumps({"format": "ctxbench-token-ratios/2", "families": {"openai": {"ratios": {"code": 3.0}}}}))
    table = read_token_ratios(doc)
    assert table["openai"].ratios["code"] == 3.0 and table["deepseek"] == FAMILY_RATIOS["deepseek"]


def test_where_one_ratio_cannot_be_fitted_the_fit_stays_by_kind():
    # content that grows while the tokens shrink: by kind the kinds keep their priors; one ratio has no fit
    odd = pd.concat([synthetic(), synthetic(turns=9).assign(session="t")], ignore_index=True)
    odd["usage_input_tokens"] = odd["usage_input_tokens"].where(odd["usage_input_tokens"] == 0,
                                                                 100_000 - odd["usage_input_tokens"])
    fit = calibrate(odd, PRIOR)
    assert fit.fit == BY_KIND and fit.why == ("by kind: one ratio for every kind cannot be fitted: the content does "
                                              "not grow with the tokens")
