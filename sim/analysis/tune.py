"""Fit a strategy's or policy's declared options to sessions, judged on sessions the fit did not see (docs/design.md §9).

The search is non-adaptive: the settings to try (a grid for one or two options, a seeded Latin
hypercube beyond that) depend on the declared ranges and the seed alone, never on the results.
So every setting is replayed once on every session (`run_grid`, each session resolved once and
shared), and each fold's search is a choice among those rows made from its training sessions
only: the same replays serve every fold and the final fit.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.schedule_bound import objective_optimum
from ctxbench.sim.analysis.grid import as_sessions, run_grid
from ctxbench.sim.analysis.metrics import bootstrap_ci, exact_means
from ctxbench.sim.analysis.prices import Price, dollars
from ctxbench.sim.analysis.ranking import PRICED_COLUMNS
from ctxbench.sim.engine.measures import CACHE_TTL_MS, METRICS
from ctxbench.sim.engine.replay import budget_for_tokens
from ctxbench.sim.errors import InputError
from ctxbench.strategies.errors import StrategyInputError, StrategyLoadError
from ctxbench.strategies.external import stop_all as stop_external_strategies
from ctxbench.strategies.isolation import ending, in_child, in_worker, loads_code, send_failure
from ctxbench.strategies.registry import make, parse_spec, split_combination
from ctxbench.strategies.tunable import Tunable, as_data, read_declaration
from ctxbench.traces.tokens import TokenRatios, as_ratios

__all__ = ["MAX_TRIALS", "GRID_UP_TO", "WEAK_BELOW", "DEFAULT_FOLDS", "DEFAULT_TRIALS", "DEFAULT_OBJECTIVE",
           "SearchParam", "Objective", "Constraint", "Choice", "TuneResult", "declared_options", "search_space",
           "settings_to_try", "with_options", "parse_objective", "parse_constraint", "session_folds", "choose",
           "window_tokens", "tune", "SAMPLERS", "sampler_for"]

#: The most settings one search may replay.
MAX_TRIALS = 10_000
#: Up to this many options are searched on a grid; more, by the seeded sampler.
GRID_UP_TO = 2
#: Fewer sessions than this make the held-out estimate weak (it is said so).
WEAK_BELOW = 10
DEFAULT_FOLDS = 5
DEFAULT_TRIALS = 64
DEFAULT_OBJECTIVE = "cost_tokens"

#: What an objective or a constraint may name: the deterministic metrics of a replay (and ``cost_usd`` with a price).
_NUMERIC = tuple(m.name for m in METRICS if not m.timed and m.name != "feasible")
_TIMED = tuple(m.name for m in METRICS if m.timed)


# ----- the options searched -------------------------------------------------------------------------------

def window_tokens(budget_tokens: float, tokens: "float | TokenRatios | None" = None) -> int:
    """The window in tokens of a budget, as a policy sees it (`Window.max_tokens`)."""
    ratios = as_ratios(tokens)
    return round(budget_for_tokens(budget_tokens, ratios).max_bytes / ratios.reference)


def _combination_text(spec: str) -> tuple[str, str] | None:
    """A ``STRATEGY+POLICY`` spec's two parts as written (``compaction`` kept), else None."""
    if split_combination(spec) is None:
        return None
    left, _, right = spec.strip().rpartition("+")
    return left, right


def _declaration_main(spec: str, send) -> None:
    in_worker(stop_external_strategies)
    try:
        send.send(as_data(getattr(type(make(spec)), "TUNABLE", None), spec))
    except BaseException as exc:
        send_failure(send, exc)
    finally:
        send.close()


def _declared(spec: str) -> dict[str, Tunable]:
    """The ``TUNABLE`` declaration of what one spec (not a combination) builds, read as data: in a process of
    its own for code ctxbench does not ship."""
    if spec.strip().startswith("cmd:"):
        return {}
    if loads_code(spec):
        got, status = in_child(_declaration_main, spec)
        if not got:
            raise StrategyLoadError(f"cannot build strategy {spec!r}: loading it ended the process ({ending(status)})")
        data = got[0]
    else:
        data = as_data(getattr(type(make(spec)), "TUNABLE", None), spec)
    return read_declaration(data, spec)


def declared_options(spec: str) -> dict[str, tuple[Tunable, int]]:
    """Each option ``spec`` declares tunable, with the part of the spec it belongs to (0, or for
    ``STRATEGY+POLICY`` 0 the strategy's and 1 the policy's options that its managed compaction reads)."""
    parts = _combination_text(spec)
    if parts is None:
        return {name: (t, 0) for name, t in _declared(spec).items()}
    out: dict[str, tuple[Tunable, int]] = {name: (t, 0) for name, t in _declared(parts[0]).items()}
    for name, t in _declared(split_combination(spec)[1]).items():
        if not t.managed:
            continue
        if name in out:
            raise InputError(f"{spec}: both parts declare a tunable option {name!r}; tune each part on its own")
        out[name] = (t, 1)
    return out


