"""Trace schema, validation, storage, synthetic generation, statistics and importers."""

from ctxbench.traces.errors import TraceError
from ctxbench.traces.io import load, save
from ctxbench.traces.presets import PRESETS, Knobs, PresetError, knobs
from ctxbench.traces.repo import Repo, RepoError, repo_from_checkout, synthetic_repo
from ctxbench.traces.schema import COLUMNS, OPS, REQUIRED_COLUMNS, empty_trace, validate

# `generate` and `stats` are imported from their modules (traces.generate, traces.stats): exporting
# the functions here would shadow the submodules of the same name.
__all__ = ["COLUMNS", "OPS", "PRESETS", "REQUIRED_COLUMNS", "Knobs", "PresetError", "Repo", "RepoError",
           "TraceError", "empty_trace", "knobs", "load", "repo_from_checkout", "save", "synthetic_repo",
           "validate"]
