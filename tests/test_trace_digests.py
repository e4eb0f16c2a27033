"""Generated traces, their statistics and imported traces are exactly those recorded (tests/golden).

The digests in ``tests/golden/trace_digests.json`` were recorded with ``python tests/trace_digests.py``
before the generator, the statistics and the importers were restructured: any change to a frame
(a value, a dtype, a category, the metadata) or to an import report changes its digest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from real_data import REAL_DATA
from trace_digests import (FIXTURES, GOLDEN, frame_digest, generate_cases, import_cases, import_digest,
                           make_checkout, stats_digest)
from ctxbench.traces.stats import stats

RECORDED: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
GENERATE_IDS = [case for case, _ in generate_cases(Path("unused"))]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return make_checkout(tmp_path_factory.mktemp("checkout"))


@pytest.mark.parametrize("case", GENERATE_IDS)
def test_generated_trace_and_its_stats_are_as_recorded(case, checkout):
    make = dict(generate_cases(checkout))[case]
    df = make()
    assert frame_digest(df) == RECORDED[case]
    assert stats_digest(stats(df)) == RECORDED[f"stats of {case}"]


def _check_import(label: str, base: Path, case: str) -> None:
    fmt, paths, messages = next((f, p, m) for c, f, p, m in import_cases(base) if c == case)
    digest, df = import_digest(fmt, paths, messages, base)
    assert digest == RECORDED[f"import {label} {case}"]
    assert stats_digest(stats(df)) == RECORDED[f"stats of import {label} {case}"]


@pytest.mark.parametrize("case", [case for case, *_ in import_cases(FIXTURES)])
def test_fixture_import_is_as_recorded(case):
    _check_import("fixtures", FIXTURES, case)


@pytest.mark.parametrize("case", [case for case, *_ in import_cases(REAL_DATA)])
@pytest.mark.real_sessions
def test_real_session_import_is_as_recorded(case):
    _check_import("real", REAL_DATA, case)


def test_every_recorded_case_is_checked():
    cases = set(GENERATE_IDS) | {f"import fixtures {c}" for c, *_ in import_cases(FIXTURES)}
    cases |= {f"import real {c}" for c, *_ in import_cases(REAL_DATA)}
    expected = cases | {f"stats of {c}" for c in cases}
    assert set(RECORDED) == expected