@dataclass(frozen=True)
class SearchParam:
    """One option to search: its declaration, the part of the spec it sets, and the range searched (in its units)."""

    tunable: Tunable
    part: int
    low: float
    high: float
    step: float | None = None

    @property
    def name(self) -> str:
        return self.tunable.name

    @property
    def log(self) -> bool:
        """Searched logarithmically: declared so, and the range starts above 0."""
        return self.tunable.log and self.low > 0 and self.step is None

    def value(self, x: float) -> int | float:
        """The option's value nearest ``x`` that the search may take (a whole number, on the step, in range)."""
        if self.step is not None:
            x = self.low + round((x - self.low) / self.step) * self.step
        x = min(max(x, self.low), self.high)
        if self.tunable.type == "int":
            return int(round(x))
        return min(max(float(f"{x:.4g}"), self.low), self.high)

    def from_unit(self, u: float) -> int | float:
        """The value at ``u`` in [0, 1] along the range (logarithmic when `log`)."""
        if self.log:
            return self.value(math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low))))
        return self.value(self.low + u * (self.high - self.low))

    def grid(self, points: int) -> list[int | float]:
        """The values of a grid along the range: every step, or ``points`` spread evenly (every whole number
        when the range holds no more)."""
        if self.step is not None:
            count = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
            return sorted({self.value(self.low + i * self.step) for i in range(count)})
        if self.tunable.type == "int" and self.high - self.low + 1 <= points:
            return list(range(int(self.low), int(self.high) + 1))
        return sorted({self.from_unit(u) for u in np.linspace(0.0, 1.0, max(points, 2))})

    def describe(self) -> str:
        step = f" step {self.step:g}" if self.step is not None else (" (log)" if self.log else "")
        return f"{self.name} {self.low:g}..{self.high:g}{step}"


_PARAM = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:=(?P<range>.*))?$")


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{what}: {text!r} is not a finite number")
    return value


def _parse_param(text: str, declared: Mapping[str, tuple[Tunable, int]], spec: str, window: int) -> SearchParam:
    """``NAME`` (its declared search range) or ``NAME=LOW:HIGH[:STEP]``, checked against the declaration."""
    match = _PARAM.match(text.strip())
    if match is None:
        raise InputError(f"--param {text!r}: expected NAME=LOW:HIGH[:STEP] or NAME")
    name = match["name"]
    if name not in declared:
        known = ", ".join(declared) or "none"
        raise InputError(f"--param {text}: {spec} has no tunable option {name!r}; it declares: {known}")
    tunable, part = declared[name]
    if match["range"] is None:
        low, high = tunable.search
        if tunable.window:
            low, high = low * window, high * window
        if tunable.type == "int":
            low, high = math.ceil(low - 1e-9), math.floor(high + 1e-9)
        return SearchParam(tunable, part, max(low, tunable.low), min(high, tunable.high))
    pieces = match["range"].split(":")
    if len(pieces) not in (2, 3):
        raise InputError(f"--param {text}: expected {name}=LOW:HIGH or {name}=LOW:HIGH:STEP")
    low, high = (_number(p, f"--param {text}") for p in pieces[:2])
    step = _number(pieces[2], f"--param {text}") if len(pieces) == 3 else None
    if tunable.type == "int":
        for value in (low, high) + (() if step is None else (step,)):
            if not float(value).is_integer():
                raise InputError(f"--param {text}: {name} is an integer option; {value:g} is not a whole number")
    for value in (low, high):
        shown = int(value) if tunable.type == "int" else value
        if not tunable.accepts(shown):
            raise InputError(f"--param {text}: {value:g} is outside {name}'s declared range {tunable.range_text()}")
    if tunable.window and high > window:
        raise InputError(f"--param {text}: {high:g} is more than the {window:,}-token window, which bounds {name}")
    if not low < high:
        raise InputError(f"--param {text}: LOW must be below HIGH")
    if step is not None and not 0 < step <= high - low:
        raise InputError(f"--param {text}: STEP must be above 0 and at most HIGH - LOW")
    return SearchParam(tunable, part, low, high, step)


