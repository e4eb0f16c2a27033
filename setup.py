"""Builds the optional compiled fast path of the manager; everything else is in pyproject.toml."""

from setuptools import Extension, setup

# optional: without a C compiler the install goes on, and the manager runs its Python path.
setup(ext_modules=[Extension("sim._fastpath", ["sim/_fastpath.c"], optional=True)])
