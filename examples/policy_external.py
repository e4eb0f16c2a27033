"""Serve a ctxbench context policy (observation-masking by default) over the ``cmd:`` JSON-lines protocol.

``ctxbench run --strategy observation-masking 'cmd:python examples/policy_external.py?kind=policy'``
replays the same policy in process and behind a pipe; their numbers are the same.
``python examples/policy_external.py claude-code`` serves another spec.
"""

import json
import sys

from ctxbench.strategies.policy import edits_to_json, request_from_json
from ctxbench.strategies.registry import make


def main(spec: str = "observation-masking") -> None:
    policy = make(spec)
    for line in sys.stdin:
        items, window = request_from_json(json.loads(line))
        sys.stdout.write(json.dumps(edits_to_json(policy.edit(items, window))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:2])
