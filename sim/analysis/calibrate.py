"""Calibration of bytes per token by content kind on real sessions that record their input tokens."""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.fidelity import summarise_pairs, window_composition
from ctxbench.sim.engine.replay import MAX_BYTES_PER_TOKEN, MIN_BYTES_PER_TOKEN
from ctxbench.sim.errors import InputError
from ctxbench.traces.model_ratios import DEFAULT_FAMILY, FAMILIES, FAMILY_RATIOS, family_ratios, model_family, session_model
from ctxbench.traces.tokens import DEFAULT_TOKENS, KINDS, TokenRatios

__all__ = ["FITTED_KINDS", "PLAUSIBLE", "MIN_SHARE", "RATIOS_FORMAT", "Calibration", "calibrate", "predict",
           "calibrate_families", "session_families", "read_token_ratios", "ratios_document", "BY_KIND", "ONE_RATIO"]

#: The kinds a calibration fits; the overhead is measured in tokens by the import, so its ratio is
#: only the unit its bytes were written in and stays as it is.
FITTED_KINDS = tuple(kind for kind in KINDS if kind != "overhead")
#: Bytes per token a fitted kind may take; a fit outside it is taken as not identifiable.
PLAUSIBLE = (0.3, 12.0)
#: A kind holding less than this share of the windows' content is not fitted.
MIN_SHARE = 0.02
#: The ratios document ``calibrate --out`` writes: ratios by content kind for each model family.
RATIOS_FORMAT = "ctxbench-token-ratios/2"
#: The version before, ratios by kind for every session alike, which ``--token-ratios`` still reads.
RATIOS_FORMAT_1 = "ctxbench-token-ratios/1"
#: How a calibration fits: each content kind its own ratio, or one ratio shared by every kind.
BY_KIND, ONE_RATIO = "by kind", "one ratio"
#: The largest token-ratios file read (one written by ``calibrate --out`` is under 2 KiB).
MAX_RATIOS_BYTES = 1 << 20


@dataclass
class Calibration:
    """A calibration's result: the ratios, which kinds were fitted (the others kept their prior, with
    the reason), each window's fit, and the pooled figures."""

    ratios: TokenRatios
    fitted: tuple[str, ...]
    kept: dict[str, str]
    shares: dict[str, float]
    windows: pd.DataFrame
    pooled: dict[str, float] = field(default_factory=dict)
    held_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    fit: str = BY_KIND
    why: str = ""

    def to_dict(self) -> dict:
        """JSON-ready form (what ``ctxbench calibrate --json`` prints)."""
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.windows.to_dict(orient="records")]
        held = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.held_out.to_dict(orient="records")]
        return {"ratios": self.ratios.to_dict(), "fit": self.fit, "why": self.why, "fitted": list(self.fitted),
                "kept": dict(self.kept), "shares": dict(self.shares), "windows": rows, "pooled": dict(self.pooled),
                "held_out": held}


