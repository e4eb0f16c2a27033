"""Maps the repository's folders into the one ``ctxbench`` namespace and builds the optional compiled
code (the replay engine, the built-in strategies' kernels); everything else is in pyproject.toml."""

from setuptools import Extension, find_packages, setup

#: Each top-level folder installs as a subpackage of ``ctxbench`` (``sim`` as ``ctxbench.sim``), so
#: nothing collides with other distributions' top-level names.
FOLDERS = ("sim", "strategies", "traces")
PACKAGES = ["ctxbench"] + [f"ctxbench.{name}" for name in find_packages(include=[f"{f}*" for f in FOLDERS])]
PACKAGE_DIR = {"ctxbench": "ctxbench", **{f"ctxbench.{folder}": folder for folder in FOLDERS}}

# optional: without a C compiler the install goes on, and the Python code runs instead.
HEADERS = ["strategies/_slot_offset.h"]
setup(packages=PACKAGES, package_dir=PACKAGE_DIR,
      ext_modules=[Extension("ctxbench.sim.engine._engine", ["sim/engine/_engine.c"], depends=HEADERS, optional=True),
                   Extension("ctxbench.strategies._kernels", ["strategies/_kernels.c"], depends=HEADERS, optional=True)])
