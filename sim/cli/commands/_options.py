"""Checks of numeric command-line options shared by the commands; each message names the option and value."""

from __future__ import annotations

from sim.errors import InputError
from sim.engine.replay import budget_for_tokens, check_bytes_per_token

__all__ = ["check_int", "check_budgets"]


def check_int(option: str, value: int | None, low: int, high: int | None = None) -> None:
    """Refuse ``value`` (when given) outside ``[low, high]`` with `InputError` naming ``option``."""
    if value is None:
        return
    if high is None and value < low:
        raise InputError(f"{option} must be >= {low}, got {value}")
    if high is not None and not low <= value <= high:
        raise InputError(f"{option} must be between {low:,} and {high:,}, got {value}")


def check_budgets(budgets, bytes_per_token: float, option: str = "--budget-tokens",
                  per_token_option: str = "--bytes-per-token") -> None:
    """Refuse an absurd bytes-per-token, and each token budget that is not a usable byte budget with it."""
    check_bytes_per_token(bytes_per_token, per_token_option)
    for budget in budgets or ():
        budget_for_tokens(budget, bytes_per_token, option=option, per_token_option=per_token_option)
