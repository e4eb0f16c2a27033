"""The simulator: the replay engine, what it measures, what it writes for people, and the command line."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["ctxbench_version"]


def ctxbench_version() -> str:
    """The installed ctxbench version."""
    try:
        return version("ctxbench")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "unknown"
