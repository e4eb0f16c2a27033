"""What a replay measures, declared once: the per-turn row's fields and the metrics made from them.

A new per-turn counter is one entry of `TALLY_FIELDS` or `END_FIELDS` plus the code that counts it,
once in the readable specification (``sim/engine/core.py`` ``Replay.steps`` for a tally, each model's
turn end for an end field) and once in the compiled engine (``sim/engine/_engine.h`` and
``_engine.c``, whose field tables are checked against this declaration when it is imported;
docs/design.md §5); a new metric is one `Metric`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxbench.traces.schema import exact_sum
from ctxbench.traces.tokens import DEFAULT_TOKENS

__all__ = ["TURN_FIELDS", "KEY_FIELDS", "TALLY_FIELDS", "END_FIELDS", "EvictedIds", "TurnLog", "Metric", "METRICS", "METRIC_COLUMNS", "DETERMINISTIC_METRICS",
           "GATED_METRICS", "POLICY_COLUMNS", "DEFAULT_BYTES_PER_TOKEN", "CACHE_TTL_MS", "CACHE_TTLS",
           "CACHE_READ_PRICE", "OUTPUT_PRICE", "cache_write_price", "cache_ttl_ms", "call_cache", "log_totals",
           "log_totals_numpy", "summarise", "pool", "nearest_rank"]

DEFAULT_BYTES_PER_TOKEN = DEFAULT_TOKENS.reference   # the budget's unit under the calibrated ratios

#: The prompt cache's lifetime by default: 5 minutes of trace time (Anthropic's default cache).
CACHE_TTL_MS = 300_000
#: The lifetimes ``--cache-ttl`` names: Anthropic's two (5 minutes, 1 hour), or no cache at all.
CACHE_TTLS = {"5m": 300_000, "1h": 3_600_000, "off": -1}
#: What a token read from the cache costs, in input tokens (Anthropic's prompt-caching prices).
CACHE_READ_PRICE = 0.1
#: What an output token costs, in input tokens: 5 on every model `sim.analysis.prices` knows (Anthropic's published
#: prices, with their source there; a test holds each model's ratio to this one).
OUTPUT_PRICE = 5.0


def cache_write_price(ttl_ms: int) -> float:
    """What a token written to the cache costs, in input tokens: 1.25 for the 5-minute cache, 2 for
    the 1-hour one (Anthropic's prices); 0 with no cache (nothing is written).

    >>> cache_write_price(300_000), cache_write_price(3_600_000), cache_write_price(-1)
    (1.25, 2.0, 0.0)
    """
    return 0.0 if ttl_ms < 0 else 1.25 if ttl_ms <= CACHE_TTLS["5m"] else 2.0


def cache_ttl_ms(text: str) -> int:
    """The cache lifetime ``--cache-ttl`` names (`CACHE_TTLS`), else `ValueError` listing them."""
    try:
        return CACHE_TTLS[text]
    except KeyError:
        raise ValueError(f"the cache lifetime must be one of {', '.join(CACHE_TTLS)}, got {text!r}") from None

#: The per-turn row is three groups of fields, in this order: the turn (`KEY_FIELDS`); the counts of
#: the turn's needs (`TALLY_FIELDS`, counted by the replay core, `sim.engine.core.Tally`); what the
#: model measures at the turn's end (`END_FIELDS`, each model's `sim.engine.core.TurnEnd`).
KEY_FIELDS = (
    "turn",                # the trace's turn number
    "ts_ms",               # time of the turn's end
)
TALLY_FIELDS = (
    "accesses",            # events that need a revision (reads and edits)
    "hits",
    "compulsory",          # misses of a revision never resident in this arm
    "capacity",            # misses of a revision the strategy evicted
    "invalidation",        # misses of a revision another arm made
    "accessed_bytes",
    "miss_bytes",
    "capacity_bytes",      # the re-read cost
    "invalidation_bytes",
)
END_FIELDS = (
    "evictions",           # entries removed at the turn's end
    "evicted_bytes",
    "turn_bytes",          # resident before the turn's eviction
    "occupancy_bytes",     # resident after it
    "entries",             # entries resident after it
    "evict_ns",            # time of the evict call
    "violations",          # 1 when the turn's answer broke the contract
    "pinned_bytes",        # the window's pinned content at the turn's end: overhead, messages, tool inputs
    "over_window",         # 1 when a call of the turn end (its own, or its summarization call) was larger than the window
    "cache_read_bytes",    # of the prompt of the call at the turn's end, what the prompt cache held
    "compactions",         # compactions at the turn's end (a stretch of the conversation replaced by a summary)
    "window_bytes",        # the whole window at the turn's end before its eviction, edits or compaction
    # The summarization call an agent makes first where the turn end's edits put an LLM-written summary in the
    # window (a `summary` of tokens > 0, or a managed compaction): its prompt is the window before the edits, or
    # what the policy's `Request` says (docs/design.md §8).
    "summary_calls",       # 1 when the turn end made a summarization call
    "summary_prompt_bytes",      # that call's prompt
    "summary_cache_read_bytes",  # what it read from the prompt cache
    "summary_output_bytes",      # the summary it wrote: its output
    "summary_dropped_bytes",     # what the edits removed from the window that the trimmed summarization prompt left out
)
#: The per-turn row, in order.
TURN_FIELDS = KEY_FIELDS + TALLY_FIELDS + END_FIELDS
_DIGEST_COLUMNS = [TURN_FIELDS.index(c) for c in ("turn", "hits", "compulsory", "capacity", "invalidation")]


class EvictedIds(Mapping):
    """The ids removed at turn ends: one list of ids and the turn number each left at, in the order they left,
    read as a mapping of turn number to ids (made when first read)."""

    __slots__ = ("turns", "ids", "_by_turn")

    def __init__(self, turns: Sequence[int] | np.ndarray = (), ids: Sequence[str] = ()) -> None:
        self.turns = np.asarray(turns, dtype=np.int64).reshape(-1)
        self.ids = ids if type(ids) is list else list(ids)
        self._by_turn: dict[int, list[str]] | None = None
        if len(self.turns) != len(self.ids):
            raise ValueError("EvictedIds: a turn for every id")

    @classmethod
    def from_mapping(cls, by_turn: Mapping[int, Sequence[str]]) -> "EvictedIds":
        """The ids of a mapping of turn number to ids."""
        return cls([turn for turn, ids in by_turn.items() for _ in ids], [i for ids in by_turn.values() for i in ids])

    @classmethod
    def concat(cls, parts: Sequence["EvictedIds"]) -> "EvictedIds":
        """Several logs' ids, one after the other."""
        return cls(np.concatenate([p.turns for p in parts]) if parts else (), [i for p in parts for i in p.ids])

    def _mapping(self) -> dict[int, list[str]]:
        if self._by_turn is None:
            by_turn: dict[int, list[str]] = {}
            for turn, entry_id in zip(self.turns.tolist(), self.ids):
                by_turn.setdefault(turn, []).append(entry_id)
            self._by_turn = by_turn
        return self._by_turn

    def __getitem__(self, turn: int) -> list[str]:
        return self._mapping()[turn]

    def __iter__(self):
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __repr__(self) -> str:
        return f"EvictedIds({self._mapping()!r})"

    def text(self) -> bytes:
        """What the log's digest reads of them: ``turn:id,id\n`` per turn number, in turn order, each turn's ids in
        the order they left (the ids of several arms at one turn number, arm after arm)."""
        turns, ids = self.turns, self.ids
        if len(turns) > 1 and (turns[1:] < turns[:-1]).any():
            order = np.argsort(turns, kind="stable")
            turns, ids = turns[order], [ids[i] for i in order.tolist()]
        from ctxbench.sim.engine.compiled import ENABLED, engine   # here: the compiled engine imports this module
        if ENABLED:
            return engine.digest_text(np.ascontiguousarray(turns), ids if type(ids) is list else list(ids))
        by_turn: dict[int, list[str]] = {}
        for turn, entry_id in zip(turns.tolist(), ids):
            by_turn.setdefault(turn, []).append(entry_id)
        return "".join([f"{turn}:{','.join(group)}\n" for turn, group in by_turn.items()]).encode()


@dataclass
class TurnLog:
    """Per-turn records of a replay: one int64 row per turn, one column per `TURN_FIELDS` name.

    ``table`` holds the rows; ``columns`` maps each field to its column (a view of ``table``);
    ``evicted_ids`` the ids removed at each turn's end, in order (`EvictedIds`; a mapping of turn
    number to ids is taken as well).
    """

    table: np.ndarray
    evicted_ids: Mapping[int, list[str]] = field(default_factory=EvictedIds)
    columns: dict[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.evicted_ids, EvictedIds):
            self.evicted_ids = EvictedIds.from_mapping(self.evicted_ids)
        self.columns = {name: self.table[:, i] for i, name in enumerate(TURN_FIELDS)}

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], evicted_ids: Mapping[int, list[str]] | None = None) -> "TurnLog":
        """A log of rows given in `TURN_FIELDS` order."""
        table = np.array(rows, dtype=np.int64).reshape(len(rows), len(TURN_FIELDS))
        return cls(table, evicted_ids if evicted_ids is not None else EvictedIds())

    @classmethod
    def concat(cls, logs: Sequence["TurnLog"]) -> "TurnLog":
        """Logs of several arms, one after the other."""
        return cls(np.concatenate([log.table for log in logs]).reshape(-1, len(TURN_FIELDS)),
                   EvictedIds.concat([log.evicted_ids for log in logs]))

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self) -> int:
        return len(self.table)

    def digest(self) -> str:
        """SHA-256 over each turn's number, hits, misses by class and evicted ids."""
        h = hashlib.sha256()
        for start in range(0, len(self.table), 1 << 16):   # in blocks: no copy of a long log at once
            h.update(np.ascontiguousarray(self.table[start:start + (1 << 16), _DIGEST_COLUMNS], dtype="<i8"))
        h.update(self.evicted_ids.text())
        return h.hexdigest()


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


