"""Strategies in other languages: an external process that answers JSON-lines requests (``cmd:`` specs).

Protocol (one process per replay; one request line per ``evict`` call, one reply line back)::

    request  {"state": [{"id": "src/a.ts:0", "path": "src/a.ts", "lastAccessedAt": 1700000000000,
                         "sizeBytes": 1834, "accessCount": 2}, ...],
              "budget": {"maxBytes": 760000, "maxEntries": 100}}
    reply    {"evict": ["src/a.ts:0", ...]}

Field names are the TypeScript runtime's (`strategies.contract.dump_request`); ``accessCount``
and ``maxEntries`` are omitted when absent. Each message is one line of UTF-8 JSON ending in
``\\n``; the process must flush its output after each reply. Anything it writes to stderr is
kept (the last lines) for error messages.

A context policy (`strategies.policy`) speaks the same way with ``kind=policy`` among the
options: one request per model call, the transcript and the window, one reply of edits::

    request  {"items": [{"id": "3", "role": "result", "kind": "code", "tokens": 812, "turn": 1,
                         "path": "src/a.ts", "ref": "src/a.ts:0"}, ...],
              "window": {"maxTokens": 200000, "tokens": 171234, "turn": 57, "compactions": 0}}
    reply    {"edits": [{"replace": ["3", "4"], "tokens": 4000, "role": "summary"},
                        {"append": "attached", "tokens": 812, "ref": "src/a.ts:0"}]}

(`strategies.policy.items_to_json`, `edits_from_json`); ``{"edits": []}`` changes nothing.

Spec: ``cmd:<command line>[?timeout_ms=N&start_timeout_ms=N&kind=policy]``. The command line is split
like a POSIX shell does (``shlex``; quotes work, no shell features such as pipes or ``$VAR``)
and run in the current directory. The options are the text after the *last* ``?`` when it
consists only of ``key=value`` pairs joined by ``&`` (no spaces or quotes); any other ``?``
belongs to the command, so ``cmd:python serve.py 'lru?max_entries=50'`` has no options.
A command whose own last ``?`` is followed by something that looks like options is written
with a trailing ``?`` (an empty option list): ``cmd:tool --q?a=1?``.

The process runs under a supervisor (`strategies.supervisor`), in a process group (and session) of its
own; stopping it stops the whole tree, so nothing it started outlives it: on Linux the supervisor is a
child subreaper, so a descendant that left the group (``setsid``, a daemon's double fork, a replaced
environment) is re-parented to it and killed. The supervisor also ends the tree when ctxbench is
killed outright (SIGKILL: it watches its parent). As a fallback ctxbench kills the group and what
carries a mark in its environment (``CTXBENCH_EXTERNAL``). Ctrl-C on the terminal reaches ctxbench,
not the group: ctxbench stops it. A process should also exit at the end of its input.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import io
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from typing import Any

from ctxbench.strategies.contract import ContextBudget, ContextEntry, dump_request, parse_json
from ctxbench.strategies.errors import StrategyInputError, StrategyLoadError
from ctxbench.strategies.limits import MAX_TIME_LIMIT_MS, time_limit_ms
from ctxbench.strategies.policy import edits_from_json, items_to_json
from ctxbench.strategies.supervisor import supervised

__all__ = ["ExternalProcess", "ExternalStrategy", "ExternalPolicy", "ExternalError", "ExternalStrategyError",
           "ExternalTimeout",
           "ExternalEnded", "parse_command_spec",
           "load_command_spec", "stop_all",
           "DEFAULT_TIMEOUT_MS", "DEFAULT_START_TIMEOUT_MS"]

DEFAULT_TIMEOUT_MS = 5_000
DEFAULT_START_TIMEOUT_MS = 10_000
_OPTIONS = ("timeout_ms", "start_timeout_ms", "kind")
_KINDS = ("strategy", "policy")
_OPTION_PART = re.compile(r"""[A-Za-z_][A-Za-z0-9_]*=[^&\s'"]*""")
_STDERR_LINES = 40
_ERROR_LINE = re.compile(r"Error|Exception|error:|panic")
_STOP_WAIT_S = 2.0
_MARK = "CTXBENCH_EXTERNAL"
_RUNNING: weakref.WeakSet = weakref.WeakSet()   # started and not yet stopped, for `stop_all`


class ExternalError(RuntimeError):
    """The external process (a strategy's or a policy's) wrote something that is not a valid reply; the
    subclasses: it gave no reply in time (`ExternalTimeout`), or it ended (`ExternalEnded`)."""


#: The name it had when only strategies were external.
ExternalStrategyError = ExternalError


class ExternalTimeout(ExternalStrategyError):
    """The external process gave no reply within its ``timeout_ms`` (a call past its time limit)."""


class ExternalEnded(ExternalStrategyError):
    """The external process exited or closed its output before replying (a call that leaves)."""


def parse_command_spec(text: str) -> tuple[list[str], dict[str, int | str]]:
    """Split the part of a ``cmd:`` spec after ``cmd:`` into the command's argv and its options.

    >>> parse_command_spec("node examples/lru.js?timeout_ms=2000")
    (['node', 'examples/lru.js'], {'timeout_ms': 2000})
    >>> parse_command_spec("python -c 'print(1 if 2 > 1 else 0)'")
    (['python', '-c', 'print(1 if 2 > 1 else 0)'], {})
    >>> parse_command_spec("tool --q?a=1?")
    (['tool', '--q?a=1'], {})
    """
    command, sep, query = text.rpartition("?")
    options: dict[str, int | str] = {}
    if sep and (query == "" or all(_OPTION_PART.fullmatch(p) for p in query.split("&"))):
        for part in filter(None, query.split("&")):
            key, _, value = part.partition("=")
            if key not in _OPTIONS:
                raise StrategyLoadError(f"unknown option {key!r} in cmd spec {text!r}; known: {', '.join(_OPTIONS)}")
            if key == "kind":
                if key in options:
                    raise StrategyLoadError(f"option kind given twice in cmd spec {text!r}; give it once")
                if value not in _KINDS:
                    raise StrategyLoadError(f"option kind in cmd spec {text!r} must be strategy or policy, "
                                            f"got {value!r}")
                options[key] = value
                continue
            if key in options:
                raise StrategyLoadError(f"option {key} given twice in cmd spec {text!r}; give it once")
            number = int(value) if value.isdigit() and len(value) <= 12 else None
            try:
                options[key] = time_limit_ms(key, number)
            except StrategyInputError:
                raise StrategyLoadError(f"option {key} in cmd spec {text!r} must be a whole number of milliseconds "
                                        f"from 1 to {MAX_TIME_LIMIT_MS:,} (one day), got {value[:40]!r}") from None
    else:
        command = text
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise StrategyLoadError(f"cannot parse the command line of cmd spec {text!r}: {exc}") from None
    if not argv:
        raise StrategyLoadError(f"cmd spec {text!r} has no command; write cmd:<command line>")
    return argv, options


class ExternalProcess(contextlib.AbstractContextManager):
    """An external process answering one JSON line per request (see the module docstring): started,
    timed, stopped; `ExternalStrategy` and `ExternalPolicy` say what the lines hold.

    ``with process:`` starts it and stops it afterwards (``replay_session`` does this for every
    replay); used outside a ``with``, it starts on the first request and stops on `close` or at
    interpreter exit. A reply later than ``timeout_ms`` (the first one may also take
    ``start_timeout_ms`` more, for the process to start), a process that exits, or a reply of
    the wrong shape raises `ExternalStrategyError`, which the simulator reports as a contract
    violation naming the strategy, session and turn. The process is then stopped and every later
    call of this replay fails at once with the same message, so a broken process costs one
    timeout, never a hung sweep (`recover` starts afresh). Messages call it an external strategy,
    or an external policy (``noun``).
    """

    noun = "external program"

    def __init__(self, argv: Sequence[str], timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 start_timeout_ms: int = DEFAULT_START_TIMEOUT_MS) -> None:
        self.argv = list(argv)
        self.timeout_ms = time_limit_ms("timeout_ms", timeout_ms)
        self.start_timeout_ms = time_limit_ms("start_timeout_ms", start_timeout_ms)
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._failed: ExternalStrategyError | None = None
        self._first = True
        self._stderr_reader: threading.Thread | None = None
        self._mark = ""
        self._exit_fd: int | None = None   # readable once the process has exited (a pidfd), where Linux has them

    # ----- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "ExternalStrategy":
        self.start()
        return self

    def __exit__(self, exc_type, *exc_info: Any) -> None:
        # After an error or an interrupt the replay is over: no point waiting for a graceful exit.
        self._stop(kill=exc_type is not None)

    def start(self) -> None:
        """Start the process (a no-op while it runs); a command that cannot start is a load error."""
        if self._proc is not None:
            return
        self._failed, self._buffer, self._first = None, b"", True
        self._stderr.clear()
        self._mark = uuid.uuid4().hex
        try:
            self._proc = subprocess.Popen(supervised(self.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, bufsize=0, start_new_session=True,
                                          env={**os.environ, _MARK: self._mark})
        except OSError as exc:
            raise StrategyLoadError(f"cannot start {self.noun} {self.command!r}: {exc}") from None
        os.set_blocking(self._proc.stdin.fileno(), False)
        os.set_blocking(self._proc.stdout.fileno(), False)
        try:   # its exit is seen even while a descendant still holds its output open
            self._exit_fd = os.pidfd_open(self._proc.pid)
        except (AttributeError, OSError):
            self._exit_fd = None
        self._stderr_reader = threading.Thread(target=self._drain_stderr, args=(self._proc.stderr,), daemon=True)
        self._stderr_reader.start()
        _RUNNING.add(self)
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the process: close its stdin, give it a moment to exit, then kill it."""
        self._stop(kill=False)

    def recover(self) -> None:
        """Forget a failure but a time-out: the next call starts a fresh process (the checker asks each request
        afresh). A program that ran past its ``timeout_ms`` stays stopped, every later call failing at once as
        in a replay, so that it costs one time-out, never one a request."""
        if not isinstance(self._failed, ExternalTimeout):
            self._failed = None

    def _stop(self, kill: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.close)
        _RUNNING.discard(self)
        with contextlib.suppress(OSError):
            proc.stdin.close()
        if kill or _wait_exited(proc, _STOP_WAIT_S) is None:
            # The supervisor kills the program and everything it started, then exits.
            _signal(proc, signal.SIGTERM)
            _wait_exited(proc, _STOP_WAIT_S)
        # The group's id is the process's own, reserved while the process (or its zombie) exists:
        # kill before reaping, so that nothing it started outlives it (should the supervisor not have).
        _kill_group(proc)
        _kill_marked(self._mark)
        proc.wait()
        if self._exit_fd is not None:
            os.close(self._exit_fd)
            self._exit_fd = None
        with contextlib.suppress(OSError):
            proc.stdout.close()

    def _kill(self) -> None:
        """Have the supervisor kill the program's tree now (from a signal handler: no waiting, no locks); the
        supervisor does so even when this process ends at once."""
        proc = self._proc
        if proc is not None:
            _signal(proc, signal.SIGTERM)

    @property
    def running(self) -> bool:
        """Whether the process is started and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def command(self) -> str:
        """The command line, quoted as a shell would need it."""
        return shlex.join(self.argv)

    # ----- one request ------------------------------------------------------------------------
    def _call(self, request: str, parse):
        """``parse(reply line)`` of one request line (see the class docstring for failures)."""
        if self._failed is not None:
            raise type(self._failed)(f"{self._failed} (the process was stopped after that failure)")
        if self._proc is None:
            self.start()
        try:
            return parse(self._exchange((request + "\n").encode()))
        except ExternalStrategyError as exc:
            self._failed = exc
            self._stop(kill=True)  # its replies can no longer be matched to requests
            raise

    def _exchange(self, request: bytes) -> bytes:
        proc = self._proc
        timeout_ms = self.timeout_ms + (self.start_timeout_ms if self._first else 0)
        self._first = False
        deadline = time.monotonic() + timeout_ms / 1000
        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()
        self._refuse_extra_output(out_fd)
        with selectors.DefaultSelector() as sel:
            sel.register(out_fd, selectors.EVENT_READ)
            if request:
                sel.register(in_fd, selectors.EVENT_WRITE)
            if self._exit_fd is not None:
                sel.register(self._exit_fd, selectors.EVENT_READ)
            while True:
                newline = self._buffer.find(b"\n")
                if newline >= 0 and not request:
                    line, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
                    return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ExternalTimeout(
                        f"{self.noun} {self.command!r} gave no reply within {timeout_ms} ms"
                        f"{self._stderr_tail()}")
                for key, _ in sel.select(left):
                    if key.fd == self._exit_fd:   # it exited: what it wrote before is all there is
                        self._read_waiting(out_fd)
                        if b"\n" not in self._buffer or request:
                            raise self._crashed()
                        sel.unregister(self._exit_fd)
                    elif key.fd == in_fd:
                        try:
                            request = request[os.write(in_fd, request):]
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, OSError):
                            raise self._crashed() from None
                        if not request:
                            sel.unregister(in_fd)
                    else:
                        try:
                            chunk = os.read(out_fd, 1 << 16)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            raise self._crashed()
                        self._buffer += chunk

    def _refuse_extra_output(self, out_fd: int) -> None:
        """Before a request, nothing may be waiting on stdout: a reply is one line, and a second line for the last
        request would be read as the answer to this one."""
        self._read_waiting(out_fd)
        if self._buffer:
            raise ExternalStrategyError(f"{self.noun} {self.command!r} wrote more than one line for one "
                                        f"request: {_shown(self._buffer)!r} (a reply is one line; write logs to "
                                        "stderr)")

    def _read_waiting(self, out_fd: int) -> None:
        """Add what is waiting on stdout to the buffer, without waiting for more."""
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(out_fd, 1 << 16):
                self._buffer += chunk

    def _json(self, line: bytes):
        try:
            return parse_json(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ExternalStrategyError(f"{self.noun} {self.command!r} replied with a line that is "
                                        f"not JSON: {_shown(line)!r} (write logs to stderr, not stdout)") from None

    def _crashed(self) -> ExternalStrategyError:
        proc = self._proc
        code = _wait_exited(proc, _STOP_WAIT_S)
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=0.5)  # let it catch the last lines
        status = "closed its output" if code is None else f"exited with status {code}"
        return ExternalEnded(f"{self.noun} {self.command!r} {status} before replying"
                                     f"{self._stderr_tail()}")

    def _drain_stderr(self, stream) -> None:
        # Buffered: the pipe is unbuffered (bufsize=0), and readline on it would read one byte a system call.
        buffered = io.BufferedReader(stream, buffer_size=1 << 16)
        with contextlib.suppress(OSError, ValueError):
            for raw in iter(buffered.readline, b""):
                self._stderr.append(raw.decode("utf-8", "replace").rstrip())
        with contextlib.suppress(OSError):
            stream.close()

    def _stderr_tail(self) -> str:
        """The last error line of the process's stderr (and its last line), for a message."""
        lines = [x.strip() for x in list(self._stderr) if x.strip()]
        if not lines:
            return ""
        errors = [x for x in lines if _ERROR_LINE.search(x)]
        shown = [errors[-1], lines[-1]] if errors and errors[-1] != lines[-1] else errors[-1:] or lines[-3:]
        return f"; its stderr ends: {' | '.join(x[:200] for x in shown)}"

    # ----- plumbing ----------------------------------------------------------------------------
    def __reduce__(self):
        # A copy (for another process) is a fresh, stopped strategy with the same command.
        return (type(self), (self.argv, self.timeout_ms, self.start_timeout_ms))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.command!r}, timeout_ms={self.timeout_ms})"


