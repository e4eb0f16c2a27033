"""Errors raised by the traces package."""

import errno
import re

__all__ = ["TraceError", "OutOfRoom", "no_room"]

#: What a full disk, a file-size limit or a quota says when a write runs out of room.
_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
_NO_ROOM_TEXT = re.compile(r"\[errno (%s)\]" % "|".join(str(code) for code in sorted(_NO_ROOM)), re.I)


class TraceError(ValueError):
    """A trace that cannot be read, or that breaks the schema; the message names where."""


class OutOfRoom(OSError):
    """A write ran out of room (disk, file-size limit, quota): the environment's failure, not the input's."""


def no_room(exc: BaseException) -> bool:
    """Whether an error is a write running out of room (its errno, or the text Arrow gives such an error).

    >>> no_room(OSError(errno.ENOSPC, "No space left on device")), no_room(OSError("[errno 27] File too large"))
    (True, True)
    """
    return isinstance(exc, OSError) and (exc.errno in _NO_ROOM or bool(_NO_ROOM_TEXT.search(str(exc))))
