"""Shared fixtures. ``LENPRED_HOME`` is left as configured so the converted embedded model is reused."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest


class WordTokenizer:
    """A tiny deterministic tokenizer (one id per whitespace word) for unit tests of prompt handling."""

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    eos_token = "</s>"
    eos_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [1 + (hash(w) % 1000) for w in text.split()]}

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"

    def __len__(self) -> int:
        return 1001


@pytest.fixture()
def word_tok() -> WordTokenizer:
    return WordTokenizer()


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    from lenpred.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")
