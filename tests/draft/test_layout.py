"""The released EAGLE-3 layout: key names, shapes, dtypes, config.json, both file forms, strict load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from draft_helpers import tiny_head, tiny_llama

from lenpred.draft.config import DraftConfig, default_layers
from lenpred.draft.io import check_against_target, load_draft, save_draft
from lenpred.draft.model import expected_state_shapes
from lenpred.draft.vocab import build_draft_vocab
from lenpred.errors import ModelError

# config.json of the release (SafeAILab/EAGLE eagle/traineagle3/config.json, the Llama-3.1-8B head)
RELEASED_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.28.1",
    "use_cache": True, "vocab_size": 128256, "draft_vocab_size": 32000,
}


def _published_state(d: int, heads: int, kv: int, inter: int, vocab: int, n_draft: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A state dict written out by hand from the release's module tree (not from our model), fp16."""
    g = torch.Generator().manual_seed(seed)
    hd = d // heads

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(shape, generator=g) * 0.02).half()

    used = np.sort(np.random.default_rng(seed).choice(vocab, n_draft, replace=False))
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.from_numpy(used)] = True
    return {
        "midlayer.self_attn.q_proj.weight": w(heads * hd, 2 * d),
        "midlayer.self_attn.k_proj.weight": w(kv * hd, 2 * d),
        "midlayer.self_attn.v_proj.weight": w(kv * hd, 2 * d),
        "midlayer.self_attn.o_proj.weight": w(d, heads * hd),
        "midlayer.mlp.gate_proj.weight": w(inter, d),
        "midlayer.mlp.up_proj.weight": w(inter, d),
        "midlayer.mlp.down_proj.weight": w(d, inter),
        "midlayer.hidden_norm.weight": torch.ones(d).half(),
        "midlayer.input_layernorm.weight": torch.ones(d).half(),
        "midlayer.post_attention_layernorm.weight": torch.ones(d).half(),
        "norm.weight": torch.ones(d).half(),
        "fc.weight": w(d, 3 * d),
        "lm_head.weight": w(n_draft, d),
        "d2t": torch.from_numpy(used - np.arange(n_draft)).to(torch.int64),
        "t2d": t2d,
    }


