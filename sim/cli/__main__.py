"""``python -m sim.cli``: the ``ctxbench`` command."""

import sys

from sim.cli import main

sys.exit(main())
