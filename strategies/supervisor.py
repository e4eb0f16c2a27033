"""The supervisor of a ``cmd:`` program: runs it, and when it ends, is stopped or its parent dies, kills every descendant.

Run as ``python -I -S supervisor.py PARENT_PID PROGRAM [ARG...]`` (standard library only, so that it starts fast).
On Linux it is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the program starts that is orphaned,
by ``setsid``, a double fork or a replaced environment, is re-parented to it, so that it can find and kill the
whole tree. It ends when the program exits (with the program's status: its code, or the same signal), on
SIGTERM, SIGINT or SIGHUP (then it kills the program first), or when ``PARENT_PID`` is no longer its parent
(ctxbench was killed outright); in every case nothing the program started is left running.
"""

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.2
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):   # not Linux: the process group is what is killed
        pass


def _children() -> list[int]:
    """This process's children, from /proc (empty where there is none)."""
    own = str(os.getpid())
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[1] == own:
                found.append(int(name))
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_tree() -> None:
    """SIGKILL every child this process has, and again for what was re-parented to it meanwhile, until it has
    none."""
    while True:
        _reap()
        children = _children()
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        signal.sigtimedwait([signal.SIGCHLD], 0.01)


def main(argv: list[str]) -> int:
    parent, program = int(argv[0]), argv[1:]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
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
