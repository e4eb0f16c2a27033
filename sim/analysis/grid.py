"""Run (traces × strategies × budgets) in worker processes or on a Dask cluster; tidy results."""

from __future__ import annotations

import contextlib
import functools
import gc
import heapq
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ctxbench.sim.analysis.bracket import bracket_results
from ctxbench.sim.analysis.labels import BRACKET_EXACT, BRACKET_LABELS, is_bracket
from ctxbench.sim.analysis.schedule_bound import (ScheduleModel, policy_columns, schedule_labels, schedule_model,
                                                  session_bound)
from ctxbench.sim.analysis.turn_log import TurnParts, TurnWriter, turn_frame
from ctxbench.sim.analysis.optimum import optimum_columns, optimum_result
from ctxbench.sim.engine.claims import ClaimConfig
from ctxbench.sim.engine.settings import DEFAULT_SETTINGS, ReplaySettings, settings_of
from ctxbench.sim.errors import ContractViolation, InputError
from ctxbench.traces.model_ratios import session_ratios
from ctxbench.sim.pool import Died, pooled
from ctxbench.traces.tokens import TokenRatios
from ctxbench.sim.engine.measures import TURN_FIELDS
from ctxbench.sim.engine.replay import (ResolvedSession, SessionResult, SessionTrace, budget_for_tokens, check_bytes_per_token,
                               compaction_rule, iter_sessions, replay_session, resolve_session, split_sessions)
from ctxbench.traces.io import TraceReader
from ctxbench.strategies.calls import raise_noted_signal
from ctxbench.strategies.external import stop_all as stop_external_strategies
from ctxbench.strategies.isolation import (counted_strategy, ended, ending, in_child, in_worker, load_isolated, loads_code,
                                  process_context, send_failure)
from ctxbench.strategies.adapter import COMBINED, POLICY, STRATEGY, adapt, label_of, names_of

__all__ = ["GridResult", "GridTask", "run_grid", "run_task", "resolve_workers",
           "workers_note", "cores", "as_sessions", "WORKERS_HELP"]


@dataclass(frozen=True)
class GridTask:
    """One session to replay under every (strategy, budget) pair of the grid, with the run's settings (their
    ``tokens`` this session's ratios) and each strategy's kind (`strategies.adapter.ADAPTER_KINDS`)."""

    index: int
    session: SessionTrace
    strategies: tuple
    budgets_tokens: tuple[float, ...]
    settings: ReplaySettings = DEFAULT_SETTINGS
    kinds: tuple[str, ...] = ()
    # (policy spec, its schedules, bound label, whether its own compactions are one of them)
    schedules: tuple[tuple[object, ScheduleModel, str, bool], ...] = ()

    def kind_of(self, spec) -> str:
        """The kind of ``spec``, one of the task's strategies."""
        return self.kinds[self.strategies.index(spec)] if self.kinds else STRATEGY


@dataclass
class GridResult:
    """The grid's metrics (one row per session × strategy × budget [× claim mode]) and details.

    ``arms`` has one row per arm of multi-arm sessions; ``thrashing`` one row per overwrite of
    another arm's unsaved change; both are empty for single-arm traces. ``schedules`` has one row per
    point of each session's hull of cheapest compaction schedules (`sim.analysis.schedule.frontier`:
    ``weight`` on a re-read token, ``cost_tokens``, ``reread_tokens``), labelled as its opt:schedule row. ``turns_file`` is where the
    per-turn log was written when `run_grid` was given ``turns_to`` (``turns`` is then empty), None
    when no turn was kept. ``ratios`` says which token ratios each session was counted with: ``{label:
    {"ratios": kind -> bytes per token, "sessions": ["trace/session", ...]}}``.
    """

    results: pd.DataFrame
    turns: pd.DataFrame
    violations: list[str] = field(default_factory=list)
    arms: pd.DataFrame = field(default_factory=pd.DataFrame)
    thrashing: pd.DataFrame = field(default_factory=pd.DataFrame)
    turns_file: Path | None = None
    ratios: dict[str, dict] = field(default_factory=dict)
    schedules: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True)
class _Replay:
    """One replay of a task: a strategy (None: the optimal bracket) under a budget [and claim mode]."""

    budget_tokens: float
    spec: object | None
    claims: ClaimConfig | None


