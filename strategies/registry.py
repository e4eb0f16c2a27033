"""Find strategies by name, import path or entry point, with options in the spec.

Spec syntax (one string, usable on the command line)::

    NAME[?key=value[&key=value...]]

``NAME`` is a registered name (``lru``), an import path ``pkg.module:factory``, a name
published by another distribution under the entry-point group ``ctxbench.strategies``, or a
scheme handled by a registered loader (``cmd:<command line>``). A name may build an eviction
strategy or a transcript policy (`strategies.policy`; the built-in policies are registered with
``kind="policy"``).

``STRATEGY+POLICY`` combines a strategy with a compaction policy (one with
``managed_compaction``, such as ``claude-code`` or ``codex``; ``compaction`` is short for
``claude-code``): the managed context's conversation is compacted as that policy compacts it
(`split_combination`, `CompactedStrategy`), e.g. ``lru+compaction``,
``gdsf?max_entries=none+codex?trigger_fraction=0.8``. Values are parsed as JSON
when they can be (``50``, ``0.5``, ``true``, ``null``, ``"x"``), and kept as strings
otherwise; ``none`` is accepted for ``null``. The factory is called with the options as
keyword arguments. A factory may return an object with ``evict`` or a plain function
``(state, budget) -> ids``; either way `make` returns an object with ``evict``.

>>> make("lru?max_entries=50")
LruStrategy(max_entries=50)
>>> parse_spec("importance?max_entries=none")
('importance', {'max_entries': None})
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import unquote

from ctxbench.strategies.calls import RAISES, call_failure
from ctxbench.strategies.contract import ContextStrategy
from ctxbench.strategies.errors import RegistryError, StrategyLoadError
from ctxbench.strategies.policy import is_policy

__all__ = [
    "ENTRY_POINT_GROUP",
    "DEFAULT_SPEC",
    "FunctionStrategy",
    "Registration",
    "register",
    "register_scheme",
    "unregister",
    "make",
    "available",
    "builtin_names",
    "kind_of",
    "KINDS",
    "describe",
    "parse_spec",
    "as_strategy",
    "split_combination",
    "combination_parts",
    "CompactedStrategy",
    "COMPACTION_ALIAS",
]

ENTRY_POINT_GROUP = "ctxbench.strategies"
DEFAULT_SPEC = "lru"
#: What a registered name builds: an eviction strategy, or a transcript policy.
KINDS = ("strategy", "policy")


@dataclass(frozen=True)
class Registration:
    """A registered factory (an object or a lazy ``"module:attr"`` string) and its summary."""

    name: str
    factory: Callable[..., Any] | str
    description: str = ""
    builtin: bool = False
    kind: str = "strategy"      # or "policy": a transcript policy (`strategies.policy`)


_REGISTRY: dict[str, Registration] = {}
_SCHEMES: dict[str, Callable[[str, dict[str, Any]], ContextStrategy]] = {}
_BUILTINS_LOADED = False


def _ensure_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        importlib.import_module("ctxbench.strategies.builtins")


def register(name: str, factory: Callable[..., Any] | str, *, description: str = "",
             override: bool = False, builtin: bool = False, kind: str = "strategy") -> None:
    """Register ``factory`` (callable or lazy ``"module:attr"``) under ``name``: a strategy, or
    (``kind="policy"``) a transcript policy.

    Registering a taken name raises `RegistryError` unless ``override=True``.
    """
    if kind not in KINDS:
        raise RegistryError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(name, str) or not name or any(c in name for c in "?&=:") or name != name.strip():
        raise RegistryError(f"invalid strategy name {name!r}: use a non-empty name without ?&=: or spaces")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise RegistryError(f"factory for {name!r} must be callable or a 'module:attr' string")
    _ensure_builtins()
    if name in _REGISTRY and not override:
        raise RegistryError(f"strategy {name!r} is already registered; pass override=True to replace it")
    _REGISTRY[name] = Registration(name, factory, description, builtin, kind)


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (a missing name raises `RegistryError`)."""
    _ensure_builtins()
    if name not in _REGISTRY:
        raise RegistryError(f"strategy {name!r} is not registered")
    del _REGISTRY[name]


def register_scheme(prefix: str, loader: Callable[[str, dict[str, Any]], ContextStrategy], *,
                    override: bool = False) -> None:
    """Handle specs ``prefix:<rest>`` with ``loader(rest, options)`` (e.g. ``cmd:``)."""
    if prefix in _SCHEMES and not override:
        raise RegistryError(f"spec scheme {prefix!r} is already registered")
    _SCHEMES[prefix] = loader