def search_space(spec: str, params: Sequence[str] = (), budget_tokens: float = 200_000,
                 tokens: "float | TokenRatios | None" = None) -> list[SearchParam]:
    """The options to search for ``spec``: those ``params`` name (``NAME`` or ``NAME=LOW:HIGH[:STEP]``), else
    every option it declares, each over its declared search range (one in fractions of the window taken at
    ``budget_tokens``). An unknown option, a range outside the declared one, an option given twice or one the
    spec already sets is `InputError`."""
    declared = declared_options(spec)
    if not declared:
        raise InputError(f"{spec} declares no tunable options (a TUNABLE class attribute; see "
                         "strategies/tunable.py)")
    window = window_tokens(budget_tokens, tokens)
    chosen = [_parse_param(text, declared, spec, window) for text in params] if params else \
        [_parse_param(name, declared, spec, window) for name in declared]
    names = [p.name for p in chosen]
    for name in names:
        if names.count(name) > 1:
            raise InputError(f"--param: {name} is given twice; give each option once")
    set_in_spec = _spec_options(spec)
    for param in chosen:
        if param.name in set_in_spec[param.part]:
            raise InputError(f"--param {param.name}: {spec} already sets it; leave it out of the spec to tune it")
        if not param.low < param.high:
            raise InputError(f"--param {param.name}: its search range is empty at a {window:,}-token window")
    return chosen


def _spec_options(spec: str) -> tuple[dict, dict]:
    parts = _combination_text(spec)
    if parts is None:
        return parse_spec(spec)[1], {}
    return parse_spec(parts[0])[1], parse_spec(parts[1])[1]


#: How settings are picked: a grid or a seeded Latin hypercube; ``auto`` is a grid for up to `GRID_UP_TO` options
#: and the Latin hypercube beyond. Both are non-adaptive (docs/design.md §9 says why).
SAMPLERS = ("auto", "grid", "lhs")


def sampler_for(sampler: str, space: Sequence[SearchParam]) -> str:
    """The sampler ``auto`` stands for with this many options, or ``sampler`` itself (checked)."""
    if sampler not in SAMPLERS:
        raise InputError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    if sampler == "auto":
        return "grid" if len(space) <= GRID_UP_TO else "lhs"
    return sampler


def settings_to_try(space: Sequence[SearchParam], trials: int = DEFAULT_TRIALS,
                    rng: np.random.Generator | None = None, sampler: str = "auto") -> list[dict[str, int | float]]:
    """The settings a non-adaptive search replays, each once: a grid (``trials`` points for one option, about
    ``trials ** (1/d)`` a side for d; every step of a stepped range), or a Latin hypercube of ``trials`` points
    from ``rng``; ``auto`` (`sampler_for`) a grid for up to `GRID_UP_TO` options. More than `MAX_TRIALS` is
    `InputError`."""
    if not 1 <= trials <= MAX_TRIALS:
        raise InputError(f"--trials must be from 1 to {MAX_TRIALS:,}, got {trials}")
    sampler = sampler_for(sampler, space)
    if sampler == "grid":
        side = trials if len(space) == 1 else max(2, int(math.floor(trials ** (1 / len(space)) + 1e-9)))
        most = math.prod(int(math.floor((p.high - p.low) / p.step + 1e-9)) + 1 if p.step is not None else side
                         for p in space)
        if most > MAX_TRIALS:
            raise InputError(f"--param: the grid has {most:,} settings, more than {MAX_TRIALS:,}; take a larger STEP")
        axes = [p.grid(side) for p in space]
        mesh = np.meshgrid(*[np.arange(len(a)) for a in axes], indexing="ij")
        return [{p.name: axes[d][int(i[d])] for d, p in enumerate(space)}
                for i in zip(*(m.ravel() for m in mesh))]
    rng = rng if rng is not None else np.random.default_rng(0)
    units = (rng.permuted(np.tile(np.arange(trials), (len(space), 1)), axis=1).T
             + rng.random((trials, len(space)))) / trials
    seen, out = set(), []
    for row in units:
        setting = {p.name: p.from_unit(float(u)) for p, u in zip(space, row)}
        key = tuple(setting.values())
        if key not in seen:
            seen.add(key)
            out.append(setting)
    return out