@dataclass(frozen=True)
class Metric:
    """One column of a replay's results.

    A replay's totals (`summarise`) hold, for each ``TURN_FIELDS`` name, its sum over turns;
    ``peak_<field>`` its largest value; ``turns``, ``oversize``, ``max_bytes`` and
    ``bytes_per_token``; ``p50``/``p90``/``p99`` of ``evict_ns``; ``peak_window``, the most
    of ``window_bytes`` over turns; the prompt cache's totals over every call (each turn end's and each
    summarization call): ``prompt_bytes``, ``cache_read_bytes``, ``cache_write_bytes``, ``uncached_bytes``;
    ``peak_prompt``, the largest prompt; and ``cache_write_price``, what a written token costs. A metric is
    either the total named by ``source`` (additive: `pool` sums it over replays) or ``derive(totals)``
    (recomputed from pooled sums). ``timed`` metrics depend on the machine; ``gated`` ones are
    compared with a baseline by ``ctxbench regress``.
    """

    name: str
    doc: str
    source: str | None = None
    derive: Callable[[Mapping], float] | None = None
    timed: bool = False
    gated: bool = False

    def compute(self, totals: Mapping) -> float:
        """The metric's value from a replay's (or pooled) totals."""
        return totals[self.source] if self.source is not None else self.derive(totals)