def _parse_value(text: str) -> Any:
    text = unquote(text)
    if text.lower() == "none":
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except (ValueError, RecursionError):  # more digits than Python converts, or nested too deeply
        raise StrategyLoadError(f"option value {text[:20]}... is too long a number or nested too deeply") from None


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split a spec into its name and keyword options."""
    if not isinstance(spec, str) or not spec.strip():
        raise StrategyLoadError(f"empty strategy spec {spec!r}")
    name, _, query = spec.strip().partition("?")
    options: dict[str, Any] = {}
    if query:
        for part in query.split("&"):
            key, eq, value = part.partition("=")
            if not eq or not key.isidentifier():
                raise StrategyLoadError(f"bad option {part!r} in spec {spec!r}: expected key=value")
            if key in options:
                raise StrategyLoadError(f"option {key} given twice in spec {spec!r}; give it once")
            options[key] = _parse_value(value)
    return name, options


def _import_from_path_or_cwd(module_name: str) -> Any:
    """Import a module; a module not found on ``sys.path`` is looked for in the working directory.

    Console scripts do not put the working directory on ``sys.path`` (``python -m`` does), so
    ``ctxbench run --strategy mymodule:factory`` finds ``./mymodule.py`` either way.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        top = module_name.partition(".")[0]
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(module_name)


