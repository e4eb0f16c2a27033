"""A regression baseline is data: it never loads code, and every key and value of it is checked."""

from __future__ import annotations

import json
import re
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxbench.sim.analysis.baseline as baseline
import ctxbench.sim.analysis.regress as regress
from ctxbench.sim.cli import main
from ctxbench.sim.analysis.regress import json_path, load_baseline, run_regress, shipped_spec
from ctxbench.sim.engine.suite import SUITES, Suite
from ctxbench.strategies.registry import make, register, unregister

TINY = Suite("tiny-baseline", "two short sessions for the baseline checks", seed=3,
             presets=(("debug-loop", 1), ("file-walk", 1)), budgets_tokens=(4_000, 20_000),
             overrides={"debug-loop": {"tool_calls": 40}, "file-walk": {"tool_calls": 40}})
PAIR = ["lru", "importance"]
FAST = regress.LatencySettings(states=8, repeats=3)


@pytest.fixture(scope="module")
def tiny():
    """TINY registered as a named suite for the module (hypothesis runs many examples per test)."""
    SUITES[TINY.name] = TINY
    yield TINY
    del SUITES[TINY.name]


@pytest.fixture(scope="module")
def fresh(tiny, tmp_path_factory) -> dict:
    """A valid baseline document for lru and importance on TINY, as --update writes it.

    Its latency tolerance is widened so that the runs these tests expect to pass never depend on timing.
    """
    path = tmp_path_factory.mktemp("baseline") / "b.json"
    assert run_regress(path, suite=TINY, strategies=PAIR, update=True, workers=1, latency=FAST).exit_code == 0
    doc = json.loads(path.read_text())
    doc["tolerances"]["evict_ratio"] = {"factor": 1000.0}
    return doc


