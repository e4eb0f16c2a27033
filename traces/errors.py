"""Errors raised by the traces package."""


class TraceError(ValueError):
    """A trace that cannot be read, or that breaks the schema; the message names where."""
