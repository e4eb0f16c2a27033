"""The regression gate: replay a fixed seeded suite and compare every strategy with a baseline file."""

from __future__ import annotations

import hashlib
import json
import math
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from ctxbench.sim.errors import BAD_INPUT_ERRORS, ContractViolation, InputError
from ctxbench.sim.analysis.grid import as_sessions, run_grid
from ctxbench.strategies.isolation import check_loads
from ctxbench.sim.analysis.latency import REFERENCE, EndedNote, LatencyRatio, LatencySettings, measure_latency
from ctxbench.sim.engine.measures import DEFAULT_BYTES_PER_TOKEN, GATED_METRICS, pool
from ctxbench.traces.tokens import DEFAULT_TOKENS, KINDS, TokenRatios
from ctxbench.sim.engine.measures import METRICS as MEASURES
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN, SessionTrace
from ctxbench.sim import ctxbench_version
from ctxbench.sim.engine.suite import SUITES, Suite, build_suite, get_suite
from ctxbench.strategies import compiled as kernels
from ctxbench.strategies.builtins import BUILTINS, POLICIES
from ctxbench.strategies.errors import StrategyLoadError
from ctxbench.strategies.registry import builtin_names, parse_spec, split_combination
from ctxbench.sim.output import output_file

__all__ = [
    "FORMAT", "FORMAT_VERSION", "DEFAULT_BASELINE", "DEFAULT_SUITE", "REFERENCE", "GATED_METRICS",
    "LATENCY_METRIC", "DEFAULT_TOLERANCES", "Tolerance", "Baseline", "Check", "RegressReport",
    "MAX_BASELINE_BYTES", "MAX_LATENCY_SETTING", "summarise_suite", "traces_digest", "json_path", "load_baseline",
    "parse_baseline", "parse_tolerances", "shipped_spec", "run_regress",
]

FORMAT, FORMAT_VERSION = "ctxbench-regress-baseline", 1
DEFAULT_BASELINE = "tests/baselines/default.json"
DEFAULT_SUITE = "regress"

# The gated metrics (`sim.engine.measures.GATED_METRICS`, ``gated=True``) are deterministic and pooled over
# the suite's sessions per (strategy, budget); lower is better.
LATENCY_METRIC = "evict_ratio"
METRICS = GATED_METRICS + (LATENCY_METRIC,)
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    **{m: {"rel": 0.0} for m in GATED_METRICS},
    LATENCY_METRIC: {"factor": 1.5},
}
# A metric read from one total is a count (an integer); one derived from totals a number >= 0, a ``*_rate`` at most 1.
COUNT_METRICS = tuple(m.name for m in MEASURES if m.gated and m.source is not None)
MAX_BASELINE_BYTES = 64 * 2**20
MAX_COUNT = 2**63 - 1            # what the results' int64 columns hold
MAX_LATENCY_SETTING = 10_000     # states, repeats and sessions per trace of the latency benchmark
MAX_SPEC_CHARS = 1_000


# ----- reading JSON data: every value checked, every problem named by its JSON path ----------------

class _JsonObject(dict):
    """A parsed JSON object that remembers the keys its text gave more than once."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> "_JsonObject":
        """The ``object_pairs_hook`` of `json.loads`."""
        obj = cls(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            obj.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))
        return obj


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _show(value: Any) -> str:
    """A value as a message quotes it: JSON, clipped, on one line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    try:
        return _clip(json.dumps(value))
    except ValueError:  # an integer too long to print
        return "a number too long"


def json_path(path: Sequence[str | int]) -> str:
    """A JSON path as messages write it: ``strategies["lru"]["budgets"]["50000"]``."""
    if not path:
        return "the top level"
    head, *rest = path
    parts = [head if isinstance(head, str) and head.isidentifier() else f"[{_step(head)}]"]
    return "".join(parts + [f"[{_step(p)}]" for p in rest])


def _step(part: str | int) -> str:
    return str(part) if isinstance(part, int) else _clip(json.dumps(part), 80)