def _write(doc, path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _edited(fresh: dict, edit) -> dict:
    doc = json.loads(json.dumps(fresh))
    edit(doc)
    return doc


def _cell(doc: dict, strategy: str = "lru", budget: int = 20_000) -> dict:
    return doc["strategies"][strategy]["budgets"][str(budget)]


def _exit2(capsys, path: Path, *argv: str) -> str:
    """Run the gate on ``path``; assert exit 2 with one line on stderr naming the file, and return it."""
    assert main(["regress", "--baseline", str(path), "--workers", "1", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ctxbench regress: error: baseline ")
    assert str(path) in err
    return err


# ----- a baseline never loads or runs code ------------------------------------------------------

@pytest.mark.parametrize("spec", [
    "cmd:touch pwned",
    "os:system?command=touch%20pwned",
    "subprocess:getoutput?cmd=touch%20pwned",
    "cmd:sh -c 'touch pwned'",
])
@pytest.mark.parametrize("update", [False, True])
def test_a_baseline_naming_a_command_runs_nothing(fresh, tmp_path, monkeypatch, capsys, spec, update):
    monkeypatch.chdir(tmp_path)
    path = _write(_edited(fresh, lambda d: d["strategies"].__setitem__(spec, d["strategies"]["lru"])),
                  tmp_path / "b.json")
    before = path.read_bytes()
    err = _exit2(capsys, path, *(["--update"] if update else []))
    assert f"{json_path(('strategies', spec))}: not a ctxbench built-in" in err and "--strategy" in err
    assert not (tmp_path / "pwned").exists()
    assert path.read_bytes() == before


def test_an_import_path_in_a_baseline_is_imported_only_when_named_on_the_command_line(
        fresh, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pwnmod.py").write_text(
        "import pathlib\npathlib.Path('imported').touch()\n"
        "from ctxbench.strategies.lru import create_lru_context_strategy as factory\n")
    monkeypatch.delitem(sys.modules, "pwnmod", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _write(_edited(fresh, lambda d: d["strategies"].__setitem__("pwnmod:factory", d["strategies"]["lru"])),
                  tmp_path / "b.json")
    load_baseline(path)  # valid: only where it may come from is refused
    assert 'strategies["pwnmod:factory"]: not a ctxbench built-in' in _exit2(capsys, path)
    assert not (tmp_path / "imported").exists() and "pwnmod" not in sys.modules

    # Named with --strategy, it is the user's choice: loaded, run and gated (it is lru, so it passes).
    assert main(["regress", "--baseline", str(path), "--workers", "1", "--strategy", *PAIR, "pwnmod:factory"]) == 0
    assert (tmp_path / "imported").exists()
    assert "ok: 48 checks" in capsys.readouterr().out
    monkeypatch.delitem(sys.modules, "pwnmod", raising=False)


def test_an_entry_point_name_in_a_baseline_is_not_loaded(fresh, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    (site / "evil_dist-1.0.dist-info").mkdir(parents=True)
    (site / "evil_dist-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-dist\nVersion: 1.0\n")
    (site / "evil_dist-1.0.dist-info" / "entry_points.txt").write_text(
        "[ctxbench.strategies]\nevil-policy = evilmod:factory\n")
    marker = tmp_path / "loaded"
    (site / "evilmod.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                     "from ctxbench.strategies.lru import create_lru_context_strategy as factory\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "evilmod", raising=False)
    path = _write(_edited(fresh, lambda d: d["strategies"].__setitem__("evil-policy", d["strategies"]["lru"])),
                  tmp_path / "b.json")
    assert 'strategies["evil-policy"]: not a ctxbench built-in' in _exit2(capsys, path)
    assert not marker.exists() and "evilmod" not in sys.modules
    make("evil-policy")  # the registry does load it when asked: the refusal above is the baseline's rule
    assert marker.exists()
    monkeypatch.delitem(sys.modules, "evilmod", raising=False)


@pytest.mark.parametrize("spec, ok", [
    ("lru", True),
    ("arc", True),
    ("lru?max_entries=50", True),
    ("importance?max_entries=none", True),
    ("segmented?protected=0.5&threshold=3", True),
    ("cmd:touch pwned", False),
    ("os:system?command=touch%20pwned", False),
    ("ctxbench.strategies.lru:create_lru_context_strategy", False),  # an import path, even of ctxbench's own code
    ("lru:x", False),
    ("nope", False),
    ("lru?max_entries=[1]", False),
    ("lru?max_entries={}", False),
    ("lru?max_entries=NaN", False),
    ("lru?max_entries=Infinity", False),
    ("lru?max_entries=" + "[" * 5000, False),
    ("lru?max_entries=" + "1" * 5000, False),
    ("lru?bad", False),
    ("", False),
])
def test_shipped_spec_admits_only_ctxbench_built_ins_with_plain_options(spec, ok):
    assert shipped_spec(spec) is ok


def test_a_registered_strategy_that_ctxbench_does_not_ship_is_not_a_built_in():
    register("test-user-strategy", "ctxbench.strategies.lru:create_lru_context_strategy", builtin=True)
    try:
        assert not shipped_spec("test-user-strategy")
    finally:
        unregister("test-user-strategy")


def test_a_built_in_named_only_by_the_baseline_is_still_gated(fresh, tmp_path):
    doc = _edited(fresh, lambda d: d["strategies"].__setitem__("lru?max_entries=1000", d["strategies"]["lru"]))
    for name in regress.builtin_names():  # every built-in in the baseline, so the default selection is gated
        doc["strategies"].setdefault(name, doc["strategies"]["lru"])
    report = run_regress(_write(doc, tmp_path / "b.json"), workers=1, latency=regress.LatencySettings(2, 1))
    assert "lru?max_entries=1000" in {c.strategy for c in report.checks}
    assert not report.missing


# ----- every value checked: reproductions ------------------------------------------------------

def test_a_nan_metric_is_refused_not_within(fresh, tmp_path, capsys):
    path = _write(_edited(fresh, lambda d: _cell(d)["metrics"].__setitem__("miss_rate", math.nan)), tmp_path / "b.json")
    assert "NaN" in path.read_text()
    err = _exit2(capsys, path, "--strategy", *PAIR)
    assert 'strategies["lru"]["budgets"]["20000"]["metrics"]["miss_rate"]: expected a finite number' in err
    assert "got NaN" in err


@pytest.mark.parametrize("text, shown", [("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e400", "Infinity")])
def test_infinite_numbers_are_refused(fresh, tmp_path, capsys, text, shown):
    doc = _edited(fresh, lambda d: _cell(d)["metrics"].__setitem__("reread_tokens", "SENTINEL"))
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc).replace('"SENTINEL"', text))
    err = _exit2(capsys, path, "--strategy", *PAIR)
    assert f'strategies["lru"]["budgets"]["20000"]["metrics"]["reread_tokens"]' in err and f"got {shown}" in err


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


@pytest.mark.parametrize("new, problem", [
    ("abc", "not a budget of the suite; expected one of: 4000, 20000"),
    ("30000", "not a budget of the suite"),
    ("20000.0", "not a budget of the suite"),
])
def test_a_renamed_budget_key_is_refused_not_skipped(fresh, tmp_path, capsys, new, problem):
    path = _write(_edited(fresh, lambda d: _rename(d["strategies"]["lru"]["budgets"], "20000", new)),
                  tmp_path / "b.json")
    err = _exit2(capsys, path, "--strategy", *PAIR)
    assert f'strategies["lru"]["budgets"]["{new}"]: {problem}' in err


def test_a_missing_budget_is_refused(fresh, tmp_path, capsys):
    path = _write(_edited(fresh, lambda d: d["strategies"]["importance"]["budgets"].pop("4000")), tmp_path / "b.json")
    assert 'strategies["importance"]["budgets"]: missing "4000"' in _exit2(capsys, path, "--strategy", *PAIR)


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.__setitem__("extra", 1), 'extra: not a known key'),
    (lambda d: d["suite"].__setitem__("colour", "red"), 'suite["colour"]: not a known key'),
    (lambda d: _cell(d).__setitem__("note", "x"), 'strategies["lru"]["budgets"]["20000"]["note"]: not a known key'),
    (lambda d: _cell(d)["metrics"].__setitem__("hit_rate", 0.5),
     'strategies["lru"]["budgets"]["20000"]["metrics"]["hit_rate"]: not a known metric'),
    (lambda d: d["latency_settings"].__setitem__("warmup", 1), 'latency_settings["warmup"]: not a known latency'),
    (lambda d: d["tolerances"]["evictions"].__setitem__("pct", 1), 'tolerances["evictions"]["pct"]: not a known'),
    (lambda d: d.__setitem__("format_version", True), "format_version true is not supported"),
    (lambda d: d.__setitem__("format_version", 1.0), "format_version 1.0 is not supported"),
    (lambda d: _cell(d)["metrics"].__setitem__("evictions", -1), '["evictions"]: expected an integer >= 0, got -1'),
    (lambda d: _cell(d)["metrics"].__setitem__("evictions", 3.0), '["evictions"]: expected an integer >= 0, got 3.0'),
    (lambda d: _cell(d)["metrics"].__setitem__("violations", True), '["violations"]: expected an integer'),
    (lambda d: _cell(d)["metrics"].__setitem__("evictions", 2**63), '["evictions"]: expected an integer'),
    (lambda d: _cell(d)["metrics"].__setitem__("miss_rate", 1.5), '["miss_rate"]: expected a finite number >= 0 and'),
    (lambda d: _cell(d, "importance")["metrics"].__setitem__("evict_ratio", 0), '["evict_ratio"]: expected a finite'),
    (lambda d: _cell(d)["metrics"].__setitem__("reread_tokens", -0.5), '["reread_tokens"]: expected a finite number'),
    (lambda d: _cell(d).__setitem__("sessions", -2), '["sessions"]: expected an integer >= 0'),
    (lambda d: _cell(d).__setitem__("sessions", 3), '["log_hashes"]: holds 2 session hashes, but "sessions" is 3'),
    (lambda d: _cell(d).__setitem__("pure", "yes"), '["pure"]: expected true or false, got "yes"'),
    (lambda d: _cell(d)["latency"].__setitem__("spread", math.inf), '["latency"]["spread"]: expected a finite'),
    (lambda d: d["tolerances"].__setitem__("evictions", {"rel": -0.1}), 'tolerances["evictions"]["rel"]: expected'),
    (lambda d: d["tolerances"].__setitem__("evictions", {"abs": math.nan}), 'tolerances["evictions"]["abs"]: expected'),
    (lambda d: d["tolerances"].__setitem__("evict_ratio", {"factor": math.inf}), '["evict_ratio"]["factor"]: expected'),
    (lambda d: d["tolerances"].__setitem__("evictions", {"rel": 0, "factor": 2}), "or 'factor' alone"),
    (lambda d: d["tolerances"].__setitem__("evictions", {}), 'tolerances["evictions"]: expected an object like'),
    (lambda d: d["tolerances"].__setitem__("evictions", [0.1]), 'tolerances["evictions"]: expected an object, got a'),
    (lambda d: d["latency_settings"].__setitem__("states", 0),
     'latency_settings["states"]: expected an integer from 1 to 10000, got 0'),
    (lambda d: d["latency_settings"].__setitem__("repeats", 10**9), 'latency_settings["repeats"]: expected an integer'),
    (lambda d: d.__setitem__("bytes_per_token", 0), "bytes_per_token: expected a finite number > 0"),
    (lambda d: d.__setitem__("traces_digest", "abc"), "traces_digest: expected 64 lowercase hex digits"),
    (lambda d: d.__setitem__("seed", d["seed"] + 1), 'seed: is 4, but suite["seed"] is 3'),
    (lambda d: d.__setitem__("compiled_kernels", "yes"), "compiled_kernels: expected true, false or null"),
    (lambda d: d["suite"].__setitem__("budgets_tokens", [4000, 4000]), 'suite["budgets_tokens"][1]: budget 4000'),
    (lambda d: d["suite"].__setitem__("presets", [["debug-loop"]]), 'suite["presets"][0]: expected [preset, sessions]'),
    (lambda d: d["suite"]["overrides"]["debug-loop"].__setitem__("tool_calls", [40]),
     'suite["overrides"]["debug-loop"]["tool_calls"]: expected a string, number, boolean or null'),
    (lambda d: d["suite"].__setitem__("name", "nope"), 'suite["name"]: unknown suite \'nope\''),
    (lambda d: d["strategies"].__setitem__("lru\tx", d["strategies"]["lru"]), 'strategies["lru\\tx"]: a strategy spec'),
    (lambda d: d["strategies"].__setitem__("lru?x=" + "y" * 2000, d["strategies"]["lru"]), "at most 1000 characters"),
])
def test_every_bad_value_is_named_by_its_json_path(fresh, tmp_path, capsys, edit, where):
    path = _write(_edited(fresh, edit), tmp_path / "b.json")
    assert where in _exit2(capsys, path, "--strategy", *PAIR)


