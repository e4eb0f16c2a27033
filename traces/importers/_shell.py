"""Shell commands as file events: which commands read, write or edit one named file, for the bash-driven importers.

An agent whose only tool is a shell (mini-swe-agent, Codex CLI) reads a file with ``cat`` or ``sed -n``
and writes one with a here-document. `classify` says what a command does when the command alone makes it
unambiguous; `ShellCommands.shell_result` turns a command and its answer into the event it is
(docs/design.md §2): a read of the file (or of ``FILE#LA-B``, the lines shown), a write, an edit,
else an output.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from ctxbench.traces.importers._text import count_lines, nbytes, window_id
from ctxbench.traces.importers.builder import Call, SessionReader

__all__ = ["classify", "ShellCommands", "split_cd"]

_RANGE = re.compile(r"^(\d+)(?:,(\d+))?p$")
_CD = re.compile(r"^\s*cd\s+(\S+)\s*&&\s*", re.S)
_HEREDOC = re.compile(r"^cat\s+(>>?)\s*(\S+)\s*<<-?\s*(['\"]?)(\w+)\3[ \t]*\n(.*)\n\4\s*$", re.S)
_HEREDOC_FIRST = re.compile(r"^cat\s*<<-?\s*(['\"]?)(\w+)\1\s*(>>?)\s*(\S+)[ \t]*\n(.*)\n\2\s*$", re.S)
_STDERR = re.compile(r"\s+2>(?:&1|/dev/null)(?=\s*(?:\||$))")


def _words(command: str) -> list[str] | None:
    """The words of a one-line command as a shell splits them, without a trailing ``2>&1``; None when it
    is not one plain command (quotes unbalanced)."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        return None
    while words and words[-1] in ("2>&1", "2>/dev/null"):
        words.pop()
    return words


def _sed_range(script: str) -> tuple[int, int] | None:
    """``(first, last)`` of a ``sed -n`` script that prints one line range, else None."""
    match = _RANGE.match(script.strip())
    if not match:
        return None
    first = int(match.group(1))
    last = int(match.group(2) or first)
    return (first, last) if 0 < first <= last else None


def classify(command: str) -> tuple[str, str, int | None, int | None, str | None]:
    """What a shell command does to a file: ``(op, path, first, last, heredoc)`` where ``op`` is ``read``,
    ``write``, ``append``, ``sed-edit`` or ``output``; ``first``/``last`` a line range of a read (None:
    the whole file), ``heredoc`` what a write or append puts. Paths are as written (`split_cd` takes a
    leading ``cd DIR &&`` off first).

    >>> classify("sed -n '10,20p' src/a.py")[:4]
    ('read', 'src/a.py', 10, 20)
    >>> classify("nl -ba src/a.py | sed -n '3,4p'")[:4]
    ('read', 'src/a.py', 3, 4)
    >>> classify("cat > t.py << 'EOF'\\nprint(1)\\nEOF")[0::4]
    ('write', 'print(1)')
    >>> classify("grep -n foo a.py")[0]
    'output'
    """
    text = command.strip()
    for pattern, op_group, path_group, body_group in ((_HEREDOC, 1, 2, 5), (_HEREDOC_FIRST, 3, 4, 5)):
        if match := pattern.match(text):
            op = "write" if match.group(op_group) == ">" else "append"
            return op, match.group(path_group), None, None, match.group(body_group)
    text = _STDERR.sub("", text)
    if "\n" in text or any(mark in text for mark in (";", "&&", "||", "$(", "`", ">", "<")):
        if not text.startswith("sed -i"):
            return "output", "", None, None, None
    if "|" in text:
        pipe = text.split("|")
        left, right = (_words(pipe[0]), _words(pipe[1])) if len(pipe) == 2 else (None, None)
        if (left and right and left[0] == "nl" and len(left) in (2, 3) and left[1:-1] in ([], ["-ba"])
                and right[:2] == ["sed", "-n"] and len(right) == 3 and (span := _sed_range(right[2]))):
            return "read", left[-1], span[0], span[1], None
        return "output", "", None, None, None
    words = _words(text)
    if not words:
        return "output", "", None, None, None
    name, args = words[0], words[1:]
    if name == "cat" and len(args) == 1 and not args[0].startswith("-"):
        return "read", args[0], None, None, None
    if name == "nl" and args and args[:-1] in ([], ["-ba"]) and not args[-1].startswith("-"):
        return "read", args[-1], None, None, None
    if name == "sed" and len(args) == 3 and args[0] == "-n" and (span := _sed_range(args[1])):
        return "read", args[2], span[0], span[1], None
    if name == "sed" and args and args[0] == "-i" and len(args) >= 3 and not args[-1].startswith("-"):
        return "sed-edit", args[-1], None, None, None
    if name == "head":
        count = None
        if len(args) == 3 and args[0] == "-n" and args[1].isdigit():
            count, path = int(args[1]), args[2]
        elif len(args) == 2 and args[0].startswith("-") and args[0][1:].isdigit():
            count, path = int(args[0][1:]), args[1]
        elif len(args) == 1 and not args[0].startswith("-"):
            count, path = 10, args[0]
        if count:
            return "read", path, 1, count, None
    return "output", "", None, None, None


