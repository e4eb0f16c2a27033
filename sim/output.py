"""Writing output without touching what ctxbench did not write: one rule for every file and directory.

The rule (README, "Safety"):

- A **directory** (``run --out``, ``report --out``) is ctxbench's when it holds a manifest,
  ``.ctxbench.json``, that lists the files ctxbench wrote there (or, written before manifests,
  when its ``meta.json`` is a ctxbench run's: then the files a results directory had are its).
  A missing or empty directory is written. One of ctxbench's own is replaced: whole and
  atomically (a rename) when it holds nothing else, else file by file (each atomically), the
  other files left as they are. Any other directory is refused unless ``force``, which writes
  ctxbench's files beside the others. A file that ctxbench would write but did not write itself
  (a user's ``results.csv``) is never replaced, with or without ``force``. A directory that is,
  or holds, the working directory is never renamed or removed.
- A **single file** (a trace, snapshots, a baseline) is replaced when it carries ctxbench's mark
  (its recogniser says so); any other existing file only with ``force``.
- Everything is written to a temporary beside (or, when files are added to an existing directory,
  inside) the target first, named ``.NAME.ctxbench-HOST-PID-RANDOM.tmp``; the temporaries of a
  process that is gone are removed by the next write to the same target, which says in one note
  what it found. While files are replaced one by one, the manifest names the writing process; a
  folder whose writer was killed part-way holds files of two runs, which `interrupted_writer`
  tells (readers refuse it, the next write replaces it). Files and directories are created with
  the permissions the umask gives, like any other program's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from ctxbench.sim import ctxbench_version
from ctxbench.sim.errors import InputError
from ctxbench.sim.folder_lock import hold, release
from ctxbench.traces.errors import OutOfRoom, no_room
from ctxbench.sim.interrupts import held

__all__ = ["MANIFEST", "OutputDir", "output_file", "check_output_dir", "check_output_file", "ctxbench_files",
           "has_ctxbench_mark", "remove_stale", "interrupted_writer"]

MANIFEST = ".ctxbench.json"
_WRITER = "ctxbench"
_MAX_MARK_BYTES = 16 << 20   # a manifest or a JSON document bigger than this is not one of ctxbench's

# What a results directory held before directories carried a manifest (ctxbench 0.1): recognised
# by a ctxbench ``meta.json``; these names are its files wherever they exist.
_LEGACY_FILES = frozenset(
    ["results.parquet", "results.csv", "turns.parquet", "meta.json", "summary.md", "arms.parquet",
     "thrashing.parquet", "report.md", "report.html"]
    + [f"figures/{slug}.{ext}" for slug in ("miss_ratio_curve", "reread_tokens", "latency_cdf", "occupancy",
                                            "timeline", "claim_modes", "price_of_purity")
       for ext in ("png", "svg")])

_TEMP = re.compile(r"^\.(?P<name>.*)\.ctxbench-(?P<host>[A-Za-z0-9]+)-(?P<pid>[0-9]+)-[0-9a-f]+\.(?P<kind>tmp|old)$")


# ----- temporaries ---------------------------------------------------------------------------------

def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"


def _temp_name(name: str, kind: str) -> str:
    return f".{name}.ctxbench-{_host()}-{os.getpid()}-{secrets.token_hex(4)}.{kind}"


def _is_temp(name: str) -> bool:
    return _TEMP.match(name) is not None


def _create_temp(directory: Path, name: str, *, is_dir: bool) -> Path:
    """A new, empty temporary file or directory for ``name`` in ``directory``, with the umask's permissions."""
    for _ in range(100):
        path = directory / _temp_name(name, "tmp")
        try:
            if is_dir:
                os.mkdir(path, 0o777)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return path
        except FileExistsError:
            continue
    raise InputError(f"{directory}: cannot create a temporary for {name}")  # pragma: no cover


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_temp(path: Path) -> None:
    """Remove a temporary this process made (all of it is ctxbench's)."""
    with held():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _entries(path: Path) -> int:
    """How many files a temporary holds (1 for a file)."""
    if not path.is_dir() or path.is_symlink():
        return 1
    return sum(len(files) for _, _, files in os.walk(path))


_SAID: set[str] = set()   # notes this process printed (a run checks its folder before and after its work)