def _replays(task: GridTask) -> list[_Replay]:
    """The task's replays in the order their outputs are reported."""
    # Claims only matter when several arms share the workspace.
    modes = task.settings.claims if task.session.arms is not None else (None,)
    out = []
    for budget_tokens in task.budgets_tokens:
        out.extend(_Replay(budget_tokens, spec, claims) for spec in task.strategies for claims in modes)
        if task.settings.bracket:
            out.extend(_Replay(budget_tokens, None, claims) for claims in modes)
    return out


def _resolved(task: GridTask, claims: ClaimConfig | None,
              resolved: dict[ClaimConfig | None, ResolvedSession]) -> ResolvedSession:
    """The task's session resolved under ``claims``, once per task (kept in ``resolved``)."""
    if claims not in resolved:
        resolved[claims] = resolve_session(task.session, claims, tokens=task.settings.tokens)
    return resolved[claims]


def _run_replay(task: GridTask, replay: _Replay, strategy_for_arm=None,
                resolved: dict[ClaimConfig | None, ResolvedSession] | None = None) -> list[tuple]:
    """The outputs of one replay (three for the bracket: its lower, upper and optimum rows); ``resolved``
    keeps the session resolved under each claim mode for the task's other replays."""
    settings = task.settings
    session = _resolved(task, replay.claims, {} if resolved is None else resolved)
    budget = budget_for_tokens(replay.budget_tokens, settings.tokens, settings.max_files)
    if replay.spec is None:
        lower, upper = bracket_results(session, budget, bytes_per_token=settings.tokens)
        exact, _ = optimum_result(session, budget, bytes_per_token=settings.tokens, belady=upper.row,
                                  limits=settings.optimum, max_directories=settings.max_directories)
        extra = {"budget_tokens": replay.budget_tokens, "task": task.index}
        return [({**lower, **extra}, None, [], [], []), _task_output(task, upper, replay.budget_tokens),
                ({**exact, **extra}, None, [], [], [])]
    result = replay_session(session, replay.spec, budget, settings, strategy_name=label_of(replay.spec),
                            strategy_for_arm=strategy_for_arm)
    if settings.bracket and task.kind_of(replay.spec) == COMBINED:
        _add_compacted_optimum(task, replay, session, budget, result)
    return [_task_output(task, result, replay.budget_tokens)]


def _add_compacted_optimum(task: GridTask, replay: _Replay, session: ResolvedSession, budget, result) -> None:
    """A built-in ``STRATEGY+POLICY`` row's own optimum: the managed context's under the same compaction."""
    if not isinstance(replay.spec, str) or loads_code(replay.spec):
        return
    rule = functools.partial(compaction_rule, adapt(replay.spec).policy, session, budget=budget,
                             bytes_per_token=check_bytes_per_token(session.tokens))
    settings = task.settings
    exact, _ = optimum_result(session, budget, bytes_per_token=settings.tokens, limits=settings.optimum,
                              compaction_for_arm=lambda arm: rule(arm=arm), max_directories=settings.max_directories,
                              objectives=("bytes",))
    result.row.update(optimum_columns(exact))


def run_task(task: GridTask) -> list[tuple[dict, dict | None, list[str], list[dict], list[dict]]]:
    """Replay one session under each (strategy, budget[, claim mode]), resolving it once per claim mode;
    runs in a worker."""
    resolved: dict[ClaimConfig | None, ResolvedSession] = {}
    outputs = [out for replay in _replays(task) for out in _run_replay(task, replay, resolved=resolved)]
    return _with_schedule_bounds(task, outputs, resolved)


def _schedule_families(specs: tuple, kinds: tuple[str, ...]) -> tuple[tuple[object, ScheduleModel, str, bool], ...]:
    """Each built-in policy spec measured against compaction schedules, its model and its bound's label."""
    found = []
    for spec, kind in zip(specs, kinds):
        if kind == POLICY and isinstance(spec, str) and not loads_code(spec):
            model = schedule_model(adapt(spec).target)
            if model is not None:
                found.append((spec, *model))
    labels = schedule_labels([model for _, model, _ in found])
    return tuple((spec, model, labels[model], member) for spec, model, member in found)