def _shown(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _add_options(part: str, options: Mapping[str, int | float]) -> str:
    if not options:
        return part
    text = "&".join(f"{name}={_shown(value)}" for name, value in options.items())
    return f"{part}{'&' if '?' in part else '?'}{text}"


def with_options(spec: str, setting: Mapping[str, int | float], space: Sequence[SearchParam]) -> str:
    """``spec`` with the setting's options added to the part each belongs to: a spec ``ctxbench run --strategy``
    accepts as it is.

    >>> from ctxbench.strategies.tunable import Tunable
    >>> n = SearchParam(Tunable("n", "int", 0, 9, (0, 9)), 0, 0, 9)
    >>> with_options("observation-masking", {"n": 7}, [n])
    'observation-masking?n=7'
    """
    part_of = {p.name: p.part for p in space}
    parts = _combination_text(spec)
    if parts is None:
        return _add_options(spec.strip(), setting)
    left = _add_options(parts[0], {k: v for k, v in setting.items() if part_of[k] == 0})
    right = _add_options(parts[1], {k: v for k, v in setting.items() if part_of[k] == 1})
    return f"{left}+{right}"


# ----- what is minimised, under what constraint ------------------------------------------------------------

def _metric_name(name: str, price: Price | None, what: str) -> str:
    if name == "cost_usd":
        if price is None:
            raise InputError(f"{what}: cost_usd needs --price MODEL to compute")
        return name
    if name in _TIMED:
        raise InputError(f"{what}: {name} is timed (it depends on the machine), so results cannot be compared by it")
    if name not in _NUMERIC:
        raise InputError(f"{what}: the results cannot compute {name!r}; use a metric of the results, such as "
                         "cost_tokens, cost_input_tokens, reread_tokens, input_tokens, compactions or cost_usd "
                         "(with --price)")
    return name


def _priced(name: str) -> bool:
    return name in PRICED_COLUMNS


@dataclass(frozen=True)
class Objective:
    """A weighted sum of metrics, each a mean per session, to minimise; ``text`` as given."""

    text: str
    terms: tuple[tuple[float, str], ...]

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.terms)

    def per_row(self, results: pd.DataFrame) -> np.ndarray:
        """The objective of each results row; NaN where the replay was infeasible (never priced, not counted)."""
        value = np.zeros(len(results))
        for weight, name in self.terms:
            value = value + weight * results[name].to_numpy(dtype=float)
        return np.where(results["feasible"].to_numpy(dtype=bool), value, np.nan)


_TERM = re.compile(r"^\s*(?:(?P<weight>[0-9.eE+-]+)\s*\*\s*)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*$")


def parse_objective(text: str, price: Price | None = None) -> Objective:
    """``METRIC`` or a weighted sum ``METRIC + W*METRIC ...`` (weights positive), each metric one the
    results compute (`InputError` otherwise).

    >>> parse_objective("cost_tokens + 20*reread_tokens").terms
    ((1.0, 'cost_tokens'), (20.0, 'reread_tokens'))
    """
    terms = []
    for piece in re.split(r"(?<![eE])\+", text) if text.strip() else [""]:
        match = _TERM.match(piece)
        if match is None:
            raise InputError(f"--objective {text!r}: expected METRIC or a sum of W*METRIC terms")
        weight = 1.0 if match["weight"] is None else _number(match["weight"], f"--objective {text!r}")
        if not weight > 0:
            raise InputError(f"--objective {text!r}: a weight must be above 0, got {weight:g}")
        name = _metric_name(match["name"], price, f"--objective {text!r}")
        if any(name == seen for _, seen in terms):
            raise InputError(f"--objective {text!r}: {name} appears twice")
        terms.append((weight, name))
    return Objective(text.strip(), tuple(terms))


@dataclass(frozen=True)
class Constraint:
    """``metric op bound``, the metric a mean per session; the bound a number, or ``factor`` times the
    default setting's mean on the same sessions."""

    text: str
    metric: str
    op: str
    bound: float | None = None
    factor: float | None = None

    def holds(self, means: np.ndarray, default_mean: float) -> np.ndarray:
        """Which of ``means`` meet it (a NaN, or a bound that is NaN, never does)."""
        bound = self.bound if self.factor is None else self.factor * default_mean
        compare = operator.le if self.op == "<=" else operator.ge
        with np.errstate(invalid="ignore"):
            return np.asarray(compare(means, bound)) & np.isfinite(means) & bool(np.isfinite(bound))


_CONSTRAINT = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op><=|>=)\s*(?P<bound>.+?)\s*$")
_OF_DEFAULT = re.compile(r"^(?:(?P<factor>[0-9.eE+-]+)\s*\*\s*)?default$")


