"""The strategies shipped with ctxbench, registered lazily by import path."""

from strategies.registry import register

BUILTINS: tuple[tuple[str, str, str], ...] = (
    ("lru", "strategies.lru:create_lru_context_strategy",
     "least recently accessed first (the default; max_entries=100)"),
    ("importance", "strategies.importance:create_importance_context_strategy",
     "lowest access_count x normalised recency / size first (max_entries=100)"),
)

for _name, _factory, _description in BUILTINS:
    register(_name, _factory, description=_description, builtin=True)