class _Reader:
    """Checks parsed JSON values; a bad one raises `InputError` naming ``where`` and its JSON path."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: Sequence[str | int], problem: str) -> NoReturn:
        """Raise `InputError` for the value at ``path``."""
        raise InputError(f"{self.where}: {json_path(path)}: {problem}" if path else f"{self.where}: {problem}")

    def object(self, value: Any, path: tuple, required: Sequence[str] = (), optional: Sequence[str] = (), *,
               noun: str = "known key") -> dict:
        """An object; with ``required`` or ``optional``, exactly those keys (the optional ones may be absent)."""
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {_show(value)}")
        for key in getattr(value, "duplicates", ()):
            self.fail(path + (key,), "appears twice in the object")
        known = tuple(required) + tuple(optional)
        if known:
            allowed = set(known)
            for key in value:
                if key not in allowed:
                    self.fail(path + (key,), f"not a {noun}; expected one of: {_names(known)}")
            for key in required:
                if key not in value:
                    self.fail(path, f"missing {json.dumps(key)}")
        return value

    def array(self, value: Any, path: tuple, *, nonempty: bool = True) -> list:
        """A list, non-empty unless told."""
        if not isinstance(value, list) or nonempty and not value:
            self.fail(path, f"expected a {'non-empty ' if nonempty else ''}list, got {_show(value)}")
        return value

    def count(self, value: Any, path: tuple, low: int = 0, high: int = MAX_COUNT) -> int:
        """An integer in ``[low, high]`` (not a float, not a boolean)."""
        if type(value) is not int or not low <= value <= high:
            bounds = f">= {low}" if high == MAX_COUNT else f"from {low} to {high}"
            self.fail(path, f"expected an integer {bounds}, got {_show(value)}")
        return value

    def number(self, value: Any, path: tuple, low: float = 0.0, high: float | None = None, *,
               above: bool = False) -> float:
        """A finite number ``>= low`` (``> low`` if ``above``) and ``<= high``, as a float."""
        try:
            number = float(value) if type(value) in (int, float) else math.nan
        except OverflowError:
            number = math.nan
        if not math.isfinite(number) or number < low or above and number == low \
                or high is not None and number > high:
            bounds = f"{'>' if above else '>='} {low:g}" + ("" if high is None else f" and <= {high:g}")
            self.fail(path, f"expected a finite number {bounds}, got {_show(value)}")
        return number

    def text(self, value: Any, path: tuple, *, pattern: re.Pattern | None = None, what: str = "a non-empty string",
             empty: bool = False) -> str:
        """A string of printable characters (matching ``pattern`` when given)."""
        if not isinstance(value, str) or not (value or empty) or not value.isprintable() \
                or pattern is not None and not pattern.fullmatch(value):
            self.fail(path, f"expected {what}, got {_show(value)}")
        return value

    def flag(self, value: Any, path: tuple, *, nullable: bool = False) -> bool | None:
        """``true`` or ``false`` (or ``null`` when ``nullable``)."""
        if not (isinstance(value, bool) or nullable and value is None):
            self.fail(path, f"expected true{', false or null' if nullable else ' or false'}, got {_show(value)}")
        return value

    def scalar(self, value: Any, path: tuple) -> Any:
        """A string, boolean, null or finite number."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.number(value, path, low=-math.inf)
        if not (value is None or isinstance(value, (str, bool))):
            self.fail(path, f"expected a string, number, boolean or null, got {_show(value)}")
        return value


# ----- tolerances --------------------------------------------------------------------------

@dataclass(frozen=True)
class Tolerance:
    """How much worse a metric may get: ``rel``/``abs`` slack, or a ``factor`` for ratios.

    With slack, a value above ``baseline + max(abs, rel * |baseline|)`` regressed and any value
    below the baseline improved. With a factor, a value above ``baseline * factor`` regressed
    and one below ``baseline / factor`` improved; anything between is noise.

    >>> Tolerance().judge(10, 10), Tolerance().judge(10, 11), Tolerance().judge(10, 9)
    ('same', 'regressed', 'improved')
    >>> Tolerance(factor=1.5).judge(2.0, 2.9), Tolerance(factor=1.5).judge(2.0, 3.1)
    ('within', 'regressed')
    """

    rel: float = 0.0
    abs: float = 0.0
    factor: float | None = None

    def judge(self, baseline: float, now: float) -> str:
        """``same``, ``within`` (changed, within tolerance), ``improved`` or ``regressed``."""
        if now == baseline:
            return "same"
        if self.factor is not None:
            if now > baseline * self.factor:
                return "regressed"
            return "improved" if now * self.factor < baseline else "within"
        if now < baseline:
            return "improved"
        return "regressed" if now > baseline + max(self.abs, self.rel * abs(baseline)) else "within"

    def describe(self) -> str:
        """Short human form: ``exact``, ``+5%``, ``+3``, ``x1.5``."""
        if self.factor is not None:
            return f"x{self.factor:g}"
        parts = ([f"+{self.rel * 100:g}%"] if self.rel else []) + ([f"+{self.abs:g}"] if self.abs else [])
        return " or ".join(parts) if parts else "exact"

    def to_dict(self) -> dict[str, float]:
        """The baseline-file form."""
        if self.factor is not None:
            return {"factor": self.factor}
        out = {"rel": self.rel}
        if self.abs:
            out["abs"] = self.abs
        return out

    @classmethod
    def parse(cls, obj: Any, where: str | _Reader, path: tuple = ()) -> "Tolerance":
        """From ``{"rel": r, "abs": a}`` (either may be absent) or ``{"factor": f}``; values finite."""
        r = where if isinstance(where, _Reader) else _Reader(where)
        r.object(obj, path)
        if not obj:
            r.fail(path, 'expected an object like {"rel": 0} or {"factor": 1.5}')
        for key in obj:
            if key not in ("rel", "abs", "factor"):
                r.fail(path + (key,), "not a known tolerance; use 'rel' and/or 'abs', or 'factor' alone")
        if "factor" in obj and len(obj) > 1:
            r.fail(path, f"use 'rel' and/or 'abs', or 'factor' alone; got {', '.join(sorted(obj))}")
        return cls(**{key: r.number(value, path + (key,), low=1.0 if key == "factor" else 0.0)
                      for key, value in obj.items()})


# ----- the suite's deterministic numbers -----------------------------------------------------

def _budget_key(budget: float) -> str:
    return str(int(budget)) if float(budget).is_integer() else repr(float(budget))