def parse_constraint(text: str, price: Price | None = None) -> Constraint:
    """``METRIC<=BOUND`` or ``METRIC>=BOUND``, the bound a number, ``default`` or ``X*default``.

    >>> parse_constraint("reread_tokens<=default")
    Constraint(text='reread_tokens<=default', metric='reread_tokens', op='<=', bound=None, factor=1.0)
    """
    match = _CONSTRAINT.match(text)
    if match is None:
        raise InputError(f"--constraint {text!r}: expected METRIC<=BOUND or METRIC>=BOUND (BOUND a number, default "
                         "or X*default)")
    name = _metric_name(match["name"], price, f"--constraint {text!r}")
    of_default = _OF_DEFAULT.match(match["bound"])
    if of_default is not None:
        factor = 1.0 if of_default["factor"] is None else _number(of_default["factor"], f"--constraint {text!r}")
        if not factor > 0:
            raise InputError(f"--constraint {text!r}: the factor of default must be above 0")
        return Constraint(text.strip(), name, match["op"], factor=factor)
    return Constraint(text.strip(), name, match["op"], bound=_number(match["bound"], f"--constraint {text!r}"))


# ----- the split and the choice ------------------------------------------------------------------------------

def session_folds(traces: Sequence[str], folds: int, rng: np.random.Generator) -> np.ndarray:
    """Each session's fold (0..k-1, k = min(folds, sessions)), ``traces`` naming each session's trace: the
    sessions of each trace shuffled by ``rng`` and dealt in turn, carrying on from trace to trace, so every
    fold holds about as many sessions of every trace and all folds about as many sessions."""
    k = max(1, min(folds, len(traces)))
    out = np.empty(len(traces), dtype=np.int64)
    labels = np.asarray(traces, dtype=object)
    dealt = 0
    for label in sorted(set(traces)):
        members = np.flatnonzero(labels == label)
        members = members[rng.permutation(len(members))]
        out[members] = (dealt + np.arange(len(members))) % k
        dealt += len(members)
    return out


@dataclass(frozen=True)
class Choice:
    """The setting chosen on some sessions (``index`` into the trials, None when no setting qualified), its
    mean objective there, and why none qualified."""

    index: int | None
    objective: float
    reason: str = ""


@dataclass(frozen=True)
class _Table:
    """The trials' replays as matrices, trials by sessions (sessions in the order the results list them)."""

    value: np.ndarray        # objective per replay, NaN where infeasible
    feasible: np.ndarray
    metrics: dict[str, np.ndarray]   # each constraint's metric per replay, NaN where priced and infeasible


def choose(table: _Table, sessions: np.ndarray, constraints: Sequence[Constraint], default: int = 0) -> Choice:
    """The trial with the least mean objective over ``sessions`` (a boolean mask) among those feasible on every one
    of them and meeting every constraint there; ties go to the earlier trial (the default setting is trial 0)."""
    qualified, means, reason = _qualified(table, sessions, constraints, default)
    if not qualified.any():
        return Choice(None, math.nan, reason)
    best = int(np.argmin(np.where(qualified, means, np.inf)))
    return Choice(best, float(means[best]))


# ----- the whole of it -------------------------------------------------------------------------------------

@dataclass
class TuneResult:
    """What a search found.

    ``trials``: one row per setting tried (trial 0 the spec as given, the default), its options, its mean
    objective over all sessions (NaN unless feasible on every one), how many sessions it was feasible on,
    its calls over the window, each constraint's metric, and the folds that chose it. ``results``: every
    replay's row (`run_grid`), with ``trial``. ``folds``: per fold its sessions, the setting chosen on its
    training sessions and the held-out means. ``heldout``: per session its fold, the setting its fold chose,
    and the objective of that setting and of the default there. ``chosen`` is the setting chosen on all
    sessions (None when none qualified); ``schedule_optimum`` the least mean objective of the compaction
    schedules it is measured against on the same sessions (`sim.analysis.schedule_bound.objective_optimum`;
    None for a policy outside that family or an objective of other metrics); ``heldout_chosen`` and ``heldout_default`` the pooled held-out
    means per session with 95% bootstrap intervals (``*_ci``), None where a held-out replay was infeasible
    or a fold chose nothing.
    """

    spec: str
    objective: Objective
    constraints: tuple[Constraint, ...]
    space: list[SearchParam]
    sampler: str
    trials: pd.DataFrame
    results: pd.DataFrame
    folds: pd.DataFrame
    heldout: pd.DataFrame
    chosen: str | None
    chosen_index: int | None
    chosen_objective: float
    chosen_reason: str
    heldout_chosen: float | None
    heldout_default: float | None
    heldout_chosen_ci: tuple[float, float] | None
    heldout_default_ci: tuple[float, float] | None
    heldout_difference: float | None
    heldout_difference_ci: tuple[float, float] | None
    sessions: int
    weak: str = ""
    notes: list[str] = field(default_factory=list)
    schedule_optimum: float | None = None

    def to_json(self) -> dict:
        """The result as JSON-ready data (what ``ctxbench tune --json`` prints)."""
        def number(x):
            return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)

        def interval(ci):
            return None if ci is None else [number(ci[0]), number(ci[1])]

        return {"chosen": self.chosen, "objective": self.objective.text,
                "heldout_chosen": number(self.heldout_chosen), "heldout_default": number(self.heldout_default),
                "heldout_chosen_ci": interval(self.heldout_chosen_ci),
                "heldout_default_ci": interval(self.heldout_default_ci),
                "heldout_difference": number(self.heldout_difference),
                "heldout_difference_ci": interval(self.heldout_difference_ci),
                "chosen_objective": number(self.chosen_objective), "chosen_reason": self.chosen_reason or None,
                "default": self.spec, "constraints": [c.text for c in self.constraints],
                "parameters": [p.describe() for p in self.space], "sampler": self.sampler,
                "trials": len(self.trials), "sessions": self.sessions, "folds": len(self.folds),
                "weak": self.weak or None, "notes": self.notes,
                "schedule_optimum": number(self.schedule_optimum),
                "fold_choices": [None if pd.isna(s) else s for s in self.folds["chosen"]]}


