"""The llama.cpp engine prefills a prompt once for its K samples (siblings copy its K/V stream).

With top_k = 1 sampling is argmax, so sharing the prefix must not change a single token: a wrong
copy (the wrong cells, a stale source, logits read from the copied prompt instead of the slot's own
last-token pass) would change the continuation or its length.
"""

from __future__ import annotations

import pytest

from lenpred.collect.base import Job, SamplingConfig
from model_testing import needs_llama


def _jobs(tok, prompts: list[str], k: int) -> list[Job]:
    out = []
    for i, p in enumerate(prompts):
        text = tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
        out += [Job(f"p{i}", j, ids, text, seed=100 * i + j) for j in range(k)]
    return out


@needs_llama
def test_shared_prefix_gives_the_same_tokens_and_copies_streams(monkeypatch):
    from transformers import AutoTokenizer

    from lenpred.collect.llamacpp import LlamaCppEngine, LlamaCppOptions
    from lenpred.models.loading import embedded_gguf, resolve

    spec = resolve("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(str(spec.hf_path)) if spec.hf_path else pytest.skip("no converted tokenizer")
    jobs = _jobs(tok, ["Name three colours.", "Write one sentence about the sea."], k=3)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=1, max_new_tokens=12, seed=0)
    results, copies = {}, {}
    for share in (False, True):
        eng = LlamaCppEngine(embedded_gguf(), sampling, LlamaCppOptions(n_parallel=4, n_threads=1), max_prompt_tokens=64,
                             share_prefix=share)
        n = 0
        real = eng.L.llama_memory_seq_cp

        def counting(*a, _real=real):
            nonlocal n
            n += 1
            return _real(*a)

        monkeypatch.setattr(eng.L, "llama_memory_seq_cp", counting)
        try:
            results[share] = {(r.prompt_id, r.sample_idx): r.token_ids for r in eng.generate(iter(jobs))}
        finally:
            eng.close()
            monkeypatch.undo()
        copies[share] = n
    assert copies[False] == 0 and copies[True] >= 2  # siblings copied a live stream at least once per prompt
    assert set(results[True]) == set(results[False]) == {(j.prompt_id, j.sample_idx) for j in jobs}
    assert results[True] == results[False]
    # argmax decoding: the K samples of a prompt agree with each other too
    for p in ("p0", "p1"):
        assert len({results[True][(p, j)] for j in range(3)}) == 1
