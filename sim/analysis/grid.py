"""Run (traces × strategies × budgets) in worker processes or on a Dask cluster; tidy results."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.bracket import bracket_results
from ctxbench.sim.analysis.labels import BRACKET_EXACT, BRACKET_LABELS
from ctxbench.sim.analysis.optimum import OptimumLimits, optimum_columns, optimum_result
from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.errors import ContractViolation, InputError
from ctxbench.traces.model_ratios import session_ratios
from ctxbench.sim.pool import Died, pooled
from ctxbench.traces.tokens import TokenRatios
from ctxbench.sim.engine.measures import CACHE_TTL_MS, TURN_FIELDS
from ctxbench.sim.engine.replay import (ResolvedSession, SessionResult, SessionTrace, budget_for_tokens, check_bytes_per_token,
                               compaction_rule, replay_session, resolve_session, split_sessions, strategy_label)
from ctxbench.strategies.external import stop_all as stop_external_strategies
from ctxbench.strategies.isolation import (Ended, counted_strategy, ending, in_child, in_worker, load_isolated, loads_code,
                                  process_context, send_failure)
from ctxbench.strategies.registry import CompactedStrategy, make

__all__ = ["GridResult", "GridTask", "run_grid", "run_task", "resolve_workers", "workers_note", "cores", "as_sessions",
           "WORKERS_HELP"]


@dataclass(frozen=True)
class GridTask:
    """One session to replay under every (strategy, budget) pair of the grid."""

    index: int
    session: SessionTrace
    strategies: tuple
    budgets_tokens: tuple[float, ...]
    bytes_per_token: "float | TokenRatios | None"
    strict: bool
    keep_turns: bool
    claims: tuple[ClaimConfig | None, ...] = (None,)
    bracket: bool = False
    max_files: int | None = None
    max_directories: int | None = None
    evict_timeout_ms: int | None = None
    cache_ttl_ms: int = CACHE_TTL_MS
    optimum: OptimumLimits = OptimumLimits()


@dataclass
class GridResult:
    """The grid's metrics (one row per session × strategy × budget [× claim mode]) and details.

    ``arms`` has one row per arm of multi-arm sessions; ``thrashing`` one row per overwrite of
    another arm's unsaved change; both are empty for single-arm traces. ``ratios`` says which token
    ratios each session was counted with (`session_tokens`).
    """

    results: pd.DataFrame
    turns: pd.DataFrame
    violations: list[str] = field(default_factory=list)
    arms: pd.DataFrame = field(default_factory=pd.DataFrame)
    thrashing: pd.DataFrame = field(default_factory=pd.DataFrame)
    ratios: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class _Replay:
    """One replay of a task: a strategy (None: the optimal bracket) under a budget [and claim mode]."""

    budget_tokens: float
    spec: object | None
    claims: ClaimConfig | None


def _replays(task: GridTask) -> list[_Replay]:
    """The task's replays in the order their outputs are reported."""
    # Claims only matter when several arms share the workspace.
    modes = task.claims if task.session.arms is not None else (None,)
    out = []
    for budget_tokens in task.budgets_tokens:
        out.extend(_Replay(budget_tokens, spec, claims) for spec in task.strategies for claims in modes)
        if task.bracket:
            out.extend(_Replay(budget_tokens, None, claims) for claims in modes)
    return out


