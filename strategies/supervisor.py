"""The supervisor of a ``cmd:`` program: runs it, and when it ends, is stopped or its parent dies, kills every descendant.

Run as ``python -I -S supervisor.py PARENT_PID PROGRAM [ARG...]`` (standard library only, so that it starts fast).
On Linux it is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the program starts that is orphaned,
by ``setsid``, a double fork or a replaced environment, is re-parented to it, so that it can find and kill the
whole tree. It ends when the program exits (with the program's status: its code, or the same signal), on
SIGTERM, SIGINT or SIGHUP (then it kills the program first), or when ``PARENT_PID`` is no longer its parent
(ctxbench was killed outright); in every case nothing the program started is left running.

`become_subreaper` and `kill_tree` serve the processes that run Python strategy code as well
(`strategies.isolation.in_worker`) and the ``ctxbench`` command itself (`sim.cli.command`).
"""

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.2
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):   # not Linux: the process group is what is killed
        pass


def become_subreaper() -> None:
    """Have what this process's descendants orphan re-parented to it, not to init (Linux; elsewhere nothing)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _living_descendants() -> list[int]:
    """Every process below this one that has not exited (zombies left out), from /proc (empty without it)."""
    parents: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(name))
    found, below = [], [os.getpid()]
    while below:
        for child in parents.get(below.pop(), ()):
            found.append(child)
            below.append(child)
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree(reap: bool = True, limit_s: float = 5.0) -> None:
    """SIGKILL every process below this one, and again for what was started or re-parented meanwhile, until
    none is left running (or ``limit_s`` has passed). ``reap``: wait for this process's children as they end
    (only where nothing else waits for them: the supervisor)."""
    deadline = time.monotonic() + limit_s
    while True:
        if reap:
            _reap()
        living = _living_descendants()
        if not living or time.monotonic() > deadline:
            return
        for pid in living:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


def supervised(argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` under this supervisor, watching this process as its parent (the
    supervisor needs ``sigtimedwait``: Linux and most POSIX systems); elsewhere ``argv`` itself, whose process
    group is then what is killed."""
    if not hasattr(signal, "sigtimedwait"):  # pragma: no cover - macOS
        return list(argv)
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), *argv]


def main(argv: list[str]) -> int:
    parent, program = int(argv[0]), argv[1:]
    become_subreaper()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD, *STOPS])
    pid = os.fork()
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD, *STOPS])
            os.execvp(program[0], program)
        except OSError as exc:
            os.write(2, f"cannot start {program[0]!r}: {exc}\n".encode())
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):   # the program's pipes are its own: ctxbench sees their end when the program's tree ends
        os.dup2(null, fd)
    status = None
    while status is None:
        if os.getppid() != parent:
            break
        info = signal.sigtimedwait([signal.SIGCHLD, *STOPS], POLL_S)
        if info is not None and info.si_signo != signal.SIGCHLD:
            break
        try:
            done, code = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            status = code
    kill_tree()
    if status is not None and os.WIFSIGNALED(status):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD, *STOPS])
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status) if status is not None else 128 + signal.SIGTERM


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
