"""At the window's edge: a compaction whose summarization call is larger than the window, policy by policy,
in both engines (docs/design.md §4, §8)."""

import json
from pathlib import Path

import pytest

from engine_paths import PATHS, compiled_or_not, replay_turns
from ctxbench.sim.engine.arm import resolve_arm
from ctxbench.sim.engine.measures import summarise
from ctxbench.sim.engine.rules import CALL, MESSAGE, OVERHEAD, READ, ArmStream, Compaction
from ctxbench.sim.engine.transcript import replay_transcript
from ctxbench.strategies.contract import ContextBudget
from ctxbench.strategies.errors import ContractViolation, StrategyLoadError
from ctxbench.strategies.policy import Replace, Request, TranscriptItem, edits_from_json, edits_to_json, judge_edits
from ctxbench.strategies.registry import make

WINDOW = 6_500   # tokens, at one byte a token


def edge_stream() -> ArmStream:
    """Overhead 1,000 and a user message 100, then three turns of a call (50) and a read: a 3,000, b 500,
    c 2,000; the window is 4,150, 4,700 and 6,750 at their ends, the last past the 6,500-token window."""
    ops, paths, sizes, turns = [OVERHEAD, MESSAGE], ["overhead://system", "msg://user/0"], [1000, 100], [0, 0]
    for t, (path, size) in enumerate([("a", 3000), ("b", 500), ("c", 2000)]):
        ops += [CALL, READ]
        paths += [f"call://t/{t}", path]
        sizes += [50, size]
        turns += [t, t]
    return ArmStream.from_turns(ops, paths, sizes, [t * 1000 for t in turns], turns)


def replayed(spec: str, compiled: bool):
    stream = edge_stream()
    log = replay_transcript(stream, resolve_arm(stream, compiled=compiled), make(spec), WINDOW, 1.0,
                            compiled=compiled).log
    return log, summarise(log, WINDOW, 1.0)


@pytest.mark.parametrize("compiled", PATHS)
def test_claude_code_before_2_1_85_fails_a_compaction_request_larger_than_the_window(compiled):
    log, row = replayed("claude-code?trigger_tokens=6000&summary_tokens=100&recent_files=0&overflow=fail", compiled)
    # the summarization call holds the whole 6,750-token window: over the window, though the call after it is 1,100
    assert log.summary_prompt_bytes.tolist() == [0, 0, 6750] and log.window_bytes.tolist()[-1] == 6750
    assert row["over_window_calls"] == 1 and row["feasible"] is False and row["peak_input_tokens"] == 6750
    assert row["summary_dropped_tokens"] == 0


@pytest.mark.parametrize("compiled", PATHS)
def test_claude_code_trims_the_oldest_history_from_its_compaction_request_until_it_fits(compiled):
    log, row = replayed("claude-code?trigger_tokens=6000&summary_tokens=100&recent_files=0", compiled)
    # the user message (100), the first call (50) and a (3,000) leave the request: 3,600 tokens remain
    assert log.summary_prompt_bytes.tolist() == [0, 0, 3600]
    assert log.summary_dropped_bytes.tolist() == [0, 0, 3150]
    # it shares only the overhead with the previous call's prompt: 1,000 read from the cache
    assert log.summary_cache_read_bytes.tolist() == [0, 0, 1000]
    assert row["over_window_calls"] == 0 and row["feasible"] is True and row["peak_input_tokens"] == 4700
    assert row["summary_dropped_tokens"] == 3150


@pytest.mark.parametrize("compiled", PATHS)
def test_codex_drops_the_oldest_items_from_its_compaction_request_and_counts_what_it_lost(compiled):
    log, row = replayed("codex?trigger_fraction=0.95&summary_tokens=100", compiled)
    # 6,750 and 110 tokens of instructions: the user message, the first call and a leave the request (3,710);
    # the user message stays in the new history, so only the call and a are lost to the summary
    assert log.summary_prompt_bytes.tolist() == [0, 0, 3710]
    assert row["summary_dropped_tokens"] == 3050 and row["feasible"] is True


@pytest.mark.parametrize("compiled", PATHS)
def test_a_request_that_cannot_be_trimmed_to_fit_is_over_the_window(compiled):
    # a window of 1,080: even the overhead and its 110 tokens of instructions do not fit
    stream = edge_stream()
    log = replay_transcript(stream, resolve_arm(stream, compiled=compiled), make("codex?trigger_fraction=0.5"),
                            1_080, 1.0, compiled=compiled).log
    row = summarise(log, 1_080, 1.0)
    assert log.summary_prompt_bytes.tolist()[0] == 1110 and row["feasible"] is False


@pytest.mark.parametrize("compiled", PATHS)
def test_gemini_cli_summarizes_only_what_it_replaces_under_its_own_instructions(compiled):
    log, row = replayed("gemini-cli?trigger_fraction=0.9&summary_tokens=100", compiled)
    # at 6,750 (>= 5,850) its history's only user message is the first: nothing can be compressed
    assert log.summary_calls.sum() == 0 and row["feasible"] is False


@compiled_or_not
def test_the_managed_model_evicts_before_it_summarizes(compiled):
    # pinned 220 and a (250), then a 200-token reply: 420 pinned reaches the 300 trigger. The strategy is called
    # first, beside the 420 (room 180): a leaves, and the summarization call is the 420 alone, inside the 600
    turns = [[("overhead", "overhead://system", 100, 0), ("message", "msg://user/0", 120, 0), ("read", "a", 250, 0)],
             [("message", "msg://assistant/1", 200, 1000)], [("read", "b", 50, 2000)]]
    log = replay_turns(make("lru?max_entries=none"), ContextBudget(600), turns, compiled=compiled,
                       compaction=Compaction(300, 50, [0, 1, 0, 1, 0])).log
    assert log.summary_prompt_bytes.tolist() == [0, 420, 0] and log.evictions.tolist() == [0, 1, 0]
    assert log.pinned_bytes.tolist() == [220, 150, 150] and log.compactions.tolist() == [0, 1, 0]
    assert summarise(log, 600, 1.0)["feasible"] is True