def test_log_hashes_of_the_wrong_shape_or_sessions_are_refused(fresh, tmp_path, capsys):
    def bad_hash(d):
        key = next(iter(_cell(d)["log_hashes"]))
        _cell(d)["log_hashes"][key] = "NOT-A-HASH"
    err = _exit2(capsys, _write(_edited(fresh, bad_hash), tmp_path / "a.json"), "--strategy", *PAIR)
    assert 'strategies["lru"]["budgets"]["20000"]["log_hashes"]["' in err and "16 lowercase hex digits" in err

    def other_session(d):  # the right shape, but no session of the suite: found once the traces are built
        hashes = _cell(d, "importance", 4_000)["log_hashes"]
        _rename(hashes, next(iter(hashes)), "debug-loop/not-a-session")
    err = _exit2(capsys, _write(_edited(fresh, other_session), tmp_path / "b.json"), "--strategy", *PAIR)
    assert ('strategies["importance"]["budgets"]["4000"]["log_hashes"]["debug-loop/not-a-session"]: '
            "not a session of suite 'tiny-baseline'") in err


def test_duplicate_keys_in_the_text_are_refused(fresh, tmp_path, capsys):
    text = json.dumps(fresh)
    path = tmp_path / "b.json"
    path.write_text(text.replace('"strategies": {', '"strategies": {"lru": {"budgets": {}}, ', 1))
    assert 'strategies["lru"]: appears twice in the object' in _exit2(capsys, path, "--strategy", *PAIR)
    path.write_text(re.sub(r'"bytes_per_token": ([0-9.]+)', r'"bytes_per_token": \1, "bytes_per_token": \1', text, count=1))
    assert "bytes_per_token: appears twice" in _exit2(capsys, path, "--strategy", *PAIR)