def _run_replay(task: GridTask, replay: _Replay, strategy_for_arm=None,
                resolved: dict[ClaimConfig | None, ResolvedSession] | None = None) -> list[tuple]:
    """The outputs of one replay (three for the bracket: its lower, upper and optimum rows); ``resolved``
    keeps the session resolved under each claim mode for the task's other replays."""
    resolved = {} if resolved is None else resolved
    if replay.claims not in resolved:
        resolved[replay.claims] = resolve_session(task.session, replay.claims, tokens=task.bytes_per_token)
    session = resolved[replay.claims]
    budget = budget_for_tokens(replay.budget_tokens, task.bytes_per_token, task.max_files)
    if replay.spec is None:
        lower, upper = bracket_results(session, budget, bytes_per_token=task.bytes_per_token)
        exact, _ = optimum_result(session, budget, bytes_per_token=task.bytes_per_token, belady=upper.row,
                                  limits=task.optimum, max_directories=task.max_directories)
        extra = {"budget_tokens": replay.budget_tokens, "task": task.index}
        return [({**lower, **extra}, None, [], [], []), _task_output(task, upper, replay.budget_tokens),
                ({**exact, **extra}, None, [], [], [])]
    result = replay_session(session, replay.spec, budget, strict=task.strict,
                            strategy_name=strategy_label(replay.spec), bytes_per_token=task.bytes_per_token,
                            max_directories=task.max_directories, strategy_for_arm=strategy_for_arm,
                            evict_timeout_ms=task.evict_timeout_ms, cache_ttl_ms=task.cache_ttl_ms)
    if task.bracket:
        _add_compacted_optimum(task, replay, session, budget, result)
    return [_task_output(task, result, replay.budget_tokens)]


def _add_compacted_optimum(task: GridTask, replay: _Replay, session: ResolvedSession, budget, result) -> None:
    """A built-in ``STRATEGY+POLICY`` row's own optimum: the managed context's under the same compaction."""
    if not isinstance(replay.spec, str) or loads_code(replay.spec) or "+" not in replay.spec:
        return
    instance = make(replay.spec)
    if not isinstance(instance, CompactedStrategy):
        return
    rule = functools.partial(compaction_rule, instance.policy, session, budget=budget,
                             bytes_per_token=check_bytes_per_token(session.tokens))
    exact, _ = optimum_result(session, budget, bytes_per_token=task.bytes_per_token, limits=task.optimum,
                              compaction_for_arm=lambda arm: rule(arm=arm), max_directories=task.max_directories,
                              objectives=("bytes",))
    result.row.update(optimum_columns(exact))


def run_task(task: GridTask) -> list[tuple[dict, dict | None, list[str], list[dict], list[dict]]]:
    """Replay one session under each (strategy, budget[, claim mode]), resolving it once per claim mode;
    runs in a worker."""
    resolved: dict[ClaimConfig | None, ResolvedSession] = {}
    return [out for replay in _replays(task) for out in _run_replay(task, replay, resolved=resolved)]


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


WORKERS_HELP = ("worker processes (default: all cores); more than the cores is capped at the cores (with a "
                "note), and never more than the sessions. Strategies that load code (import paths, entry points) "
                "run in worker processes even with 1, so that one ending its process is a contract violation")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def resolve_workers(workers: int | None, tasks: int | None = None) -> int:
    """How many worker processes to use: ``None`` or 0 means all cores; never more than the cores or ``tasks``."""
    if workers is None or workers == 0:
        workers = cores()
    if workers < 0:
        raise InputError(f"workers must be >= 0, got {workers}")
    return max(1, min(workers, cores(), tasks if tasks is not None else workers))


def workers_note(workers: int | None) -> str | None:
    """The note to show when ``--workers`` asks for more processes than there are cores, else None."""
    if workers is not None and workers > cores():
        return f"--workers {workers} is more than the {cores()} cores; using {cores()}"
    return None


def _check_strategies(strategies: Sequence) -> tuple:
    if not strategies:
        raise InputError("no strategy to run")
    labels = [strategy_label(s) for s in strategies]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise InputError(f"strategy named twice: {', '.join(dupes)}")
    # Fail fast, before any work, on a spec that cannot be loaded; code ctxbench does not ship is
    # loaded in a process of its own, as it will run.
    for spec in strategies:
        if not loads_code(spec):
            make(spec)
    load_isolated([spec for spec in strategies if loads_code(spec)])
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
    if workers <= 1 and not any(loads_code(spec) for spec in tasks[0].strategies):
        for task in tasks:
            out = run_task(task)
            on_done(len(out))
            yield out
        return
    done = _execute_local(tasks, workers, on_done)
    for i in range(len(tasks)):
        yield done.pop(i)


