"""The strategies and policies shipped with ctxbench, registered lazily by import path."""

from ctxbench.strategies.external import load_command_spec
from ctxbench.strategies.registry import register, register_scheme

BUILTINS: tuple[tuple[str, str, str], ...] = (
    ("lru", "ctxbench.strategies.lru:create_lru_context_strategy",
     "least recently accessed first (the default; max_entries=100)"),
    ("importance", "ctxbench.strategies.importance:create_importance_context_strategy",
     "lowest access_count x normalised recency / size first (max_entries=100)"),
    ("lfu", "ctxbench.strategies.lfu:create_lfu_context_strategy",
     "fewest accesses first, least recent among equals (LFU; max_entries=100)"),
    ("size", "ctxbench.strategies.size:create_size_context_strategy",
     "largest entries first (SIZE, Williams et al. 1996; max_entries=100)"),
    ("segmented", "ctxbench.strategies.segmented:create_segmented_context_strategy",
     "once-used entries before re-used ones, LRU within each (SLRU-like; protected=0.8, threshold=2)"),
    ("outputs-first", "ctxbench.strategies.outputs_first:create_outputs_first_context_strategy",
     "tool outputs (tool://...) before files, LRU within each (max_entries=100)"),
    ("gdsf", "ctxbench.strategies.gdsf:create_gdsf_context_strategy",
     "outputs first, then lowest recency clock + frequency x re-read cost / footprint "
     "(GreedyDual-Size-Frequency-style; aging=1)"),
    ("fifo", "ctxbench.strategies.fifo:create_fifo_context_strategy",
     "stateful: first in, first out; hits change nothing (max_entries=100)"),
    ("sieve", "ctxbench.strategies.sieve:create_sieve_context_strategy",
     "stateful: SIEVE, FIFO queue with visited bits and a moving hand (Zhang et al., NSDI'24)"),
    ("s3fifo", "ctxbench.strategies.s3fifo:create_s3fifo_context_strategy",
     "stateful: S3-FIFO, small/main/ghost FIFO queues (Yang et al., SOSP'23; small=0.1)"),
    ("arc", "ctxbench.strategies.arc:create_arc_context_strategy",
     "stateful: ARC, recency/frequency lists tuned by ghost hits (Megiddo & Modha, FAST'03)"),
)

#: The context policies of real agents (`strategies.policy`), with their projects' defaults.
POLICIES: tuple[tuple[str, str, str], ...] = (
    ("claude-code", "ctxbench.strategies.policies.compaction:create_claude_code_policy",
     "policy: Claude Code's auto-compaction at 167K tokens into a summary and 5 recent files"),
    ("codex", "ctxbench.strategies.policies.compaction:create_codex_policy",
     "policy: Codex's compaction at 0.9 of the window, keeping user messages up to 20K tokens"),
    ("gemini-cli", "ctxbench.strategies.policies.compaction:create_gemini_cli_policy",
     "policy: Gemini CLI's compression at 0.5 of the window, the newest 30% kept from a user message on"),
    ("clear-tool-uses", "ctxbench.strategies.policies.masking:create_clear_tool_uses_policy",
     "policy: Anthropic's context editing, clearing tool results but the last 3 past 100K tokens"),
    ("observation-masking", "ctxbench.strategies.policies.masking:create_observation_masking_policy",
     "policy: SWE-agent's last_n_observations, old tool results masked but the last 5 (n=5)"),
    ("openhands-summarizing", "ctxbench.strategies.policies.condensers:create_openhands_summarizing_policy",
     "policy: OpenHands' LLM-summarizing condenser (max_size=80, keep_first=4)"),
    ("amortized-forgetting", "ctxbench.strategies.policies.condensers:create_amortized_forgetting_policy",
     "policy: OpenHands' amortized forgetting (max_size=100, keep_first=1), no summary"),
    ("schedule", "ctxbench.strategies.policies.schedule:create_schedule_policy",
     "policy: the whole history compacted into a summary at given calls (at=3:7), as opt:schedule finds"),
)

for _name, _factory, _description in BUILTINS:
    register(_name, _factory, description=_description, builtin=True)
for _name, _factory, _description in POLICIES:
    register(_name, _factory, description=_description, builtin=True, kind="policy")

# cmd:<command line>[?timeout_ms=N]: a strategy answered by an external process (JSON lines).
register_scheme("cmd", load_command_spec)