def _shown(line: bytes) -> str:
    return line[:200].decode("utf-8", "replace")


class ExternalStrategy(ExternalProcess):
    """A strategy answered by an external process speaking JSON lines (see the module docstring).

    ``with strategy:`` starts the process and stops it afterwards (``replay_session`` does this
    for every replay); used outside a ``with``, the process starts on the first ``evict`` and
    stops on `close` or at interpreter exit. Every ``evict`` call sends the whole state and
    waits for the reply, so the eviction latency measured for an external strategy includes
    serialising the state, the round trip through the pipes and parsing the reply. A reply that
    is not a JSON object with an ``"evict"`` array is an `ExternalStrategyError` (a contract
    violation naming the strategy, session and turn); ids in it are passed on as they are.
    """

    noun = "external strategy"

    def evict(self, state: Sequence[ContextEntry], budget: ContextBudget) -> list:
        return self._call(dump_request(state, budget), self._parse)

    def _parse(self, line: bytes) -> list:
        reply = self._json(line)
        if not isinstance(reply, dict) or not isinstance(reply.get("evict"), list):
            raise ExternalStrategyError(f"{self.noun} {self.command!r} replied {_shown(line)!r}; expected "
                                        f'an object {{"evict": [ids...]}}')
        return reply["evict"]


