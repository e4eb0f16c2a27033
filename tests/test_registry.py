"""The strategy registry: names, overrides, spec options, import paths, functions and entry points."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import ctxbench.strategies.registry as registry
from ctxbench.strategies.contract import ContextBudget, ContextEntry
from ctxbench.strategies.errors import RegistryError, StrategyLoadError
from ctxbench.strategies.importance import ImportanceStrategy
from ctxbench.strategies.lru import LruStrategy, create_lru_context_strategy
from ctxbench.strategies.registry import (
    DEFAULT_SPEC,
    FunctionStrategy,
    available,
    describe,
    make,
    parse_spec,
    register,
    unregister,
)

STATE = [ContextEntry("a:0", "a", 1, 10), ContextEntry("b:0", "b", 2, 10)]


def evict_newest(state, budget):
    """A plain-function strategy, importable as test_registry:evict_newest."""
    return [max(state, key=lambda e: (e.last_accessed_at, e.id)).id] if state else []


class Keeper:
    """A factory class with an option."""

    def __init__(self, keep: int = 1, label: str = "") -> None:
        self.keep, self.label = keep, label

    def evict(self, state, budget):
        return [e.id for e in sorted(state, key=lambda e: e.id)[self.keep:]]


@pytest.fixture
def scratch_names():
    """Names registered by a test, removed afterwards so tests stay independent."""
    names: list[str] = []
    yield names
    for name in names:
        if name in available():
            unregister(name)


def test_builtins_and_default():
    assert {"lru", "importance"} <= set(available())
    assert DEFAULT_SPEC == "lru" and isinstance(make(), LruStrategy)
    assert make().max_entries == 100
    assert isinstance(make("importance"), ImportanceStrategy)
    assert describe()["lru"] and describe()["importance"]


def test_register_make_and_duplicate_error(scratch_names):
    scratch_names.append("keeper")
    register("keeper", Keeper, description="keeps the first ids")
    assert isinstance(make("keeper"), Keeper)
    assert describe()["keeper"] == "keeps the first ids"
    with pytest.raises(RegistryError, match="already registered"):
        register("keeper", Keeper)
    with pytest.raises(RegistryError, match="already registered"):
        register("lru", Keeper)


def test_override_replaces(scratch_names):
    scratch_names.append("keeper2")
    register("keeper2", Keeper)
    register("keeper2", create_lru_context_strategy, override=True)
    assert isinstance(make("keeper2"), LruStrategy)


@pytest.mark.parametrize("name", ["", "a?b", "x=y", "p:q", " lru", "a&b"])
def test_invalid_names_rejected(name):
    with pytest.raises(RegistryError, match="invalid strategy name"):
        register(name, Keeper)


def test_unregister_unknown():
    with pytest.raises(RegistryError, match="not registered"):
        unregister("never-registered")


def test_unknown_name_lists_available():
    with pytest.raises(StrategyLoadError) as info:
        make("no-such-policy")
    message = str(info.value)
    assert "'no-such-policy'" in message and "lru" in message and "importance" in message


@pytest.mark.parametrize(("spec", "expected"), [
    ("lru", ("lru", {})),
    ("lru?max_entries=50", ("lru", {"max_entries": 50})),
    ("importance?max_entries=none", ("importance", {"max_entries": None})),
    ("x?a=0.5&b=true&c=null&d=text&e=%22quoted%22", ("x", {"a": 0.5, "b": True, "c": None, "d": "text", "e": "quoted"})),
    ("pkg.mod:factory?k=1", ("pkg.mod:factory", {"k": 1})),
])
def test_parse_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "   ", "lru?max_entries", "lru?=3", "lru?max-entries=3"])
def test_bad_specs(spec):
    with pytest.raises(StrategyLoadError):
        parse_spec(spec)


def test_options_reach_the_factory():
    assert make("lru?max_entries=50").max_entries == 50
    assert make("lru?max_entries=none").max_entries is None
    with pytest.raises(StrategyLoadError, match="max_entries"):
        make("lru?max_entries=-1")
    with pytest.raises(StrategyLoadError, match="colour"):
        make("lru?colour=red")


def test_import_path_with_options():
    strategy = make("test_registry:Keeper?keep=0&label=x")
    assert isinstance(strategy, Keeper) and strategy.keep == 0 and strategy.label == "x"
    assert make("ctxbench.strategies.lru:create_lru_context_strategy?max_entries=7").max_entries == 7


@pytest.mark.parametrize(("spec", "match"), [
    ("no_such_module_xyz:factory", "cannot import module"),
    ("ctxbench.strategies.lru:nope", "has no attribute"),
    ("ctxbench.strategies.lru:FRONT_FROM", "neither"),
])
def test_bad_import_paths(spec, match):
    with pytest.raises(StrategyLoadError, match=match):
        make(spec)


def test_plain_function_accepted():
    by_path = make("test_registry:evict_newest")
    assert isinstance(by_path, FunctionStrategy) and by_path.function is evict_newest
    assert by_path.evict(STATE, ContextBudget(10)) == ["b:0"]
    direct = make(evict_newest)
    assert direct.evict(STATE, ContextBudget(10)) == ["b:0"]
    with pytest.raises(StrategyLoadError, match="takes no options"):
        make("test_registry:evict_newest?k=1")


def test_registered_function(scratch_names):
    scratch_names.append("newest")
    register("newest", evict_newest)
    assert make("newest").evict(STATE, ContextBudget(10)) == ["b:0"]


def test_object_passes_through():
    strategy = create_lru_context_strategy(5)
    assert make(strategy) is strategy
    with pytest.raises(StrategyLoadError, match="neither"):
        make(42)


def _fake_entry_points(*points: EntryPoint):
    def entry_points(*, group: str):
        return [p for p in points if p.group == group]
    return entry_points


def test_entry_point_strategy(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", _fake_entry_points(
        EntryPoint("keeper-ep", "test_registry:Keeper", registry.ENTRY_POINT_GROUP),
        EntryPoint("other-group", "test_registry:Keeper", "something.else"),
    ))
    assert "keeper-ep" in available() and "other-group" not in available()
    assert describe()["keeper-ep"] == "from entry point test_registry:Keeper"
    strategy = make("keeper-ep?keep=2")
    assert isinstance(strategy, Keeper) and strategy.keep == 2


def test_broken_entry_point_is_a_load_error(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", _fake_entry_points(
        EntryPoint("broken-ep", "no_such_module_xyz:f", registry.ENTRY_POINT_GROUP)))
    with pytest.raises(StrategyLoadError, match="broken-ep"):
        make("broken-ep")


def test_registered_name_wins_over_entry_point(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", _fake_entry_points(
        EntryPoint("lru", "test_registry:Keeper", registry.ENTRY_POINT_GROUP)))
    assert isinstance(make("lru"), LruStrategy)
    assert available().count("lru") == 1
