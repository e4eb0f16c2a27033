"""Repository models for the generator: a synthetic directory tree, or a real checkout's files."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["Repo", "RepoError", "synthetic_repo", "repo_from_checkout", "lognormal_sigma", "HUB_NAMES"]

Z90 = 1.2815515655446004  # the standard normal's 90th percentile

# Basenames (without extension) that make a file a hub: read from everywhere in a session.
HUB_NAMES: tuple[str, ...] = (
    "router", "routes", "urls", "config", "settings", "schema", "models", "app", "main", "index",
    "types", "constants", "utils", "api", "__init__", "package", "pyproject", "conftest", "setup",
)

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox",
                       ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".hypothesis"})

_WORDS = (
    "admin", "alerts", "api", "audit", "auth", "billing", "cache", "catalog", "cli", "client", "common",
    "core", "db", "events", "export", "feeds", "files", "forms", "graph", "http", "imports", "indexer",
    "io", "jobs", "ledger", "limits", "mail", "media", "metrics", "migrate", "notify", "orders", "parser",
    "payments", "plugins", "policy", "queue", "render", "reports", "retry", "search", "server", "session",
    "shipping", "signals", "storage", "stream", "sync", "tasks", "tenant", "tokens", "tracing", "users",
    "validate", "views", "web", "webhooks", "workers",
)
_SUFFIXES = ("", "_service", "_store", "_handler", "_utils", "_models", "_client", "_view", "_test_data",
             "_helpers", "_api", "_state")


class RepoError(ValueError):
    """A repository that cannot be used: no such directory, or no usable files in it."""


@dataclass(frozen=True, eq=False)
class Repo:
    """Files of a repository grouped by directory, their sizes, hubs, and candidate new files.

    Files of directory ``d`` are ``paths[dir_start[d]:dir_start[d] + dir_count[d]]`` in listing
    order (so a walk is consecutive indices); ``new_paths`` are names that do not exist yet,
    grouped the same way (``new_start``/``new_count``), for files a session creates.
    """

    paths: tuple[str, ...]
    sizes: np.ndarray        # int64 bytes per file
    dirs: tuple[str, ...]
    dir_start: np.ndarray    # int64 index of the directory's first file
    dir_count: np.ndarray    # int64 files per directory (>= 1)
    hubs: np.ndarray         # int64 file indices of hub files, most central first
    new_paths: tuple[str, ...]
    new_start: np.ndarray    # int64 index into new_paths of the directory's first candidate
    new_count: np.ndarray    # int64 candidates per directory (>= 1)

    @property
    def n_files(self) -> int:
        """Number of existing files."""
        return len(self.paths)

    @property
    def n_dirs(self) -> int:
        """Number of directories holding files."""
        return len(self.dirs)

    @property
    def all_paths(self) -> tuple[str, ...]:
        """Existing files then candidate new files: the index space the generator draws from."""
        return self.paths + self.new_paths


def lognormal_sigma(median: float, p90: float) -> float:
    """The sigma of a lognormal with this median and 90th percentile.

    >>> round(lognormal_sigma(1700, 17000), 3)
    1.797
    """
    if not (0 < median < p90):
        raise ValueError(f"need 0 < median < p90, got median={median}, p90={p90}")
    return math.log(p90 / median) / Z90


def _group(paths_by_dir: dict[str, list[str]]) -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray, np.ndarray]:
    """Directories with files (sorted), their files in one sorted run each, and each run's start and length."""
    dirs = tuple(sorted(directory for directory, files in paths_by_dir.items() if files))
    flat: list[str] = []
    start, count = [], []
    for directory in dirs:
        start.append(len(flat))
        files = sorted(paths_by_dir[directory])
        count.append(len(files))
        flat.extend(files)
    return dirs, tuple(flat), np.asarray(start, dtype=np.int64), np.asarray(count, dtype=np.int64)


