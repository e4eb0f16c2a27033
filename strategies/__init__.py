"""The strategy contract, built-in strategies, the registry and the conformance checker."""

from strategies.contract import (
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
from strategies.errors import RegistryError, StrategyInputError, StrategyLoadError
from strategies.importance import create_importance_context_strategy
from strategies.lru import create_lru_context_strategy
from strategies.registry import DEFAULT_SPEC, available, describe, make, register, unregister

__all__ = [
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