def _note(target: Path, text: str) -> None:
    line = f"ctxbench: note: {target}: {text}"
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def remove_stale(target: Path) -> list[str]:
    """Remove temporaries for ``target`` left by ctxbench processes that are gone (killed while writing).

    A directory that an interrupted swap had moved away is put back when ``target`` is missing.
    Each thing found is said in one note on stderr; returns those notes.
    """
    places = [target.parent] + ([target] if target.is_dir() and not target.is_symlink() else [])
    host = _host()
    found = []
    for place in places:
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in sorted(names):
            m = _TEMP.match(name)
            if m is None or m["name"] != target.name or m["host"] != host or _alive(int(m["pid"])):
                continue
            path = place / name
            who = f"a ctxbench command (process {m['pid']}) that was killed"
            if m["kind"] == "tmp":
                count = _entries(path)
                _remove_temp(path)
                what = "file" if count == 1 else "files"
                found.append(f"removed the unfinished output of {who} while writing it ({count} {what}, in {name})")
            elif place == target.parent and not os.path.lexists(target):
                with contextlib.suppress(OSError):
                    os.rename(path, target)
                    found.append(f"put back the folder that {who} while replacing it had moved aside ({name})")
            else:
                _remove_ours(path)
                found.append(f"removed the earlier files that {who} after replacing them had left in {name}")
    pid = interrupted_writer(target)
    if pid is not None:
        found.append(f"holds files of two runs: a ctxbench command (process {pid}) was killed while replacing its "
                     "files one by one; this write replaces them")
    for text in found:
        _note(target, text)
    return found


# ----- what is ctxbench's ----------------------------------------------------------------------------

def _safe_relative(name: object) -> bool:
    if not isinstance(name, str) or not name or "\0" in name:
        return False
    p = PurePosixPath(name)
    return not p.is_absolute() and p.as_posix() == name and all(part not in ("", ".", "..") for part in p.parts)


def _read_json(path: Path):
    """The JSON document in ``path`` (a regular file of reasonable size), or None."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > _MAX_MARK_BYTES:
            return None
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def ctxbench_files(directory: str | os.PathLike) -> set[str] | None:
    """The files ctxbench wrote in ``directory`` (relative paths), or None if it is not a ctxbench directory."""
    d = Path(directory)
    doc = _read_json(d / MANIFEST)
    if doc is not None:
        if not (isinstance(doc, dict) and doc.get("written_by") == _WRITER and isinstance(doc.get("files"), list)):
            return None
        return {f for f in doc["files"] if _safe_relative(f)} | {MANIFEST}
    meta = _read_json(d / "meta.json")
    if isinstance(meta, dict) and "ctxbench_version" in meta and "config" in meta:
        return {f for f in _LEGACY_FILES if os.path.lexists(d / f)}
    return None


def interrupted_writer(directory: str | os.PathLike) -> int | None:
    """The process, gone, that was replacing ``directory``'s files one by one when it was killed, or None.

    Its manifest names a writer (``writing``) only while the files are replaced; a writer that is
    still running (or of another host) is not an interrupted one.
    """
    doc = _read_json(Path(directory) / MANIFEST)
    writer = doc.get("writing") if isinstance(doc, dict) and doc.get("written_by") == _WRITER else None
    if not isinstance(writer, dict) or writer.get("host") != _host():
        return None
    pid = writer.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or _alive(pid):
        return None
    return pid


def has_ctxbench_mark(path: str | os.PathLike) -> bool:
    """Whether a file carries ctxbench's mark: Parquet with its metadata key, or JSON whose ``format`` is ctxbench's."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    if head == b"PAR1":
        try:
            import pyarrow.parquet as pq

            from ctxbench.traces.io import META_KEY

            return META_KEY in (pq.read_schema(p).metadata or {})
        except Exception:
            return False
    doc = _read_json(p)
    return isinstance(doc, dict) and isinstance(doc.get("format"), str) and doc["format"].startswith(_WRITER)


def _first_foreign(directory: Path, ours: set[str]) -> str | None:
    """The first entry under ``directory`` that ctxbench did not write (a relative path), or None."""
    parents = {str(p) for f in ours for p in PurePosixPath(f).parents}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(directory / rel if rel else directory))
        except OSError:
            return rel or "."
        for entry in entries:
            path = f"{rel}{entry.name}"
            if _is_temp(entry.name):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if path in ours and not is_dir:
                continue
            if path in parents and is_dir:
                stack.append(path + "/")
                continue
            return path
    return None


