"""ctxbench: replay coding-agent sessions against context-eviction strategies and policies (`ctxbench.sim`, `ctxbench.strategies`, `ctxbench.traces`)."""
