"""Digests of generated traces, their statistics and imported traces, for golden comparisons.

``python tests/trace_digests.py`` prints the digests of every case as JSON (what
``tests/golden/trace_digests.json`` holds); `tests/test_trace_digests.py` compares against it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "importers"
GOLDEN = ROOT / "tests" / "golden" / "trace_digests.json"

#: (preset, sessions, seed, overrides) of the generator cases beyond one per preset.
EXTRA_GENERATE_CASES: tuple[tuple[str, int, int, dict[str, Any]], ...] = (
    ("mixed", 1100, 0, {}),                                   # more than one chunk of sessions
    ("mixed", 2, 5, {"read_before_edit": False}),
    ("mixed", 2, 3, {"hub_files": 0}),                        # no hubs: hub revisits become jumps
    ("mixed", 2, 1, {"arms": 4, "spanning_arms": 2}),
    ("long", 1, 2, {"arms": 2}),
    ("debug-loop", 3, 9, {"tool_calls": 37, "working_set": 1, "focus_dirs": 1}),
)
#: A small checkout for ``generate(repo=...)``: relative path -> size in bytes.
CHECKOUT = {"README.md": 900, "setup.py": 1200, "src/app/__init__.py": 40, "src/app/config.py": 5000,
            "src/app/router.py": 7000, "src/app/views/users.py": 3000, "src/app/views/orders.py": 2500,
            "tests/test_users.py": 1800, "tests/test_orders.py": 1600, "docs/guide.md": 12000}


def _update(h: Any, value: object) -> None:
    h.update(json.dumps(value, sort_keys=True, default=str).encode())


def frame_digest(df: pd.DataFrame) -> str:
    """SHA-256 of a frame's columns, dtypes, values (categories and codes), index and ``attrs``."""
    h = hashlib.sha256()
    _update(h, [list(df.columns), [str(t) for t in df.dtypes], type(df.index).__name__, len(df)])
    for column in df.columns:
        series = df[column]
        if isinstance(series.dtype, pd.CategoricalDtype):
            _update(h, [str(c) for c in series.cat.categories])
            h.update(series.cat.codes.to_numpy().tobytes())
        else:
            values = series.to_numpy()
            if values.dtype == object:
                _update(h, [repr(v) for v in values])
            else:
                h.update(np.ascontiguousarray(values).tobytes())
    _update(h, df.attrs)
    return h.hexdigest()


def stats_digest(result: dict[str, Any]) -> str:
    """SHA-256 of a `traces.stats.stats` result: its per-session frame and its overall figures."""
    h = hashlib.sha256()
    h.update(frame_digest(result["sessions"]).encode())
    _update(h, result["overall"])
    return h.hexdigest()


def make_checkout(directory: Path) -> Path:
    """Write `CHECKOUT` under ``directory`` (deterministic contents) and return it."""
    for rel, size in CHECKOUT.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(("x" * 37 + "\n") * (size // 38) + "y" * (size % 38))
    return directory


def generate_cases(checkout: Path) -> Iterator[tuple[str, Callable[[], pd.DataFrame]]]:
    """(case id, function making the trace) for every generator case."""
    from ctxbench.traces.generate import generate
    from ctxbench.traces.presets import PRESETS

    for name in PRESETS:
        yield f"generate {name} sessions=3 seed=11", lambda name=name: generate(name, sessions=3, seed=11)
    for preset, sessions, seed, overrides in EXTRA_GENERATE_CASES:
        shown = " ".join(f"{k}={v}" for k, v in overrides.items())
        yield (f"generate {preset} sessions={sessions} seed={seed} {shown}".rstrip(),
               lambda p=preset, s=sessions, r=seed, o=overrides: generate(p, sessions=s, seed=r, **o))

    def from_checkout() -> pd.DataFrame:
        df = generate("claude-code-like", sessions=2, seed=4, repo=checkout)
        df.attrs["generator"]["repo"] = "CHECKOUT"  # the temporary directory's name varies
        return df

    yield "generate claude-code-like sessions=2 seed=4 repo=CHECKOUT", from_checkout


#: Data folders named for an agent's version rather than for the format that reads them.
FOLDER_FORMATS = {"openhands-v1": "openhands"}


def import_cases(base: Path) -> Iterator[tuple[str, str, list[Path], bool]]:
    """(case id, format, paths, conversation) of the imports under ``base`` (fixtures or the bundled real sessions), one per
    folder, named by the folder; a case's ``messages=`` says whether the conversation (messages, calls' inputs,
    overhead) is imported."""
    formats = sorted(p.name for p in base.iterdir() if p.is_dir())
    for messages in (False, True):
        for fmt in formats:
            yield f"{fmt} messages={messages}", FOLDER_FORMATS.get(fmt, fmt), [base / fmt], messages
        yield f"auto messages={messages}", "auto", [base / fmt for fmt in formats], messages


def import_digest(fmt: str, paths: list[Path], conversation: bool, base: Path) -> tuple[str, pd.DataFrame]:
    """SHA-256 of an import's trace and its report (paths shown relative to ``base``), and the trace."""
    from ctxbench.traces.importers import import_paths

    df, report = import_paths(fmt, paths, conversation=conversation)
    h = hashlib.sha256()
    h.update(frame_digest(df).encode())
    prefix = str(base) + "/"
    h.update(json.dumps(report.to_dict(), sort_keys=True, default=str).replace(prefix, "").encode())
    h.update(report.summary().replace(prefix, "").encode())
    return h.hexdigest(), df


def all_digests(checkout: Path) -> dict[str, str]:
    """Every case's digest: traces, their statistics, fixture imports and imports of the bundled real sessions."""
    from real_data import REAL_DATA
    from ctxbench.traces.stats import stats

    out: dict[str, str] = {}
    for case, make in generate_cases(checkout):
        df = make()
        out[case] = frame_digest(df)
        out[f"stats of {case}"] = stats_digest(stats(df))
    sources = [("fixtures", FIXTURES), ("real", REAL_DATA)]
    for label, base in sources:
        for case, fmt, paths, messages in import_cases(base):
            digest, df = import_digest(fmt, paths, messages, base)
            out[f"import {label} {case}"] = digest
            out[f"stats of import {label} {case}"] = stats_digest(stats(df))
    return out


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    with tempfile.TemporaryDirectory() as tmp:
        digests = all_digests(make_checkout(Path(tmp)))
    print(json.dumps(digests, indent=1, sort_keys=True))