def _misses(t: Mapping) -> int:
    return t["compulsory"] + t["capacity"] + t["invalidation"]


def _tokens(name: str) -> Callable[[Mapping], float]:
    return lambda t: t[name] / t["bytes_per_token"]


def _cost(t: Mapping) -> float:
    """The prompts in input-token equivalents: uncached at 1, read at 0.1, written at 1.25 or 2."""
    return (t["uncached_bytes"] + CACHE_READ_PRICE * t["cache_read_bytes"]
            + t["cache_write_price"] * t["cache_write_bytes"]) / t["bytes_per_token"]


def _total_cost(t: Mapping) -> float:
    """Every call in input-token equivalents: its prompt (`_cost`) and, at `OUTPUT_PRICE`, the summaries written."""
    return _cost(t) + OUTPUT_PRICE * t["summary_output_bytes"] / t["bytes_per_token"]


METRICS: tuple[Metric, ...] = (
    Metric("accesses", "reads and edits: events that need a revision", "accesses"),
    Metric("hits", "accesses whose revision was resident", "hits"),
    Metric("misses", "accesses whose revision was not resident", derive=_misses),
    Metric("compulsory_misses", "misses of a revision never resident before", "compulsory", gated=True),
    Metric("capacity_misses", "misses of a revision the strategy evicted", "capacity", gated=True),
    Metric("invalidation_misses", "misses of a revision another arm made", "invalidation", gated=True),
    Metric("miss_rate", "misses / accesses", derive=lambda t: _ratio(_misses(t), t["accesses"]), gated=True),
    Metric("capacity_miss_rate", "capacity misses / accesses", derive=lambda t: _ratio(t["capacity"], t["accesses"])),
    Metric("byte_miss_rate", "bytes missed / bytes accessed",
           derive=lambda t: _ratio(t["miss_bytes"], t["accessed_bytes"])),
    Metric("accessed_bytes", "bytes of the revisions accesses need", "accessed_bytes"),
    Metric("miss_bytes", "bytes of the revisions misses need", "miss_bytes"),
    Metric("reread_bytes", "bytes of capacity misses: the re-read cost", "capacity_bytes"),
    Metric("reread_tokens", "re-read bytes / bytes per token",
           derive=lambda t: t["capacity_bytes"] / t["bytes_per_token"], gated=True),
    Metric("invalidation_bytes", "bytes of invalidation misses", "invalidation_bytes"),
    Metric("evictions", "entries removed at turn ends", "evictions", gated=True),
    Metric("evicted_bytes", "bytes removed at turn ends", "evicted_bytes"),
    Metric("peak_bytes", "most bytes resident after a turn's eviction", derive=lambda t: t["peak_occupancy_bytes"]),
    Metric("peak_turn_bytes", "most bytes resident within a turn", derive=lambda t: t["peak_turn_bytes"]),
    # An exact sum, so this equals numpy's mean to the last bit whenever that sum is below 2**53.
    Metric("mean_occupancy", "mean over turns of resident bytes after eviction / max_bytes",
           derive=lambda t: t["occupancy_bytes"] / t["turns"] / t["max_bytes"] if t["turns"] and t["max_bytes"]
           else 0.0),
    Metric("violations", "turns whose answer broke the contract", "violations", gated=True),
    # A call whose prompt is larger than the window cannot happen (an API refuses it): a replay with
    # any such call is infeasible, ranked after the feasible ones and never priced (docs/design.md §5).
    Metric("over_window_calls", "turn ends with a call (the turn end's own or its summarization call) larger than "
                                "the window", "over_window"),
    Metric("feasible", "no call's prompt was larger than the window", derive=lambda t: not t["over_window"]),
    Metric("peak_window_bytes", "most of the window in use within a turn: pinned and resident",
           derive=lambda t: t["peak_window"]),
    # Each turn end is a call to the model; its prompt is the window after the turn end's eviction,
    # edits or compaction. Where the edits put an LLM-written summary in the window, a summarization
    # call comes first: its prompt is the window before them, its output the summary. Every call
    # writes to the cache what it did not read from it (its new suffix, as Claude Code's calls do);
    # with no cache everything is uncached.
    Metric("input_tokens", "input tokens billed over the session: the prompts of every call, summarization "
                           "calls included", derive=_tokens("prompt_bytes")),
    Metric("input_tokens_per_call", "mean input tokens of a call (summarization calls included)",
           derive=lambda t: _ratio(t["prompt_bytes"], t["turns"] + t["summary_calls"]) / t["bytes_per_token"]),
    Metric("peak_input_tokens", "most input tokens of one call", derive=_tokens("peak_prompt")),
    Metric("summary_calls", "summarization calls: turn ends whose edits put an LLM-written summary in the window",
           "summary_calls"),
    Metric("summary_input_tokens", "input tokens of the summarization calls (each one's prompt: the window before "
                                   "its compaction)", derive=_tokens("summary_prompt_bytes")),
    Metric("summary_output_tokens", "output tokens of the summarization calls: the summaries",
           derive=_tokens("summary_output_bytes")),
    Metric("summary_dropped_tokens", "tokens a compaction removed from the window that its summarization call's "
                                     "prompt, trimmed to fit the window, left out",
           derive=_tokens("summary_dropped_bytes")),
    Metric("peak_window_tokens", "most of the window in use within a turn, in tokens", derive=_tokens("peak_window")),
    Metric("cache_read_input_tokens", "input tokens read from the prompt cache", derive=_tokens("cache_read_bytes")),
    Metric("cache_write_input_tokens", "input tokens written to the prompt cache", derive=_tokens("cache_write_bytes")),
    Metric("uncached_input_tokens", "input tokens neither read from the cache nor written to it",
           derive=_tokens("uncached_bytes")),
    Metric("cost_input_tokens", "the cost of the input of every call, summarization calls included, in input-token "
                                "equivalents (cache read 0.1, 5-minute write 1.25, 1-hour write 2)", derive=_cost),
    Metric("cost_tokens", "the cost of every call in input-token equivalents: its input (cost_input_tokens) and "
                          f"the summaries' output at {OUTPUT_PRICE:g}", derive=_total_cost),
    Metric("compactions", "turn ends where a stretch of the conversation was compacted into a summary",
           "compactions"),
    Metric("oversize_entries", "entries larger than the whole budget when they entered", "oversize"),
    Metric("turns", "turn ends", "turns"),
    Metric("evict_calls", "evict calls (one per turn end)", derive=lambda t: t["turns"]),
    Metric("evict_p50_ns", "median evict call (nearest rank)", derive=lambda t: t["p50"], timed=True),
    Metric("evict_p90_ns", "90th percentile evict call", derive=lambda t: t["p90"], timed=True),
    Metric("evict_p99_ns", "99th percentile evict call", derive=lambda t: t["p99"], timed=True),
    Metric("evict_max_ns", "slowest evict call", derive=lambda t: t["peak_evict_ns"], timed=True),
)

