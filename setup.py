"""Builds the optional compiled code (the replay engine, the built-in strategies' kernels);
everything else is in pyproject.toml."""

from setuptools import Extension, setup

# optional: without a C compiler the install goes on, and the Python code runs instead.
HEADERS = ["strategies/_slot_offset.h"]
# The engine: its module and core, resolution, and the two models that plug into the core.
ENGINE = ["sim/engine/_engine.c", "sim/engine/_resolve.c", "sim/engine/_managed.c", "sim/engine/_transcript.c"]
setup(ext_modules=[Extension("sim.engine._engine", ENGINE, depends=HEADERS + ["sim/engine/_engine.h"], optional=True),
                   Extension("strategies._kernels", ["strategies/_kernels.c"], depends=HEADERS, optional=True)])