def _interval(values: np.ndarray, seed: int) -> tuple[float | None, tuple[float, float] | None]:
    if len(values) == 0 or not np.isfinite(values).all():
        return None, None
    mean, lo, hi = bootstrap_ci(values, seed=seed)
    return mean, (lo, hi)


def _replay(sessions: list, specs: list[str], objective: Objective, constraints: Sequence[Constraint],
            price: Price | None, grid_options: dict) -> tuple[pd.DataFrame, _Table]:
    """Every setting of ``specs`` replayed on every session, in one `run_grid`: its rows (with ``trial``, the
    setting's place in ``specs``) and the same as matrices, settings by sessions (in the order of ``sessions``)."""
    results = run_grid(sessions, specs, **grid_options).results
    if price is not None:
        results["cost_usd"] = dollars(results["cost_input_tokens"], results["summary_output_tokens"], price)
    trial = {s: i for i, s in enumerate(specs)}
    results.insert(0, "trial", results["strategy"].map(trial).astype(np.int64))
    column = {(s.trace, s.session): j for j, s in enumerate(sessions)}
    where = (results["trial"].to_numpy(), np.array([column[key] for key in zip(results["trace"], results["session"])]))

    def matrix(values: np.ndarray, fill=np.nan, dtype=float) -> np.ndarray:
        out = np.full((len(specs), len(sessions)), fill, dtype=dtype)
        out[where] = values
        return out

    feasible = results["feasible"].to_numpy(dtype=bool)
    metrics = {}
    for c in constraints:
        raw = results[c.metric].to_numpy(dtype=float)
        priced = _priced(c.metric) or c.metric == "cost_usd"
        metrics[c.metric] = matrix(np.where(feasible, raw, np.nan) if priced else raw)
    return results, _Table(matrix(objective.per_row(results)), matrix(feasible, False, bool), metrics)


def _mean(values: np.ndarray) -> float:
    """The mean of ``values`` (`exact_means`: the same in any order)."""
    return float(exact_means(np.asarray(values, dtype=float)[None, :])[0])


def _qualified(table: _Table, sessions: np.ndarray, constraints: Sequence[Constraint], default: int = 0
               ) -> tuple[np.ndarray, np.ndarray, str]:
    """Which trials count on ``sessions`` (feasible on each, meeting every constraint), their mean objective there,
    and why none counts."""
    if not sessions.any():
        return np.zeros(len(table.value), dtype=bool), np.full(len(table.value), np.nan), "no sessions to choose on"
    qualified = table.feasible[:, sessions].all(axis=1)
    if not qualified.any():
        return qualified, np.full(len(qualified), np.nan), "no setting is feasible on every one of these sessions"
    reason = ""
    for constraint in constraints:
        means = exact_means(table.metrics[constraint.metric][:, sessions])
        qualified = qualified & constraint.holds(means, float(means[default]))
        if not qualified.any():
            reason = f"no feasible setting meets {constraint.text}"
            break
    return qualified, exact_means(table.value[:, sessions]), reason