def _with_schedule_bounds(task: GridTask, outputs: list[tuple],
                          resolved: dict[ClaimConfig | None, ResolvedSession]) -> list[tuple]:
    """``outputs`` with each compaction policy's row given its session's cheapest schedule at its re-reads
    (`sim.analysis.schedule_bound.policy_columns`), and the opt:schedule rows after them (`session_bound`)."""
    if not task.schedules or not task.settings.bracket:
        return outputs
    settings = task.settings
    labels = {label_of(spec): (model, label, member) for spec, model, label, member in task.schedules}
    bounds: dict[tuple, object] = {}
    for budget_tokens in task.budgets_tokens:
        for claims in (settings.claims if task.session.arms is not None else (None,)):
            session = _resolved(task, claims, resolved)
            budget = budget_for_tokens(budget_tokens, settings.tokens, settings.max_files)
            for model, label in dict.fromkeys((model, label) for model, label, _ in labels.values()):
                bounds[budget_tokens, claims, label] = session_bound(session, budget, settings, model, label)
    added = []
    for row, *_ in outputs:
        if row.get("strategy") in labels:
            _, label, member = labels[row["strategy"]]
            bound = bounds[row["budget_tokens"], _claims_of(task, row), label]
            row.update(policy_columns(bound, row, label, member))
    for (budget_tokens, claims, label), bound in bounds.items():
        if bound.row is not None:
            added.append(({**bound.row, "budget_tokens": budget_tokens, "task": task.index}, None, [], [], []))
    return outputs + added


def _claims_of(task: GridTask, row: dict) -> ClaimConfig | None:
    """The claim mode a task's row replayed under (None for a one-arm session)."""
    if task.session.arms is None:
        return None
    return next(mode for mode in task.settings.claims if mode.mode == row.get("claims"))


def _task_output(task: GridTask, result: SessionResult, budget_tokens: float) -> tuple:
    """One replay's row, per-turn columns (when kept), violations, arm rows and thrashing rows."""
    extra = {"budget_tokens": budget_tokens, "task": task.index}
    row = {**result.row, **extra}
    turns = None
    if task.settings.keep_turns:
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
    """Sessions from a DataFrame, a trace file being read (`traces.io.TraceReader`), a ``{label: DataFrame
    or reader}`` mapping, or a list of any of these or of sessions."""
    return list(_iter_sessions(traces))


def _iter_sessions(traces, label: str | None = None) -> Iterator[SessionTrace]:
    """`as_sessions`, one session at a time: a trace file is read as its sessions are needed."""
    if isinstance(traces, pd.DataFrame):
        yield from split_sessions(traces, traces.attrs.get("name", "") if label is None else label)
    elif isinstance(traces, TraceReader):
        yield from iter_sessions(traces, traces.attrs.get("name", "") if label is None else label)
    elif isinstance(traces, SessionTrace):
        yield traces
    elif isinstance(traces, Mapping):
        for name, trace in traces.items():
            yield from _iter_sessions(trace, str(name))
    else:
        for item in traces:
            yield from _iter_sessions(item)


def _read_as_needed(traces) -> bool:
    """Whether ``traces`` holds a trace file read as its sessions are needed, rather than frames in memory."""
    if isinstance(traces, TraceReader):
        return True
    if isinstance(traces, (pd.DataFrame, SessionTrace)):
        return False
    if isinstance(traces, Mapping):
        return any(_read_as_needed(t) for t in traces.values())
    if isinstance(traces, (list, tuple)):
        return any(_read_as_needed(t) for t in traces)
    return True   # an iterator: read as it goes


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


def _check_strategies(strategies: Sequence) -> tuple[tuple, tuple[str, ...]]:
    """The strategies, each loaded once (fail fast, before any work), and each one's kind."""
    if not strategies:
        raise InputError("no strategy to run")
    labels = [label_of(s) for s in strategies]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise InputError(f"strategy named twice: {', '.join(dupes)}")
    # Code ctxbench does not ship is loaded in a process of its own, as it will run.
    isolated = iter(load_isolated([spec for spec in strategies if loads_code(spec)]))
    kinds = tuple(next(isolated) if loads_code(spec) else adapt(spec).kind for spec in strategies)
    return tuple(strategies), kinds


