"""``python -m sim.cli``: the ``ctxbench`` command."""

import sys

from ctxbench.sim.cli import command

sys.exit(command())
