"""`InternedPaths`: a session's paths as 4-byte codes into its own list of distinct names."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

__all__ = ["InternedPaths"]


class InternedPaths(Sequence):
    """A session's paths as codes into its own list of distinct names: 4 bytes an event, each name held once.

    A read-only sequence of str (indexing, slicing, iteration, ``==`` with any sequence);
    The compiled resolver reads the codes and names as they are; `tolist` gives a plain list.

    >>> p = InternedPaths.of(["a.py", "b.py", "a.py"])
    >>> p.codes.tolist(), p.names, p[2], p == ["a.py", "b.py", "a.py"]
    ([0, 1, 0], ['a.py', 'b.py'], 'a.py', True)
    """

    __slots__ = ("codes", "names")

    def __init__(self, codes, names: Sequence[str]) -> None:
        self.codes = np.ascontiguousarray(codes, dtype=np.int32)
        self.names = list(names)

    @classmethod
    def of(cls, paths: "Sequence[str] | InternedPaths") -> "InternedPaths":
        """``paths`` interned: each distinct name once, in order of first appearance."""
        if isinstance(paths, InternedPaths):
            return paths
        codes, names = pd.factorize(np.asarray(list(paths) if not isinstance(paths, np.ndarray) else paths,
                                               dtype=object), use_na_sentinel=False)
        return cls(codes, names.tolist())

    def tolist(self) -> list[str]:
        """The paths as a list (each distinct name one str object, shared)."""
        if not self.names:
            return []
        return np.asarray(self.names, dtype=object)[self.codes].tolist()

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return InternedPaths(self.codes[index], self.names)
        return self.names[self.codes[index]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InternedPaths):
            return self.tolist() == other.tolist()
        if isinstance(other, Sequence) and not isinstance(other, str):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None   # type: ignore[assignment]

    def __reduce__(self):
        return InternedPaths, (self.codes, self.names)

    def __repr__(self) -> str:
        return f"InternedPaths({len(self)} paths, {len(self.names)} distinct)"