def _progress_enabled(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return sys.stderr.isatty() and not os.environ.get("CI")


def _execute(tasks: Iterable[GridTask], specs: tuple, workers: int, scheduler: str | None, on_done: Callable[[int], None],
             ahead: int | None, meanwhile: Callable[[], None] | None = None):
    """Yield each task's output in task order, however the tasks ran; ``ahead`` bounds the tasks read
    ahead of the one whose output is next (None: every task is in memory already); ``meanwhile`` runs
    once here, while worker processes replay their first sessions (before the first one without)."""
    here = not scheduler and workers <= 1 and not any(loads_code(spec) for spec in specs)
    if (scheduler or here) and meanwhile is not None:   # no worker process of ours replays meanwhile
        meanwhile()
    if scheduler:
        yield from _execute_dask(list(tasks), scheduler, on_done)
        return
    if here:
        for task in tasks:
            out = run_task(task)
            on_done(len(out))
            yield out
        return
    yield from _execute_local(tasks, workers, on_done, ahead, meanwhile)


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


class _ReadAhead:
    """Tasks read from their source as workers need them (a `sim.pool.Feed`): at most ``ahead`` held, running
    or finished before the task whose output is next; the largest held first, which keeps every worker busy
    to the end. ``started`` keeps each running task, for a worker that dies."""

    def __init__(self, tasks: Iterable[GridTask], ahead: int | None) -> None:
        self.source = iter(tasks)
        self.ahead = sys.maxsize if ahead is None else max(ahead, 1)
        self.waiting: list[tuple[int, int, GridTask]] = []   # a heap of (-events, index, task)
        self.started: dict[int, GridTask] = {}
        self.finished = 0   # finished, their outputs not yet passed on in order
        self.read_all = False

    def take(self, running: int) -> tuple[int, GridTask] | None:
        while not self.read_all and len(self.waiting) + running + self.finished < self.ahead:
            task = next(self.source, None)
            if task is None:
                self.read_all = True
            else:
                heapq.heappush(self.waiting, (-len(task.session), task.index, task))
        if not self.waiting:
            return None
        _, index, task = heapq.heappop(self.waiting)
        self.started[index] = task
        return index, task


def _execute_local(tasks: Iterable[GridTask], workers: int, on_done: Callable[[int], None], ahead: int | None,
                   meanwhile: Callable[[], None] | None) -> Iterator[list]:
    """Every task's output, in task order, from local worker processes reading tasks as they need them
    (`_ReadAhead`: memory follows the largest sessions rather than the trace). A strict violation ends the
    sweep with the failure of the earliest started task that fails (those started before it finish first)."""
    context = process_context()
    feed = _ReadAhead(tasks, ahead)
    done: dict[int, list] = {}
    next_index = 0
    gc.freeze()   # what exists now is never collected in the workers: they share its pages instead of copying them
    try:
        for i, out in pooled(run_task, feed, workers, context, _init_worker, meanwhile):
            task = feed.started.pop(i)
            done[i] = _run_isolated(task, context) if isinstance(out, Died) else out
            on_done(len(done[i]))
            feed.finished += 1
            while next_index in done:
                feed.finished -= 1
                yield done.pop(next_index)
                next_index += 1
    finally:
        gc.unfreeze()


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
    return _with_schedule_bounds(task, [out for replay_outputs in outputs for out in replay_outputs], {})


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
    """A replay whose process died outside any counted call: a violation (strict), or counted at every turn."""
    noun, method = names_of(STRATEGY if replay.spec is None else task.kind_of(replay.spec))
    label = "opt:bracket" if replay.spec is None else label_of(replay.spec)
    what = (f"the {noun} ended its worker process ({ending(status)}) outside {method}" if counted
            else f"the worker process died ({ending(status)}) during this replay")
    if task.settings.strict or replay.spec is None:
        raise ContractViolation(f"{noun} {label!r}, session {task.session.session!r}: {what}")
    return _run_replay(task, replay, lambda arm: ended(what, noun))


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


def run_grid(traces, strategies: Sequence = ("lru",), budgets_tokens: Iterable[float] = (200_000,),
             settings: ReplaySettings | None = None, *, workers: int | None = None, scheduler: str | None = None,
             progress: bool | None = None, turns_to: "str | os.PathLike | TurnParts | None" = None,
             meanwhile: Callable[[], None] | None = None, **changes) -> GridResult:
    """Replay every session of ``traces`` under every strategy (or policy) and budget, as ``settings``
    (`sim.engine.settings.ReplaySettings`) say.

    ``strategies`` are specs (``"lru?max_entries=50"``, a policy such as ``"claude-code"``, a
    combination ``"lru+compaction"``) or objects: strategies replay the managed context, policies
    the append-only transcript (`sim.engine.replay.replay_session`). ``workers`` local
    processes (default: all cores; never more than the cores or the sessions) or a Dask
    ``scheduler`` address run the sessions. The deterministic columns are identical however the
    grid ran. Strategies that load code (import paths, entry points) run in worker processes
    even with ``workers=1``: one that ends its process (``os._exit``, a crash) is a contract
    violation naming strategy, session and turn, like one that raises.

    The settings: ``strict=False`` counts contract violations instead of stopping at the first.
    ``bracket=True`` adds, per (session, budget),
    the offline optimum's row ``opt:exact`` (`sim.analysis.optimum`, within the ``optimum`` limits)
    and the bracket's rows ``opt:lower`` and ``opt:belady-size`` (`sim.analysis.bracket`), and gives
    each managed strategy's row the optimum's columns (``opt_reread_tokens``, ``opt_lower_tokens``,
    ``opt_exact``; a ``STRATEGY+POLICY`` row the optimum under its own compaction).
    ``tokens`` counts every session alike (one ratio, or `traces.tokens.TokenRatios`); a table
    by model family, or ``None`` (`traces.model_ratios.FAMILY_RATIOS`), counts each session with its
    model's family's ratios (`traces.model_ratios.session_ratios`).
    ``claims`` replays multi-arm sessions once per claim configuration (single-arm ones once).
    Budgets in multi-agent terms: the token budget is ``max_tokens``, ``max_files`` becomes the
    budget's ``max_entries``, and ``max_directories`` is enforced by each replay (the bracket
    does not model it). ``evict_timeout_ms`` limits each call into an in-process strategy
    (`sim.engine.turn_by_turn`); it needs each task to run in a process's main thread, so not on Dask.
    ``changes`` are settings given one by one (``strict=False``, ``bytes_per_token=`` for ``tokens``, ...),
    applied to ``settings``.

    ``traces`` may hold trace files being read (`traces.io.open_trace`): their sessions are then read
    as the workers need them, at most a few per worker ahead, so that memory follows the largest
    session rather than the trace (``scheduler`` reads them all first). ``turns_to`` writes the
    per-turn log to that Parquet file as the sessions finish (`sim.analysis.turn_log.TurnWriter`), or
    gives it to a `TurnParts`, rather than keeping it in ``GridResult.turns``. ``meanwhile`` is work of
    the caller's to do once while worker processes replay (an import the caller needs next).
    """
    if "bytes_per_token" in changes:
        changes["tokens"] = changes.pop("bytes_per_token")
    if changes.get("claims") is not None:
        changes["claims"] = tuple(changes["claims"])
    settings = settings_of(settings, **changes)
    read_as_needed = _read_as_needed(traces)
    sessions: Iterator[SessionTrace] = _iter_sessions(traces)
    head = list(itertools.islice(sessions, 4 * cores() if read_as_needed else None))
    if not head:
        raise InputError("no sessions to replay: the traces are empty")
    rest = next(sessions, None) if read_as_needed else None
    read_as_needed = rest is not None   # a file of few sessions is read whole, as frames are
    sessions = itertools.chain(head, [rest], sessions) if read_as_needed else head
    budgets = tuple(float(b) if not float(b).is_integer() else int(b) for b in budgets_tokens)
    if not budgets:
        raise InputError("no budget to run")
    session_ratios_used = _SessionRatios(settings.tokens, budgets)
    if not read_as_needed:   # every session's ratios known now: an absurd budget is named before any work
        session_ratios_used.check(sessions)
    specs, kinds = _check_strategies(list(strategies))
    if settings.evict_timeout_ms is not None and scheduler:
        raise InputError("--evict-timeout-ms cannot be used with --scheduler: Dask workers run tasks in threads")
    families = _schedule_families(specs, kinds) if settings.bracket else ()
    tasks = (GridTask(i, s, specs, budgets, settings.replace(tokens=session_ratios_used.of(s)), kinds, families)
             for i, s in enumerate(sessions))
    modes = settings.claims
    per_session = len(specs) + (3 + len({label for _, _, label, _ in families}) if settings.bracket else 0)
    total = None if read_as_needed else sum(
        per_session * len(budgets) * (len(modes) if s.arms is not None else 1) for s in sessions)
    workers = resolve_workers(workers, None if read_as_needed else len(sessions))
    ahead = 4 * workers if read_as_needed else None
    rows, arm_rows, thrashing, frontier = _Rows(), _Rows(), _Rows(), _Rows()
    violations: list[str] = []
    writer = (TurnWriter(turns_to, budgets) if isinstance(turns_to, (str, os.PathLike)) else turns_to) \
        if settings.keep_turns and turns_to is not None else None
    turn_parts: list[tuple[dict, dict]] = []
    with _Progress(total, _progress_enabled(progress)) as bar, (writer or contextlib.nullcontext()):
        for out in _execute(tasks, specs, workers, scheduler, bar.advance, ahead, meanwhile):
            raise_noted_signal()   # a signal whose exception a library lost on the way stops the grid here
            parts = []
            for row, turns, messages, arms, thrash in out:
                for weight, cost, reread in row.pop("schedule_frontier", None) or ():
                    frontier.add({"trace": row["trace"], "session": row["session"], "strategy": row["strategy"],
                                  "claims": row.get("claims"), "budget_tokens": row["budget_tokens"],
                                  "weight": weight, "cost_tokens": cost, "reread_tokens": reread})
                rows.add(row)
                violations.extend(messages)
                for arm_row in arms:
                    arm_rows.add(arm_row)
                for thrash_row in thrash:
                    thrashing.add(thrash_row)
                if turns is not None:
                    parts.append((row, turns))
            if writer is not None:
                writer.write(parts)
            else:
                turn_parts.extend(parts)
    results = rows.frame()
    lead = ["trace", "session", "strategy", "model", "pure", "budget_tokens", "budget_bytes"]
    results = _with_optimum(results[lead + [c for c in results.columns if c not in lead and c != "task"]])
    return GridResult(results=results, turns=turn_frame(turn_parts), violations=violations, arms=arm_rows.frame(),
                      thrashing=thrashing.frame(),
                      turns_file=writer.path if isinstance(writer, TurnWriter) and writer.rows else None,
                      ratios=session_ratios_used.table, schedules=frontier.frame())


class _SessionRatios:
    """The token ratios each session is counted with (`traces.model_ratios.session_ratios`), each checked
    against the budgets the first time it is used; ``table`` says which were used for which sessions:
    ``{label: {"ratios": kind -> bytes per token, "sessions": ["trace/session", ...]}}``, labelled by family
    (chosen by the session's model) or ``given``."""

    def __init__(self, chosen: "float | TokenRatios | Mapping | None", budgets: Sequence[float]) -> None:
        self.chosen, self.budgets = chosen, budgets
        self.table: dict[str, dict] = {}
        self._checked: set[int] = set()

    def of(self, session: SessionTrace) -> TokenRatios:
        label, ratios = self._checked_ratios(session)
        entry = self.table.setdefault(label, {"ratios": ratios.to_dict(), "sessions": []})
        entry["sessions"].append(f"{session.trace}/{session.session}" if session.trace else session.session)
        return ratios

    def check(self, sessions: Iterable[SessionTrace]) -> None:
        """Every session's ratios checked against the budgets (`InputError` for the first too small or large)."""
        for session in sessions:
            self._checked_ratios(session)

    def _checked_ratios(self, session: SessionTrace) -> tuple[str, TokenRatios]:
        label, ratios = session_ratios(session.model, self.chosen)
        if id(ratios) not in self._checked:
            for b in self.budgets:
                budget_for_tokens(b, ratios)
            self._checked.add(id(ratios))
        return label, ratios


class _Rows:
    """Rows (dicts) gathered one by one and made into a frame exactly as ``pd.DataFrame(rows)`` makes it
    (columns in order of first appearance, a key a row lacks read as NaN), each kept as a tuple of its
    values beside its shared tuple of keys: a third of the memory of the dicts."""

    def __init__(self) -> None:
        self._keys: dict[tuple, tuple] = {}
        self._rows: list[tuple[tuple, tuple]] = []

    def add(self, row: dict) -> None:
        keys = tuple(row)
        self._rows.append((self._keys.setdefault(keys, keys), tuple(row.values())))

    def frame(self) -> pd.DataFrame:
        if not self._rows:
            return pd.DataFrame()
        columns = list(dict.fromkeys(key for keys in self._keys for key in keys))
        if not columns:
            return pd.DataFrame([{}] * len(self._rows))
        place = {keys: [columns.index(k) for k in keys] for keys in self._keys}
        width = len(columns)

        def full(keys: tuple, values: tuple) -> tuple:
            if len(keys) == width and keys == tuple(columns):
                return values
            out = [np.nan] * width
            for i, value in zip(place[keys], values):
                out[i] = value
            return tuple(out)

        return pd.DataFrame.from_records([full(keys, values) for keys, values in self._rows], columns=columns)


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
    bare = ((results["model"] == "managed") & ~results["strategy"].map(is_bracket).astype(bool)
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


class _Progress:
    """A rich progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int | None, enabled: bool) -> None:
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
