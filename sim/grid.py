"""Run (traces × strategies × budgets) in worker processes or on a Dask cluster; tidy results."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.bracket import bracket_results
from sim.claims import ClaimConfig
from sim.errors import InputError
from sim.manager import TURN_FIELDS
from sim.metrics import DEFAULT_BYTES_PER_TOKEN
from sim.replay import (SessionResult, SessionTrace, budget_for_tokens, replay_session, split_sessions,
                        strategy_label)
from strategies.registry import make

__all__ = ["GridResult", "GridTask", "run_grid", "run_task", "resolve_workers", "as_sessions"]


@dataclass(frozen=True)
class GridTask:
    """One session to replay under every (strategy, budget) pair of the grid."""

    index: int
    session: SessionTrace
    strategies: tuple
    budgets_tokens: tuple[float, ...]
    bytes_per_token: float
    strict: bool
    keep_turns: bool
    claims: tuple[ClaimConfig | None, ...] = (None,)
    bracket: bool = False
    max_files: int | None = None
    max_directories: int | None = None
    evict_timeout_ms: int | None = None


@dataclass
class GridResult:
    """The grid's metrics (one row per session × strategy × budget [× claim mode]) and details.

    ``arms`` has one row per arm of multi-arm sessions; ``thrashing`` one row per overwrite of
    another arm's unsaved change; both are empty for single-arm traces.
    """

    results: pd.DataFrame
    turns: pd.DataFrame
    violations: list[str] = field(default_factory=list)
    arms: pd.DataFrame = field(default_factory=pd.DataFrame)
    thrashing: pd.DataFrame = field(default_factory=pd.DataFrame)


def run_task(task: GridTask) -> list[tuple[dict, dict | None, list[str], list[dict], list[dict]]]:
    """Replay one session under each (strategy, budget[, claim mode]); runs in a worker."""
    out = []
    # Claims only matter when several arms share the workspace.
    modes = task.claims if task.session.arms is not None else (None,)
    for budget_tokens in task.budgets_tokens:
        budget = budget_for_tokens(budget_tokens, task.bytes_per_token, task.max_files)
        for spec in task.strategies:
            for claims in modes:
                result = replay_session(task.session, spec, budget, strict=task.strict,
                                        strategy_name=strategy_label(spec), bytes_per_token=task.bytes_per_token,
                                        claims=claims, max_directories=task.max_directories,
                                        evict_timeout_ms=task.evict_timeout_ms)
                out.append(_task_output(task, result, budget_tokens))
        if task.bracket:
            for claims in modes:
                lower, upper = bracket_results(task.session, budget, claims=claims,
                                               bytes_per_token=task.bytes_per_token)
                out.append(({**lower, "budget_tokens": budget_tokens, "task": task.index}, None, [], [], []))
                out.append(_task_output(task, upper, budget_tokens))
    return out


def _task_output(task: GridTask, result: SessionResult, budget_tokens: float) -> tuple:
    """One replay's row, per-turn columns (when kept), violations, arm rows and thrashing rows."""
    extra = {"budget_tokens": budget_tokens, "task": task.index}
    row = {**result.row, **extra}
    turns = None
    if task.keep_turns:
        logs = result.arm_logs
        turns = {name: np.concatenate([log.columns[name] for log in logs.values()])
                 for name in TURN_FIELDS}
        turns["arm"] = np.repeat(np.array(list(logs), dtype=object), [len(g) for g in logs.values()])
    arms = [{**a, "budget_tokens": budget_tokens} for a in result.arms]
    thrashing = [{**t, "trace": row["trace"], "session": row["session"], "strategy": row["strategy"],
                  "claims": row.get("claims"), "budget_tokens": budget_tokens}
                 for t in result.thrashing]
    return row, turns, result.violation_messages, arms, thrashing


def as_sessions(traces) -> list[SessionTrace]:
    """Sessions from a DataFrame, a ``{label: DataFrame}`` mapping, or a list of either / of sessions."""
    if isinstance(traces, pd.DataFrame):
        return split_sessions(traces, traces.attrs.get("name", ""))
    if isinstance(traces, SessionTrace):
        return [traces]
    if isinstance(traces, Mapping):
        return [s for label, df in traces.items() for s in split_sessions(df, str(label))]
    out: list[SessionTrace] = []
    for item in traces:
        out.extend(as_sessions(item))
    return out


def resolve_workers(workers: int | None) -> int:
    """``None`` or 0 means all cores (of this process's affinity)."""
    if workers is None or workers == 0:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, os.cpu_count() or 1)
    if workers < 0:
        raise InputError(f"workers must be >= 0, got {workers}")
    return workers


def _check_strategies(strategies: Sequence) -> tuple:
    if not strategies:
        raise InputError("no strategy to run")
    labels = [strategy_label(s) for s in strategies]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise InputError(f"strategy named twice: {', '.join(dupes)}")
    for spec in strategies:
        make(spec)  # fail fast, before any work, on a spec that cannot be loaded
    return tuple(strategies)


def _progress_enabled(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return sys.stderr.isatty() and not os.environ.get("CI")


def _execute(tasks: list[GridTask], workers: int, scheduler: str | None, on_done: Callable[[int], None]):
    """Yield each task's output in task order, however the tasks ran."""
    if scheduler:
        yield from _execute_dask(tasks, scheduler, on_done)
        return
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            out = run_task(task)
            on_done(len(out))
            yield out
        return
    # Largest sessions first keeps workers busy to the end; results are re-ordered below.
    order = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].session))
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {i: pool.submit(run_task, tasks[i]) for i in order}
        done: dict[int, list] = {}
        try:
            for i in order:
                done[i] = futures[i].result()
                on_done(len(done[i]))
        except BaseException:
            # A strict violation (or Ctrl-C) ends the sweep now, not after every queued session.
            for future in futures.values():
                future.cancel()
            raise
        for i in range(len(tasks)):
            yield done.pop(i)


