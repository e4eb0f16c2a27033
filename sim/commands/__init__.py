"""Subcommands of the ctxbench CLI, one module each (see `sim.cli`)."""