def traces_digest(sessions: Sequence[SessionTrace]) -> str:
    """SHA-256 over every event of every session: equal digests mean the same traces were replayed."""
    h = hashlib.sha256()
    for st in sessions:
        h.update(f"{st.trace}\0{st.session}\0{len(st)}\n".encode())
        h.update(np.asarray([st.turns, st.ops, st.sizes, st.ts_ms], dtype="<i8").tobytes())
        h.update("\0".join(st.paths).encode())
        h.update("\0".join(st.arms or ()).encode())
    return h.hexdigest()


def summarise_suite(results: pd.DataFrame, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN) -> dict:
    """Per (strategy, budget): the gated metrics pooled over all sessions (`sim.engine.measures.pool`:
    counts summed, ``miss_rate`` all misses over all accesses, ``reread_tokens`` the summed re-read
    bytes over ``bytes_per_token``), and each session's log hash."""
    out: dict[tuple[str, float], dict] = {}
    for (strategy, budget), g in results.groupby(["strategy", "budget_tokens"], sort=False):
        budget = budget.item() if isinstance(budget, np.generic) else budget
        out[(str(strategy), budget)] = {
            "pure": bool(g["pure"].all()),
            "sessions": len(g),
            "accesses": int(g["accesses"].sum()),
            "metrics": pool(g, GATED_METRICS, bytes_per_token),
            "log_hashes": {f"{t}/{s}": h[:16] for t, s, h in zip(g["trace"], g["session"], g["log_hash"])},
        }
    return out


# ----- the baseline file ------------------------------------------------------------------------

@dataclass
class Baseline:
    """A baseline file in memory (see `run_regress` for the file's layout)."""

    suite: dict
    traces_digest: str
    bytes_per_token: float
    ctxbench_version: str
    tolerances: dict[str, Tolerance]
    latency: LatencySettings
    # strategy -> budget key -> {"pure", "sessions", "accesses", "metrics", "latency", "log_hashes"}
    strategies: dict[str, dict[str, dict]]
    # whether the built-ins ran their compiled kernels when the latencies were measured (None: not recorded)
    kernels: bool | None = None
    reference: str = REFERENCE
    # the bytes per token of each content kind the replays counted with (absent: one ratio for all)
    tokens: TokenRatios | None = None

    @property
    def token_ratios(self) -> TokenRatios:
        """The ratios the baseline's replays counted with."""
        return self.tokens if self.tokens is not None else TokenRatios.uniform(self.bytes_per_token)


_TOP_REQUIRED = ("format", "format_version", "ctxbench_version", "suite", "seed", "bytes_per_token",
                 "traces_digest", "reference", "strategies")
_TOP_OPTIONAL = ("compiled_kernels", "latency_settings", "tolerances", "token_ratios")
_SUITE_KEYS = tuple(f for f in Suite.__dataclass_fields__ if f != "policies")   # policies: only when it has some
_CELL_KEYS = ("pure", "sessions", "accesses", "metrics", "latency", "log_hashes")
_LATENCY_KEYS = ("ratio", "spread", "states", "repeats")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_LOG_HASH = re.compile(r"[0-9a-f]{16}")
_SESSION_KEY = re.compile(r"[^/]+/.+")


def parse_tolerances(obj: Any, where: str | _Reader, path: tuple = ()) -> dict[str, Tolerance]:
    """Tolerances per metric from a baseline file; metrics it omits get `DEFAULT_TOLERANCES`."""
    r = where if isinstance(where, _Reader) else _Reader(where)
    r.object(obj, path, optional=METRICS, noun="known metric")
    out = {m: Tolerance.parse(v, r, path + (m,)) for m, v in DEFAULT_TOLERANCES.items()}
    out.update({m: Tolerance.parse(v, r, path + (m,)) for m, v in obj.items()})
    return out


