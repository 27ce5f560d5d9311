"""Suite-wide stand-ins for the target model: a tiny word tokenizer, and the mark for tests that need
the real embedded model through llama.cpp (imported by name: ``from model_testing import ...``).

Helpers used by one area live in that area's folder as ``<area>_testing.py`` (``collect_testing``...);
helpers used by several areas live here, at the root of tests/, which tests/conftest.py keeps on
``sys.path`` for every test. Uniquely named modules, not ``conftest``: with several conftest.py files
in the tree, ``from conftest import X`` resolves to whichever one pytest imported last.
"""

from __future__ import annotations

import importlib.util
import zlib
from typing import Any

import pytest

__all__ = ["WordTokenizer", "needs_llama"]


class WordTokenizer:
    """A tiny deterministic tokenizer (one id per whitespace word) for unit tests of prompt handling.

    Ids come from crc32, not ``hash()``: str hashes are salted per process (PYTHONHASHSEED), so a
    test could pass in one run and fail in the next.
    """

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    eos_token = "</s>"
    eos_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [1 + zlib.crc32(w.encode()) % 1000 for w in text.split()]}

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return " ".join(f"w{i}" for i in ids)

    def __len__(self) -> int:
        return 1001


_no_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")


def needs_llama(test: Any) -> Any:
    """Marks a test ``llamacpp`` and ``slow`` (the real embedded model through llama.cpp) and skips it
    where llama-cpp-python is not installed. Select or drop them with ``-m llamacpp`` / ``-m 'not slow'``."""
    return pytest.mark.slow(pytest.mark.llamacpp(_no_llama(test)))