METRIC_COLUMNS = tuple(m.name for m in METRICS)
#: Metrics that depend only on trace, strategy and budget, never on the machine.
DETERMINISTIC_METRICS = tuple(m.name for m in METRICS if not m.timed) + ("log_hash",)
GATED_METRICS = tuple(m.name for m in METRICS if m.gated)
#: What the "Context policies" comparison shows of each policy and strategy: billed input tokens, the summaries'
#: output, the cost of every call with the prompt cache (and of their input alone), re-fetched tokens (needed again
#: after leaving the window) and compactions.
POLICY_COLUMNS = ("input_tokens", "summary_output_tokens", "cost_tokens", "cost_input_tokens", "reread_tokens",
                  "compactions", "summary_input_tokens", "cache_read_input_tokens", "cache_write_input_tokens",
                  "uncached_input_tokens", "peak_window_tokens")


def call_cache(log: TurnLog, ttl_ms: int = CACHE_TTL_MS) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per call (turn end): its prompt, what it read from the cache, wrote to it and neither, in bytes.

    A call's prompt is the window after the turn end (pinned content and what stays resident); it
    reads the engine's ``cache_read_bytes`` and writes the rest; with no cache (``ttl_ms`` < 0) all
    of it is uncached.

    >>> [c.tolist() for c in call_cache(TurnLog.from_rows([]))]
    [[], [], [], []]
    """
    prompt = log.columns["occupancy_bytes"] + log.columns["pinned_bytes"]
    read = log.columns["cache_read_bytes"]
    if ttl_ms < 0:
        return prompt, np.zeros_like(prompt), np.zeros_like(prompt), prompt
    return prompt, read, prompt - read, np.zeros_like(prompt)


def nearest_rank(values: np.ndarray, percents: Sequence[float]) -> list[int]:
    """``np.percentile(values, percents, method="nearest")`` as ints, from one partial sort.

    >>> nearest_rank(np.array([5, 1, 4, 2, 3]), (0, 50, 90, 100))
    [1, 3, 5, 5]
    """
    last = len(values) - 1
    ranks = [round(p / 100 * last) for p in percents]   # half to even, as numpy rounds
    return np.partition(values, ranks)[ranks].tolist()


def log_totals_numpy(table: np.ndarray) -> tuple[list[int], list[int], int, int, int]:
    """`log_totals` by its definition, with numpy: each field's sum over the rows (exact) and largest value; the
    prompts' sum (each row's occupancy plus pinned bytes) and the cache reads' sum, exact; the largest prompt."""
    columns = {name: table[:, i] for i, name in enumerate(TURN_FIELDS)}
    prompt = columns["occupancy_bytes"] + columns["pinned_bytes"]
    return ([exact_sum(table[:, i]) for i in range(len(TURN_FIELDS))], table.max(axis=0).tolist(), exact_sum(prompt),
            exact_sum(columns["cache_read_bytes"]), int(prompt.max()))