def _write_released(path, sd, form: str, **cfg_changes) -> None:
    path.mkdir(parents=True, exist_ok=True)
    d = sd["fc.weight"].shape[0]
    cfg = {**RELEASED_CONFIG, "hidden_size": d, "intermediate_size": sd["midlayer.mlp.up_proj.weight"].shape[0],
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": sd["t2d"].shape[0],
           "draft_vocab_size": sd["d2t"].shape[0], **cfg_changes}
    (path / "config.json").write_text(json.dumps(cfg))
    if form == "bin":
        torch.save(sd, path / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file(sd, str(path / "model.safetensors"))


@pytest.mark.parametrize("form", ["bin", "safetensors"])
def test_published_layout_loads_strictly(tmp_path, form) -> None:
    sd = _published_state(d=32, heads=4, kv=2, inter=64, vocab=100, n_draft=40)
    _write_released(tmp_path / "head", sd, form)
    head = load_draft(tmp_path / "head")
    assert head.weights_file == ("pytorch_model.bin" if form == "bin" else "model.safetensors")
    got = head.model.state_dict()
    assert set(got) == set(sd)  # nothing added (no embeddings, no rotary buffers)
    for k, v in sd.items():
        assert torch.equal(got[k].to(v.dtype), v), k
    assert got["d2t"].dtype == torch.int64 and got["t2d"].dtype == torch.bool
    assert head.config.layers is None and head.meta is None
    # the release's config for Llama-3.1-8B implies the published shapes
    big = expected_state_shapes(DraftConfig.from_json(RELEASED_CONFIG))
    assert big["fc.weight"][0] == (4096, 3 * 4096)
    assert big["midlayer.self_attn.q_proj.weight"][0] == (4096, 8192)
    assert big["midlayer.self_attn.k_proj.weight"][0] == (1024, 8192)
    assert big["lm_head.weight"][0] == (32000, 4096)
    assert big["t2d"][0] == (128256,) and big["d2t"][0] == (32000,)


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_save_round_trip_keeps_released_layout(tmp_path, fmt) -> None:
    model = tiny_llama()
    head = tiny_head(model, 40)
    out = save_draft(head, tmp_path / "h", fmt=fmt, dtype="float16", meta={"layers": [2, 4, 5]})
    names = sorted(p.name for p in out.iterdir())
    weights = "model.safetensors" if fmt == "safetensors" else "pytorch_model.bin"
    assert names == sorted(["config.json", "meta.json", weights])
    # a loader that knows nothing of lenpred sees exactly the released keys
    if fmt == "bin":
        raw = torch.load(out / weights, weights_only=True)
    else:
        from safetensors.torch import load_file

        raw = load_file(str(out / weights))
    assert set(raw) == set(expected_state_shapes(head.config))
    assert raw["fc.weight"].dtype == torch.float16 and raw["d2t"].dtype == torch.int64
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 40 and cfg["vocab_size"] == 96 and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # layer outputs (SGLang ids)
    back = load_draft(out)
    assert back.config.layers == (2, 4, 5)
    assert back.meta is not None and back.meta["kind"] == "draft" and back.meta["weights"] == weights
    for k, v in head.state_dict().items():
        w = back.model.state_dict()[k]
        if v.is_floating_point():
            assert torch.allclose(w, v, atol=1e-3, rtol=1e-3), k  # float16 on disk
        else:
            assert torch.equal(w, v), k


def test_missing_extra_and_wrong_keys_are_named(tmp_path) -> None:
    sd = _published_state(d=32, heads=4, kv=2, inter=64, vocab=100, n_draft=40)
    cases = {
        "missing": ({k: v for k, v in sd.items() if k != "midlayer.hidden_norm.weight"}, "missing key(s) midlayer.hidden_norm.weight"),
        "extra": ({**sd, "midlayer2.norm.weight": sd["norm.weight"].clone()}, "unexpected key(s) midlayer2.norm.weight"),
        "shape": ({**sd, "fc.weight": sd["fc.weight"][:, :64].contiguous()}, "fc.weight has shape"),
        "dtype": ({**sd, "d2t": sd["d2t"].to(torch.int32)}, "d2t is torch.int32"),
        "d2t": ({**sd, "d2t": sd["d2t"] + 1000}, "outside the target vocabulary"),
    }
    for name, (bad, msg) in cases.items():
        _write_released(tmp_path / name, bad, "safetensors")
        with pytest.raises(ModelError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            load_draft(tmp_path / name)


def test_specforge_embeddings_are_checked_and_dropped(tmp_path) -> None:
    sd = _published_state(d=32, heads=4, kv=2, inter=64, vocab=100, n_draft=40)
    _write_released(tmp_path / "sf", {**sd, "embed_tokens.weight": torch.zeros(100, 32).half()}, "safetensors",
                    architectures=["LlamaForCausalLMEagle3"])
    head = load_draft(tmp_path / "sf")
    assert head.dropped == ["embed_tokens.weight"] and "embed_tokens.weight" not in head.model.state_dict()


def test_unsupported_config_fields_are_refused() -> None:
    for change, msg in [({"num_hidden_layers": 2}, "num_hidden_layers"),
                        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
                        ({"norm_before_residual": True}, "norm_before_residual")]:
        with pytest.raises(ModelError, match=msg):
            DraftConfig.from_json({**RELEASED_CONFIG, **change})


def test_layers_default_and_sglang_ids() -> None:
    assert default_layers(30) == (2, 15, 27)  # SmolLM2-135M
    assert default_layers(32) == (2, 16, 29)  # Llama-3.1-8B
    with pytest.raises(ModelError, match="three distinct"):
        default_layers(4)
    cfg = DraftConfig.from_json({**RELEASED_CONFIG, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})
    assert cfg.layers == (2, 16, 29)  # SGLang/SpecForge name layer outputs: +1 to the layer they enter


def test_draft_vocab_by_hand() -> None:
    counts = np.array([0, 5, 9, 5, 0, 1, 7])
    d2t, t2d, cov = build_draft_vocab(counts, 4)
    # most frequent: 2 (9), 6 (7), then 1 and 3 tie at 5 -> both in; sorted by id: [1, 2, 3, 6]
    assert (torch.arange(4) + d2t).tolist() == [1, 2, 3, 6]
    assert d2t.tolist() == [1, 1, 1, 3] and d2t.dtype == torch.int64
    assert t2d.tolist() == [False, True, True, True, False, False, True]
    assert cov == pytest.approx(26 / 27)
    d2t, t2d, _ = build_draft_vocab(np.array([0, 0, 3, 0]), 2)  # fewer seen than asked: fill by id
    assert (torch.arange(2) + d2t).tolist() == [0, 2]


def test_check_against_target_names_the_mismatch(tmp_path) -> None:
    model = tiny_llama()
    head = load_draft(save_draft(tiny_head(model, 40), tmp_path / "h"))
    assert check_against_target(head, model.config) == (2, 4, 5)
    for kw, msg in [(dict(hidden=32), "hidden size mismatch"), (dict(vocab=120), "vocabulary mismatch"),
                    (dict(layers=5), "layer mismatch")]:
        other = tiny_llama(vocab=kw.get("vocab", 96), hidden=kw.get("hidden", 64), layers=kw.get("layers", 8))
        with pytest.raises(ModelError, match=msg):
            check_against_target(head, other.config)


def test_ttt_steps_equal_the_decoding_chain() -> None:
    """Training-time test step i at column t is the decoding chain started at real position t
    (fed the true tokens): the attention structure of training and decoding agree."""
    from lenpred.draft.target import Target

    torch.manual_seed(0)
    model = tiny_llama()
    head = tiny_head(model, 40)
    target = Target(model)
    head.attach_embeddings(target.embedding)
    ids = torch.randint(0, 96, (1, 12))
    with torch.no_grad():
        _, aux = target.forward(ids)
        outs = head.ttt(aux, ids, n_steps=4)  # each (1, 12, d)
        for t in (3, 7):
            # decoding: real positions 0..t in the cache, then the chain at t+1, t+2, ...
            o, kv = head.step(head.fuse(aux[:, : t + 1]), ids[:, 1 : t + 2], torch.arange(t + 1)[None], None)
            assert torch.allclose(o[0, t], outs[0][0, t], atol=1e-5)
            prev = o[:, t : t + 1]
            for i in range(1, 4):
                prev, kv = head.step(prev, ids[:, t + i + 1 : t + i + 2], torch.tensor([[t + i]]), kv)
                assert torch.allclose(prev[0, 0], outs[i][0, t], atol=1e-5), (t, i)
