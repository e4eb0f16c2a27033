"""Bytes per token by model family: which family a session's model belongs to, and the ratios it is counted with.

Tokenizers differ between model families (Claude's packs source code at about 2 bytes per token,
DeepSeek's at about 3.7), so a replay counts each session with the ratios of its model's family
(`session_ratios`): the session's model is the one that made most of its calls (the trace's
``model`` column, which imports fill from the log). A session with no recorded model, or one of a
family without its own ratios, is counted with the default family's (`traces.tokens.DEFAULT_TOKENS`,
fitted on Claude). ``--token-ratios`` or ``--bytes-per-token`` replace the choice for every session.
An OpenAI model's text the log holds is counted exactly at import instead (`traces.exact_tokens`).
`FAMILY_RATIOS` holds each family's ratios and `FAMILY_SOURCES` says where they come from
(docs/design.md §7 has the table and the figures).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ctxbench.traces.tokens import DEFAULT_RATIOS, DEFAULT_TOKENS, TokenRatios, as_ratios

__all__ = ["FAMILIES", "DEFAULT_FAMILY", "FAMILY_RATIOS", "FAMILY_SOURCES", "MAX_MODEL_CHARS", "model_family",
           "session_model", "family_ratios", "ratios_for_model", "session_ratios", "trace_models", "family_table",
           "GIVEN"]

#: Model families, in the order tables list them; ``other`` is every model no pattern names.
FAMILIES = ("claude", "openai", "deepseek", "gemini", "qwen", "other")
#: The family whose ratios a session without a recorded model, or of a family without its own ratios, uses.
DEFAULT_FAMILY = "claude"
#: The longest model name a trace holds (a longer one is bad input).
MAX_MODEL_CHARS = 200

# A model name as logs spell it: "claude-opus-4-6", "anthropic/claude-3-5-sonnet", "gpt-5.3-codex",
# "openai/gpt-4o", "o4-mini", "deepseek-reasoner", "gemini-2.5-pro", "Qwen/Qwen3-Coder". The provider
# prefix (everything to the last "/") is dropped before matching.
_PATTERNS = (
    ("claude", re.compile(r"claude|^(opus|sonnet|haiku)\b")),
    ("openai", re.compile(r"^(gpt|chatgpt|codex|o[1-9])\b|^(text-davinci|davinci|babbage)")),
    ("deepseek", re.compile(r"deepseek")),
    ("gemini", re.compile(r"gemini|gemma")),
    ("qwen", re.compile(r"qwen")),
)

#: Each family's bytes per token by content kind: fitted with ``ctxbench calibrate`` on the bundled
#: sessions of that family (``make calibrate``); a family absent here uses `DEFAULT_FAMILY`'s.
FAMILY_RATIOS: dict[str, TokenRatios] = {
    "claude": DEFAULT_TOKENS,
    # One ratio for every kind: fitted by kind on either session alone, the other is over-predicted by 12-33 %;
    # one ratio predicts each left out within 5 % (docs/design.md §7).
    "deepseek": TokenRatios({**dict.fromkeys(("code", "output", "prose", "thinking", "json"), 3.66),
                             "overhead": DEFAULT_RATIOS["overhead"]}),
}

#: Where each family's ratios come from, as the tables say it.
FAMILY_SOURCES: dict[str, str] = {
    "claude": "fitted by kind on the Claude Code session 258c7280 (Claude Opus 4.6)",
    "deepseek": "one ratio for every kind, fitted on the two mini-swe-agent sessions (deepseek-chat, "
                "deepseek-reasoner)",
    "openai": "the claude ratios (its one bundled session with usage, its text redacted to lengths, fits no "
              "better); text the log holds counted exactly",
    "gemini": "no bundled session with usage: the claude ratios",
    "qwen": "no bundled session with usage: the claude ratios",
    "other": "the claude ratios",
}


def model_family(model: object) -> str:
    """The family of a model name (`FAMILIES`); ``""`` for no model (empty, missing or not text).

    >>> model_family("claude-opus-4-6"), model_family("openai/gpt-5.3-codex"), model_family("o4-mini")
    ('claude', 'openai', 'openai')
    >>> model_family("deepseek-reasoner"), model_family("gemini-2.5-pro"), model_family("llama-3"), model_family("")
    ('deepseek', 'gemini', 'other', '')
    """
    if not isinstance(model, str) or not model.strip():
        return ""
    name = model.strip().lower().rsplit("/", 1)[-1]
    for family, pattern in _PATTERNS:
        if pattern.search(name):
            return family
    return "other"


def session_model(models: Iterable[object]) -> str:
    """The model of a session from its calls' models (one per call, ``""`` where unknown): the one that made
    most calls, the first of them on a tie; ``""`` when none is known.

    >>> session_model(["", "claude-opus-4-6", "claude-haiku-4-5", "claude-opus-4-6"]), session_model(["", ""])
    ('claude-opus-4-6', '')
    """
    counts: dict[str, int] = {}
    for model in models:
        if isinstance(model, str) and model:
            counts[model] = counts.get(model, 0) + 1
    return max(counts, key=counts.get) if counts else ""


def family_ratios(family: str, table: Mapping[str, TokenRatios] | None = None) -> tuple[str, TokenRatios]:
    """The family whose ratios a session of ``family`` is counted with, and those ratios: its own in ``table``
    (default `FAMILY_RATIOS`), else `DEFAULT_FAMILY`'s (``""``, no recorded model, too).

    >>> family_ratios("deepseek")[0], family_ratios("gemini")[0], family_ratios("")[0]
    ('deepseek', 'claude', 'claude')
    """
    table = FAMILY_RATIOS if table is None else table
    if family in table:
        return family, table[family]
    return DEFAULT_FAMILY, table.get(DEFAULT_FAMILY, DEFAULT_TOKENS)


def ratios_for_model(model: object, table: Mapping[str, TokenRatios] | None = None) -> tuple[str, TokenRatios]:
    """`family_ratios` of ``model``'s family.

    >>> ratios_for_model("deepseek-chat")[0], ratios_for_model("claude-opus-4-6")[0]
    ('deepseek', 'claude')
    """
    return family_ratios(model_family(model), table)


#: What a replay was told to count with: one ratio for every kind, ratios by kind for every session, or
#: ratios by kind per family (a table of `FAMILY_RATIOS`' shape); ``None`` for `FAMILY_RATIOS`.
Chosen = "float | TokenRatios | Mapping[str, TokenRatios] | None"
#: The label of ratios given for every session (``--token-ratios``, ``--bytes-per-token``), not chosen by model.
GIVEN = "given"


def session_ratios(model: object, chosen: Chosen = None) -> tuple[str, TokenRatios]:
    """The ratios a session of ``model`` is counted with, and their label: those ``chosen`` for every session
    (a number or `TokenRatios`; label `GIVEN`), else its family's in ``chosen`` (a table by family; ``None``:
    `FAMILY_RATIOS`), labelled by the family whose ratios they are (`family_ratios`).

    >>> session_ratios("deepseek-chat")[0], session_ratios("deepseek-chat", 3.8)[0], session_ratios("")[0]
    ('deepseek', 'given', 'claude')
    """
    if chosen is None or isinstance(chosen, Mapping):
        return family_ratios(model_family(model), chosen)
    return GIVEN, as_ratios(chosen)


def trace_models(trace, chosen: Chosen = None) -> list[dict]:
    """Per session of a trace (a DataFrame in the schema, sessions' rows contiguous): its model (`session_model`
    of its turns' models), its family, and the label of the ratios it is counted with under ``chosen``
    (`session_ratios`). O(n)."""
    codes, names = pd.factorize(trace["session"].astype(str).to_numpy(dtype=object))
    if not len(codes):
        return []
    if "model" in trace.columns:
        turns = trace["turn"].to_numpy()
        first = np.r_[True, (codes[1:] != codes[:-1]) | (turns[1:] != turns[:-1])]   # each turn's first row
        models = trace["model"].astype(str).to_numpy(dtype=object)[first]
        starts = np.flatnonzero(np.r_[True, codes[first][1:] != codes[first][:-1]])
        chosen_models = [session_model(part) for part in np.split(models, starts[1:])]
    else:
        chosen_models = [""] * len(names)
    return [{"session": str(session), "model": model, "family": model_family(model),
             "ratios": session_ratios(model, chosen)[0]} for session, model in zip(names, chosen_models)]


def family_table() -> list[dict]:
    """One row per family: the family whose ratios it uses, those ratios, and where they come from."""
    rows = []
    for family in FAMILIES:
        uses, ratios = family_ratios(family)
        rows.append({"family": family, "uses": uses, "ratios": ratios.to_dict(), "source": FAMILY_SOURCES[family]})
    return rows
