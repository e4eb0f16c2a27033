"""The compiled resolver reads a session's interned paths (codes into its names) exactly as it reads a list of str."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxbench.sim.engine.compiled import ENABLED, engine
from ctxbench.sim.engine.interned import InternedPaths
from ctxbench.traces.vocabulary import EDIT, MESSAGE, OUTPUT, READ, WRITE

pytestmark = pytest.mark.skipif(not ENABLED, reason="the compiled engine was not built")

OPS = [READ, EDIT, WRITE, OUTPUT, MESSAGE]


def _resolve(ops, sizes, paths):
    n = len(ops)
    out = tuple(np.zeros(n, np.int64) for _ in range(9))
    entry_slot = np.zeros(2 * n, np.int64)
    ops, sizes = np.asarray(ops, np.int64), np.asarray(sizes, np.int64)
    steps, ids, slot_paths, slots, entries = engine.resolve(ops, paths, sizes, sizes, np.arange(n, dtype=np.int64),
                                                            out, entry_slot)
    return steps, ids, slot_paths, slots, entries, [c[:steps].tolist() for c in out], entry_slot[:len(ids)].tolist()


@given(st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(["a.py", "b.py", "c/d.py", "msg://user/0"]),
                          st.integers(1, 50)), min_size=1, max_size=60))
def test_interned_paths_resolve_as_the_list_does(events):
    ops, paths, sizes = (list(column) for column in zip(*events))
    interned = InternedPaths.of(paths)
    assert _resolve(ops, sizes, (interned.codes.astype(np.int64), interned.names)) == _resolve(ops, sizes, paths)


def test_a_code_outside_the_names_is_an_error_naming_the_event():
    with pytest.raises(ValueError, match="path code 2 of event 1 is not an index of the names"):
        _resolve([READ, READ], [1, 1], (np.array([0, 2], np.int64), ["a.py", "b.py"]))