@pytest.mark.parametrize("text, expect", [
    ("[" * 100_000, "nested too deeply"),
    ('{"format": ' * 100_000, "nested too deeply"),
    ('{"format": "ctxbench-regress-baseline", "n": ' + "1" * 5000 + "}", "not valid JSON: Exceeds the limit"),
    ("3", "not a ctxbench regress baseline"),
    ("null", "not a ctxbench regress baseline"),
    ('"ctxbench-regress-baseline"', "not a ctxbench regress baseline"),
    ('{"format": "ctxbench-regress-baseline", "format_version": 1}', 'missing "ctxbench_version"'),
])
def test_odd_json_is_one_line_and_update_leaves_the_file(tmp_path, capsys, text, expect):
    path = tmp_path / "b.json"
    path.write_text(text)
    assert expect in _exit2(capsys, path)
    assert expect in _exit2(capsys, path, "--update")
    assert path.read_text() == text


def test_a_file_that_is_not_utf8_a_directory_or_too_large_is_refused(fresh, tmp_path, capsys, monkeypatch):
    path = tmp_path / "b.json"
    path.write_bytes(b'{"format": "\xff"}')
    assert "not UTF-8 text (byte 12)" in _exit2(capsys, path)
    assert "not a regular file" in _exit2(capsys, tmp_path)
    _write(fresh, path)
    monkeypatch.setattr(baseline, "MAX_BASELINE_BYTES", 1000)
    assert "too large to be a baseline" in _exit2(capsys, path, "--strategy", *PAIR)


