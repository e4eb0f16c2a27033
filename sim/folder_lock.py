"""One command at a time on a results folder: a lock file beside it, held while a command reads or writes it.

A run that rewrites ``DIR`` while a report reads it, or two runs into one ``DIR``, would mix or lose
results. Each holds ``.DIR.ctxbench-lock`` (next to ``DIR``, which a run replaces whole) with an
exclusive ``flock`` for as long as it works on ``DIR``; a second command is refused in one line. The
lock is reentrant within a process, released explicitly (forked workers share it), and its file is
removed by the holder when done. Where no lock file can be made (a read-only parent), none is taken.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ctxbench.sim.errors import InputError

__all__ = ["lock_path", "hold", "release", "folder_lock"]

_HELD: dict[str, list[int]] = {}   # lock file -> [fd, depth]


def lock_path(target: str | os.PathLike) -> Path:
    """Where the lock of folder ``target`` lives: ``.NAME.ctxbench-lock`` beside it (links followed, so every
    spelling of one folder shares one lock, as `sim.output` resolves the folder it writes)."""
    t = Path(os.path.realpath(target))
    return t.parent / f".{t.name}.ctxbench-lock"


def hold(target: str | os.PathLike) -> str | None:
    """Take the lock of ``target`` (again, if this process holds it); `InputError` when another command holds it.

    Returns the key `release` takes, or None when no lock could be made there."""
    path = lock_path(target)
    key = str(path)
    if key in _HELD:
        _HELD[key][1] += 1
        return key
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EACCES, errno.EROFS, errno.EPERM):
                return None   # nowhere to lock: the parent is missing or read-only
            raise InputError(f"{target}: cannot lock it for this command: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise InputError(f"{Path(target)}: another ctxbench command is reading or writing it; wait for it "
                             "to finish, or choose another folder") from None
        try:   # a holder that finished removed the file: the lock must be on the file at the path now
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _HELD[key] = [fd, 1]
            return key
        os.close(fd)


def release(key: str | None) -> None:
    """Give back a lock `hold` took; the last release removes its file and unlocks it."""
    if key is None or key not in _HELD:
        return
    entry = _HELD[key]
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _HELD[key]
    with contextlib.suppress(OSError):
        os.unlink(key)
    with contextlib.suppress(OSError):
        fcntl.flock(entry[0], fcntl.LOCK_UN)   # forked workers share the lock: release it for all
    os.close(entry[0])


@contextlib.contextmanager
def folder_lock(target: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of folder ``target`` for the block (see `hold`)."""
    key = hold(target)
    try:
        yield
    finally:
        release(key)