# ----- local worker processes ------------------------------------------------------------------------
#
# Tasks run in worker processes (`sim.pool.pooled`), as if nothing could go wrong. A worker that dies (a
# strategy calling os._exit, a crash, the OOM killer) is reported with the task it was running, which is
# then run again one replay at a time in single-use processes that count the strategy's calls, to find
# the replay and call that ends the process; that replay is run once more with the strategy answering,
# from that call on, by raising `ProcessEnded`, which the replay engine reports like any raising strategy
# (strategy, session, arm, turn): strict stops, lenient counts it. The other workers go on meanwhile.

def _init_worker() -> None:
    in_worker(stop_external_strategies)


def _execute_local(tasks: list[GridTask], workers: int, on_done: Callable[[int], None]) -> dict[int, list]:
    """Every task's output, by index, from local worker processes."""
    context = process_context()
    done: dict[int, list] = {}
    # Largest sessions first keeps workers busy to the end; results are re-ordered by the caller.
    order = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].session))
    for i, out in pooled(run_task, tasks, order, workers, context, _init_worker):
        done[i] = _run_isolated(tasks[i], context) if isinstance(out, Died) else out
        on_done(len(done[i]))
    return done


def _run_isolated(task: GridTask, context) -> list[tuple]:
    """The task's outputs from single-use processes, one replay at a time, finding a replay that ends its process."""
    replays = _replays(task)
    outputs: list[list] = []
    start, fail = 0, None
    while start < len(replays):
        got, death = _probe(task, start, fail, context)
        outputs.extend(got)
        if death is None:
            break
        index, calls, status = death
        if calls and (fail is None or fail[0] != index):
            start, fail = index, (index, calls, status)   # again, the strategy "raising" from that call on
            continue
        outputs.append(_ended_replay(task, replays[index], status, counted=_may_end_process(replays[index].spec)))
        start, fail = index + 1, None
    return [out for replay_outputs in outputs for out in replay_outputs]


def _may_end_process(spec) -> bool:
    return spec is not None and (loads_code(spec) or not isinstance(spec, str))


def _probe(task: GridTask, start: int, fail, context) -> tuple[list[list], tuple | None]:
    """Replays ``start``... of ``task`` in a fresh process: their outputs, and (replay, calls, status) if it died."""
    progress = context.RawArray("q", 3)   # the replay running, its strategy's calls, and 1 while inside one
    got, status = in_child(_probe_main, task, start, fail, progress, context=context)
    if status == 0 and start + len(got) == len(_replays(task)):
        return got, None
    calls = int(progress[1]) if progress[2] else 0   # 0: it died outside evict (a hook, its factory)
    return got, (int(progress[0]), calls, status)


def _probe_main(task: GridTask, start: int, fail, progress, send) -> None:
    in_worker(stop_external_strategies)
    replays = _replays(task)
    try:
        for index in range(start, len(replays)):
            progress[0], progress[1], progress[2] = index, 0, 0
            replay = replays[index]
            arm_strategy = None
            if _may_end_process(replay.spec):
                fail_at, why = (fail[1], ending(fail[2])) if fail is not None and fail[0] == index else (None, "")
                arm_strategy = functools.partial(counted_strategy, replay.spec, progress, fail_at, why)
            send.send(_run_replay(task, replay, arm_strategy))
    except BaseException as exc:   # a strict violation, or a failure to pass on as it is
        send_failure(send, exc)
    finally:
        send.close()


def _ended_replay(task: GridTask, replay: _Replay, status: int | None, counted: bool) -> list[tuple]:
    """A replay whose process died outside any counted evict call: a violation (strict), or counted at every turn."""
    label = "opt:bracket" if replay.spec is None else strategy_label(replay.spec)
    what = (f"the strategy ended its worker process ({ending(status)}) outside evict" if counted
            else f"the worker process died ({ending(status)}) during this replay")
    if task.strict or replay.spec is None:
        raise ContractViolation(f"strategy {label!r}, session {task.session.session!r}: {what}")
    return _run_replay(task, replay, lambda arm: Ended(what))


