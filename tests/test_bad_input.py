"""Every bad input a new user tried, as one table: exit code 1, one line naming the problem and the
fix, nothing written. Rows live in tests/bad_inputs/<area>.py (``CASES``); this file runs them all."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import bad_inputs
from bad_input_harness import BadInput, check


def _all_cases() -> list[BadInput]:
    cases: list[BadInput] = []
    for mod in pkgutil.iter_modules(bad_inputs.__path__):
        cases.extend(importlib.import_module(f"bad_inputs.{mod.name}").CASES)
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "bad-input ids must be unique"
    return cases


@pytest.mark.parametrize("case", [c.param() for c in _all_cases()])
def test_bad_input(case: BadInput, tmp_path, capsys) -> None:
    check(case, tmp_path, capsys)


def test_generate_refuses_a_prompt_over_the_context(tmp_path, capsys, monkeypatch) -> None:
    """`generate` with a prompt longer than the target's context ran and printed garbage. It now exits 1
    with one error line and writes nothing, as `serve` refuses the same prompt with
    context_length_exceeded -- before the weights load (issue 39: the refusal came after 14-17 s of
    loading): the tokenizer counts the tokens, the config gives the context, and loading weights
    here fails the test."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from lenpred.cli import main
    from lenpred.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=8,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    (tmp_path / "prompt.txt").write_text("hello " * 200)
    before = sorted(p.name for p in tmp_path.rglob("*"))

    def no_weights(*a: object, **k: object) -> None:
        raise AssertionError("the weights were loaded before the prompt was checked against the context")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_weights)
    capsys.readouterr()
    rc = main(["generate", "--model", str(tmp_path / "model"), "--prompt-file", str(tmp_path / "prompt.txt"),
               "--greedy", "--max-new-tokens", "4", "--no-chat-template", "--events", str(tmp_path / "ev.jsonl")])
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in err and out == ""
    assert len(err.strip().splitlines()) == 1, err  # no loading output: nothing loaded
    last = err.strip().splitlines()[-1]
    assert re.match(r"lenpred generate: error: the rendered prompt has 20\d tokens, over the model's context of 64 -- fix: ",
                    last), last
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
