"""The extractor on a tiny random Llama: known answers from the model itself, padding invariance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lenpred.features.prefill import Extractor, FeatureConfig

SEQS = [[5, 17, 3], [9, 2, 44, 81, 6, 7, 30, 11], [61], [12, 13, 14, 15, 16]]


def _ext(model_dir: Path, **kw: object) -> Extractor:
    return Extractor.load(model_dir, FeatureConfig(**kw), layers=(0, 2, 4))


TOL = {"rtol": 1e-5, "atol": 1e-5}


def test_blocks_match_the_model_run_alone(tiny_model: Path) -> None:
    """last / mean against hidden_states of a plain unpadded forward, and entropies against the logits.

    A padded batch and a single sequence run through other BLAS kernels (and thread splits), so they
    agree to float32 rounding *relative to the values* (|h| reaches ~13 here), not to a fixed 1e-5."""
    from transformers import AutoModelForCausalLM

    ext = _ext(tiny_model)
    blocks, side = ext.features(SEQS)
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    for i, s in enumerate(SEQS):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([s]), output_hidden_states=True)
        for layer in (0, 2, 4):
            h = out.hidden_states[layer][0]  # (T, d)
            np.testing.assert_allclose(blocks[f"{layer}.last"][i], h[-1].numpy(), **TOL)
            np.testing.assert_allclose(blocks[f"{layer}.mean"][i], h.mean(0).numpy(), **TOL)
        logp = torch.log_softmax(out.logits[0], dim=-1)  # (T, V)
        ent = -(logp.exp() * logp).sum(-1)  # (T,)
        w = torch.softmax(ent, dim=0)  # temperature 1
        np.testing.assert_allclose(blocks["2.entropy"][i], (w[:, None] * out.hidden_states[2][0]).sum(0).numpy(), **TOL)
        want = [len(s), np.log(len(s)), ent.mean(), ent.std(unbiased=False), ent.max(), ent[-1]]
        np.testing.assert_allclose(side[i], np.array(want, dtype=np.float32), **TOL)
    assert ext.forward_calls == 1  # the whole batch in one pass
    assert np.ptp(side[:, 5]) > 0.05  # the tiny model's entropies do differ between prompts


@pytest.mark.parametrize("side", ["right", "left"])
def test_batched_equals_unbatched(tiny_model: Path, side: str) -> None:
    ext = _ext(tiny_model, padding_side=side)
    batched, bside = ext.features(SEQS)
    for i, s in enumerate(SEQS):
        alone, aside = ext.features([s])
        for k in batched:
            np.testing.assert_allclose(batched[k][i], alone[k][0], atol=2e-5, err_msg=f"{side} {k} row {i}")
        np.testing.assert_allclose(bside[i], aside[0], atol=2e-5)


def test_left_equals_right_padding(tiny_model: Path) -> None:
    r, rs = _ext(tiny_model, padding_side="right").features(SEQS)
    lb, ls = _ext(tiny_model, padding_side="left").features(SEQS)
    for k in r:
        np.testing.assert_allclose(r[k], lb[k], atol=2e-5, err_msg=k)
    np.testing.assert_allclose(rs, ls, atol=2e-5)


def test_max_tokens_keeps_the_last_tokens_and_counts_all(tiny_model: Path) -> None:
    ext = _ext(tiny_model, max_tokens=3)
    cut, cside = ext.features([SEQS[1]])
    tail, tside = _ext(tiny_model).features([SEQS[1][-3:]])
    for k in cut:
        np.testing.assert_allclose(cut[k], tail[k], atol=1e-5)
    assert cside[0, 0] == len(SEQS[1]) and tside[0, 0] == 3  # prompt_tokens counts the whole prompt
    np.testing.assert_allclose(cside[0, 2:], tside[0, 2:], atol=1e-5)


@pytest.mark.slow
def test_smollm2_default_spec() -> None:
    """The embedded model's default layers are 10, 15, 30 of 30 (0 = embeddings), 576 wide."""
    from transformers import AutoConfig

    from lenpred.features.prefill import make_spec
    from lenpred.models.loading import hf_folder

    spec, folder = hf_folder("smollm2-135m")
    s = make_spec(FeatureConfig(), AutoConfig.from_pretrained(folder), spec.id, spec.fingerprint)
    assert s["layers"] == [10, 15, 30] and s["n_layers"] == 30 and s["hidden_size"] == 576
    assert len(s["blocks"]) == 9 and s["dtype"] == "float16"