def _execute_dask(tasks: list[GridTask], scheduler: str, on_done: Callable[[int], None]):
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask: pip install 'ctxbench[dask]'") from None
    try:
        client = Client(scheduler, timeout="10s")
    except Exception as exc:
        raise InputError(f"cannot reach Dask scheduler {scheduler!r}: {exc}") from None
    futures = []
    try:
        futures = client.map(run_task, tasks, pure=False)
        for future in futures:
            out = future.result()
            on_done(len(out))
            yield out
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(futures)   # an interrupt or a strict violation: nothing more to compute
        raise
    finally:
        client.close()


def run_grid(traces, strategies: Sequence = ("lru",), budgets_tokens: Iterable[float] = (200_000,), *,
             bytes_per_token: "float | TokenRatios | None" = None, strict: bool = True, workers: int | None = None,
             scheduler: str | None = None, progress: bool | None = None, keep_turns: bool = True,
             claims: Sequence[ClaimConfig] | None = None, bracket: bool = False,
             max_files: int | None = None, max_directories: int | None = None,
             evict_timeout_ms: int | None = None, cache_ttl_ms: int = CACHE_TTL_MS,
             optimum: OptimumLimits | None = None) -> GridResult:
    """Replay every session of ``traces`` under every strategy (or policy) and budget.

    ``strategies`` are specs (``"lru?max_entries=50"``, a policy such as ``"claude-code"``, a
    combination ``"lru+compaction"``) or objects: strategies replay the managed context, policies
    the append-only transcript (`sim.engine.replay.replay_session`); ``cache_ttl_ms`` is the prompt
    cache's lifetime (-1: none). ``workers`` local
    processes (default: all cores; never more than the cores or the sessions) or a Dask
    ``scheduler`` address run the sessions. The deterministic columns are identical however the
    grid ran. Strategies that load code (import paths, entry points) run in worker processes
    even with ``workers=1``: one that ends its process (``os._exit``, a crash) is a contract
    violation naming strategy, session and turn, like one that raises. ``strict=False`` counts contract
    violations instead of stopping at the first. ``bracket=True`` adds, per (session, budget),
    the offline optimum's row ``opt:exact`` (`sim.analysis.optimum`, within the ``optimum`` limits)
    and the bracket's rows ``opt:lower`` and ``opt:belady-size`` (`sim.analysis.bracket`), and gives
    each managed strategy's row the optimum's columns (``opt_reread_tokens``, ``opt_lower_tokens``,
    ``opt_exact``; a ``STRATEGY+POLICY`` row the optimum under its own compaction).
    ``bytes_per_token`` counts every session alike (one ratio, or `traces.tokens.TokenRatios`); a table
    by model family, or ``None`` (`traces.model_ratios.FAMILY_RATIOS`), counts each session with its
    model's family's ratios (`traces.model_ratios.session_ratios`).
    ``claims`` replays multi-arm sessions once per claim configuration (single-arm ones once).
    Budgets in multi-agent terms: the token budget is ``max_tokens``, ``max_files`` becomes the
    budget's ``max_entries``, and ``max_directories`` is enforced by each replay (the bracket
    does not model it). ``evict_timeout_ms`` limits each call into an in-process strategy
    (`sim.engine.turn_by_turn`); it needs each task to run in a process's main thread, so not on Dask.
    """
    sessions = as_sessions(traces)
    if not sessions:
        raise InputError("no sessions to replay: the traces are empty")
    budgets = tuple(float(b) if not float(b).is_integer() else int(b) for b in budgets_tokens)
    if not budgets:
        raise InputError("no budget to run")
    if bytes_per_token is not None and not isinstance(bytes_per_token, (TokenRatios, Mapping)):
        check_bytes_per_token(bytes_per_token)   # an absurd ratio named before any is made
    chosen = [session_ratios(s.model, bytes_per_token) for s in sessions]
    for b in budgets:
        for ratios in {id(r): r for _, r in chosen}.values():
            budget_for_tokens(b, ratios)
    specs = _check_strategies(list(strategies))
    modes = tuple(claims) if claims else (None,)
    for name, value in (("max_files", max_files), ("max_directories", max_directories),
                        ("evict_timeout_ms", evict_timeout_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if evict_timeout_ms is not None and scheduler:
        raise InputError("--evict-timeout-ms cannot be used with --scheduler: Dask workers run tasks in threads")
    if isinstance(cache_ttl_ms, bool) or not isinstance(cache_ttl_ms, int) or cache_ttl_ms < -1:
        raise InputError(f"cache_ttl_ms must be -1 (no cache) or a lifetime in ms >= 0, got {cache_ttl_ms!r}")
    tasks = [GridTask(i, s, specs, budgets, ratios, strict, keep_turns, modes, bracket,
                      max_files, max_directories, evict_timeout_ms, cache_ttl_ms, optimum or OptimumLimits())
             for i, (s, (_, ratios)) in enumerate(zip(sessions, chosen))]
    per_session = len(specs) + (3 if bracket else 0)
    total = sum(per_session * len(budgets) * (len(modes) if t.session.arms is not None else 1) for t in tasks)
    rows: list[dict] = []
    turn_parts: list[tuple[dict, dict]] = []
    violations: list[str] = []
    arm_rows: list[dict] = []
    thrashing: list[dict] = []
    with _Progress(total, _progress_enabled(progress)) as bar:
        for out in _execute(tasks, resolve_workers(workers, len(tasks)), scheduler, bar.advance):
            for row, turns, messages, arms, thrash in out:
                rows.append(row)
                violations.extend(messages)
                arm_rows.extend(arms)
                thrashing.extend(thrash)
                if turns is not None:
                    turn_parts.append((row, turns))
    results = pd.DataFrame(rows)
    lead = ["trace", "session", "strategy", "model", "pure", "budget_tokens", "budget_bytes"]
    results = _with_optimum(results[lead + [c for c in results.columns if c not in lead and c != "task"]])
    turns_df = _turn_frame(turn_parts)
    return GridResult(results=results, turns=turns_df, violations=violations, arms=pd.DataFrame(arm_rows),
                      thrashing=pd.DataFrame(thrashing), ratios=session_tokens(sessions, chosen))


def session_tokens(sessions: Sequence[SessionTrace], chosen: Sequence[tuple[str, TokenRatios]]) -> dict[str, dict]:
    """Which ratios each session was counted with: ``{label: {"ratios": kind -> bytes per token, "sessions":
    ["trace/session", ...]}}``, labelled by family (chosen by the session's model) or ``given``."""
    out: dict[str, dict] = {}
    for session, (label, ratios) in zip(sessions, chosen):
        entry = out.setdefault(label, {"ratios": ratios.to_dict(), "sessions": []})
        entry["sessions"].append(f"{session.trace}/{session.session}" if session.trace else session.session)
    return out


def _with_optimum(results: pd.DataFrame) -> pd.DataFrame:
    """Each bare managed strategy's row with its session's optimum (`optimum_columns`), where the grid has it."""
    exact = results["strategy"] == BRACKET_EXACT
    if not exact.any():
        return results
    keys = ["trace", "session", "budget_tokens"] + (["claims"] if "claims" in results.columns else [])
    frame = results[keys].astype(object).where(results[keys].notna(), "")
    table = frame[exact].assign(opt_reread_tokens=results.loc[exact, "reread_tokens"],
                                opt_lower_tokens=results.loc[exact, "reread_tokens_lower"],
                                opt_exact=results.loc[exact, "opt_exact"].astype(bool))
    bare = ((results["model"] == "managed") & ~results["strategy"].isin(BRACKET_LABELS)
            & ~results["strategy"].astype(str).str.contains("+", regex=False))
    filled = frame[bare].merge(table, on=keys, how="left")
    results = results.copy()
    for name in ("opt_reread_tokens", "opt_lower_tokens", "opt_exact"):
        if name not in results.columns:
            results[name] = np.nan
        if name == "opt_exact":
            results[name] = results[name].astype(object)
        results.loc[bare, name] = filled[name].to_numpy()
    return results


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
    return pd.DataFrame(data, copy=False)   # the arrays are new: no copy into one block


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
