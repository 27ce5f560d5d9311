"""The transformers engine with row refill gives exactly what `generate` gives, row by row."""

from __future__ import annotations

import pytest
import torch

from lenpred.collect.base import Job, SamplingConfig, sample_seed
from lenpred.collect.hf import HFEngine


class _Tok:
    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, eos_token_id=0, pad_token_id=0, bos_token_id=1,
    )
    return LlamaForCausalLM(cfg).eval()


def _prompts():
    g = torch.Generator().manual_seed(1)
    return [tuple(int(t) for t in torch.randint(2, 97, (int(n),), generator=g)) for n in (3, 9, 5, 14, 2, 7)]


def test_refill_matches_generate_greedy(tiny_llama):
    s = SamplingConfig(temperature=1.0, top_p=1.0, top_k=1, max_new_tokens=12)
    eng = HFEngine(tiny_llama, _Tok(), s, batch_size=3)
    jobs = [Job(str(i), 0, p, "", 0) for i, p in enumerate(_prompts())]
    got = {r.prompt_id: r for r in eng.generate(iter(jobs))}
    assert len(got) == len(jobs)
    for j in jobs:
        ref = tiny_llama.generate(torch.tensor([j.prompt_token_ids]), max_new_tokens=12, do_sample=False)[0, len(j.prompt_token_ids):].tolist()
        stop = "length"
        if 0 in ref:
            ref = ref[: ref.index(0)]
            stop = "eos"
        assert list(got[j.prompt_id].token_ids) == ref, j.prompt_id
        assert got[j.prompt_id].stop_reason == stop
    assert 0.0 <= eng.padding_share < 0.5


def test_sampling_is_per_sample_seeded(tiny_llama):
    """A sample's tokens depend on its seed, not on which batch or row it ran in."""
    s = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=10)
    prompts = _prompts()
    jobs = [Job(f"p{i}", k, p, "", sample_seed(0, f"p{i}", k)) for i, p in enumerate(prompts) for k in range(2)]
    a = {(r.prompt_id, r.sample_idx): r.token_ids for r in HFEngine(tiny_llama, _Tok(), s, batch_size=4).generate(iter(jobs))}
    b = {(r.prompt_id, r.sample_idx): r.token_ids for r in HFEngine(tiny_llama, _Tok(), s, batch_size=1).generate(iter(reversed(jobs)))}
    assert a == b
    assert len({a[("p0", 0)], a[("p0", 1)]}) == 2 or len(a[("p0", 0)]) == 0


def test_length_cap(tiny_llama):
    """A sample that reaches max_new_tokens is cut there and marked "length" (censored); one that
    draws EOS first is "eos" with the EOS left out. Greedy picks make the expected answer known."""
    prompts = _prompts()
    for cap in (1, 3):
        s = SamplingConfig(temperature=1.0, top_p=1.0, top_k=1, max_new_tokens=cap)
        jobs = [Job(str(i), 0, p, "", 0) for i, p in enumerate(prompts)]
        got = {r.prompt_id: r for r in HFEngine(tiny_llama, _Tok(), s, batch_size=2).generate(iter(jobs))}
        for j in jobs:
            ref = tiny_llama.generate(torch.tensor([j.prompt_token_ids]), max_new_tokens=cap, do_sample=False)[0, len(j.prompt_token_ids):].tolist()
            want = (tuple(ref[: ref.index(0)]), "eos") if 0 in ref else (tuple(ref), "length")
            r = got[j.prompt_id]
            assert (r.token_ids, r.stop_reason) == want, j.prompt_id
            assert r.stop_reason == "eos" or len(r.token_ids) == cap


def test_eos_at_the_first_token_on_every_row():
    """A model that always picks EOS: every sample stops at once, 0 tokens, "eos", and no job is
    lost when a whole refill finishes inside its prefill (the engine used to return early there)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=11, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, eos_token_id=0, pad_token_id=0, bos_token_id=1)
    m = LlamaForCausalLM(cfg).eval()
    head = torch.nn.Linear(16, 11, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[0] = 10.0  # logits (B, T, V): EOS wins whatever the state
    m.lm_head = head
    s = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=5)
    jobs = [Job(str(i), 0, (5, 6 + i), "", i) for i in range(5)]
    res = list(HFEngine(m, _Tok(), s, batch_size=2).generate(iter(jobs)))
    assert sorted((r.prompt_id, r.token_ids, r.stop_reason) for r in res) == [(str(i), (), "eos") for i in range(5)]


def test_frequency_penalty_breaks_greedy_loops(tiny_llama):
    """Greedy decoding of a random tiny model loops; an output-only frequency penalty changes the picks."""
    prompt = _prompts()[3]
    base = SamplingConfig(temperature=1.0, top_k=1, max_new_tokens=40)
    pen = SamplingConfig(temperature=1.0, top_k=1, max_new_tokens=40, frequency_penalty=2.0)
    a = next(HFEngine(tiny_llama, _Tok(), base, batch_size=1).generate(iter([Job("a", 0, prompt, "", 0)])))
    b = next(HFEngine(tiny_llama, _Tok(), pen, batch_size=1).generate(iter([Job("a", 0, prompt, "", 0)])))
    assert len(set(b.token_ids)) > len(set(a.token_ids))
