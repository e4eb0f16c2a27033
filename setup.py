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
# The engine: its module and core, resolution, and the two models that plug into the core.
ENGINE = ["sim/engine/_engine.c", "sim/engine/_resolve.c", "sim/engine/_managed.c", "sim/engine/_transcript.c"]
setup(packages=PACKAGES, package_dir=PACKAGE_DIR,
      ext_modules=[Extension("ctxbench.sim.engine._engine", ENGINE, depends=HEADERS + ["sim/engine/_engine.h"],
                             optional=True),
                   Extension("ctxbench.strategies._kernels", ["strategies/_kernels.c"], depends=HEADERS, optional=True)])
