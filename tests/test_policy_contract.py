"""Every built-in context policy keeps the policy contract (tests/policy_contract.py), with its project's defaults
and with options that make it act on small transcripts."""

import pytest

from policy_contract import PolicyContract
from ctxbench.strategies.registry import builtin_names


class TestClaudeCode(PolicyContract):
    spec = "claude-code"


class TestClaudeCodeLowTrigger(PolicyContract):
    spec = "claude-code?trigger_tokens=500&recent_files=2&file_tokens=300"


class TestCodex(PolicyContract):
    spec = "codex"


class TestGeminiCli(PolicyContract):
    spec = "gemini-cli"


class TestGeminiCliLowTrigger(PolicyContract):
    spec = "gemini-cli?trigger_fraction=0.05&preserve_fraction=0.5&summary_tokens=50"


class TestClearToolUses(PolicyContract):
    spec = "clear-tool-uses?trigger_tokens=200&keep=1"


class TestObservationMasking(PolicyContract):
    spec = "observation-masking"


class TestObservationMaskingTen(PolicyContract):
    spec = "observation-masking?n=10"


class TestOpenHandsSummarizing(PolicyContract):
    spec = "openhands-summarizing?max_size=8&keep_first=1"


class TestAmortizedForgetting(PolicyContract):
    spec = "amortized-forgetting?max_size=8&keep_first=1"


class TestSchedule(PolicyContract):
    spec = "schedule?at=1:3:4&summary_tokens=50"


def test_every_builtin_policy_has_a_contract_test():
    tested = {cls.spec.partition("?")[0] for cls in PolicyContract.__subclasses__() if cls.spec}
    assert tested >= set(builtin_names(kind="policy")), set(builtin_names(kind="policy")) - tested
    assert len(builtin_names(kind="policy")) == 8


@pytest.mark.parametrize("spec", ["claude-code", "observation-masking"])
def test_the_mixin_fails_on_a_broken_policy(spec):
    from broken_policies import Grows

    class Broken(PolicyContract):
        def make_policy(self):
            return Grows()

    with pytest.raises(AssertionError, match="grows"):
        Broken().test_checker_finds_nothing()