@compiled_or_not
def test_a_managed_compaction_trims_a_summarization_call_its_pinned_content_alone_makes_too_long(compiled):
    # a 500-token reply takes the pinned content to 720, past the 600 window: a evicted first, the request is
    # still 720; trimmed, the task (120) leaves it; it shares the overhead (100) with the previous call
    turns = [[("overhead", "overhead://system", 100, 0), ("message", "msg://user/0", 120, 0), ("read", "a", 250, 0)],
             [("message", "msg://assistant/1", 500, 1000)], [("read", "b", 50, 2000)]]
    for trim, prompt, dropped, read, feasible in ((True, 600, 120, 100, True), (False, 720, 0, 220, False)):
        log = replay_turns(make("lru?max_entries=none"), ContextBudget(600), turns, compiled=compiled,
                           compaction=Compaction(300, 50, [0, 1, 0, 1, 0], trim)).log
        assert log.summary_prompt_bytes.tolist() == [0, prompt, 0]
        assert log.summary_dropped_bytes.tolist() == [0, dropped, 0]
        assert log.summary_cache_read_bytes.tolist() == [0, read, 0]
        assert log.pinned_bytes.tolist() == [220, 150, 150]
        assert summarise(log, 600, 1.0)["feasible"] is feasible


def test_claude_code_and_codex_trim_a_managed_compaction_gemini_cli_does_not():
    assert make("claude-code").managed_compaction(200_000) == (167_000, 4_000, True)
    assert make("claude-code?overflow=fail").managed_compaction(200_000)[2] is False
    assert make("codex").managed_compaction(200_000)[2] is True and len(make("gemini-cli").managed_compaction(10)) == 2


def test_an_unknown_overflow_is_refused_by_name():
    with pytest.raises(StrategyLoadError, match="overflow must be one of trim, fail"):
        make("claude-code?overflow=retry")


ITEMS = {i.id: i for i in (TranscriptItem("0", "overhead", "prose", 10, 0), TranscriptItem("1", "user", "prose", 5, 0),
                           TranscriptItem("2", "result", "code", 40, 1))}
SUMMARY = Replace(("1", "2"), 8, "summary")


@pytest.mark.parametrize("edits, problem", [
    ([SUMMARY, Request(("2",), 30)], None),
    ([SUMMARY, Request(None, 0, True)], None),
    ([SUMMARY, Request(("9",))], "requests '9', which is not in the transcript"),
    ([SUMMARY, Request(("2", "2"))], "requests '2' a second time"),
    ([SUMMARY, Request(), Request()], "a second Request"),
    ([SUMMARY, Request(None, -1)], "tokens >= 0"),
    ([SUMMARY, Request(None, 0, 1)], "fit true or false"),
    ([Replace(("2",), 3, "placeholder"), Request()], "no summary to write"),
])
def test_a_request_is_judged_by_the_contract(edits, problem):
    judged = judge_edits(edits, ITEMS.get, {})
    if problem is None:
        assert judged is None
    else:
        assert judged[0] == "bad-request" and problem in judged[1]


def test_a_request_survives_the_json_a_policy_program_speaks():
    edits = [SUMMARY, Request(("1", "2"), 30, True)]
    assert edits_from_json(json.loads(json.dumps(edits_to_json(edits)))) == edits
    assert edits_from_json({"edits": [{"request": None}]}) == [Request()]
    with pytest.raises(ValueError, match="a request is null or a list of ids"):
        edits_from_json({"edits": [{"request": "1"}]})
    with pytest.raises(ValueError, match="fit must be true or false"):
        edits_from_json({"edits": [{"request": None, "fit": "yes"}]})


@pytest.mark.parametrize("compiled", PATHS)
def test_a_request_for_an_unknown_item_is_a_violation_in_both_engines(compiled, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    with pytest.raises(ContractViolation, match="edit 1: requests 'nope', which is not in the transcript"):
        replayed("broken_policies:requests_unknown", compiled)


def test_a_feasible_row_never_bills_a_call_larger_than_the_window():
    from ctxbench.sim.analysis.grid import run_grid
    from ctxbench.traces.generate import generate

    specs = ["claude-code", "claude-code?overflow=fail", "codex", "gemini-cli", "openhands-summarizing",
             "observation-masking", "lru+compaction", "lru"]
    results = run_grid(generate("file-walk", sessions=2, seed=3), specs, [30_000, 60_000], workers=1,
                       progress=False).results
    rows = results[results["strategy"].isin(specs)]
    assert len(rows) == len(specs) * 2 * 2
    feasible = rows[rows["feasible"].astype(bool)]
    assert len(feasible) > 0 and (feasible["peak_input_tokens"] <= feasible["budget_tokens"]).all()
    # at 60K the trimmed requests keep claude-code feasible; untrimmed, some of them pass the window
    at_60k = rows[rows["budget_tokens"] == 60_000].set_index(["strategy", "session"])
    assert at_60k.loc["claude-code", "feasible"].astype(bool).all()
    assert not at_60k.loc["claude-code?overflow=fail", "feasible"].astype(bool).any()
    assert (at_60k.loc["claude-code", "summary_dropped_tokens"] > 0).all()
