"""Builds the optional compiled code (the replay engine, the built-in strategies' kernels);
everything else is in pyproject.toml."""

from setuptools import Extension, setup

# optional: without a C compiler the install goes on, and the Python code runs instead.
HEADERS = ["strategies/_slot_offset.h"]
setup(ext_modules=[Extension("sim.engine._engine", ["sim/engine/_engine.c"], depends=HEADERS, optional=True),
                   Extension("strategies._kernels", ["strategies/_kernels.c"], depends=HEADERS, optional=True)])