def _execute_dask(tasks: list[GridTask], scheduler: str, on_done: Callable[[int], None]):
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask: pip install 'ctxbench[dask]'") from None
    try:
        client = Client(scheduler, timeout="10s")
    except Exception as exc:
        raise InputError(f"cannot reach Dask scheduler {scheduler!r}: {exc}") from None
    try:
        futures = client.map(run_task, tasks, pure=False)
        for future in futures:
            out = future.result()
            on_done(len(out))
            yield out
    finally:
        client.close()


def run_grid(traces, strategies: Sequence = ("lru",), budgets_tokens: Iterable[float] = (200_000,), *,
             bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN, strict: bool = True, workers: int | None = None,
             scheduler: str | None = None, progress: bool | None = None, keep_turns: bool = True,
             claims: Sequence[ClaimConfig] | None = None, bracket: bool = False,
             max_files: int | None = None, max_directories: int | None = None,
             evict_timeout_ms: int | None = None) -> GridResult:
    """Replay every session of ``traces`` under every strategy and budget.

    ``strategies`` are specs (``"lru?max_entries=50"``) or strategy objects; ``workers`` local
    processes (default: all cores) or a Dask ``scheduler`` address run the sessions. The
    deterministic columns are identical however the grid ran. ``strict=False`` counts contract
    violations instead of stopping at the first. ``bracket=True`` adds, per (session, budget),
    the optimal bracket's rows ``opt:lower`` and ``opt:belady-size`` (see `sim.bracket`).
    ``claims`` replays multi-arm sessions once per claim configuration (single-arm ones once).
    Budgets in multi-agent terms: the token budget is ``max_tokens``, ``max_files`` becomes the
    budget's ``max_entries``, and ``max_directories`` is enforced by each manager (the bracket
    does not model it). ``evict_timeout_ms`` limits each call into an in-process strategy
    (`sim.manager`); it needs each task to run in a process's main thread, so not on Dask.
    """
    sessions = as_sessions(traces)
    if not sessions:
        raise InputError("no sessions to replay: the traces are empty")
    budgets = tuple(float(b) if not float(b).is_integer() else int(b) for b in budgets_tokens)
    if not budgets:
        raise InputError("no budget to run")
    for b in budgets:
        budget_for_tokens(b, bytes_per_token)
    specs = _check_strategies(list(strategies))
    modes = tuple(claims) if claims else (None,)
    for name, value in (("max_files", max_files), ("max_directories", max_directories),
                        ("evict_timeout_ms", evict_timeout_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if evict_timeout_ms is not None and scheduler:
        raise InputError("--evict-timeout-ms cannot be used with --scheduler: Dask workers run tasks in threads")
    tasks = [GridTask(i, s, specs, budgets, bytes_per_token, strict, keep_turns, modes, bracket,
                      max_files, max_directories, evict_timeout_ms)
             for i, s in enumerate(sessions)]
    per_session = len(specs) + (2 if bracket else 0)
    total = sum(per_session * len(budgets) * (len(modes) if t.session.arms is not None else 1) for t in tasks)
    rows: list[dict] = []
    turn_parts: list[tuple[dict, dict]] = []
    violations: list[str] = []
    arm_rows: list[dict] = []
    thrashing: list[dict] = []
    with _Progress(total, _progress_enabled(progress)) as bar:
        for out in _execute(tasks, resolve_workers(workers), scheduler, bar.advance):
            for row, turns, messages, arms, thrash in out:
                rows.append(row)
                violations.extend(messages)
                arm_rows.extend(arms)
                thrashing.extend(thrash)
                if turns is not None:
                    turn_parts.append((row, turns))
    results = pd.DataFrame(rows)
    lead = ["trace", "session", "strategy", "pure", "budget_tokens", "budget_bytes"]
    results = results[lead + [c for c in results.columns if c not in lead and c != "task"]]
    turns_df = _turn_frame(turn_parts)
    return GridResult(results=results, turns=turns_df, violations=violations, arms=pd.DataFrame(arm_rows),
                      thrashing=pd.DataFrame(thrashing))


def _turn_frame(parts: list[tuple[dict, dict]]) -> pd.DataFrame:
    """Every kept per-turn log in one frame, keyed by trace, session, strategy and budget.

    Built once from the concatenated columns: a frame per replay would make the parent's
    serial work grow with the grid and cap the speed-up of parallel workers.
    """
    if not parts:
        return pd.DataFrame()
    lengths = [len(turns["turn"]) for _, turns in parts]

    def key(name: str, dtype=object) -> np.ndarray:
        return np.repeat(np.array([row.get(name) for row, _ in parts], dtype=dtype), lengths)

    data = {"trace": key("trace"), "session": key("session"), "strategy": key("strategy"),
            "budget_tokens": key("budget_tokens", None)}
    for name in parts[0][1]:
        data[name] = np.concatenate([turns[name] for _, turns in parts])
    if any("claims" in row for row, _ in parts):
        data["claims"] = key("claims")
    return pd.DataFrame(data)


class _Progress:
    """A rich progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self._progress = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._progress = Progress("replaying", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task("grid", total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
