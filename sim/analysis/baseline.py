"""The regression baseline: what it records of a suite (pooled metrics, log hashes, latency), its tolerances, and
its file, read back with every key and value checked."""

from __future__ import annotations

import hashlib
import json
import re
import stat
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctxbench.sim import ctxbench_version
from ctxbench.sim.analysis.json_reader import JsonObject, Reader, shown
from ctxbench.sim.analysis.latency import REFERENCE, LatencySettings
from ctxbench.sim.engine.measures import DEFAULT_BYTES_PER_TOKEN, GATED_METRICS, pool
from ctxbench.sim.engine.measures import METRICS as MEASURES
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN, SessionTrace
from ctxbench.sim.engine.suite import Suite
from ctxbench.sim.errors import InputError
from ctxbench.sim.output import output_file
from ctxbench.strategies import compiled as kernels
from ctxbench.traces.tokens import KINDS, TokenRatios

__all__ = [
    "FORMAT", "FORMAT_VERSION", "LATENCY_METRIC", "METRICS", "DEFAULT_TOLERANCES", "COUNT_METRICS",
    "MAX_BASELINE_BYTES", "MAX_LATENCY_SETTING", "MAX_SPEC_CHARS", "Tolerance", "Baseline", "budget_key",
    "traces_digest", "summarise_suite", "parse_tolerances", "read_json", "load_baseline", "parse_baseline",
    "baseline_document", "check_new_baseline", "write_baseline",
]

FORMAT, FORMAT_VERSION = "ctxbench-regress-baseline", 1

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
MAX_LATENCY_SETTING = 10_000     # states, repeats and sessions per trace of the latency benchmark
MAX_SPEC_CHARS = 1_000


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
    def parse(cls, obj: Any, where: str | Reader, path: tuple = ()) -> "Tolerance":
        """From ``{"rel": r, "abs": a}`` (either may be absent) or ``{"factor": f}``; values finite."""
        r = where if isinstance(where, Reader) else Reader(where)
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

def budget_key(budget: float) -> str:
    """A budget as the baseline file keys it: ``"50000"``, ``"50000.5"``."""
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


def parse_tolerances(obj: Any, where: str | Reader, path: tuple = ()) -> dict[str, Tolerance]:
    """Tolerances per metric from a baseline file; metrics it omits get `DEFAULT_TOLERANCES`."""
    r = where if isinstance(where, Reader) else Reader(where)
    r.object(obj, path, optional=METRICS, noun="known metric")
    out = {m: Tolerance.parse(v, r, path + (m,)) for m, v in DEFAULT_TOLERANCES.items()}
    out.update({m: Tolerance.parse(v, r, path + (m,)) for m, v in obj.items()})
    return out


def read_json(p: Path) -> Any:
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
        return json.loads(data.decode("utf-8"), object_pairs_hook=JsonObject.from_pairs)
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
    return parse_baseline(read_json(p), f"baseline {p}")


def parse_baseline(doc: Any, where: str) -> Baseline:
    """Check a parsed baseline document against the format, every key and value of it (see `run_regress`)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = "" if isinstance(doc, dict) else f"; got {shown(doc)}"
        raise InputError(f"{where}: not a ctxbench regress baseline (expected an object with "
                         f"\"format\": \"{FORMAT}\"{got})")
    version = doc.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise InputError(f"{where}: format_version {shown(version)} is not supported "
                         f"(this ctxbench reads {FORMAT_VERSION}); rewrite it with --update")
    r = Reader(where)
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
    budget_keys = [budget_key(b) for b in suite["budgets_tokens"]]
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


def _parse_token_ratios(r: "Reader", value: Any) -> TokenRatios:
    ratios = r.object(value, ("token_ratios",), KINDS, noun="content kind")
    return TokenRatios({kind: r.number(ratios[kind], ("token_ratios", kind), low=MIN_BYTES_PER_TOKEN,
                                       high=MAX_BYTES_PER_TOKEN) for kind in KINDS})


def _parse_suite(r: Reader, value: Any) -> dict:
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
            r.fail(path + ("presets", i), f"expected [preset, sessions], got {shown(pair)}")
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


def _parse_cell(r: Reader, value: Any, path: tuple) -> dict:
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


def _parse_latency_settings(r: Reader, value: Any) -> LatencySettings:
    path = ("latency_settings",)
    fields = tuple(LatencySettings.__dataclass_fields__)
    settings = r.object(value, path, optional=fields, noun="known latency setting")
    return LatencySettings(**{key: r.count(v, path + (key,), low=1, high=MAX_LATENCY_SETTING)
                              for key, v in settings.items()})


def baseline_document(suite: Suite, digest: str, tokens: TokenRatios, tolerances: dict[str, Tolerance],
                      latency: LatencySettings, strategies: dict[str, dict[str, dict]]) -> dict:
    """The baseline file's document of a run of ``suite``."""
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


def check_new_baseline(path: Path, doc: dict) -> None:
    """What --update writes must read back: the same checks as any baseline, before the file is touched."""
    parse_baseline(json.loads(json.dumps(doc), object_pairs_hook=JsonObject.from_pairs), f"new baseline for {path}")


def write_baseline(path: Path, doc: dict) -> None:
    """Write ``doc`` to ``path`` by the output rule (`sim.output.output_file`)."""
    with output_file(path) as tmp:
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
