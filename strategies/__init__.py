"""The strategy contract, built-in strategies, the registry and the conformance checker."""

from ctxbench.strategies.contract import (
    ContextBudget,
    ContextEntry,
    ContextState,
    ContextStrategy,
    budget_from_json,
    budget_to_json,
    dump_request,
    entry_from_json,
    entry_to_json,
    load_request,
)
from ctxbench.strategies.errors import RegistryError, StrategyInputError, StrategyLoadError
from ctxbench.strategies.importance import create_importance_context_strategy
from ctxbench.strategies.lru import create_lru_context_strategy
from ctxbench.strategies.registry import DEFAULT_SPEC, available, describe, make, register, unregister

_LAZY = {"check_strategy": "ctxbench.strategies.check", "CheckReport": "ctxbench.strategies.check"}


def __getattr__(name: str):
    """Import the conformance checker (and hypothesis) only when it is asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ctxbench.strategies' has no attribute {name!r}")

__all__ = [
    "CheckReport",
    "ContextBudget",
    "ContextEntry",
    "ContextState",
    "ContextStrategy",
    "DEFAULT_SPEC",
    "RegistryError",
    "StrategyInputError",
    "StrategyLoadError",
    "available",
    "budget_from_json",
    "budget_to_json",
    "check_strategy",
    "create_importance_context_strategy",
    "create_lru_context_strategy",
    "describe",
    "dump_request",
    "entry_from_json",
    "entry_to_json",
    "load_request",
    "make",
    "register",
    "unregister",
]