def _new_candidates(dirs: Sequence[str], existing: set[str], ext_of: dict[str, str],
                    per_dir: int) -> dict[str, list[str]]:
    """``per_dir`` plausible names per directory that are not existing files."""
    out: dict[str, list[str]] = {}
    for directory in dirs:
        ext = ext_of.get(directory, ".py")
        names: list[str] = []
        for index, word in enumerate(_WORDS):
            stem = f"new_{word}" if index % 2 else f"{word}_v2"
            path = f"{directory}/{stem}{ext}" if directory else f"{stem}{ext}"
            if path not in existing:
                names.append(path)
            if len(names) == per_dir:
                break
        out[directory] = names
    return out


def _choose_hubs(paths: Sequence[str], sizes: np.ndarray, n_hubs: int) -> np.ndarray:
    """Hub files: names in `HUB_NAMES` (shallow and large first), then the largest shallow files."""
    def depth(path: str) -> int:
        """How many directories deep ``path`` is."""
        return path.count("/")

    def named_order(index: int) -> tuple:
        """Shallow first, then by the order of `HUB_NAMES`, large first, then by path."""
        path = paths[index]
        return depth(path), HUB_NAMES.index(Path(path).stem.lower()), -int(sizes[index]), path

    named = [index for index, path in enumerate(paths) if Path(path).stem.lower() in HUB_NAMES]
    named.sort(key=named_order)
    chosen = named[:n_hubs]
    if len(chosen) < n_hubs:
        taken = set(chosen)
        rest = [index for index in range(len(paths)) if index not in taken]
        rest.sort(key=lambda index: (min(depth(paths[index]), 2), -int(sizes[index]), paths[index]))
        chosen += rest[: n_hubs - len(chosen)]
    return np.asarray(chosen, dtype=np.int64)