def log_totals(table: np.ndarray) -> tuple[list[int], list[int], int, int, int]:
    """Over the rows of a non-empty per-turn log: each `TURN_FIELDS` field's exact sum and largest value, the exact
    sum of the prompts (occupancy plus pinned bytes of each row) and of the cache reads, and the largest prompt.
    In one pass of the compiled engine where it runs, else `log_totals_numpy`."""
    from ctxbench.sim.engine.compiled import ENABLED, engine   # here: the compiled engine imports this module
    if ENABLED:
        return engine.log_totals(np.ascontiguousarray(table, dtype=np.int64))
    return log_totals_numpy(table)


def summarise(log: TurnLog, max_bytes: int, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
              oversize: int = 0, cache_ttl_ms: int = CACHE_TTL_MS) -> dict:
    """One metrics row (`METRICS`, in order) from a per-turn log; ``cache_ttl_ms`` is the lifetime of the
    prompt cache the replay had (it prices what is written, `cache_write_price`).

    >>> row = summarise(TurnLog.from_rows([]), 100)
    >>> row["miss_rate"], row["turns"], row["evict_p99_ns"]
    (0.0, 0, 0)
    """
    table = log.table
    turns = len(table)
    totals: dict = {"turns": turns, "oversize": oversize, "max_bytes": max_bytes, "bytes_per_token": bytes_per_token,
                    "cache_write_price": cache_write_price(cache_ttl_ms)}
    if turns:
        sums, peaks, prompts, reads, peak_prompt = log_totals(table)
        totals.update(zip(TURN_FIELDS, sums))
        totals.update(zip((f"peak_{f}" for f in TURN_FIELDS), peaks))
        totals["peak_window"] = totals["peak_window_bytes"]
        # The calls are the turn ends' and the summarization calls before some of them.
        prompts += totals["summary_prompt_bytes"]
        reads += totals["summary_cache_read_bytes"]
        totals["peak_prompt"] = max(peak_prompt, totals["peak_summary_prompt_bytes"])
        # Each call reads what the engine found in the cache and writes the rest; with no cache all is uncached.
        if cache_ttl_ms < 0:
            totals.update(prompt_bytes=prompts, cache_read_bytes=0, cache_write_bytes=0, uncached_bytes=prompts)
        else:
            totals.update(prompt_bytes=prompts, cache_read_bytes=reads, cache_write_bytes=prompts - reads,
                          uncached_bytes=0)
        totals["p50"], totals["p90"], totals["p99"] = nearest_rank(log.columns["evict_ns"], (50, 90, 99))
    else:
        totals.update(dict.fromkeys(TURN_FIELDS, 0))
        totals.update(dict.fromkeys((f"peak_{f}" for f in TURN_FIELDS), 0))
        totals["p50"] = totals["p90"] = totals["p99"] = totals["peak_window"] = totals["peak_prompt"] = 0
        totals.update(prompt_bytes=0, cache_write_bytes=0, uncached_bytes=0)
    return {m.name: m.compute(totals) for m in METRICS}


def pool(rows, metrics: Sequence[str], bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN) -> dict:
    """``metrics`` over several replays' rows (a DataFrame or dicts) taken together: additive
    metrics summed, the others recomputed from those sums (peaks and latency cannot be pooled).

    >>> pool([{"accesses": 4, "compulsory_misses": 1, "capacity_misses": 0, "invalidation_misses": 0},
    ...       {"accesses": 6, "compulsory_misses": 2, "capacity_misses": 2, "invalidation_misses": 0}],
    ...      ["capacity_misses", "miss_rate"])
    {'capacity_misses': 2, 'miss_rate': 0.5}
    """
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    totals: dict = {"bytes_per_token": bytes_per_token}
    for m in METRICS:
        if m.source is not None and all(m.name in r for r in records):
            totals[m.source] = int(sum(int(r[m.name]) for r in records))
    by_name = {m.name: m for m in METRICS}
    return {name: by_name[name].compute(totals) for name in metrics}