def tune(traces, spec: str, params: Sequence[str] = (), *, objective: str | Objective = DEFAULT_OBJECTIVE,
         constraints: Sequence[str | Constraint] = (), budget_tokens: float = 200_000,
         bytes_per_token: "float | TokenRatios | None" = None, cache_ttl_ms: int = CACHE_TTL_MS,
         price: Price | None = None, folds: int = DEFAULT_FOLDS, trials: int = DEFAULT_TRIALS, seed: int = 0,
         sampler: str = "auto", workers: int | None = None, scheduler: str | None = None,
         progress: bool | None = None, evict_timeout_ms: int | None = None,
         max_files: int | None = None) -> TuneResult:
    """Search ``spec``'s declared options on the sessions of ``traces`` and judge the choice on held-out sessions.

    Nested: the sessions are split into ``folds`` folds (`session_folds`, seeded, stratified by trace); for
    each fold a setting is chosen (`choose`) on the other folds' sessions and scored on the fold's own; the
    held-out estimate pools those scores over every session, beside the default setting's on the same
    sessions, with bootstrap intervals (`sim.analysis.metrics.bootstrap_ci`). The setting reported as
    ``chosen`` is then chosen the same way on all sessions; its objective there is in-sample. The settings
    (`settings_to_try`, by ``sampler``) depend on the ranges and the seed alone, so each is replayed once per
    session (`run_grid`: ``workers`` processes or a Dask ``scheduler``) and every fold chooses among those
    replays, seeing only its training sessions' rows; the default (``spec`` as given) is always a candidate.
    ``evict_timeout_ms`` limits each call into the policy and ``max_files`` caps the resident entries, as in
    `run_grid` (a replay of ``chosen`` with the same options gives the same numbers).
    """
    if not isinstance(folds, int) or isinstance(folds, bool) or folds < 2:
        raise InputError(f"--folds must be a whole number of at least 2, got {folds!r}")
    objective = objective if isinstance(objective, Objective) else parse_objective(objective, price)
    constraints = tuple(c if isinstance(c, Constraint) else parse_constraint(c, price) for c in constraints)
    rng = np.random.default_rng(seed)
    space = search_space(spec, params, budget_tokens, bytes_per_token)
    sampler = sampler_for(sampler, space)
    if not 1 <= trials <= MAX_TRIALS:
        raise InputError(f"--trials must be from 1 to {MAX_TRIALS:,}, got {trials}")
    sessions = as_sessions(traces)
    if not sessions:
        raise InputError("no sessions to tune on: the traces are empty")
    default = spec.strip()
    setting_of: dict[str, dict] = {default: {}}
    refused = 0
    for setting in settings_to_try(space, trials, rng, sampler):
        candidate = with_options(spec, setting, space)
        if candidate in setting_of:
            continue
        if not loads_code(candidate):
            try:
                make(candidate)
            except (StrategyInputError, StrategyLoadError):
                refused += 1   # options each in range but not together (keep_first past max_size // 2)
                continue
        setting_of[candidate] = setting
    specs = list(setting_of)
    results, table = _replay(sessions, specs, objective, constraints, price,
                             dict(budgets_tokens=[budget_tokens], bytes_per_token=bytes_per_token, workers=workers,
                                  scheduler=scheduler, progress=progress, keep_turns=False, cache_ttl_ms=cache_ttl_ms,
                                  evict_timeout_ms=evict_timeout_ms, max_files=max_files))
    n = len(sessions)
    fold_of = session_folds([s.trace for s in sessions], folds, rng)
    k = int(fold_of.max()) + 1
    fold_rows, per_session = [], []
    chosen_in: dict[str, list[int]] = {}
    if n >= 2:
        for f in range(k):
            test = fold_of == f
            pick = choose(table, ~test, constraints)   # sees the training sessions' rows only
            chosen = None if pick.index is None else specs[pick.index]
            if chosen is not None:
                chosen_in.setdefault(chosen, []).append(f)
            values = table.value[pick.index, test] if chosen else np.full(int(test.sum()), np.nan)
            defaults = table.value[0, test]
            fold_rows.append({"fold": f, "train_sessions": int((~test).sum()), "test_sessions": int(test.sum()),
                              "chosen": chosen, "train_objective": pick.objective, "reason": pick.reason or None,
                              "heldout_chosen": _mean(values), "heldout_default": _mean(defaults)})
            for j, value, default_value in zip(np.flatnonzero(test), values, defaults):
                row = {"trace": sessions[j].trace, "session": sessions[j].session, "fold": f, "chosen": chosen,
                       "chosen_objective": value,
                       "chosen_feasible": chosen is not None and bool(table.feasible[pick.index, j]),
                       "default_objective": default_value, "default_feasible": bool(table.feasible[0, j])}
                for metric, column in table.metrics.items():
                    row[f"chosen_{metric}"] = column[pick.index, j] if chosen else np.nan
                    row[f"default_{metric}"] = column[0, j]
                per_session.append(row)
    final = choose(table, np.ones(n, dtype=bool), constraints)
    heldout = pd.DataFrame(per_session, columns=["trace", "session", "fold", "chosen", "chosen_objective",
                                                 "chosen_feasible", "default_objective", "default_feasible"]
                           + [f"{who}_{c.metric}" for c in dict((c.metric, c) for c in constraints).values()
                              for who in ("chosen", "default")])
    chosen_values = heldout["chosen_objective"].to_numpy(dtype=float)
    default_values = heldout["default_objective"].to_numpy(dtype=float)
    heldout_chosen, chosen_ci = _interval(chosen_values, seed)
    heldout_default, default_ci = _interval(default_values, seed)
    difference, difference_ci = (_interval(chosen_values - default_values, seed)
                                 if heldout_chosen is not None and heldout_default is not None else (None, None))
    if n < 2:
        weak = "one session: nothing is held out, so there is no held-out estimate"
    elif n < WEAK_BELOW:
        weak = (f"only {n} sessions: each fold is chosen on {n - math.ceil(n / k)} or so and judged on "
                f"{math.ceil(n / k)} or fewer, so the held-out estimate is weak")
    else:
        weak = ""
    notes = []
    if refused:
        notes.append(f"{refused} settings were refused by {spec} (options each in range, not together)")
    chosen_spec = None if final.index is None else specs[final.index]
    if chosen_spec is not None and chosen_spec != default:
        notes.extend(_edges(setting_of[chosen_spec], space))
    optimum = (objective_optimum(sessions, chosen_spec, objective.terms, budget_tokens, bytes_per_token, cache_ttl_ms)
               if chosen_spec is not None else None)
    trials_frame = _trials_frame(specs, [setting_of[s] for s in specs], space, table, results, constraints, chosen_in,
                                 final.index)
    return TuneResult(spec=default, objective=objective, constraints=constraints, space=space, sampler=sampler,
                      trials=trials_frame, results=results, heldout=heldout,
                      folds=pd.DataFrame(fold_rows, columns=["fold", "train_sessions", "test_sessions", "chosen",
                                                             "train_objective", "reason", "heldout_chosen",
                                                             "heldout_default"]),
                      chosen=chosen_spec, chosen_index=final.index, chosen_objective=final.objective,
                      chosen_reason=final.reason, heldout_chosen=heldout_chosen, heldout_default=heldout_default,
                      heldout_chosen_ci=chosen_ci, heldout_default_ci=default_ci,
                      heldout_difference=difference, heldout_difference_ci=difference_ci,
                      sessions=n, weak=weak, notes=notes, schedule_optimum=optimum)