def split_cd(command: str) -> tuple[list[str], str]:
    """The directories of a command's leading ``cd DIR &&`` prefixes, and the command after them.

    >>> split_cd("cd /repo && cd src && cat a.py")
    (['/repo', 'src'], 'cat a.py')
    """
    dirs = []
    while match := _CD.match(command):
        dirs.append(match.group(1))
        command = command[match.end():]
    return dirs, command


class ShellCommands(SessionReader):
    """A session reader whose calls are shell commands: the working directory they run in, and the
    event each command's answer is."""

    cwd: str = ""     # the directory relative paths resolve against: the last ``cd``, else the log's

    def resolve(self, path: str, cwd: str = "") -> str:
        """``path`` made absolute against ``cwd``, else `cwd` (the last one known), when known."""
        base = cwd or self.cwd
        if path.startswith("/"):
            return posixpath.normpath(path)
        return posixpath.normpath(posixpath.join(base, path)) if base else path

    def shell_result(self, call: Call, command: str, text: str, *, failed: bool, truncated: bool,
                     workdir: str = "") -> None:
        """A command's answer ``text``: a read, write or edit of the one file it names, else an output.

        ``failed`` (a non-zero exit) and ``truncated`` (the agent cut the answer, so it is not the
        file) make a read an output; ``workdir`` is where the command ran, when the log says."""
        size = nbytes(text)
        dirs, command = split_cd(command)
        cwd = workdir
        for directory in dirs:
            cwd = self.resolve(directory, cwd)
        if dirs:
            self.cwd = cwd
        if failed:
            self.failed(call, size, text=text)
            return
        op, path, first, last, body = classify(command)
        if op == "output":
            self.output(call, size, text=text)
            return
        path = self.resolve(path, cwd)
        if op == "read":
            if truncated:
                self.report.notes["truncated_output"] += 1
                self.output(call, size, text=text)
            elif first is None:
                self.sizes[path] = size
                self.file_event(call, "read", path, size, text=text)
            else:
                self.file_event(call, "read", window_id(path, first, last), size, text=text)
        elif op == "write":
            self.sizes[path] = nbytes(body)
            self.file_event(call, "write", path, nbytes(body), lines=count_lines(body), text=body)
            self.confirmation(call, size, text=text)
        else:   # an append or an in-place sed: the log never shows the file after it
            added = nbytes(body) if op == "append" else 0
            self.estimated_edit(call, path, added, lines=count_lines(body) if body else 1, answer=size, text=text)

    def estimated_edit(self, call: Call, path: str, added: int, *, lines: int, answer: int,
                       unknown: int | None = None, confirm: bool = True, text: object = None) -> None:
        """An edit whose result the log does not show (counted as estimated): the file's last known size
        plus ``added`` bytes (fewer when negative); when its size is unknown, ``unknown``, else the larger
        of ``added`` and the ``answer``. With ``confirm``, the answer (``text``, where the log holds it) enters
        as the edit's confirmation."""
        self.report.notes["estimated_size"] += 1
        if path in self.sizes:
            new_size = max(0, self.sizes[path] + added)
        else:
            new_size = max(answer, added) if unknown is None else max(0, unknown)
        self.sizes[path] = new_size
        self.file_event(call, "edit", path, new_size, lines=lines)
        if confirm:
            self.confirmation(call, answer, text=text)
