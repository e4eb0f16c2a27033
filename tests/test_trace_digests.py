"""Generated traces, their statistics and imported traces are exactly those recorded (tests/golden).

The digests in ``tests/golden/trace_digests.json`` were recorded with ``python tests/trace_digests.py``
before the generator, the statistics and the importers were restructured: any change to a frame
(a value, a dtype, a category, the metadata) or to an import report changes its digest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_digests import (FIXTURES, GOLDEN, SHARED_DATA, frame_digest, generate_cases, import_cases, import_digest,
                           make_checkout, stats_digest)
from traces.stats import stats

RECORDED: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
GENERATE_IDS = [case for case, _ in generate_cases(Path("unused"))]


def needs_shared_data(test):
    """Mark ``test`` as reading ../shared/data, skipped when it is absent."""
    test = pytest.mark.shared_data(test)
    return pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent")(test)


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


@pytest.mark.parametrize("case", [case for case, *_ in import_cases(SHARED_DATA)] if SHARED_DATA.is_dir()
                         else ["(absent)"])
@needs_shared_data
def test_shared_data_import_is_as_recorded(case):
    _check_import("shared", SHARED_DATA, case)


def test_every_recorded_case_is_checked():
    cases = set(GENERATE_IDS) | {f"import fixtures {c}" for c, *_ in import_cases(FIXTURES)}
    if SHARED_DATA.is_dir():
        cases |= {f"import shared {c}" for c, *_ in import_cases(SHARED_DATA)}
    expected = cases | {f"stats of {c}" for c in cases}
    recorded = set(RECORDED) if SHARED_DATA.is_dir() else {c for c in RECORDED if " shared " not in c}
    assert recorded == expected