def test_update_refuses_an_invalid_baseline_and_keeps_it(fresh, tmp_path, capsys):
    path = _write(_edited(fresh, lambda d: _cell(d)["metrics"].__setitem__("miss_rate", math.nan)), tmp_path / "b.json")
    before = path.read_bytes()
    assert "miss_rate" in _exit2(capsys, path, "--strategy", *PAIR, "--update")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_update_replaces_a_valid_baseline_for_another_latency_reference(fresh, tmp_path, capsys):
    path = _write(_edited(fresh, lambda d: d.__setitem__("reference", "fifo")), tmp_path / "b.json")
    assert "timed latency against 'fifo'" in _exit2(capsys, path, "--strategy", *PAIR)
    assert main(["regress", "--baseline", str(path), "--workers", "1", "--strategy", *PAIR, "--update"]) == 0
    assert load_baseline(path).reference == "lru"


def test_update_never_writes_a_baseline_it_would_refuse(tmp_path, tiny):
    path = tmp_path / "b.json"
    # The registry strips the spec, so the run goes ahead; the file would not read back.
    with pytest.raises(regress.InputError, match=r'new baseline for .*strategies\["lru\\t"\]: a strategy spec'):
        run_regress(path, suite=TINY, strategies=["lru\t"], update=True, workers=1, latency=FAST)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_names_from_a_baseline_are_printed_as_text_not_markup(fresh, tmp_path, capsys):
    spec = "lru?prefix=[/bold]"
    path = _write(_edited(fresh, lambda d: d["strategies"].__setitem__(spec, d["strategies"]["lru"])),
                  tmp_path / "b.json")
    assert main(["regress", "--baseline", str(path), "--workers", "1", "--strategy", *PAIR]) == 0
    assert f"in the baseline, not run: {spec}" in capsys.readouterr().out


def test_help_states_the_rule_for_strategies_named_in_a_baseline(capsys):
    with pytest.raises(SystemExit):
        main(["regress", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "never makes ctxbench load or run code" in out and "run only when --strategy names it" in out


# ----- any single corruption of a valid baseline: exit 2 naming it -------------------------------

def _nodes(value, path=()):
    """Every (path, value) below ``value``, and whether its last step is a key of an object."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield path + (key,), child
            yield from _nodes(child, path + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield path + (i,), child
            yield from _nodes(child, path + (i,))


def _bad_values(value) -> list:
    """Replacements that no place holding ``value`` accepts."""
    common = [math.nan, math.inf, -math.inf, []]
    if isinstance(value, bool):
        return common + ["x", 1]
    if isinstance(value, int):
        return common + ["x", -1, 1.5, True, {}, None]
    if isinstance(value, float):
        return common + ["x", -1.0, True, {}]
    if isinstance(value, str):
        return common + [1, {}, None, True, "two\nlines"]
    if isinstance(value, list):
        return [math.nan, "x", 1, {}, [[]]]
    return [math.nan, "x", 1, [], None]


def _get(doc, path):
    for step in path:
        doc = doc[step]
    return doc


@st.composite
def corruptions(draw, doc: dict):
    """A copy of ``doc`` with one key renamed or one value replaced, and the path a message must name."""
    nodes = list(_nodes(doc))
    path, value = draw(st.sampled_from(nodes))
    bad = json.loads(json.dumps(doc))
    parent = _get(bad, path[:-1])
    if isinstance(path[-1], str) and draw(st.booleans()):
        new = "zz" + draw(st.text(alphabet="abc/1", max_size=4))
        parent[new] = parent.pop(path[-1])
        if path in (("format",), ("format_version",)):  # without them the file is no baseline of this version
            return bad, path
        return bad, path[:-1] + (new,)
    parent[path[-1]] = draw(st.sampled_from(_bad_values(value)))
    return bad, path


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_corruption_is_exit_2_naming_it(fresh, tmp_path, capsys, data):
    bad, path = data.draw(corruptions(fresh))
    file = _write(bad, tmp_path / "b.json")
    err = _exit2(capsys, file)  # the default selection: built-ins plus the baseline's strategies
    if path[:2] == ("suite", "overrides") and len(path) > 2:
        # A suite knob of another valid value is another suite definition, found by the comparison.
        assert json_path(path) in err or 'differs in: overrides' in err
    else:
        assert json_path(path) in err


@pytest.mark.parametrize("value", ["1" * 5000, "[" * 5000])
def test_an_option_value_too_long_or_too_deep_is_one_line_on_the_command_line(tmp_path, capsys, value):
    path = tmp_path / "none.json"
    assert main(["regress", "--baseline", str(path), "--update", "--strategy", f"lru?max_entries={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "too long a number or nested too deeply" in err
    assert not path.exists()
