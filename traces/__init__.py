"""Trace schema, validation, storage, synthetic generation, statistics and importers."""

from traces.errors import TraceError
from traces.io import load, save
from traces.schema import COLUMNS, OPS, REQUIRED_COLUMNS, empty_trace, validate

__all__ = ["COLUMNS", "OPS", "REQUIRED_COLUMNS", "TraceError", "empty_trace", "load", "save", "validate"]
