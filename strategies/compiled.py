"""The optional compiled kernels of the built-in strategies (``strategies/_kernels.c``): built, and in use."""

import os

from ctxbench.strategies.contract import ContextEntry

try:
    from ctxbench.strategies import _kernels
except ImportError:   # not built (no C compiler at install): the Python code only
    _kernels = None

__all__ = ["ENABLED", "IMPORTANCE", "LRU", "evict_order", "pure_python_requested", "read_only_slot"]

#: Kernel numbers understood by `evict_order`.
LRU, IMPORTANCE = 0, 1


def pure_python_requested() -> bool:
    """Whether ``CTXBENCH_PURE_PYTHON`` asks for the Python code everywhere (set, and not ``0``)."""
    return os.environ.get("CTXBENCH_PURE_PYTHON", "") not in ("", "0")


#: Whether built-in strategies use the kernels by default: built, and no pure Python requested.
ENABLED = _kernels is not None and not pure_python_requested()

if _kernels is not None:
    _kernels.bind(ContextEntry)
    #: ``evict_order(kind, entries, max_bytes, cap, total)``: the ids to evict, or ``None`` when
    #: the input needs the Python reference (see ``strategies/_kernels.c``).
    evict_order = _kernels.evict_order
else:
    evict_order = None


def read_only_slot(owner: type, member):
    """A descriptor that reads the object slot ``member`` (a member descriptor of ``owner``) stands for and refuses
    every write, ``object.__setattr__`` included (compiled where built: a read-only member descriptor, as fast to
    read as the slot itself; else a property)."""
    if _kernels is not None:
        return _kernels.read_only_slot(owner, member)
    return property(member.__get__, doc=f"{owner.__name__}.{member.__name__}, read-only")
