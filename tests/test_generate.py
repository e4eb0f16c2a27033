"""The synthetic generator: determinism, schema properties, preset characteristics, real checkouts."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_digests import frame_digest, generate_cases, make_checkout, stats_digest
from ctxbench.traces.generate import CALL_MAX, MAX_EVENTS, MESSAGE_MAX, check_size, generate
from ctxbench.traces.presets import PRESETS, PresetError, knobs, parse_override
from ctxbench.traces.repo import RepoError, repo_from_checkout, synthetic_repo
from ctxbench.traces.schema import find_problems, validate
from ctxbench.traces.stats import stats
from ctxbench.traces.tokens import DEFAULT_RATIOS

BUDGET_BYTES = 200_000 * 3.8
gen = importlib.import_module("ctxbench.traces.generate")
TOOL_OPS = ("read", "edit", "write", "output")


def _tool_events(df: pd.DataFrame) -> pd.DataFrame:
    """The file and tool-output events (one per tool call), without the conversation around them."""
    return df[df["op"].isin(TOOL_OPS)]


def _session(df: pd.DataFrame, name: str) -> pd.DataFrame:
    part = df[df["session"] == name].reset_index(drop=True)
    return part.assign(session=part["session"].astype(str), path=part["path"].astype(str),
                       arm=part["arm"].astype(str), op=part["op"].astype(str))


# ----- determinism --------------------------------------------------------------------------

def test_same_seed_gives_an_identical_trace():
    a = generate("mixed", sessions=3, seed=11)
    b = generate("mixed", sessions=3, seed=11)
    pd.testing.assert_frame_equal(a, b)


def test_different_seed_gives_a_different_trace():
    a = generate("mixed", sessions=1, seed=11)
    b = generate("mixed", sessions=1, seed=12)
    assert not a["path"].astype(str).equals(b["path"].astype(str))
    assert not np.array_equal(a["size_bytes"].to_numpy(), b["size_bytes"].to_numpy())


def test_session_k_does_not_depend_on_the_number_of_sessions(monkeypatch):
    many = generate("refactor", sessions=9, seed=4, tool_calls=80)
    monkeypatch.setattr(gen, "CHUNK_EVENTS", 200)  # two or three sessions per chunk
    few = generate("refactor", sessions=4, seed=4, tool_calls=80)
    for name in few["session"].cat.categories:
        pd.testing.assert_frame_equal(_session(few, name), _session(many, name))


def test_output_is_already_canonical_and_carries_its_recipe():
    df = generate("long", sessions=1, seed=2, tool_calls=300, arms=2)
    pd.testing.assert_frame_equal(df, validate(df))
    assert df.attrs["generator"] == {"preset": "long", "sessions": 1, "seed": 2,
                                     "overrides": {"tool_calls": 300, "arms": 2}, "repo": None}


# ----- without the conversation, in the old turn shapes: exactly the traces of before ------------

#: The digests of every generator case and of its statistics, recorded before the conversation was
#: generated (tests/trace_digests.py on the commit that added the message, call and overhead ops).
BEFORE: dict[str, str] = json.loads((Path(__file__).parent / "golden" / "generate_without_conversation.json")
                                    .read_text(encoding="utf-8"))


#: The knobs that give the turn shapes of before: every read of a walk or search in one turn with the
#: read before it, no other call joining a turn, no limit on a turn's calls or bytes, no cap on a read.
OLD_SHAPE = {"parallel": 1.0, "parallel_calls": 0.0, "turn_calls_max": 0, "turn_bytes_max": 0, "read_max": 0}


@pytest.fixture(scope="module")
def checkout_dir(tmp_path_factory) -> Path:
    return make_checkout(tmp_path_factory.mktemp("checkout"))


@pytest.mark.parametrize("case", sorted(case for case in BEFORE if case.startswith("generate ")))
def test_without_conversation_a_trace_and_its_stats_are_exactly_as_before(case, checkout_dir, monkeypatch):
    original = gen.generate

    def files_only(*args, **kwargs):
        df = original(*args, conversation=False, **OLD_SHAPE, **kwargs)
        for knob in ("conversation", *OLD_SHAPE):
            del df.attrs["generator"]["overrides"][knob]  # the recipe as it was written before
        return df.drop(columns="truncated")   # outputs were cut at output_max then too, unmarked

    monkeypatch.setattr(gen, "generate", files_only)
    df = dict(generate_cases(checkout_dir))[case]()
    assert frame_digest(df) == BEFORE[case]
    result = stats(df, tokens=3.8)   # the one ratio stats counted unique tokens at before
    assert set(result["overall"]["bytes_per_token"].values()) == {3.8}
    result["overall"]["bytes_per_token"] = 3.8   # reported per kind now, one number then
    for figure in ("turn_calls", "turn_tool_bytes", "truncated"):   # the turns' shape, reported since
        del result["overall"][figure]
    assert stats_digest(result) == BEFORE[f"stats of {case}"]


@pytest.mark.parametrize("preset, overrides", [("claude-code-like", {}), ("parallel-hubs", {}),
                                               ("debug-loop", {"tool_calls": 37, "read_before_edit": False})])
def test_the_conversation_leaves_the_file_and_tool_events_as_they_were(preset, overrides):
    talk = generate(preset, sessions=3, seed=6, **overrides)
    quiet = generate(preset, sessions=3, seed=6, conversation=False, **overrides)
    assert (talk["op"] == "message").any() and not quiet["op"].isin(["message", "call", "overhead"]).any()
    tools = _tool_events(talk).reset_index(drop=True)
    for column in ("session", "turn", "ts_ms", "op", "path", "size_bytes", "arm", "lines_changed"):
        assert tools[column].astype(str).tolist() == quiet[column].astype(str).tolist(), column
    # the file figures of stats see the same events
    file_columns = [c for c in stats(quiet)["sessions"].columns if c != "events"]
    pd.testing.assert_frame_equal(stats(talk)["sessions"][file_columns], stats(quiet)["sessions"][file_columns])


# ----- the conversation and the overhead --------------------------------------------------------

def test_each_arm_starts_with_its_overhead_and_a_user_message():
    df = generate("parallel-disjoint", sessions=2, seed=3, overhead_tokens=1000.0)
    for _, part in df.groupby(["session", "arm"], observed=True):
        assert part["op"].tolist()[:2] == ["overhead", "message"]
        assert part["path"].astype(str).tolist()[1].startswith("msg://user/")
        assert part["size_bytes"].iloc[0] == round(1000 * DEFAULT_RATIOS["overhead"])
        assert (part["op"] == "overhead").sum() == 1
    assert generate("mixed", seed=1, overhead_tokens=0.0)["size_bytes"].iloc[0] == 0


def test_call_inputs_carry_edits_strings_and_writes_content():
    df = generate("refactor", sessions=4, seed=2, call_framing_tokens=0.0)
    position = np.flatnonzero(df["op"].isin(TOOL_OPS).to_numpy())
    call = df["size_bytes"].to_numpy()[position - 1]
    op = df["op"].to_numpy()[position]
    size, lines = df["size_bytes"].to_numpy()[position], df["lines_changed"].to_numpy()[position]
    body = np.where(op == "edit", 2 * np.minimum(lines * gen.BYTES_PER_LINE, size), np.where(op == "write", size, 0))
    envelope = call - body
    assert (op == "edit").sum() > 50 and (op == "write").sum() > 3
    assert envelope.min() >= 16 and envelope.max() <= CALL_MAX
    assert 80 <= np.median(envelope) <= 140  # the real inputs' median: 110 bytes
    framed = generate("refactor", sessions=4, seed=2)
    extra = framed.loc[framed["op"] == "call", "size_bytes"].to_numpy() - df.loc[df["op"] == "call", "size_bytes"]
    assert (extra == round(75 * DEFAULT_RATIOS["json"])).all()


def test_messages_follow_the_knobs():
    df = generate("mixed", sessions=40, seed=4)
    paths = df["path"].astype(str)
    user, text, thinking = (df.loc[paths.str.startswith(f"msg://{role}/"), "size_bytes"]
                            for role in ("user", "assistant", "thinking"))
    assert 230 <= user.median() <= 350 and 65 <= text.median() <= 100 and 250 <= thinking.median() <= 380
    assert max(user.max(), text.max(), thinking.max()) <= MESSAGE_MAX
    turns = _tool_events(df).drop_duplicates(["session", "turn"])
    assert 0.48 <= len(text) / len(turns) <= 0.64 and 0.09 <= len(thinking) / len(turns) <= 0.17
    # a user speaks at the session's start and at some phase starts
    per_session = user.groupby(df.loc[user.index, "session"], observed=True).size()
    assert per_session.min() >= 1 and 2 <= per_session.median() <= 6
    silent = generate("mixed", sessions=5, seed=4, follow_up=0.0, text_chance=0.0, thinking_chance=0.0)
    spoken = silent.loc[silent["op"] == "message", "path"].astype(str)
    assert len(spoken) == 5 and spoken.str.startswith("msg://user/").all()


def test_a_thinking_block_comes_first_in_its_turn_and_calls_come_before_their_results():
    df = generate("claude-code-like", sessions=3, seed=8)
    for _, part in df.groupby("session", observed=True):
        for _, turn in part.groupby("turn"):
            ops, paths = turn["op"].tolist(), turn["path"].astype(str).tolist()
            roles = [p.split("/")[2] for p, o in zip(paths, ops) if o == "message"]
            assert roles == sorted(roles, key=["user", "thinking", "assistant"].index)
            first_call = ops.index("call")
            assert all(o in ("overhead", "message") for o in ops[:first_call])
            assert all(o != "message" for o in ops[first_call:])


def test_the_size_limit_counts_the_inputs():
    sessions = MAX_EVENTS // 250 // 2 + 1  # within the limit in tool calls, over it with their inputs
    with pytest.raises(ValueError, match="tool calls .and as many inputs"):
        check_size(knobs("mixed"), sessions)
    check_size(knobs("mixed", conversation=False), sessions)


# ----- properties on generated traces ---------------------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preset=st.sampled_from(sorted(PRESETS)), seed=st.integers(0, 2**32), sessions=st.integers(1, 3),
       tool_calls=st.integers(1, 300), arms=st.integers(1, 3), working_set=st.integers(1, 12),
       repo_files=st.integers(2, 300), phase_calls=st.floats(1, 150))
def test_generated_traces_keep_the_schema(preset, seed, sessions, tool_calls, arms, working_set, repo_files,
                                          phase_calls):
    df = generate(preset, sessions=sessions, seed=seed, tool_calls=tool_calls, arms=arms, working_set=working_set,
                  repo_files=repo_files, hub_files=min(6, repo_files // 2), phase_calls=phase_calls)
    assert find_problems(df) == []
    codes = df["session"].cat.codes.to_numpy()
    same = codes[1:] == codes[:-1]
    assert (np.diff(df["turn"].to_numpy())[same] >= 0).all()
    assert (np.diff(df["ts_ms"].to_numpy())[same] >= 0).all()
    assert (df["size_bytes"] >= 0).all()
    changes = df["op"].isin(["edit", "write"])
    assert (df.loc[changes, "lines_changed"] > 0).all() and (df.loc[~changes, "lines_changed"] == 0).all()
    assert set(df["arm"].astype(str)) <= {"main"} | {f"arm{i}" for i in range(1, arms)}
    tools = _tool_events(df)
    assert len(tools) == sessions * tool_calls * arms
    assert (tools.groupby("session", observed=True).size() == tool_calls * arms).all()
    outputs = df[df["op"] == "output"]
    assert outputs["path"].astype(str).str.match(r"^tool://(bash|grep|glob|task)/\d+$").all()
    assert not outputs.duplicated(["session", "path"]).any()  # each output is its own resource
    # the conversation: one input per tool call, just before its result and numbered like it; one
    # overhead per arm, first in its turn; the first event of each arm is its overhead
    calls = df[df["op"] == "call"]
    assert len(calls) == len(tools) and not calls.duplicated(["session", "path"]).any()
    position = np.flatnonzero(df["op"].isin(TOOL_OPS).to_numpy())
    assert (df["op"].to_numpy()[position - 1] == "call").all()
    before = df["path"].astype(str).to_numpy()[position - 1]
    result = df["path"].astype(str).to_numpy()[position]
    out = df["op"].to_numpy()[position] == "output"
    assert all(call.replace("call://", "tool://", 1) == output for call, output in zip(before[out], result[out]))
    assert all(re.fullmatch(r"call://(read|edit|write)/\d+", call) for call in before[~out])
    overheads = df[df["op"] == "overhead"]
    assert len(overheads) == sessions * arms and (overheads["path"] == "overhead://system").all()
    assert (df.groupby(["session", "arm"], observed=True)["op"].first() == "overhead").all()
    messages = df.loc[df["op"] == "message", "path"].astype(str)
    assert messages.str.match(r"^msg://(user|assistant|thinking)/\d+$").all()
    # turns of real agents' shape, results cut at the caps and marked
    shape = knobs(preset)
    per_turn = tools.groupby(["session", "turn"], observed=True)["size_bytes"].agg(["size", "sum"])
    assert (per_turn["size"] <= shape.turn_calls_max).all()
    assert ((per_turn["sum"] <= shape.turn_bytes_max) | (per_turn["size"] == 1)).all()
    assert not df.loc[~df["op"].isin(TOOL_OPS), "truncated"].any()
    cut = tools[tools["truncated"]]
    caps = np.where(cut["op"] == "output", shape.output_max, shape.read_max)
    assert (cut["size_bytes"].to_numpy() == caps).all()
    assert (tools.loc[tools["op"] == "output", "size_bytes"] <= shape.output_max).all()
    assert (tools.loc[tools["op"] != "output", "size_bytes"] <= shape.read_max).all()


def test_an_edit_follows_a_read_or_write_of_its_file():
    df = generate("mixed", sessions=5, seed=1)
    for name in df["session"].cat.categories:
        part = _session(df, name)
        seen: set[str] = set()
        for op, path in zip(part["op"], part["path"]):
            if op == "edit":
                assert path in seen, (name, path)
            if op in ("read", "write"):
                seen.add(path)


def test_without_read_before_edit_some_edits_come_first():
    df = generate("debug-loop", sessions=3, seed=1, read_before_edit=False)
    first = df.drop_duplicates(["session", "path"])
    assert (first["op"] == "edit").any()


def test_turns_usually_hold_one_event_and_gaps_are_human():
    df = _tool_events(generate("claude-code-like", sessions=10, seed=3))
    per_turn = df.groupby(["session", "turn"], observed=True).size()
    assert 0.8 < (per_turn == 1).mean() < 1.0 and per_turn.max() >= 2
    starts = df.drop_duplicates(["session", "turn"])
    gaps = starts.groupby("session", observed=True)["ts_ms"].diff().dropna() / 1000
    assert 4 <= gaps.median() <= 12 and 25 <= gaps.quantile(0.9) <= 60


# ----- the shape of a turn and the agents' caps ------------------------------------------------------

def test_reads_and_calls_join_turns_by_their_chances_up_to_the_most_calls():
    from ctxbench.traces.generate import JOIN_CALL, JOIN_READ, _new_turns

    joinable = np.array([[0, JOIN_READ, JOIN_READ, JOIN_READ, JOIN_CALL, JOIN_CALL]], dtype=np.int8)
    u = np.array([[0.5, 0.1, 0.1, 0.1, 0.1, 0.01]])
    shape = knobs("mixed", parallel=0.2, parallel_calls=0.05, turn_calls_max=2)
    # reads 1-3 join (0.1 < 0.2); the call at 4 does not (0.1 >= 0.05), the one at 5 does; at most 2 a turn
    assert _new_turns(shape, joinable, u).tolist() == [[True, False, True, False, True, False]]
    unlimited = knobs("mixed", parallel=0.2, parallel_calls=0.05, turn_calls_max=0)
    assert _new_turns(unlimited, joinable, u).tolist() == [[True, False, False, False, True, False]]


def test_a_turn_past_the_most_bytes_is_split_at_its_first_call_past_them():
    from ctxbench.traces.generate import _split_heavy_turns

    # two sessions of 5 events each
    turn, size = np.array([0, 0, 0, 1, 1, 0, 0, 1, 2, 2]), np.array([50, 40, 30, 10, 100, 90, 5, 5, 40, 40])
    # session 1: 50 | 40 + 30 | 10 | 100 (alone, larger than the limit); session 2: 90 | 5 | 5 | 40 + 40
    assert _split_heavy_turns(turn, size, 5, 80).tolist() == [0, 1, 1, 2, 3, 0, 1, 2, 3, 3]
    light = np.array([0, 0, 1, 1, 1])
    assert _split_heavy_turns(light, np.array([40, 40, 10, 20, 30]), 5, 80) is light   # nothing to split


def test_results_over_the_caps_are_cut_and_marked():
    common = {"turn_bytes_max": 0, "conversation": False, "bash_median": 900.0, "bash_p90": 9000.0}
    whole = generate("debug-loop", sessions=3, seed=5, read_max=0, output_max=10**9, **common)
    cut = generate("debug-loop", sessions=3, seed=5, read_max=5000, output_max=2000, **common)
    assert not whole["truncated"].any()
    assert cut["op"].tolist() == whole["op"].tolist() and cut["path"].tolist() == whole["path"].tolist()
    assert cut["turn"].tolist() == whole["turn"].tolist()
    # outputs: cut to 2,000 bytes where they were longer, marked
    out = (whole["op"] == "output").to_numpy()
    sizes, full = cut["size_bytes"].to_numpy(), whole["size_bytes"].to_numpy()
    assert (sizes[out] == np.minimum(full[out], 2000)).all()
    assert (cut["truncated"].to_numpy()[out] == (full[out] > 2000)).all() and (full[out] > 2000).sum() > 10
    # reads and edits of a file never written in its session show its first 5,000 bytes
    written = set(zip(whole.loc[whole["op"] == "write", "session"], whole.loc[whole["op"] == "write", "path"]))
    seen = whole["op"].isin(["read", "edit"]).to_numpy() & np.array(
        [(session, path) not in written for session, path in zip(whole["session"], whole["path"])])
    assert (sizes[seen] == np.minimum(full[seen], 5000)).all()
    assert (cut["truncated"].to_numpy()[seen] == (full[seen] > 5000)).all() and (full[seen] > 5000).sum() > 10
    assert (cut.loc[cut["op"] == "write", "size_bytes"] <= 5000).all()   # no write larger than one read shows


def test_the_old_turns_knobs_give_back_the_old_extremes():
    trace = generate("file-walk", sessions=10, seed=0, **OLD_SHAPE)
    old = stats(trace)["overall"]
    assert old["turn_calls"]["max"] > 20 and old["turn_tool_bytes"]["max"] > 250_000
    reads = trace[trace["op"] == "read"]
    assert reads["size_bytes"].max() > 100_000 and not reads["truncated"].any()
    new = stats(generate("file-walk", sessions=10, seed=0))["overall"]
    assert new["turn_calls"]["max"] <= 8 and new["turn_tool_bytes"]["max"] <= 80_000 and new["truncated"] > 0


def test_the_shape_knobs_are_in_the_help():
    from ctxbench.traces.presets import knob_help

    help_ = knob_help()
    for knob in ("parallel", "parallel_calls", "turn_calls_max", "turn_bytes_max", "read_max", "output_max"):
        assert len(help_[knob]) > 40, knob
    assert "0: no limit" in help_["turn_calls_max"] and "0: no cap" in help_["read_max"]


def test_lines_changed_are_plausible():
    df = generate("refactor", sessions=4, seed=2)
    edits = df.loc[df["op"] == "edit", "lines_changed"]
    assert 3 <= edits.median() <= 12 and edits.max() <= 5000
    writes = df[df["op"] == "write"]
    assert ((writes["lines_changed"] - writes["size_bytes"] / gen.BYTES_PER_LINE).abs() <= 1).all()


def test_sizes_follow_edits_and_writes():
    df = generate("debug-loop", sessions=2, seed=8)
    for name in df["session"].cat.categories:
        part = _session(df, name)
        files = part[part["op"] != "output"]
        for _, events in files.groupby("path"):
            sizes, ops = events["size_bytes"].to_numpy(), events["op"].to_numpy()
            # a read sees the size the previous event left
            reads_after = np.flatnonzero(ops[1:] == "read") + 1
            assert np.array_equal(sizes[reads_after], sizes[reads_after - 1])
        assert files.loc[files["op"] == "edit", "size_bytes"].min() >= 16


# ----- preset characteristics ----------------------------------------------------------------

@pytest.fixture(scope="module")
def preset_stats() -> dict[str, pd.DataFrame]:
    return {name: stats(generate(name, sessions=6 if name != "long" else 1, seed=21))["sessions"]
            for name in PRESETS}


def test_hub_and_spoke_rereads_a_hub_most(preset_stats):
    hub = preset_stats["hub-and-spoke"]
    assert hub["top_path_reads"].median() >= 2 * preset_stats["mixed"]["top_path_reads"].median()
    assert hub["top_path"].str.startswith("src/app/").all()
    repo = synthetic_repo(np.random.default_rng(0), files=50, hubs=5)
    assert {repo.paths[i].rsplit("/", 1)[1] for i in repo.hubs} >= {"router.py", "config.py", "schema.py"}


def test_long_overflows_the_window_several_times(preset_stats):
    long = preset_stats["long"].iloc[0]
    assert long["unique_bytes"] > 3 * BUDGET_BYTES
    assert long["duration_s"] > 3 * 3600
    assert (preset_stats["mixed"]["unique_bytes"] < BUDGET_BYTES).all()


def test_file_walk_reads_many_files_far_apart(preset_stats):
    walk, mixed = preset_stats["file-walk"], preset_stats["mixed"]
    assert walk["reads"].median() > 3 * mixed["reads"].median()
    assert walk["distinct_files_read"].median() > 3 * mixed["distinct_files_read"].median()
    assert walk["reuse_median"].median() > mixed["reuse_median"].median()


def test_file_walk_reads_directories_in_order():
    df = generate("file-walk", sessions=1, seed=3)
    reads = df.loc[df["op"] == "read", "path"].astype(str).to_numpy()
    dirs = np.array([p.rsplit("/", 1)[0] for p in reads])
    same_dir = dirs[1:] == dirs[:-1]
    in_order = same_dir & (reads[1:] > reads[:-1])
    assert in_order.mean() > 0.5


def test_debug_loop_rereads_a_small_working_set(preset_stats):
    loop, mixed = preset_stats["debug-loop"], preset_stats["mixed"]
    assert loop["reread_fraction"].median() > mixed["reread_fraction"].median() + 0.15
    assert loop["distinct_files_read"].median() < mixed["distinct_files_read"].median()
    assert loop["edits"].median() > loop["reads"].median()


def test_refactor_edits_many_files(preset_stats):
    ref, mixed = preset_stats["refactor"], preset_stats["mixed"]
    assert ref["edits"].median() > 1.5 * mixed["edits"].median()
    assert ref["reread_fraction"].median() < mixed["reread_fraction"].median()

    def files_edited(name: str) -> float:
        df = generate(name, sessions=4, seed=21)
        return df[df["op"] == "edit"].groupby("session", observed=True)["path"].nunique().median()

    assert files_edited("refactor") > 1.6 * files_edited("mixed")


def test_arms_work_in_different_directories_and_share_hubs():
    df = generate("mixed", sessions=2, seed=5, arms=3, hub_edit=0.0, cold_jump=0.0, locality=1.0)
    assert list(df["arm"].cat.categories) == ["main", "arm1", "arm2"]
    files = df[df["op"].isin(["read", "edit", "write"]) & ~df["path"].astype(str).str.match(r"src/app/[^/]+$")]
    dirs = files.assign(d=files["path"].astype(str).str.rsplit("/", n=1).str[0]).groupby("arm", observed=True)["d"]
    sets = {arm: set(d) for arm, d in dirs}
    assert all(sets[a].isdisjoint(sets[b]) for a in sets for b in sets if a < b)
    hubs = df[df["path"].astype(str).str.match(r"src/app/[^/]+$") & (df["op"] == "read")]
    assert hubs["arm"].nunique() == 3
    # each arm's own turns and times stay in order, and every arm starts at the session's start
    for _, part in df.groupby(["session", "arm"], observed=True):
        assert part["ts_ms"].is_monotonic_increasing


# ----- presets and knobs -----------------------------------------------------------------------

def test_unknown_preset_and_knob_are_named():
    with pytest.raises(PresetError, match="unknown preset 'nope'; presets: mixed, file-walk"):
        generate("nope")
    with pytest.raises(PresetError, match=r"unknown knob 'tool_call'; knobs: tool_calls, arms, .*output_max"):
        generate("mixed", tool_call=3)


@pytest.mark.parametrize("override, message", [
    ({"tool_calls": 0}, "knob tool_calls=0: must be >= 1"),
    ({"locality": 1.5}, r"knob locality=1.5: must be a probability"),
    ({"bash_p90": 10.0}, "knob bash_p90=10.0: must be greater than bash_median"),
    ({"arms": 2.5}, "knob arms: expected int"),
    ({"follow_up": 1.5}, r"knob follow_up=1.5: must be a probability"),
    ({"thinking_p90": 100.0}, "knob thinking_p90=100.0: must be greater than thinking_median"),
    ({"overhead_tokens": -1.0}, "knob overhead_tokens=-1.0: must be between 0 and 10,000,000"),
    ({"conversation": 1}, "knob conversation: expected bool"),
    ({"turn_calls_max": -1}, r"knob turn_calls_max=-1: must be between 0 \(no limit\)"),
    ({"read_max": -5}, r"knob read_max=-5: must be between 0 \(no limit\)"),
    ({"parallel_calls": 1.5}, r"knob parallel_calls=1.5: must be a probability"),
    ({**{m: 0.0 for m in ("mix_hub", "mix_walk", "mix_jump", "mix_edit_loop", "mix_edit_burst", "mix_search",
                          "mix_command", "mix_write", "mix_subtask")}}, "mix_\\* weights sum"),
])
def test_absurd_knob_values_are_refused(override, message):
    with pytest.raises(PresetError, match=message):
        knobs("mixed", **override)


def test_every_knob_is_documented_and_overridable():
    base = knobs("mixed")
    for name, value in vars(base).items():
        new = (not value) if isinstance(value, bool) else value / 2 if isinstance(value, float) and value <= 1 \
            else value + 1
        assert getattr(knobs("mixed", **{name: new}), name) == new
    assert parse_override("walk_files=2.5") == ("walk_files", 2.5)
    with pytest.raises(PresetError, match="cannot read 'x' as int"):
        parse_override("tool_calls=x")
    with pytest.raises(PresetError, match="expected knob=value"):
        parse_override("tool_calls")


def test_bad_sessions_and_seed_are_refused():
    with pytest.raises(ValueError, match="sessions must be a positive integer"):
        generate("mixed", sessions=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        generate("mixed", seed=-1)
    with pytest.raises(ValueError, match="the limit is"):
        generate("long", sessions=10**6)


# ----- real checkouts --------------------------------------------------------------------------

@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "proj"
    files = {"src/pkg/router.py": "x" * 900, "src/pkg/util.py": "y" * 300, "src/pkg/models.py": "m" * 2000,
             "tests/test_util.py": "t" * 500, "README.md": "r" * 120, "docs/guide.md": "g" * 4000}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "logo.png").write_bytes(b"\x89PNG\0\0binary")
    (root / "big.log").write_text("z" * 2_000_001)
    return root, {rel: len(text) for rel, text in files.items()}


def test_repo_from_checkout_keeps_text_files_with_their_sizes(checkout):
    root, files = checkout
    repo = repo_from_checkout(root)
    assert dict(zip(repo.paths, repo.sizes.tolist())) == files
    assert repo.paths[repo.hubs[0]] == "src/pkg/router.py"
    assert not set(repo.new_paths) & set(repo.paths)


def test_generate_on_a_checkout_uses_its_paths_and_sizes(checkout):
    root, files = checkout
    df = generate("mixed", sessions=2, seed=3, repo=root, tool_calls=120)
    paths = set(df.loc[df["op"].isin(["read", "edit", "write"]), "path"].astype(str))
    created = paths - set(files)
    assert paths & set(files) and all(p.split("/")[-1].startswith(("new_", )) or "_v2" in p for p in created)
    first = df[df["op"] == "read"].drop_duplicates(["session", "path"])
    first = first[first["path"].astype(str).isin(list(files))]
    assert (first["size_bytes"] == first["path"].astype(str).map(files)).all()
    assert df.attrs["generator"]["repo"] == str(root)


def test_a_bad_checkout_is_refused(tmp_path):
    with pytest.raises(RepoError, match="not a directory"):
        repo_from_checkout(tmp_path / "missing")
    (tmp_path / "only.bin").write_bytes(b"\0\1\2")
    with pytest.raises(RepoError, match="no usable text files"):
        repo_from_checkout(tmp_path)