def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a few columns: the best of the unconstrained fits on
    every subset of columns whose weights are all non-negative."""
    best, best_res = np.zeros(X.shape[1]), float((y ** 2).sum())
    for size in range(1, X.shape[1] + 1):
        for subset in itertools.combinations(range(X.shape[1]), size):
            cols = list(subset)
            w, *_ = np.linalg.lstsq(X[:, cols], y, rcond=None)
            if (w < 0).any():
                continue
            res = float(((X[:, cols] @ w - y) ** 2).sum())
            if res < best_res:
                best, best_res = np.zeros(X.shape[1]), res
                best[cols] = w
    return best


def _compared(trace_df: pd.DataFrame, prior: TokenRatios) -> pd.DataFrame:
    rows = window_composition(trace_df, prior)
    rows = rows[rows["real_tokens"] > 0]
    if rows.empty:
        raise InputError("no recorded input tokens to calibrate on: the logs need a usage per call "
                         "(Claude Code transcripts record it per assistant message)")
    return rows


def predict(rows: pd.DataFrame, ratios: TokenRatios) -> np.ndarray:
    """The simulated tokens of `window_composition` rows under ``ratios`` (overhead and exact counts included)."""
    return (sum(rows[f"bytes_{kind}"].to_numpy(dtype=float) / ratios.ratios[kind] for kind in KINDS)
            + rows["exact_tokens"].to_numpy(dtype=float))


def calibrate(trace_df: pd.DataFrame, prior: TokenRatios | None = None, *, min_share: float = MIN_SHARE,
              fit: str | None = None) -> Calibration:
    """Fit bytes per token of each content kind to the real input tokens of every call of a trace
    imported with its conversation (`window_composition` gives each call's window by kind).

    Model: ``real = overhead + Σ_kind bytes_kind / ratio_kind``, the overhead being what the import
    measured (in tokens) from each window's first call; fitted on the growth from that call within
    each compaction segment, least squares weighted by ``1 / real²`` (relative errors, so a long
    session does not drown a short one), every weight non-negative. A kind absent from the windows,
    holding less than ``min_share`` of their content, or whose fit falls outside `PLAUSIBLE` keeps
    its ``prior`` ratio (default: `traces.tokens.DEFAULT_TOKENS`), and the others are fitted again.
    With several sessions, ``held_out`` gives each session's fit by ratios fitted on the others.

    ``fit`` is `BY_KIND` (each kind its own ratio) or `ONE_RATIO` (one ratio shared by every content
    kind; the overhead's stays the unit). ``None`` chooses: by kind, unless there are several sessions
    and one ratio predicts the sessions left out better (the largest ``|log median sim/real|`` of a
    session left out is smaller); ``why`` says which and why.
    Raises `InputError` when no call has recorded input tokens.
    """
    prior = prior or DEFAULT_TOKENS
    rows = _compared(trace_df, prior)
    if fit is not None:
        result = _fit(rows, prior, min_share, fit)
        result.held_out = _held_out(rows, prior, min_share, fit)
        result.why = f"{fit}, as asked"
        return result
    by_kind = _fit(rows, prior, min_share, BY_KIND)
    by_kind.held_out = _held_out(rows, prior, min_share, BY_KIND)
    by_kind.why = "by kind: one session, nothing to leave out" if by_kind.held_out.empty else ""
    if by_kind.held_out.empty:
        return by_kind
    try:
        one = _fit(rows, prior, min_share, ONE_RATIO)
    except InputError as exc:
        by_kind.why = f"by kind: {exc}"
        return by_kind
    one.held_out = _held_out(rows, prior, min_share, ONE_RATIO)
    worst_kind, worst_one = _worst(by_kind.held_out), _worst(one.held_out)
    figures = (f"the worst session left out is off by {math.expm1(worst_one):+.1%} with one ratio, "
               f"{math.expm1(worst_kind):+.1%} by kind")
    if worst_one < worst_kind:
        one.why = f"one ratio: {figures}"
        return one
    by_kind.why = f"by kind: {figures}"
    return by_kind


def _worst(held_out: pd.DataFrame) -> float:
    """The largest ``|log median sim/real|`` of the sessions left out (inf where one could not be predicted)."""
    medians = pd.to_numeric(held_out["median_ratio"], errors="coerce").to_numpy(dtype=float)
    medians = medians[~np.isnan(medians)]
    return float(np.abs(np.log(medians)).max()) if len(medians) else math.inf


def session_families(trace_df: pd.DataFrame) -> dict[str, str]:
    """Each session's model family (`traces.model_ratios.model_family` of `traces.model_ratios.session_model`),
    `traces.model_ratios.DEFAULT_FAMILY` where the trace names no model."""
    out: dict[str, str] = {}
    sessions = trace_df["session"].astype(str)
    if "model" not in trace_df.columns:
        return dict.fromkeys(dict.fromkeys(sessions), DEFAULT_FAMILY)
    per_turn = trace_df.assign(session=sessions, model=trace_df["model"].astype(str)).drop_duplicates(
        ["session", "turn"])
    for session, part in per_turn.groupby("session", sort=False):
        out[session] = model_family(session_model(part["model"])) or DEFAULT_FAMILY
    return out


def calibrate_families(trace_df: pd.DataFrame, prior: Mapping[str, TokenRatios] | None = None, *,
                       min_share: float = MIN_SHARE, fit: str | None = None
                       ) -> tuple[dict[str, Calibration], dict[str, str]]:
    """`calibrate` for each model family of the trace's sessions (`session_families`), in `FAMILIES` order:
    the fits, and the families that could not be fitted with the reason. Each family's prior is its
    ratios in ``prior`` (default `traces.model_ratios.FAMILY_RATIOS`, or those it falls back to). No
    family fitted is `InputError` (the reason of the first)."""
    families = session_families(trace_df)
    fits: dict[str, Calibration] = {}
    skipped: dict[str, str] = {}
    for family in FAMILIES:
        sessions = [s for s, f in families.items() if f == family]
        if not sessions:
            continue
        part = trace_df[trace_df["session"].astype(str).isin(sessions)]
        try:
            fits[family] = calibrate(part, family_ratios(family, prior)[1], min_share=min_share, fit=fit)
        except InputError as exc:
            skipped[family] = str(exc)
    if not fits:
        raise InputError(next(iter(skipped.values())))
    return fits, skipped


def _held_out(rows: pd.DataFrame, prior: TokenRatios, min_share: float, fit: str) -> pd.DataFrame:
    """Leave-one-session-out: each session's calls predicted by ratios fitted (``fit``) on the other sessions
    (none when there is only one session, or the others cannot be fitted: ``reason`` says why)."""
    sessions = list(dict.fromkeys(rows["session"]))
    out = []
    whole = _fit(rows, prior, min_share, fit) if len(sessions) > 1 else None
    for session in sessions if len(sessions) > 1 else []:
        part = rows[rows["session"] == session]
        real = part["real_tokens"].to_numpy(dtype=float)
        inside = _figures(predict(part, whole.ratios), real)
        try:
            others = _fit(rows[rows["session"] != session], prior, min_share, fit)
        except InputError as exc:
            out.append({"session": session, "calls": len(part), "in_sample_median_ratio": inside["median_ratio"],
                        "in_sample_pearson": inside["pearson"], "reason": str(exc)})
            continue
        left_out = _figures(predict(part, others.ratios), real)
        out.append({"session": session, "calls": left_out["calls"], "median_ratio": left_out["median_ratio"],
                    "pearson": left_out["pearson"], "in_sample_median_ratio": inside["median_ratio"],
                    "in_sample_pearson": inside["pearson"], "reason": ""})
    return pd.DataFrame(out, columns=["session", "calls", "median_ratio", "pearson", "in_sample_median_ratio",
                                      "in_sample_pearson", "reason"])


def _fit(rows: pd.DataFrame, prior: TokenRatios, min_share: float, fit: str = BY_KIND) -> Calibration:
    """`calibrate` on `window_composition` rows that record input tokens, ``fit`` `BY_KIND` or `ONE_RATIO`."""
    real = rows["real_tokens"].to_numpy(dtype=float)
    X = np.stack([rows[f"bytes_{kind}"].to_numpy(dtype=float) for kind in FITTED_KINDS], axis=1)
    # what the overhead and the content counted exactly at import hold is known: the rest is fitted
    y = (real - rows["bytes_overhead"].to_numpy(dtype=float) / prior.ratios["overhead"]
         - rows["exact_tokens"].to_numpy(dtype=float))
    # The import measures each window's start from its first call, so every segment's first call is
    # exact by construction: the fit is on the growth from it (which also keeps a compaction's summary,
    # traded one for one against the context re-attached with it, out of the fit).
    first = rows.groupby(["session", "arm", "segment"], sort=False).cumcount().to_numpy() == 0
    starts = np.flatnonzero(first)
    start_of = starts[np.searchsorted(starts, np.arange(len(rows)), side="right") - 1]
    X, y = (X - X[start_of])[~first], (y - y[start_of])[~first]
    weight = 1.0 / real[~first]
    content = X.sum(axis=0)
    if not len(y):
        raise InputError("no window has two calls with recorded input tokens: nothing to fit the growth on")
    shares = {kind: float(content[j] / content.sum()) if content.sum() else 0.0 for j, kind in enumerate(FITTED_KINDS)}
    if fit == ONE_RATIO:
        return _fit_one(rows, prior, X.sum(axis=1), y, weight, shares, real)
    kept: dict[str, str] = {}
    for j, kind in enumerate(FITTED_KINDS):
        if content[j] == 0:
            kept[kind] = "absent"
        elif shares[kind] < min_share:
            kept[kind] = f"under {min_share:.0%} of the content"
    ratios = dict(prior.ratios)
    while True:
        free = [j for j, kind in enumerate(FITTED_KINDS) if kind not in kept]
        fixed = [j for j in range(len(FITTED_KINDS)) if j not in free]
        target = y - sum((X[:, j] / prior.ratios[FITTED_KINDS[j]] for j in fixed), np.zeros(len(y)))
        weights = _nnls(X[:, free] * weight[:, None], target * weight) if free else np.zeros(0)
        bad = []
        for j, w in zip(free, weights):
            kind = FITTED_KINDS[j]
            if w <= 0:
                bad.append((kind, "not identifiable (its weight is at the bound)"))
            elif not PLAUSIBLE[0] <= 1.0 / w <= PLAUSIBLE[1]:
                bad.append((kind, f"fit {1.0 / w:.3g} outside {PLAUSIBLE[0]:g}-{PLAUSIBLE[1]:g}"))
        if not bad:
            break
        kept.update(bad[:1])   # one at a time: the others may be identifiable once it is fixed
    for j, w in zip(free, weights):
        ratios[FITTED_KINDS[j]] = float(1.0 / w)
    fitted_ratios = TokenRatios(ratios)
    fitted = tuple(FITTED_KINDS[j] for j in free)
    return Calibration(fitted_ratios, fitted, kept, shares, _windows(rows, fitted_ratios),
                       _figures(predict(rows, fitted_ratios), real))


def _fit_one(rows: pd.DataFrame, prior: TokenRatios, content: np.ndarray, y: np.ndarray, weight: np.ndarray,
             shares: dict[str, float], real: np.ndarray) -> Calibration:
    """One ratio for every content kind: the weighted least-squares slope of the growth on all content."""
    x, t = content * weight, y * weight
    w = float(x @ t / (x @ x)) if x @ x > 0 else 0.0
    if w <= 0 or not PLAUSIBLE[0] <= 1.0 / w <= PLAUSIBLE[1]:
        raise InputError("one ratio for every kind cannot be fitted: "
                         + ("the content does not grow with the tokens" if w <= 0 else
                            f"its fit {1.0 / w:.3g} lies outside {PLAUSIBLE[0]:g}-{PLAUSIBLE[1]:g} bytes per token"))
    ratios = TokenRatios({**prior.ratios, **dict.fromkeys(FITTED_KINDS, 1.0 / w)})
    return Calibration(ratios, FITTED_KINDS, {}, shares, _windows(rows, ratios), _figures(predict(rows, ratios), real),
                       fit=ONE_RATIO)


def _figures(sim: np.ndarray, real: np.ndarray) -> dict[str, float]:
    ratio = sim / real
    pairs = summarise_pairs(sim, real)
    return {"calls": int(len(real)), "median_ratio": pairs["median_ratio"],
            "p10_ratio": float(np.quantile(ratio, 0.1)), "p90_ratio": float(np.quantile(ratio, 0.9)),
            "pearson": pairs["pearson"]}


def _windows(rows: pd.DataFrame, ratios: TokenRatios) -> pd.DataFrame:
    """Per (session, arm): its calls, its measured overhead and how well ``ratios`` predict it."""
    out = []
    for (session, arm), part in rows.groupby(["session", "arm"], sort=False):
        overhead = part.loc[part["segment"] == part["segment"].min(), "bytes_overhead"].max()
        out.append({"session": session, "arm": arm,
                    "overhead_tokens": float(overhead / ratios.ratios["overhead"]),
                    **_figures(predict(part, ratios), part["real_tokens"].to_numpy(dtype=float))})
    return pd.DataFrame(out, columns=["session", "arm", "overhead_tokens", "calls", "median_ratio", "p10_ratio",
                                      "p90_ratio", "pearson"])


def ratios_document(fits: Mapping[str, Calibration], sources: list[str]) -> dict:
    """The JSON document ``ctxbench calibrate --out`` writes and ``--token-ratios`` reads: each family's ratios,
    how they were fitted and on what."""
    return {"format": RATIOS_FORMAT, "fitted_on": sources,
            "families": {family: {"ratios": fit.ratios.to_dict(), "fit": fit.fit, "why": fit.why,
                                  "fitted": list(fit.fitted), "kept": dict(fit.kept),
                                  "sessions": list(dict.fromkeys(fit.windows["session"].astype(str))),
                                  "pooled": dict(fit.pooled)}
                         for family, fit in fits.items()}}


def read_token_ratios(path: str | os.PathLike) -> "TokenRatios | dict[str, TokenRatios]":
    """Token ratios from a JSON file: ``ctxbench calibrate --out``'s document (format 2: ratios by family, each
    session counted with its model's family's, a family not named with the built-in ratios; format 1: its
    ``ratios`` for every session), or a plain object of kind -> bytes per token (every session). Kinds not
    named keep their default. An unreadable file, one that is not a regular file or is over
    `MAX_RATIOS_BYTES`, a document of another ``format`` version, an unknown family or kind, or a value that
    is not a number or lies outside 0.001-1,000,000 is `InputError` naming the file and the key."""
    file = Path(path)
    try:
        if not file.is_file():
            raise InputError(f"{file}: cannot read token ratios: not a regular file")
        with open(file, "rb") as fh:
            raw = fh.read(MAX_RATIOS_BYTES + 1)
        if len(raw) > MAX_RATIOS_BYTES:
            raise InputError(f"{file}: a token-ratios file is at most {MAX_RATIOS_BYTES // 1024} KiB; this one is larger")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot read token ratios: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{file}: not a JSON document of token ratios: {exc}") from None
    if isinstance(doc, dict) and "format" in doc and doc["format"] not in (RATIOS_FORMAT, RATIOS_FORMAT_1):
        raise InputError(f"{file}: format {doc['format']!r:.60} is not one this version reads "
                         f"(expected {RATIOS_FORMAT!r} or {RATIOS_FORMAT_1!r})")
    if isinstance(doc, dict) and doc.get("format") == RATIOS_FORMAT:
        families = doc.get("families")
        if not isinstance(families, dict) or not families:
            raise InputError(f"{file}: families: expected an object of model family -> its ratios")
        out = {}
        for family, entry in families.items():
            if family not in FAMILIES:
                raise InputError(f"{file}: families.{family:.40}: unknown model family; known: {', '.join(FAMILIES)}")
            ratios = entry.get("ratios") if isinstance(entry, dict) else None
            out[family] = _kind_ratios(file, ratios, f"families.{family}.ratios.")
        return {**FAMILY_RATIOS, **out}
    if isinstance(doc, dict) and "ratios" in doc:
        return _kind_ratios(file, doc["ratios"], "ratios.")
    return _kind_ratios(file, doc, "")


def _kind_ratios(file: Path, doc: object, prefix: str) -> TokenRatios:
    """``doc`` (kind -> bytes per token, read from ``file`` at ``prefix``) checked, as `TokenRatios`."""
    if not isinstance(doc, dict):
        raise InputError(f"{file}: {prefix or ''}token ratios must be a JSON object of kind -> bytes per token")
    for key, value in doc.items():
        if key not in KINDS:
            raise InputError(f"{file}: {prefix}{key}: unknown content kind {key!r}; known: {', '.join(KINDS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{file}: {prefix}{key}: bytes per token must be a number, got {value!r:.40}")
        if not MIN_BYTES_PER_TOKEN <= value <= MAX_BYTES_PER_TOKEN:
            raise InputError(f"{file}: {prefix}{key}: bytes per token must be between {MIN_BYTES_PER_TOKEN:g} "
                             f"and {MAX_BYTES_PER_TOKEN:,}, got {value!r}")
    return TokenRatios({key: float(value) for key, value in doc.items()})