def _edges(setting: Mapping[str, int | float], space: Sequence[SearchParam]) -> list[str]:
    """A note for each chosen value at an end of its searched range that the option's declared range passes."""
    out = []
    for p in space:
        value = setting[p.name]
        for end, which, beyond in ((p.low, "lowest", p.tunable.low), (p.high, "highest", p.tunable.high)):
            if value == p.value(end) and end != beyond:
                out.append(f"the chosen {p.name}={_shown(value)} is the {which} value searched; a wider --param "
                           f"range may do better")
    return out


def _trials_frame(specs: list[str], settings: list[dict], space: Sequence[SearchParam], table: _Table,
                  results: pd.DataFrame, constraints: Sequence[Constraint], chosen_in: dict[str, list[int]],
                  final: int | None) -> pd.DataFrame:
    """One row per setting tried: its options, objective over all sessions and feasibility."""
    over = results.groupby("trial")["over_window_calls"].sum()
    calls = results.groupby("trial")["turns"].sum()
    rows = []
    for i, (spec, setting) in enumerate(zip(specs, settings)):
        all_feasible = bool(table.feasible[i].all())
        row = {"trial": i, "spec": spec, "default": i == 0}
        row.update({p.name: setting.get(p.name, np.nan) for p in space})
        row["objective"] = _mean(table.value[i]) if all_feasible else np.nan
        row["feasible_sessions"] = int(table.feasible[i].sum())
        row["feasible"] = all_feasible
        row["over_window_share"] = float(over.get(i, 0) / calls.get(i, 1)) if calls.get(i, 0) else 0.0
        for c in constraints:
            row[c.metric] = _mean(table.metrics[c.metric][i])
        row["meets_constraints"] = all(
            bool(c.holds(np.array([_mean(table.metrics[c.metric][i])]), _mean(table.metrics[c.metric][0]))[0])
            for c in constraints)
        row["chosen_in_folds"] = ",".join(str(f) for f in chosen_in.get(spec, ()))
        row["chosen"] = i == final
        rows.append(row)
    frame = pd.DataFrame(rows)
    for p in space:
        if p.tunable.type == "int":
            frame[p.name] = frame[p.name].astype("Int64")   # whole numbers, blank for the default
    return frame