def _read_json(p: Path) -> Any:
    """The JSON value of file ``p``; anything unreadable raises `InputError` naming it."""
    try:
        if not stat.S_ISREG(p.stat().st_mode):
            raise InputError(f"baseline {p}: not a regular file")
        with open(p, "rb") as fh:
            data = fh.read(MAX_BASELINE_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"baseline {p} not found; create it with: ctxbench regress --update --baseline {p}") \
            from None
    except OSError as exc:
        raise InputError(f"baseline {p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BASELINE_BYTES:
        raise InputError(f"baseline {p}: larger than {MAX_BASELINE_BYTES // 2**20} MiB, too large to be a baseline")
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_JsonObject.from_pairs)
    except UnicodeDecodeError as exc:
        raise InputError(f"baseline {p}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"baseline {p}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") \
            from None
    except RecursionError:
        raise InputError(f"baseline {p}: nested too deeply to be a baseline") from None
    except ValueError as exc:  # an integer with more digits than Python converts
        raise InputError(f"baseline {p}: not valid JSON: {str(exc).splitlines()[0]}") from None


def load_baseline(path: str | Path) -> Baseline:
    """Read and check a baseline file; anything wrong raises `InputError` naming file and JSON path."""
    p = Path(path)
    return parse_baseline(_read_json(p), f"baseline {p}")


def parse_baseline(doc: Any, where: str) -> Baseline:
    """Check a parsed baseline document against the format, every key and value of it (see `run_regress`)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = "" if isinstance(doc, dict) else f"; got {_show(doc)}"
        raise InputError(f"{where}: not a ctxbench regress baseline (expected an object with "
                         f"\"format\": \"{FORMAT}\"{got})")
    version = doc.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise InputError(f"{where}: format_version {_show(version)} is not supported "
                         f"(this ctxbench reads {FORMAT_VERSION}); rewrite it with --update")
    r = _Reader(where)
    r.object(doc, (), _TOP_REQUIRED, _TOP_OPTIONAL)
    suite = _parse_suite(r, doc["suite"])
    seed = r.count(doc["seed"], ("seed",))
    if seed != suite["seed"]:
        r.fail(("seed",), f"is {seed}, but suite[\"seed\"] is {suite['seed']}")
    version_text = r.text(doc["ctxbench_version"], ("ctxbench_version",))
    bpt = r.number(doc["bytes_per_token"], ("bytes_per_token",), above=True)
    digest = r.text(doc["traces_digest"], ("traces_digest",), pattern=_DIGEST, what="64 lowercase hex digits")
    reference = r.text(doc["reference"], ("reference",), what="a strategy name")
    kernels_ran = r.flag(doc.get("compiled_kernels"), ("compiled_kernels",), nullable=True)
    tolerances = parse_tolerances(doc.get("tolerances", {}), r, ("tolerances",))
    latency = _parse_latency_settings(r, doc.get("latency_settings", {}))
    budget_keys = [_budget_key(b) for b in suite["budgets_tokens"]]
    strategies: dict[str, dict[str, dict]] = {}
    for spec, entry in r.object(doc["strategies"], ("strategies",)).items():
        path = ("strategies", spec)
        if not (spec.strip() and spec.isprintable() and len(spec) <= MAX_SPEC_CHARS):
            r.fail(path, f"a strategy spec is a non-empty line of printable text (at most {MAX_SPEC_CHARS} "
                         "characters)")
        budgets = r.object(r.object(entry, path, ("budgets",))["budgets"], path + ("budgets",), budget_keys,
                           noun="budget of the suite")
        strategies[spec] = {key: _parse_cell(r, cell, path + ("budgets", key)) for key, cell in budgets.items()}
    tokens = _parse_token_ratios(r, doc["token_ratios"]) if "token_ratios" in doc else None
    if tokens is not None and tokens.reference != bpt:
        r.fail(("bytes_per_token",), f"is {bpt:g}, but token_ratios[\"code\"] (the budget's unit) is "
                                     f"{tokens.reference:g}")
    return Baseline(suite, digest, bpt, version_text, tolerances, latency, strategies, kernels_ran, reference,
                    tokens)


def _parse_token_ratios(r: "_Reader", value: Any) -> TokenRatios:
    ratios = r.object(value, ("token_ratios",), KINDS, noun="content kind")
    return TokenRatios({kind: r.number(ratios[kind], ("token_ratios", kind), low=MIN_BYTES_PER_TOKEN,
                                       high=MAX_BYTES_PER_TOKEN) for kind in KINDS})


def _parse_suite(r: _Reader, value: Any) -> dict:
    path = ("suite",)
    suite = r.object(value, path, _SUITE_KEYS, ("policies",))
    for i, spec in enumerate(r.array(suite.get("policies", [""]), path + ("policies",))):
        if "policies" in suite:
            r.text(spec, path + ("policies", i), what="a policy spec")
    r.text(suite["name"], path + ("name",), what="a suite name")
    r.text(suite["description"], path + ("description",), what="a line of text", empty=True)
    r.count(suite["seed"], path + ("seed",))
    for i, pair in enumerate(r.array(suite["presets"], path + ("presets",))):
        if not isinstance(pair, list) or len(pair) != 2:
            r.fail(path + ("presets", i), f"expected [preset, sessions], got {_show(pair)}")
        r.text(pair[0], path + ("presets", i, 0), what="a preset name")
        r.count(pair[1], path + ("presets", i, 1), low=1)
    seen: set[int] = set()
    for i, budget in enumerate(r.array(suite["budgets_tokens"], path + ("budgets_tokens",))):
        if r.count(budget, path + ("budgets_tokens", i), low=1) in seen:
            r.fail(path + ("budgets_tokens", i), f"budget {budget} appears twice")
        seen.add(budget)
    for preset, knobs in r.object(suite["overrides"], path + ("overrides",)).items():
        for knob, knob_value in r.object(knobs, path + ("overrides", preset)).items():
            r.scalar(knob_value, path + ("overrides", preset, knob))
    return suite


def _parse_cell(r: _Reader, value: Any, path: tuple) -> dict:
    cell = r.object(value, path, _CELL_KEYS)
    r.flag(cell["pure"], path + ("pure",))
    sessions = r.count(cell["sessions"], path + ("sessions",))
    r.count(cell["accesses"], path + ("accesses",))
    mpath = path + ("metrics",)
    metrics = r.object(cell["metrics"], mpath, METRICS, noun="known metric")
    for m in GATED_METRICS:
        if m in COUNT_METRICS:
            r.count(metrics[m], mpath + (m,))
        else:
            r.number(metrics[m], mpath + (m,), high=1.0 if m.endswith("_rate") else None)
    if metrics[LATENCY_METRIC] is not None:
        r.number(metrics[LATENCY_METRIC], mpath + (LATENCY_METRIC,), above=True)
    lpath = path + ("latency",)
    latency = r.object(cell["latency"], lpath)
    if "error" in latency:
        r.text(r.object(latency, lpath, ("error",))["error"], lpath + ("error",), what="a line of text")
    else:
        r.object(latency, lpath, _LATENCY_KEYS)
        r.number(latency["ratio"], lpath + ("ratio",))
        r.number(latency["spread"], lpath + ("spread",))
        r.count(latency["states"], lpath + ("states",))
        r.count(latency["repeats"], lpath + ("repeats",))
    hpath = path + ("log_hashes",)
    hashes = r.object(cell["log_hashes"], hpath)
    for key, digest in hashes.items():
        r.text(key, hpath + (key,), pattern=_SESSION_KEY, what="a key of the form trace/session")
        r.text(digest, hpath + (key,), pattern=_LOG_HASH, what="16 lowercase hex digits")
    if len(hashes) != sessions:
        r.fail(hpath, f"holds {len(hashes)} session hashes, but \"sessions\" is {sessions}")
    return cell


def _parse_latency_settings(r: _Reader, value: Any) -> LatencySettings:
    path = ("latency_settings",)
    fields = tuple(LatencySettings.__dataclass_fields__)
    settings = r.object(value, path, optional=fields, noun="known latency setting")
    return LatencySettings(**{key: r.count(v, path + (key,), low=1, high=MAX_LATENCY_SETTING)
                              for key, v in settings.items()})


def _baseline_document(suite: Suite, digest: str, tokens: TokenRatios, tolerances: dict[str, Tolerance],
                       latency: LatencySettings, strategies: dict[str, dict[str, dict]]) -> dict:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "ctxbench_version": ctxbench_version(),
        "suite": suite.to_dict(),
        "seed": suite.seed,
        "bytes_per_token": tokens.reference,
        "token_ratios": tokens.to_dict(),
        "traces_digest": digest,
        "reference": REFERENCE,
        "compiled_kernels": kernels.ENABLED,
        "latency_settings": asdict(latency),
        "tolerances": {m: t.to_dict() for m, t in tolerances.items()},
        "strategies": strategies,
    }


def _check_new_baseline(path: Path, doc: dict) -> None:
    """What --update writes must read back: the same checks as any baseline, before the file is touched."""
    parse_baseline(json.loads(json.dumps(doc), object_pairs_hook=_JsonObject.from_pairs), f"new baseline for {path}")


def _write_baseline(path: Path, doc: dict) -> None:
    with output_file(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


# ----- comparison ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """One metric of one (strategy, budget), against the baseline."""

    strategy: str
    budget_tokens: float
    metric: str
    baseline: float | None
    now: float | None
    status: str        # same, within, improved, regressed, not measured, not comparable
    tolerance: str

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"strategy": self.strategy, "budget_tokens": self.budget_tokens, "metric": self.metric,
                "baseline": self.baseline, "now": self.now, "status": self.status, "tolerance": self.tolerance}


@dataclass
class RegressReport:
    """What one gate run found; `exit_code` is 1 on a regression (unless the baseline was updated)."""

    baseline_path: Path
    suite: Suite
    sessions: int
    checks: list[Check] = field(default_factory=list)
    new: list[str] = field(default_factory=list)          # run, not in the baseline: not gated
    not_run: list[str] = field(default_factory=list)      # in the baseline, not selected
    missing: dict[str, str] = field(default_factory=dict)  # in the baseline, selected, cannot be loaded
    replay: dict[tuple[str, float], tuple[int, int]] = field(default_factory=dict)  # identical, compared
    latency: dict[tuple[str, float], LatencyRatio | str] = field(default_factory=dict)
    latency_settings: LatencySettings = field(default_factory=LatencySettings)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: bool = True
    updated: bool = False
    elapsed_s: float = 0.0

    @property
    def regressions(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if c.status == "regressed"]

    @property
    def improvements(self) -> list[Check]:
        """The checks that got better."""
        return [c for c in self.checks if c.status == "improved"]

    @property
    def exit_code(self) -> int:
        """0, or 1 when a metric regressed or a baselined strategy is missing (and no --update)."""
        return 1 if (self.regressions or self.missing) and not self.updated else 0

    def to_dict(self) -> dict:
        """JSON-ready form of the whole report."""
        return {
            "status": "updated" if self.updated else ("regressed" if self.exit_code else "ok"),
            "exit_code": self.exit_code,
            "baseline": str(self.baseline_path),
            "suite": self.suite.to_dict(),
            "sessions": self.sessions,
            "compared": self.compared,
            "checks": [c.to_dict() for c in self.checks],
            "regressions": [c.to_dict() for c in self.regressions],
            "improvements": [c.to_dict() for c in self.improvements],
            "new_not_gated": self.new,
            "not_run": self.not_run,
            "missing": self.missing,
            "replay": [{"strategy": s, "budget_tokens": b, "identical": i, "compared": n}
                       for (s, b), (i, n) in self.replay.items()],
            "latency": {"reference": REFERENCE, "states": self.latency_settings.states,
                        "repeats": self.latency_settings.repeats,
                        "ratios": [{"strategy": s, "budget_tokens": b,
                                    **(v.to_dict() if isinstance(v, LatencyRatio) else {"error": v})}
                                   for (s, b), v in self.latency.items()]},
            "violations": self.violations[:20],
            "notes": self.notes,
            "updated": self.updated,
            "elapsed_s": round(self.elapsed_s, 3),
        }


def _compare(report: RegressReport, old: Baseline, now: dict[tuple[str, float], dict]) -> None:
    # Latency ratios measured with and without the built-ins' compiled kernels differ several-fold.
    latency_comparable = old.kernels is None or old.kernels == kernels.ENABLED
    if not latency_comparable:
        report.notes.append(
            f"latency not gated: the baseline was measured {'with' if old.kernels else 'without'} the built-in "
            f"strategies' compiled kernels, this run {'has' if kernels.ENABLED else 'lacks'} them "
            "(CTXBENCH_PURE_PYTHON, or a build without a C compiler); re-record with --update to gate it here")
    for (strategy, budget), cell in now.items():
        base = old.strategies.get(strategy, {}).get(_budget_key(budget))
        if base is None:
            continue
        for metric in METRICS:
            tol = old.tolerances[metric]
            b, n = base["metrics"].get(metric), cell["metrics"].get(metric)
            if b is None or n is None:
                status = "not measured"
            elif metric == LATENCY_METRIC and not latency_comparable:
                status = "not comparable"
            else:
                status = tol.judge(b, n)
            report.checks.append(Check(strategy, budget, metric, b, n, status, tol.describe()))
        old_hashes = base["log_hashes"]
        shared = [k for k in cell["log_hashes"] if k in old_hashes]
        same = sum(cell["log_hashes"][k] == old_hashes[k] for k in shared)
        report.replay[(strategy, budget)] = (same, len(shared))


def _default_strategies(old: Baseline | None) -> list[str]:
    """Every built-in strategy, the context policies (and compacted strategies) of the default suite, and the
    strategies of the baseline."""
    names = builtin_names() + list(SUITES["default"].policies)
    return names + [s for s in (old.strategies if old else ()) if s not in names]


def shipped_spec(spec: str) -> bool:
    """Whether ``spec`` names a strategy shipped with ctxbench, its options plain values: safe to build from a file.

    >>> shipped_spec("lru?max_entries=50"), shipped_spec("cmd:touch pwned"), shipped_spec("os:system")
    (True, False, False)
    >>> shipped_spec("claude-code?trigger_tokens=150000"), shipped_spec("lru+compaction")
    (True, True)
    """
    if ":" in spec:  # import paths and loader schemes (cmd:) run code of the spec's choosing
        return False
    combined = split_combination(spec)
    if combined is not None:
        return all(shipped_spec(part) for part in combined)
    try:
        name, options = parse_spec(spec)
    except (StrategyLoadError, ValueError, RecursionError):
        return False
    ours = {shipped for shipped, _, _ in BUILTINS + POLICIES}
    return name in ours and name in builtin_names(kind=None) and all(_plain(v) for v in options.values())


def _plain(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, bool, int))


def _refuse_foreign_strategies(old: Baseline, path: Path) -> None:
    """A baseline selects only ctxbench's own strategies by itself; any other must come from the command line."""
    foreign = [spec for spec in old.strategies if not shipped_spec(spec)]
    if foreign:
        named = _names([json_path(("strategies", spec)) for spec in foreign], limit=3)
        what = "not ctxbench built-ins" if len(foreign) > 1 else "not a ctxbench built-in"
        raise InputError(f"baseline {path}: {named}: {what}, and a baseline never loads code by itself; name them "
                         "with --strategy to gate them, or remove them from the baseline")


def _check_sessions(old: Baseline, path: Path, suite: Suite, sessions: Sequence[SessionTrace]) -> None:
    """Every cell of the baseline hashes exactly the suite's sessions."""
    expected = {f"{st.trace}/{st.session}" for st in sessions}
    r = _Reader(f"baseline {path}")
    for spec, cells in old.strategies.items():
        for key, cell in cells.items():
            where = ("strategies", spec, "budgets", key, "log_hashes")
            for session in cell["log_hashes"]:
                if session not in expected:
                    r.fail(where + (session,), f"not a session of suite {suite.name!r}")
            missing = sorted(expected - set(cell["log_hashes"]))
            if missing:
                r.fail(where, f"missing session {json.dumps(missing[0])} of suite {suite.name!r}")


def _resolve_suite(suite: Suite | str | None, old: Baseline | None, path: Path) -> Suite:
    if isinstance(suite, Suite):
        return suite
    if suite is not None:
        return get_suite(suite)
    if old is not None:
        name = old.suite["name"]
        if name not in SUITES:
            raise InputError(f"baseline {path}: suite[\"name\"]: unknown suite {name!r}; "
                             f"known: {', '.join(sorted(SUITES))}")
        return SUITES[name]
    return get_suite(DEFAULT_SUITE)


def _ratios_text(tokens: TokenRatios) -> str:
    if tokens.is_uniform:
        return f"{tokens.reference:g}"
    return "(" + ", ".join(f"{k} {v:g}" for k, v in tokens.ratios.items()) + ")"


def _definition_problem(old: Baseline, suite: Suite, tokens: TokenRatios) -> str | None:
    now = suite.to_dict()
    differs = sorted(k for k in set(now) | set(old.suite) if old.suite.get(k) != now.get(k))
    if differs:
        return (f"was made for suite {old.suite.get('name')!r} with a different definition than suite "
                f"{suite.name!r} (differs in: {', '.join(differs)})")
    if old.token_ratios != tokens:
        return (f"was made at {_ratios_text(old.token_ratios)} bytes per token, this run counts "
                f"{_ratios_text(tokens)}")
    if old.reference != REFERENCE:
        return f"timed latency against {old.reference!r}, this ctxbench against {REFERENCE!r}"
    return None


def run_regress(baseline: str | Path = DEFAULT_BASELINE, *, suite: Suite | str | None = None,
                strategies: Sequence[str] | None = None, update: bool = False, allow_violations: bool = False,
                workers: int | None = None,
                latency: LatencySettings | None = None, clock: Callable[[], int] = perf_counter_ns,
                progress: bool | None = None, evict_timeout_ms: int | None = None) -> RegressReport:
    """Replay the suite and compare each (strategy, budget) with the baseline file.

    ``suite`` defaults to the baseline's suite (else `DEFAULT_SUITE`); ``strategies`` to every
    built-in plus every strategy of the baseline, which must then be built-ins (`shipped_spec`:
    a baseline never makes ctxbench load code; import paths, entry points and ``cmd:`` specs run
    only when ``strategies`` names them). A strategy run but not in the baseline is reported as
    new and not gated; one in the baseline but not selected as not run; one in the baseline,
    selected by default, that cannot be built fails the gate. With ``update`` the baseline is
    rewritten atomically (strategies not run keep their entries when the suite is unchanged) and
    nothing fails. ``evict_timeout_ms`` limits each call into an in-process
    strategy, in the replay and in the latency measurement (`strategies.calls`).

    The baseline file is JSON: ``format``, ``format_version``, ``ctxbench_version``, ``suite``
    (`Suite.to_dict`), ``seed``, ``bytes_per_token``, ``traces_digest`` (SHA-256 of the
    generated traces, so a changed generator is caught rather than reported as a regression),
    ``reference`` (the latency reference strategy), ``compiled_kernels`` (whether the built-ins ran
    their compiled kernels; latency is not gated across a difference), ``latency_settings`` (`LatencySettings`;
    ``latency`` defaults to them, so ratios are compared as they were measured), ``tolerances``
    (metric -> ``{"rel", "abs"}`` or ``{"factor"}``, see `Tolerance`; edit them by hand,
    ``--update`` keeps them) and ``strategies``: spec -> ``{"budgets": {tokens: {"pure",
    "sessions", "accesses", "metrics", "latency", "log_hashes"}}}``, every budget of the suite
    under every strategy. `parse_baseline` checks every key and value before anything runs.

    A missing or invalid baseline, an unknown suite or strategy, a strategy only the baseline
    names that is not a built-in, or a baseline made for another suite definition, other traces
    or another latency reference raise `InputError` (exit 2); ``update`` accepts the last three
    (the file is replaced whole) and refuses the others, leaving the file as it was.
    """
    started = time.perf_counter()
    path = Path(baseline)
    old = load_baseline(path) if path.exists() or not update else None
    explicit = strategies is not None
    if old is not None and not explicit:
        _refuse_foreign_strategies(old, path)
    suite_obj = _resolve_suite(suite, old, path)
    tokens = DEFAULT_TOKENS   # what this ctxbench counts with: a baseline made otherwise is re-made
    if latency is None:
        latency = old.latency if old is not None else LatencySettings()
    report = RegressReport(path, suite_obj, 0, latency_settings=latency, updated=update)
    comparable = old is not None and _same_definition(report, old, tokens)
    runnable = _runnable(report, old, strategies)

    sessions = as_sessions(build_suite(suite_obj))
    report.sessions = len(sessions)
    digest = traces_digest(sessions)
    comparable = comparable and _same_traces(report, old, digest)
    if comparable:
        _check_sessions(old, path, suite_obj, sessions)
    report.compared = comparable

    now = _measure(report, sessions, runnable, tokens, workers=workers, clock=clock, progress=progress,
                   evict_timeout_ms=evict_timeout_ms)
    if comparable:
        _compare(report, old, now)
        report.new = [s for s in runnable if s not in old.strategies]
        report.not_run = [s for s in old.strategies if s not in runnable and s not in report.missing]
    else:
        report.new = list(runnable)
    _refuse_ended_processes(report)
    if comparable:
        _note_baselined_violations(report, old)
    if update:
        _refuse_violations(report, allow_violations)
        _update_baseline(report, old, now, digest, tokens)
    report.elapsed_s = time.perf_counter() - started
    return report


def _same_definition(report: RegressReport, old: Baseline, tokens: TokenRatios) -> bool:
    """Whether ``old`` was made for this suite definition (else, with --update, a note; without, `InputError`)."""
    problem = _definition_problem(old, report.suite, tokens)
    if problem and not report.updated:
        raise InputError(f"baseline {report.baseline_path} {problem}; pass the matching --suite, or re-baseline "
                         "with --update")
    if problem:
        report.notes.append(f"the old baseline {problem}; it is replaced whole")
        return False
    if old.ctxbench_version != ctxbench_version():
        report.notes.append(f"baseline made with ctxbench {old.ctxbench_version}, running {ctxbench_version()}")
    return True


def _runnable(report: RegressReport, old: Baseline | None, strategies: Sequence[str] | None) -> list[str]:
    """The selected strategies that can be built; a baselined one selected by default that cannot is missing."""
    explicit = strategies is not None
    specs = list(dict.fromkeys(strategies)) if explicit else _default_strategies(old)
    if not specs:
        raise InputError("no strategy to run")
    runnable = []
    for spec in specs:
        try:
            check_loads(spec)   # code ctxbench does not ship is built in a process of its own
            runnable.append(spec)
        except BAD_INPUT_ERRORS as exc:
            if explicit or old is None or spec not in old.strategies:
                raise
            report.missing[spec] = str(exc)
    return runnable


def _same_traces(report: RegressReport, old: Baseline, digest: str) -> bool:
    """Whether ``old`` was made from these traces (else, with --update, a note; without, `InputError`)."""
    if old.traces_digest == digest:
        return True
    problem = (f"was made from other traces of suite {report.suite.name!r} (the trace generator or its "
               f"dependencies changed: traces digest {old.traces_digest[:12]} != {digest[:12]})")
    if not report.updated:
        raise InputError(f"baseline {report.baseline_path} {problem}; review and re-baseline with --update")
    report.notes.append(f"the old baseline {problem}; it is replaced whole")
    return False


def _measure(report: RegressReport, sessions: Sequence[SessionTrace], runnable: list[str], tokens: TokenRatios,
             **options) -> dict[tuple[str, float], dict]:
    """Replay the suite (violations counted) and time each strategy: `summarise_suite`'s cells with their latency."""
    budgets = report.suite.budgets_tokens
    timeout = options["evict_timeout_ms"]
    grid = run_grid(sessions, runnable, budgets, bytes_per_token=tokens, strict=False,
                    workers=options["workers"], progress=options["progress"], keep_turns=False,
                    evict_timeout_ms=timeout)
    report.violations = grid.violations
    now = summarise_suite(grid.results, tokens.reference)
    report.latency = measure_latency(sessions, runnable, budgets, report.latency_settings,
                                     bytes_per_token=tokens, clock=options["clock"],
                                     evict_timeout_ms=timeout)
    for key, cell in now.items():
        measured = report.latency.get(key)
        # Rounded, and never to 0: a baseline's ratios are positive.
        cell["metrics"][LATENCY_METRIC] = max(round(measured.ratio, 3), 0.001) \
            if isinstance(measured, LatencyRatio) else None
        cell["latency"] = measured.to_dict() if isinstance(measured, LatencyRatio) else {"error": measured}
    return now


def _refuse_ended_processes(report: RegressReport) -> None:
    """A strategy that ended the process measuring its latency: a `ContractViolation` (exit 2, nothing written),
    unless this gate run fails on one of its metrics (exit 1, the report naming it)."""
    regressed = set() if report.updated else {c.strategy for c in report.regressions}
    for (spec, _), measured in report.latency.items():
        if isinstance(measured, EndedNote) and spec not in regressed:
            prefix = f"strategy {spec!r}, "
            first = next((v for v in report.violations if v.startswith(prefix)), None)
            replay = f"; in its replay, {first[len(prefix):]}" if first else ""
            raise ContractViolation(f"strategy {spec!r}: latency {measured}{replay}")


def _refuse_violations(report: RegressReport, allowed: bool) -> None:
    """A baseline never records a strategy whose calls broke the contract (raised, left, timed out), unless
    ``allowed``: then the violations are its numbers (``violations`` is gated) and the report says so."""
    if not report.violations:
        return
    if not allowed:
        raise InputError(f"--update refuses to record contract violations ({len(report.violations)}; first: "
                         f"{report.violations[0]}): fix the strategy, leave it out of --strategy, or pass "
                         "--allow-violations to record them")
    report.notes.append(f"recorded with {len(report.violations)} contract violations (--allow-violations)")


def _note_baselined_violations(report: RegressReport, old: Baseline) -> None:
    """Say which baselined strategies were recorded with contract violations (the gate holds them to that count)."""
    for spec, entry in old.strategies.items():
        count = sum(cell.get("metrics", {}).get("violations") or 0 for cell in entry.values())
        if count:
            report.notes.append(f"{spec} was baselined with {count:,.0f} contract violations")


def _update_baseline(report: RegressReport, old: Baseline | None, now: dict[tuple[str, float], dict], digest: str,
                     tokens: TokenRatios) -> None:
    """Write this run's numbers as the baseline, with ``old``'s tolerances and its entries of the strategies not run."""
    tolerances = old.tolerances if old is not None else parse_tolerances({}, "defaults")
    entries: dict[str, dict] = {}
    for (strategy, budget), cell in now.items():
        entries.setdefault(strategy, {"budgets": {}})["budgets"][_budget_key(budget)] = cell
    # Strategies not selected this time (only when the old baseline is comparable) keep their numbers;
    # missing ones are dropped.
    entries.update({s: {"budgets": old.strategies[s]} for s in report.not_run})
    if report.missing:
        report.notes.append(f"dropped from the baseline (cannot be loaded): {', '.join(report.missing)}")
    doc = _baseline_document(report.suite, digest, tokens, tolerances, report.latency_settings, entries)
    _check_new_baseline(report.baseline_path, doc)
    _write_baseline(report.baseline_path, doc)
