"""Serve a ctxbench strategy (lru by default) over the ``cmd:`` JSON-lines protocol.

Run ``ctxbench run --strategy lru 'cmd:python examples/lru_external.py'`` to compare the same
strategy in process and behind a pipe: the difference in eviction latency is the IPC cost.
``python examples/lru_external.py 'gdsf?aging=2'`` serves another spec.
"""

import json
import sys

from ctxbench.strategies.contract import load_request
from ctxbench.strategies.registry import make


def main(spec: str = "lru") -> None:
    strategy = make(spec)
    for line in sys.stdin:
        state, budget = load_request(line)
        sys.stdout.write(json.dumps({"evict": list(strategy.evict(state, budget))}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:2])
