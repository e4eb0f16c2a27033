"""The simulator: the replay engine, what it measures, what it writes for people, and the command line."""

__all__ = ["ctxbench_version"]


def ctxbench_version() -> str:
    """The installed ctxbench version."""
    # Imported here: the command line handles signals from its first instant, and this package is imported first.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxbench")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "unknown"