def _holds_cwd(target: Path) -> bool:
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        return False
    return cwd == target or target in cwd.parents


def _resolve(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


# ----- directories -------------------------------------------------------------------------------

def check_output_dir(target: str | os.PathLike, *, force: bool = False) -> str:
    """Check that ctxbench may write the directory ``target``; raise `InputError` saying why not.

    Returns how it will be written: ``"create"``, ``"swap"`` (replaced whole) or ``"merge"``
    (files added and replaced one by one). Also removes stale temporaries of earlier writes.
    """
    t = _resolve(target)
    remove_stale(t)
    return _plan(t, force)


def _plan(t: Path, force: bool) -> str:
    if not os.path.lexists(t):
        return "create"
    if not t.is_dir():
        raise InputError(f"{t}: exists and is not a directory")
    ours = ctxbench_files(t)
    foreign = _first_foreign(t, ours or set())
    if ours is None and foreign is not None and not force:
        raise InputError(f"{t}: not a directory ctxbench wrote, and not empty (it holds {foreign!r}); choose a new "
                         f"or empty directory, or pass --force to add ctxbench's files beside the others")
    return "swap" if foreign is None and not _holds_cwd(t) else "merge"


def _files_in(directory: Path) -> list[str]:
    out = []
    for root, dirs, files in os.walk(directory):
        rel = Path(root).relative_to(directory)
        out.extend((rel / f).as_posix() for f in files)
        out.extend((rel / d).as_posix() for d in dirs if (Path(root) / d).is_symlink())
    return sorted(f for f in out if f != MANIFEST)


def _write_manifest(directory: Path, files, *, writing: bool = False) -> None:
    doc = {"written_by": _WRITER, "ctxbench_version": ctxbench_version(),
           "about": "the files ctxbench wrote in this directory; it replaces or removes only these",
           "files": sorted(set(files) - {MANIFEST})}
    if writing:   # until the last manifest: a kill part-way leaves a folder that says it is incomplete
        doc["writing"] = {"host": _host(), "pid": os.getpid()}
    with output_file(directory / MANIFEST, ours=lambda p: True) as tmp:
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _check_collisions(t: Path, new: list[str], ours: set[str]) -> None:
    """A file ctxbench would write whose path holds something ctxbench did not write: refused."""
    for name in new:
        parts = PurePosixPath(name).parts
        for i in range(1, len(parts) + 1):
            rel = "/".join(parts[:i])
            p = t / rel
            if not os.path.lexists(p):
                break
            last = i == len(parts)
            if (last and (rel not in ours or p.is_dir() and not p.is_symlink())) or \
                    (not last and (p.is_symlink() or not p.is_dir())):
                raise InputError(f"{p}: exists and was not written by ctxbench; move it away or choose "
                                 f"another output directory (ctxbench never replaces it, even with --force)")


def _remove_ours(directory: Path, names: set[str] | None = None) -> None:
    """Remove ctxbench's files (``names``, else those of the directory's manifest), then emptied directories."""
    if names is None:
        names = ctxbench_files(directory) or set()
    emptied = set()
    for name in sorted(names):
        p = directory / name
        if os.path.lexists(p) and (p.is_symlink() or not p.is_dir()):
            with contextlib.suppress(OSError):
                p.unlink()
                emptied.update(str(q) for q in PurePosixPath(name).parents if str(q) != ".")
    for name in sorted(emptied, key=lambda x: -x.count("/")):
        with contextlib.suppress(OSError):
            (directory / name).rmdir()
    if directory.name.endswith(".old"):
        try:
            directory.rmdir()
        except OSError:
            if directory.exists():
                print(f"ctxbench: note: kept {directory}: it holds files ctxbench did not write", file=sys.stderr)


class OutputDir(contextlib.AbstractContextManager):
    """Write a directory by the rule: ``with OutputDir(target) as staging:`` fill ``staging``, installed on success.

    ``part(name)`` says which of ctxbench's earlier files the new ones replace (default: all of
    them; `write_report` replaces only the report's). Construction checks the target
    (`check_output_dir`); after installing, ``files`` lists what was written.
    """

    def __init__(self, target: str | os.PathLike, *, part: Callable[[str], bool] | None = None,
                 force: bool = False) -> None:
        self.target = _resolve(target)
        self.part = part
        self.force = force
        self._lock = hold(self.target)   # one command at a time on the folder, from now until __exit__
        try:
            self.mode = check_output_dir(self.target, force=force)
        except BaseException:
            release(self._lock)
            raise
        if part is not None and self.mode == "swap":
            self.mode = "merge"   # the rest of the directory stays
        self.files: list[str] = []
        self._staging: Path | None = None

    def __enter__(self) -> Path:
        t = self.target
        try:
            if self.mode == "merge":
                self._staging = _create_temp(t, t.name, is_dir=True)
            else:
                t.parent.mkdir(parents=True, exist_ok=True)
                self._staging = _create_temp(t.parent, t.name, is_dir=True)
        except OSError as exc:
            raise InputError(f"{t}: cannot write: {exc.strerror or exc}") from None
        return self._staging

    def __exit__(self, exc_type, exc, tb) -> None:
        staging = self._staging
        try:
            if exc_type is None:
                try:
                    self._install(staging)
                except OSError as err:
                    if no_room(err):
                        raise OutOfRoom(f"{self.target}: no room to write: {err.strerror or err}") from None
                    raise InputError(f"{self.target}: cannot write: {err.strerror or err}") from None
        finally:
            try:
                if staging is not None and os.path.lexists(staging):
                    _remove_temp(staging)
            finally:
                release(self._lock)
                self._lock = None

    def _install(self, staging: Path) -> None:
        t = self.target
        new = _files_in(staging)
        self.files = new
        with held():
            if not staging.is_dir():
                raise InputError(f"{t}: changed while ctxbench was writing it; run again")
            mode = _plan(t, self.force)   # again: the directory may have changed meanwhile
            if mode == "swap" and (self.part is not None or staging.parent == t):
                mode = "merge"
            ours = (ctxbench_files(t) or set()) if mode != "create" else set()
            _check_collisions(t, new, ours)
            if mode == "create":
                _write_manifest(staging, new)
                os.rename(staging, t)
            elif mode == "swap":
                _write_manifest(staging, new)
                old = t.parent / _temp_name(t.name, "old")
                os.rename(t, old)
                os.rename(staging, t)
                _remove_ours(old, ours)
            else:
                replaced = {o for o in ours if self.part is None or self.part(o)} - {MANIFEST}
                _write_manifest(t, ours | set(new), writing=True)   # first: a kill part-way leaves every file accounted for
                for name in new:
                    (t / name).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(staging / name, t / name)
                _remove_ours(t, replaced - set(new))
                kept = {o for o in ours - replaced if os.path.lexists(t / o)}
                _write_manifest(t, kept | set(new))


# ----- single files ------------------------------------------------------------------------------

def check_output_file(path: str | os.PathLike, *, ours: Callable[[Path], bool] | None = None,
                      force: bool = False) -> Path:
    """Check that ctxbench may write the file ``path``; raise `InputError` saying why not.

    An existing file is replaced when ``ours(path)`` (default `has_ctxbench_mark`) says ctxbench
    wrote it, or with ``force``; a file a results folder's manifest lists never is (it would break
    the folder). Removes stale temporaries of earlier writes; returns the path
    that will be written (symbolic links followed).
    """
    p = _resolve(path)
    remove_stale(p)
    if p.name != MANIFEST and p.name in (ctxbench_files(p.parent) or ()):
        # even with --force: replacing one file of a results folder would break the folder
        raise InputError(f"{p}: is part of the results folder {p.parent} (its manifest lists it); "
                         "write to a path outside that folder")
    if os.path.lexists(p):
        if p.is_dir():
            raise InputError(f"{p}: is a directory")
        if not force and not (ours or has_ctxbench_mark)(p):
            raise InputError(f"{p}: exists and ctxbench cannot tell that it wrote it; choose another path, "
                             f"or pass --force to replace it")
    return p


@contextlib.contextmanager
def output_file(path: str | os.PathLike, *, ours: Callable[[Path], bool] | None = None,
                force: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` only if the block succeeds.

    The rule of `check_output_file` applies, before and again when replacing.
    """
    target = check_output_file(path, ours=ours, force=force)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_temp(target.parent, target.name, is_dir=False)
    except OSError as exc:
        raise InputError(f"{target}: cannot write: {exc.strerror or exc}") from None
    try:
        yield tmp
        with held():
            check_output_file(target, ours=ours, force=force)
            os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            _remove_temp(tmp)
