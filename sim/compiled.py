"""The optional compiled fast path (``sim/_fastpath.c``): whether it is built, and whether it runs."""

from strategies.compiled import pure_python_requested

try:
    from sim import _fastpath
except ImportError:   # not built (no C compiler at install): the Python path only
    _fastpath = None

#: Whether the compiled code runs by default: built, and ``CTXBENCH_PURE_PYTHON`` unset or ``0``.
ENABLED = _fastpath is not None and not pure_python_requested()
