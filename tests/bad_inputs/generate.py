"""Bad inputs of plain ``lenpred generate`` (rows for tests/test_bad_input.py; the ``--length-head`` rows are
in outlets.py)."""

from __future__ import annotations

from pathlib import Path

from bad_input_harness import BadInput


def _model_without_readable_weights(tmp: Path) -> dict[str, Path]:
    """A model folder whose config (a context of 64) and tokenizer are fine and whose weights are not: a
    command that reads them fails on them, one that checks the prompt first never gets there."""
    from transformers import LlamaConfig

    from lenpred.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    folder = tmp / "model"
    LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=64).save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"not weights")
    (tmp / "prompt.txt").write_text("hello " * 200)
    return {"model": folder, "prompt": tmp / "prompt.txt"}


CASES: list[BadInput] = [  # issue 39 part 3: refused only after loading the weights (14-17 s on SmolLM2)
    BadInput("generate-prompt-over-the-context-before-the-weights",
             ["generate", "--model", "{model}", "--prompt-file", "{prompt}", "--greedy", "--no-chat-template"],
             _model_without_readable_weights, expect="over the model's context of 64 -- fix: shorten the prompt"),
]