class ExternalPolicy(ExternalProcess):
    """A context policy answered by an external process (``cmd:...?kind=policy``): each ``edit`` sends the
    transcript and the window, and reads ``{"edits": [...]}`` (`strategies.policy.edits_from_json`); a
    reply of another shape is an `ExternalStrategyError`, judged as any policy's failure."""

    noun = "external policy"

    def edit(self, items, window) -> list:
        return self._call(json.dumps(items_to_json(items, window), separators=(",", ":")), self._parse)

    def _parse(self, line: bytes) -> list:
        try:
            return edits_from_json(self._json(line))
        except ValueError as exc:
            raise ExternalStrategyError(f"{self.noun} {self.command!r} replied {_shown(line)!r}: {exc}") from None


def _wait_exited(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """Wait up to ``timeout_s`` for the process to exit, without reaping it; its exit status, or None."""
    if not hasattr(os, "waitid"):  # pragma: no cover - such systems reap here; the group is killed right after
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
    deadline = time.monotonic() + timeout_s
    delay = 0.0005
    while True:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:   # already reaped
            return proc.returncode
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)


def _signal(proc: subprocess.Popen, signum: int) -> None:
    if proc.returncode is None:   # not reaped: the pid is still the supervisor's
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signum)


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.returncode is None or not hasattr(os, "waitid"):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)


