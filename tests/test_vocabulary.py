"""The event vocabulary (traces/vocabulary.py) is the one every part speaks: the schema, the token ratios,
both engines; and every arm of a session sees the trace's kinds."""

import pandas as pd
import pytest

from ctxbench.sim.engine import compiled
from ctxbench.sim.engine.replay import replay_session, split_sessions, budget_for_tokens
from ctxbench.strategies import policy as policy_contract
from ctxbench.traces import schema, tokens, vocabulary
from ctxbench.traces.vocabulary import (CONFIRMATION, CONTENT, EDIT, INVALIDATE, MESSAGE, NOTHING, OUTPUT, READ, WRITE,
                               role_of, transcript_adds)


def test_codes_are_the_schema_ops_in_order():
    assert schema.OPS is vocabulary.OPS and tokens.KINDS is vocabulary.KINDS
    assert [vocabulary.OP_CODE[op] for op in schema.OPS] == list(range(len(schema.OPS)))
    assert (READ, EDIT, WRITE, OUTPUT, MESSAGE) == tuple(schema.OPS.index(op) for op in
                                                         ("read", "edit", "write", "output", "message"))
    assert INVALIDATE == len(schema.OPS) and vocabulary.ENGINE_OPS[INVALIDATE] == "invalidate"
    assert set(vocabulary.EVENT_ROLES) <= set(policy_contract.ROLES)


@pytest.mark.skipif(not compiled.BUILT, reason="the compiled engine is not built")
def test_the_compiled_engine_speaks_the_vocabulary():
    engine = compiled.engine
    assert engine.OPS == vocabulary.ENGINE_OPS
    assert engine.ADDS == vocabulary.ADDS
    assert engine.ROLES == policy_contract.ROLES


@pytest.mark.skipif(not compiled.BUILT, reason="the compiled engine is not built")
def test_drift_of_the_compiled_vocabulary_fails_loudly(monkeypatch):
    monkeypatch.setattr(compiled.engine, "OPS", vocabulary.ENGINE_OPS[:-1] + ("other",))
    with pytest.raises(ImportError, match="OPS"):
        compiled.check_vocabulary(compiled.engine)


def test_what_an_event_adds_to_a_transcript():
    ops = [MESSAGE, "call", EDIT, OUTPUT, WRITE, READ, WRITE, EDIT, INVALIDATE]
    ops = [vocabulary.CALL if op == "call" else op for op in ops]
    paths = ["msg://user/0", "call://edit/1", "a.py", "tool://edit/1", "b.py", "c.py", "c.py", "d.py", "e.py"]
    # the accompanied edit adds nothing; a write of a new file its confirmation, over a file read before the file
    assert transcript_adds(ops, paths).tolist() == [CONTENT, CONTENT, NOTHING, CONTENT, CONFIRMATION, CONTENT, CONTENT,
                                                    CONFIRMATION, NOTHING]
    assert [role_of(op, p) for op, p in zip(ops[:4], paths[:4])] == ["user", "call", "result", "result"]


class Recording:
    """A policy that edits nothing and notes the path and kind of every item it is last shown."""

    def __init__(self, seen, arm):
        self.seen, self.arm = seen, arm

    def edit(self, items, window):
        self.seen[self.arm] = [(item.path, item.kind) for item in items]
        return []


WEB = [("s", 0, 0, "read", "a.py", 100, "main", 0, ""),
       ("s", 1, 1, "output", "tool://web/1", 900, "main", 0, "prose"),
       ("s", 2, 2, "edit", "a.py", 120, "main", 3, ""),
       ("s", 3, 3, "output", "tool://web/2", 900, "sub", 0, "prose"),
       ("s", 4, 4, "write", "b.py", 50, "sub", 2, ""),
       ("s", 5, 5, "write", "b.py", 60, "sub", 2, "")]


@pytest.mark.parametrize("compiled_engine", [False, True] if compiled.BUILT else [False])
@pytest.mark.parametrize("arms", ["one", "two"])
def test_every_arm_keeps_the_traces_kinds(arms, compiled_engine):
    rows = [row if arms == "two" else (*row[:6], "main", *row[7:]) for row in WEB]
    df = pd.DataFrame(rows, columns=["session", "turn", "ts_ms", "op", "path", "size_bytes", "arm", "lines_changed",
                                     "kind"])
    (st,) = split_sessions(df)
    seen: dict[str, list] = {}
    replay_session(st, None, budget_for_tokens(200_000), strategy_for_arm=lambda arm: Recording(seen, arm),
                   compiled=compiled_engine)
    items = [item for arm in sorted(seen) for item in seen[arm]]
    # a web result is prose on every arm; a read is code; an edit and the first write of a file return the
    # tool's confirmation (output); the write over it, the file
    assert items == [("a.py", "code"), ("tool://web/1", "prose"), ("a.py", "output"), ("tool://web/2", "prose"),
                     ("b.py", "output"), ("b.py", "code")]