def synthetic_repo(rng: np.random.Generator, files: int = 400, hubs: int = 6, size_median: float = 1700,
                   size_p90: float = 17000, size_max: int = 120_000, files_per_dir: float = 10.0) -> Repo:
    """A plausible Python project with ``files`` files and lognormal sizes (median, p90, cap).

    Directories hold about ``files_per_dir`` files each (``src/app/<pkg>[/<sub>]``, mirrored
    ``tests/``, ``docs``, ``scripts``); hub files (router, config, schema, models, ...) sit at
    the package root and are at least median-sized (between the median and the p90).

    >>> r = synthetic_repo(np.random.default_rng(0), files=50, hubs=3)
    >>> r.n_files, [r.paths[i] for i in r.hubs]
    (50, ['src/app/router.py', 'src/app/config.py', 'src/app/schema.py'])
    """
    if files < 2 or hubs < 0 or hubs > files // 2:
        raise RepoError(f"synthetic repo needs files >= 2 and 0 <= hubs <= files/2, got files={files}, hubs={hubs}")
    sigma = lognormal_sigma(size_median, size_p90)
    hub_names = ("router", "config", "schema", "models", "settings", "app", "constants", "types", "api", "main",
                 "urls", "utils", "index", "conftest")
    hub_paths = [f"src/app/{hub_names[hub % len(hub_names)]}{'' if hub < len(hub_names) else hub // len(hub_names)}.py"
                 for hub in range(hubs)]
    n_dirs = max(1, min(round((files - hubs) / files_per_dir), files - hubs))
    words = list(_WORDS)
    order = rng.permutation(len(words))
    src_dirs: list[str] = []
    for dir_index in range(n_dirs):
        top = words[order[dir_index % len(words)]]
        if dir_index < len(words):
            src_dirs.append(f"src/app/{top}")
        else:
            sub = words[order[(dir_index // len(words) + dir_index) % len(words)]]
            src_dirs.append(f"src/app/{top}/{sub}{dir_index // (len(words) ** 2) or ''}")
    n_test = n_dirs // 4
    dirs = src_dirs[: n_dirs - n_test - (1 if n_dirs > 6 else 0)]
    dirs += [f"tests/{directory.split('/', 2)[2]}" for directory in dirs[:n_test]]
    if n_dirs > 6:
        dirs.append("docs")
    weights = rng.dirichlet(np.full(len(dirs), 2.0))
    per_dir = 1 + rng.multinomial(files - hubs - len(dirs), weights)
    by_dir: dict[str, list[str]] = {"src/app": list(hub_paths)}
    ext_of = {"docs": ".md"}
    for directory, n_dir_files in zip(dirs, per_dir):
        ext = ext_of.get(directory, ".py")
        prefix = "test_" if directory.startswith("tests/") else ""
        names: set[str] = set()
        picks = rng.integers(0, len(words) * len(_SUFFIXES), size=4 * int(n_dir_files) + 8)
        for pick in picks:
            word, suffix = divmod(int(pick), len(_SUFFIXES))
            names.add(f"{directory}/{prefix}{words[word]}{_SUFFIXES[suffix]}{ext}")
            if len(names) == n_dir_files:
                break
        number = 0
        while len(names) < n_dir_files:  # tiny vocabulary collisions: number the rest
            names.add(f"{directory}/{prefix}module_{number}{ext}")
            number += 1
        by_dir[directory] = sorted(names)
    all_dirs, paths, start, count = _group(by_dir)
    sizes = np.exp(np.log(size_median) + sigma * rng.standard_normal(len(paths)))
    is_hub = np.isin(np.asarray(paths, dtype=object), np.asarray(hub_paths, dtype=object))
    sizes[is_hub] = np.clip(sizes[is_hub], size_median, size_p90)
    sizes = np.clip(np.rint(sizes), 40, size_max).astype(np.int64)
    position = {path: index for index, path in enumerate(paths)}
    hub_idx = np.asarray([position[path] for path in hub_paths], dtype=np.int64)
    new_by_dir = _new_candidates(all_dirs, set(paths), ext_of, per_dir=4)
    _, new_paths, new_start, new_count = _group(dict(new_by_dir))
    return Repo(paths, sizes, all_dirs, start, count, hub_idx, new_paths, new_start, new_count)


def _is_binary(path: Path) -> bool:
    """Whether the file has a NUL byte in its first 8 KiB."""
    with open(path, "rb") as fh:
        return b"\0" in fh.read(8192)


def repo_from_checkout(path: str | os.PathLike, hubs: int = 6, max_file_bytes: int = 1_000_000) -> Repo:
    """The text files of a real checkout (relative paths, on-disk sizes) as a `Repo`.

    Skips version-control, cache and ``*.egg-info`` directories (`SKIP_DIRS`), symbolic links, binary files
    (a NUL byte in the first 8 KiB) and files over ``max_file_bytes``. Raises `RepoError` if
    ``path`` is not a directory or holds no usable file.
    """
    root = Path(path)
    if not root.is_dir():
        raise RepoError(f"{root}: not a directory")
    by_dir: dict[str, list[str]] = {}
    size_of: dict[str, int] = {}
    ext_count: dict[str, dict[str, int]] = {}
    for current, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if name not in SKIP_DIRS and not name.endswith(".egg-info"))
        rel_dir = Path(current).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        for name in sorted(filenames):
            full = Path(current) / name
            try:
                if full.is_symlink() or not full.is_file():
                    continue
                size = full.stat().st_size
                if size > max_file_bytes or _is_binary(full):
                    continue
            except OSError:
                continue  # unreadable or vanished: not part of the model
            rel = f"{rel_dir}/{name}" if rel_dir else name
            by_dir.setdefault(rel_dir, []).append(rel)
            size_of[rel] = size
            ext = Path(name).suffix
            counts = ext_count.setdefault(rel_dir, {})
            counts[ext] = counts.get(ext, 0) + 1
    if not size_of:
        raise RepoError(f"{root}: no usable text files (binaries, links and files over {max_file_bytes} bytes "
                        f"are skipped)")
    dirs, paths, start, count = _group(by_dir)
    sizes = np.asarray([size_of[path] for path in paths], dtype=np.int64)
    ext_of = {directory: max(sorted(counts), key=counts.__getitem__) or ".txt"
              for directory, counts in ext_count.items()}
    new_by_dir = _new_candidates(dirs, set(paths), ext_of, per_dir=4)
    _, new_paths, new_start, new_count = _group(new_by_dir)
    hub_idx = _choose_hubs(paths, sizes, min(hubs, len(paths)))
    return Repo(paths, sizes, dirs, start, count, hub_idx, new_paths, new_start, new_count)