def _kill_marked(mark: str, rounds: int = 5) -> None:
    """SIGKILL every process (but this one) whose environment holds ``CTXBENCH_EXTERNAL=mark``: what an external
    process started, in its group or not; again while a round finds one (it may have forked meanwhile)."""
    if not mark or not os.path.isdir("/proc"):
        return
    needle = f"\0{_MARK}={mark}\0".encode()
    own = os.getpid()
    for _ in range(rounds):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == own:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    environment = fh.read()
            except OSError:   # gone, or another user's
                continue
            if needle in b"\0" + environment + b"\0":
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(name), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


def stop_all() -> None:
    """Have every external strategy this process has running stopped, with all it started (a worker that is stopped)."""
    for strategy in list(_RUNNING):
        strategy._kill()


def load_command_spec(rest: str, options: dict[str, Any] | None = None) -> ExternalProcess:
    """The loader of ``cmd:`` specs (registered with `strategies.registry.register_scheme`): an
    `ExternalStrategy`, or with ``kind=policy`` an `ExternalPolicy`.

    The program must exist (on ``PATH`` or as a path), else `StrategyLoadError`; it is not
    started until the strategy is entered or first called.
    """
    argv, parsed = parse_command_spec(rest)
    parsed.update(options or {})
    kind = parsed.pop("kind", "strategy")
    program = argv[0]
    if shutil.which(program) is None:
        raise StrategyLoadError(f"cmd spec {rest!r}: program {program!r} not found"
                                f"{'' if os.sep in program else ' on PATH'}")
    return (ExternalPolicy if kind == "policy" else ExternalStrategy)(argv, **parsed)
