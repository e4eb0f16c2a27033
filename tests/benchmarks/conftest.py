"""The benchmarks import the test suite's helpers (tests/whole_window.py) as the tests do."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
