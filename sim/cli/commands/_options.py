"""Command-line options parsed in one place: argparse types that name their option (bad input: exit 2, one line),
and the checks of options shared by the commands; each message names the option and value."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from ctxbench.sim.errors import InputError
from ctxbench.sim.engine.replay import budget_for_tokens
from ctxbench.sim.engine.settings import check_bytes_per_token
from ctxbench.strategies.limits import MAX_TIME_LIMIT_MS

from ctxbench.traces.model_ratios import DEFAULT_FAMILY, FAMILIES, FAMILY_RATIOS, family_ratios, session_ratios
from ctxbench.traces.tokens import TokenRatios, as_ratios

__all__ = ["check_int", "int_option", "bytes_per_token_option", "time_limit_option", "check_budgets", "budget_label",
           "check_triggers", "every_ratios", "default_of", "ratios_note"]


def check_int(option: str, value: int | None, low: int, high: int | None = None) -> None:
    """Refuse ``value`` (when given) outside ``[low, high]`` with `InputError` naming ``option``."""
    if value is None:
        return
    if high is None and value < low:
        raise InputError(f"{option} must be >= {low}, got {value}")
    if high is not None and not low <= value <= high:
        raise InputError(f"{option} must be between {low:,} and {high:,}, got {value}")


def _typed(option: str, parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse ``type`` applying ``parse`` to the text, its `InputError` an error naming ``option``."""
    def typed(text: str):
        try:
            return parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = option
    return typed


def _whole(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{option} must be a whole number, got {text!r:.40}") from None


def int_option(option: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """The argparse ``type`` of an integer option from ``low`` to ``high`` (None: no upper bound).

    >>> int_option("--sessions", 1)("3")
    3
    """
    def parse(text: str) -> int:
        value = _whole(option, text)
        check_int(option, value, low, high)
        return value

    return _typed(option, parse)


def time_limit_option(option: str = "--evict-timeout-ms") -> Callable[[str], int]:
    """The argparse ``type`` of a per-call time limit: a whole number of milliseconds from 1 to one day
    (`strategies.limits.MAX_TIME_LIMIT_MS`)."""
    def parse(text: str) -> int:
        value = _whole(option, text)
        if not 1 <= value <= MAX_TIME_LIMIT_MS:
            raise InputError(f"{option} must be a whole number of milliseconds from 1 to {MAX_TIME_LIMIT_MS:,} "
                             f"(one day), got {value}")
        return value

    return _typed(option, parse)


def bytes_per_token_option(option: str = "--bytes-per-token") -> Callable[[str], float]:
    """The argparse ``type`` of a bytes-per-token ratio (`sim.engine.settings.check_bytes_per_token`: from
    `traces.tokens.MIN_BYTES_PER_TOKEN` to `MAX_BYTES_PER_TOKEN`)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = text
        return check_bytes_per_token(value, option)

    return _typed(option, parse)


def check_budgets(budgets, bytes_per_token: float, option: str = "--budget-tokens",
                  per_token_option: str = "--bytes-per-token") -> None:
    """Refuse an absurd bytes-per-token, each token budget that is not a usable byte budget with it,
    and a budget given twice: the same number (``200000 2e5``), the same byte budget, or one that
    reads the same in the tables (``50000.2 50000.4``, both "50,000"); each would be replayed and
    counted again."""
    check_bytes_per_token(bytes_per_token, per_token_option)
    seen_bytes: dict[int, float] = {}
    seen_labels: dict[str, float] = {}
    for budget in budgets or ():
        max_bytes = budget_for_tokens(budget, bytes_per_token, option=option,
                                      per_token_option=per_token_option).max_bytes
        label = budget_label(budget)
        if label in seen_labels:
            first = seen_labels[label]
            raise InputError(f"{option}: the budget of {label} tokens is given twice; give each budget once"
                             if first == budget else
                             f"{option} {first:g} and {budget:g} both read {label} tokens in the tables; give "
                             "budgets that differ in whole tokens")
        if max_bytes in seen_bytes:
            raise InputError(f"{option} {seen_bytes[max_bytes]:g} and {budget:g} are the same budget of "
                             f"{max_bytes:,} bytes at {as_ratios(bytes_per_token).reference:g} bytes per token; "
                             "give each budget once")
        seen_labels[label], seen_bytes[max_bytes] = budget, budget


def every_ratios(chosen) -> list:
    """Every set of ratios a replay told ``chosen`` (`sim.cli.commands.token_ratios`) may count a session with:
    the one given, or each family's (of the file's table, or `traces.model_ratios.FAMILY_RATIOS`)."""
    if chosen is None or isinstance(chosen, Mapping):
        table = FAMILY_RATIOS if chosen is None else chosen
        return list({id(r): r for r in (*table.values(), family_ratios(DEFAULT_FAMILY, table)[1])}.values())
    return [chosen]


def default_of(chosen) -> TokenRatios:
    """The ratios of a session without a recorded model under ``chosen``."""
    return session_ratios("", chosen)[1]


def ratios_note(chosen) -> str:
    """How sessions are counted under ``chosen``, for the help and the tables."""
    if chosen is None or isinstance(chosen, Mapping):
        return "each session with its model's family's ratios (" + ", ".join(
            f"{family}: {'own' if family in (FAMILY_RATIOS if chosen is None else chosen) else DEFAULT_FAMILY}"
            for family in FAMILIES) + ")"
    ratios = as_ratios(chosen)
    return (f"{ratios.reference:g} bytes/token for every kind" if ratios.is_uniform
            else "bytes/token " + ", ".join(f"{k} {v:g}" for k, v in ratios.ratios.items()))


def budget_label(budget: float) -> str:
    """How a token budget reads in the tables and reports.

    >>> budget_label(50_000.4), budget_label(2e5)
    ('50,000', '200,000')
    """
    return f"{budget:,.0f}"


def check_triggers(specs, budgets, tokens) -> list[str]:
    """Where a policy (alone or in ``STRATEGY+POLICY``) would first act above the window of a budget:
    `InputError` when the spec sets ``trigger_tokens`` itself, else the notes to print (a default
    trigger, as clear-tool-uses' 100,000 tokens in a 50,000-token window). Such a policy never acts
    before its calls pass the window. Only specs ctxbench ships are built here; others are not asked."""
    from ctxbench.strategies.adapter import COMBINED, adapt
    from ctxbench.strategies.isolation import loads_code
    from ctxbench.strategies.registry import combination_parts, parse_spec

    ratios = as_ratios(tokens)
    notes = []
    for spec in specs:
        if not isinstance(spec, str) or loads_code(spec) or spec.strip().startswith("cmd:"):
            continue
        adapter = adapt(spec)
        combined = adapter.kind == COMBINED
        policy, policy_spec = (adapter.policy, combination_parts(spec)[1]) if combined else (adapter.target, spec)
        for budget in budgets:
            window = round(budget_for_tokens(budget, ratios).max_bytes / ratios.reference)
            if combined:
                trigger = policy.managed_compaction(window)[0]
            elif callable(getattr(policy, "trigger", None)):
                trigger = policy.trigger(window)
            else:
                continue
            if trigger <= window:
                continue
            what = (f"{spec} acts at {trigger:,.0f} tokens, above the {window:,}-token window: its calls pass "
                    "the window before it compacts or clears")
            if "trigger_tokens" in parse_spec(policy_spec)[1]:
                raise InputError(f"{what}; give a trigger_tokens within the window")
            notes.append(what)
    return notes