def _resolve_import_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = _import_from_path_or_cwd(module_name)
    except BaseException as exc:  # an import error of any kind (sys.exit too) is a load failure of the spec
        raise StrategyLoadError(f"cannot import module {module_name!r} for {path!r}: {_load_failure(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise StrategyLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def _load_failure(exc: BaseException, typed: bool = False) -> str:
    """What loading a strategy ended in: the exception (with its type if ``typed``), or how it left.

    A real interrupt is passed on (`strategies.calls.call_failure`).
    """
    kind, text = call_failure(exc)
    if kind == RAISES:
        return f"{type(exc).__name__}: {exc}" if typed else str(exc)
    return text


def _entry_point_names() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Registered names plus entry-point names, sorted."""
    _ensure_builtins()
    return sorted(set(_REGISTRY) | set(_entry_point_names()))


def builtin_names(kind: str | None = "strategy") -> list[str]:
    """Names of the strategies (``kind="policy"``: the policies; ``None``: both) shipped with
    ctxbench, sorted."""
    _ensure_builtins()
    return sorted(name for name, reg in _REGISTRY.items() if reg.builtin and kind in (None, reg.kind))


def kind_of(spec: Any) -> str:
    """``"strategy"`` or ``"policy"``: what a spec builds, for a registered name or a combination
    (``"strategy"``); other specs are known only once built (`strategies.policy.is_policy`)."""
    _ensure_builtins()
    if not isinstance(spec, str) or split_combination(spec) is not None:
        return "policy" if is_policy(spec) else "strategy"
    try:
        reg = _REGISTRY.get(parse_spec(spec)[0])
    except StrategyLoadError:
        return "strategy"
    return reg.kind if reg is not None else "strategy"


def describe() -> dict[str, str]:
    """Each available name with its one-line description."""
    _ensure_builtins()
    out: dict[str, str] = {}
    eps = _entry_point_names()
    for name in available():
        if name in _REGISTRY:
            out[name] = _REGISTRY[name].description
        else:
            out[name] = f"from entry point {eps[name].value}"
    return out


class FunctionStrategy:
    """Adapt a plain function ``(state, budget) -> ids`` to the strategy protocol."""

    __slots__ = ("function",)

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def evict(self, state, budget):
        return self.function(state, budget)

    def __repr__(self) -> str:
        name = getattr(self.function, "__qualname__", repr(self.function))
        return f"FunctionStrategy({name})"


def as_strategy(obj: Any, origin: str = "strategy") -> ContextStrategy:
    """Return ``obj`` if it has ``evict`` (or is a transcript policy, with ``edit``); wrap a plain
    callable; reject anything else."""
    if _has_evict(obj) or is_policy(obj):
        return obj
    if callable(obj):
        return FunctionStrategy(obj)
    raise StrategyLoadError(f"{origin} is neither a strategy (with evict) nor a function: {obj!r}")


def _has_evict(obj: Any) -> bool:
    """``isinstance(obj, ContextStrategy)`` at a fraction of a runtime protocol check's cost."""
    return getattr(obj, "evict", None) is not None


def _is_evict_function(obj: Any) -> bool:
    """A callable with two required positional parameters is taken as ``(state, budget)``."""
    try:
        return _is_evict_signature(obj)
    except TypeError:   # unhashable: not cached
        return _is_evict_signature.__wrapped__(obj)


@functools.lru_cache(maxsize=512)
def _is_evict_signature(obj: Any) -> bool:
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [p for p in params
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) == 2


def _instantiate(obj: Any, options: Mapping[str, Any], origin: str) -> ContextStrategy:
    if not isinstance(obj, type) and (_has_evict(obj) or is_policy(obj)):
        if options:
            raise StrategyLoadError(f"{origin} is a strategy object and takes no options")
        return obj
    if not callable(obj):
        raise StrategyLoadError(f"{origin} is neither a strategy, a factory nor a function: {obj!r}")
    if not isinstance(obj, type) and _is_evict_function(obj):
        if options:
            raise StrategyLoadError(f"{origin} is an eviction function and takes no options")
        return FunctionStrategy(obj)
    try:
        product = obj(**options)
    except BaseException as exc:  # a factory that raises or leaves (sys.exit) is a load failure
        detail = f" with options {dict(options)}" if options else ""
        raise StrategyLoadError(f"cannot build {origin}{detail}: {_load_failure(exc, typed=True)}") from None
    return as_strategy(product, origin)


#: The policy a combination names by ``+compaction``.
COMPACTION_ALIAS = ("compaction", "claude-code")


def split_combination(spec: Any) -> tuple[str, str] | None:
    """``(strategy spec, policy spec)`` of a ``STRATEGY+POLICY`` spec, else None: the text after the
    last ``+`` must name a registered policy (``compaction``: ``claude-code``), with options.

    >>> split_combination("lru?max_entries=50+compaction?trigger_tokens=150000")
    ('lru?max_entries=50', 'claude-code?trigger_tokens=150000')
    >>> split_combination("lru"), split_combination("cmd:tool --x+y")
    (None, None)
    """
    if not isinstance(spec, str) or "+" not in spec:
        return None
    left, _, right = spec.strip().rpartition("+")
    name, sep, options = right.partition("?")
    if name == COMPACTION_ALIAS[0]:
        name = COMPACTION_ALIAS[1]
    _ensure_builtins()
    registered = _REGISTRY.get(name)
    if not left or registered is None or registered.kind != "policy":
        return None
    return left, name + sep + options


class CompactedStrategy:
    """A strategy whose managed context's conversation ``policy`` compacts (``STRATEGY+POLICY``):
    it evicts as ``strategy`` does; the replay reads ``policy.managed_compaction``."""

    def __init__(self, strategy: Any, policy: Any) -> None:
        self.strategy, self.policy = strategy, policy

    def evict(self, state, budget):
        return self.strategy.evict(state, budget)

    def __repr__(self) -> str:
        return f"CompactedStrategy({self.strategy!r}, {self.policy!r})"


def combination_parts(spec: Any) -> tuple[str, str] | None:
    """`split_combination`, refusing a strategy part that is itself a combination (two policies, whose
    first one would be dropped) with `StrategyLoadError`.

    >>> combination_parts("lru+compaction?trigger_tokens=50000+compaction")
    Traceback (most recent call last):
    ...
    ctxbench.strategies.errors.StrategyLoadError: 'lru+compaction?trigger_tokens=50000+compaction' names two policies (claude-code?trigger_tokens=50000, then claude-code): a combination is one STRATEGY+POLICY
    """
    parts = split_combination(spec)
    if parts is not None:
        inner = split_combination(parts[0])
        if inner is not None:
            raise StrategyLoadError(f"{spec.strip()!r} names two policies ({inner[1]}, then {parts[1]}): a "
                                    "combination is one STRATEGY+POLICY")
    return parts


def _combination(strategy_spec: str, policy_spec: str) -> CompactedStrategy:
    strategy, policy = make(strategy_spec), make(policy_spec)
    if is_policy(strategy):
        raise StrategyLoadError(f"{strategy_spec!r} is a policy: a combination is STRATEGY+POLICY")
    if not callable(getattr(policy, "managed_compaction", None)):
        raise StrategyLoadError(f"policy {policy_spec!r} does not compact a managed context (it has no "
                                "managed_compaction); combine a strategy with claude-code, codex or compaction")
    return CompactedStrategy(strategy, policy)


def make(spec: Any = DEFAULT_SPEC) -> ContextStrategy:
    """Build a strategy (or a transcript policy) from a spec string, an object, or a plain function."""
    if not isinstance(spec, str):
        return as_strategy(spec)
    combined = combination_parts(spec)
    if combined is not None:
        return _combination(*combined)
    _ensure_builtins()
    scheme, sep, _ = spec.strip().partition(":")
    if sep and scheme in _SCHEMES:
        # Everything after the scheme belongs to the loader, including any '?'.
        return _SCHEMES[scheme](spec.strip()[len(scheme) + 1:], {})
    name, options = parse_spec(spec)
    if name in _REGISTRY:
        factory = _REGISTRY[name].factory
        if isinstance(factory, str):
            factory = _resolve_import_path(factory)
        return _instantiate(factory, options, f"strategy {name!r}")
    if ":" in name:
        return _instantiate(_resolve_import_path(name), options, f"strategy {name!r}")
    eps = _entry_point_names()
    if name in eps:
        try:
            factory = eps[name].load()
        except BaseException as exc:
            raise StrategyLoadError(f"entry point {name!r} ({eps[name].value}) failed to load: "
                                    f"{_load_failure(exc)}") from None
        return _instantiate(factory, options, f"strategy {name!r}")
    raise StrategyLoadError(
        f"unknown strategy {name!r}; available: {', '.join(available())} "
        f"(or an import path 'pkg.module:factory')"
    )
