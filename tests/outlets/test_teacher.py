"""The states-only teacher-forcing pass: the same states as the full model (float32), batching by prompt
without a mask, bf16 detection and the refusal to mix precisions, a damaged chunk set aside, agreement
with the rows read through the draft-training state cache."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from traj_helpers import make_run, save_head, tiny_llama

from lenpred.draft.target import Target
from lenpred.draft.teacher import StatesOnlyTarget, cpu_bf16, length_groups, resolve_compute_dtype
from lenpred.errors import ConfigError, DataError
from lenpred.outlets.extract import TrajectoryRequest, compute_trajectory
from lenpred.outlets.features import TrajectoryConfig
from lenpred.outlets.store import load_trajectory

LAYERS = (2, 4, 5)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def _compute(run, head, out, model, dtype="float32", kill_after=None, **kw):
    def on_chunk(n: int) -> None:
        if kill_after is not None and n >= kill_after:
            raise KeyboardInterrupt

    cfg = TrajectoryConfig(stride=16, chunk_prompts=1, compute_dtype=dtype)
    log = kw.pop("log", None)
    return compute_trajectory(TrajectoryRequest(run.path, head, out, cfg, progress=False, **kw), log=log,
                              target=Target(model, LAYERS), on_chunk=on_chunk)


# ------------------------------------------------------------------------------------------ the pass
def test_states_equal_the_full_models_hidden_states(model) -> None:
    """Layers above the highest captured one and the LM head are skipped, the prompt runs once, its samples
    are batched right-padded without a mask: each sample's states equal a full forward pass of its own."""
    st = StatesOnlyTarget(model, LAYERS, "float32")
    prompt = [5, 9, 11, 3, 7]
    rng = np.random.default_rng(1)
    resp = [rng.integers(1, 90, n).tolist() for n in (8, 2, 0, 20, 19, 1)]
    got = st.sample_states(prompt, resp, max_pad=0.5)
    for r, g in zip(resp, got, strict=True):
        with torch.inference_mode():
            hs = model(input_ids=torch.tensor([prompt + r]), output_hidden_states=True).hidden_states
        want = torch.cat([hs[j][0] for j in LAYERS], dim=-1)  # (N, 3d)
        assert g.shape == want.shape
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)
    assert len(model.model.layers) == model.config.num_hidden_layers  # the model is left whole


def test_bfloat16_states_stay_close_to_float32(model) -> None:
    prompt, resp = [4, 8, 15, 16], [[23, 42, 7, 1, 9, 3] * 5, [2, 2, 5]]
    a = StatesOnlyTarget(model, LAYERS, "float32").sample_states(prompt, resp)
    b = StatesOnlyTarget(model, LAYERS, "bfloat16").sample_states(prompt, resp)
    for x, y in zip(a, b, strict=True):
        rel = torch.linalg.vector_norm(y - x, dim=-1) / torch.linalg.vector_norm(x, dim=-1)
        assert float(rel.max()) < 0.05 and float(rel.max()) > 0  # bf16 products: close, not equal


def test_length_groups_bound_the_padding() -> None:
    assert length_groups([10, 11, 100, 12, 95]) == [[0, 1, 3], [4, 2]]  # 10-12 pad little; 95 with 100
    assert length_groups([5, 500]) == [[0], [1]]  # one long answer does not pad a short one to 500
    assert length_groups([100] * 5, max_tokens=250) == [[0, 1], [2, 3], [4]]
    assert length_groups([]) == []


# ------------------------------------------------------------------------------------------ dtype choice
@pytest.mark.parametrize(("flags", "asked", "want"), [
    ("fpu sse avx2 amx_bf16 amx_tile", "auto", "bfloat16"),
    ("fpu avx512f avx512_bf16", "auto", "bfloat16"),
    ("fpu sse avx2", "auto", "float32"),
    ("fpu sse avx2", "float32", "float32"),
    ("fpu amx_bf16", "float32", "float32"),
])
def test_compute_dtype_follows_the_cpu(tmp_path, flags, asked, want) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert resolve_compute_dtype(asked, "cpu", cpuinfo=info) == want


def test_bfloat16_on_a_cpu_without_it_says_so_in_one_line(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse avx2\n")
    said: list[str] = []
    assert resolve_compute_dtype("bfloat16", "cpu", cpuinfo=info, warn=said.append) == "float32"
    assert len(said) == 1 and "neither amx_bf16 nor avx512_bf16" in said[0] and "--compute-dtype float32" in said[0]
    assert resolve_compute_dtype("bfloat16", "cuda") == "bfloat16"
    assert cpu_bf16(tmp_path / "missing") == []
    with pytest.raises(ConfigError, match="'fp8' is not one of auto, float32, bfloat16"):
        resolve_compute_dtype("fp8")


# ------------------------------------------------------------------------------------------ resume
def test_a_resume_in_another_precision_is_refused_naming_both(tmp_path, model, monkeypatch) -> None:
    monkeypatch.setattr("lenpred.draft.teacher.cpu_bf16", lambda *a, **k: ["amx_bf16"])
    run, head = make_run(tmp_path / "run", model), save_head(tmp_path / "head", model)
    with pytest.raises(KeyboardInterrupt):
        _compute(run, head, tmp_path / "t", model, "float32", kill_after=1)
    with pytest.raises(DataError, match="target_states: 'float32' there, 'bfloat16' now"):
        _compute(run, head, tmp_path / "t", model, "bfloat16")
    assert len(list((tmp_path / "t.work").glob("chunk-*.safetensors"))) == 1  # nothing of the refused run


def test_a_damaged_chunk_is_set_aside_and_recomputed(tmp_path, model) -> None:
    run, head = make_run(tmp_path / "run", model), save_head(tmp_path / "head", model)
    full = _compute(run, head, tmp_path / "full", model)
    with pytest.raises(KeyboardInterrupt):
        _compute(run, head, tmp_path / "t", model, kill_after=3)
    chunk = tmp_path / "t.work" / "chunk-00001.safetensors"
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2])  # truncated, as a full disk or a copy cut short leaves it
    said: list[str] = []
    again = _compute(run, head, tmp_path / "t", model, log=said.append)
    assert any("chunk-00001.safetensors is not a readable trajectory chunk" in m and "set aside" in m for m in said)
    assert again.computed == full.samples - 6  # chunks 0 and 2 kept (one prompt of 3 samples each)
    a, b = load_trajectory(tmp_path / "full"), load_trajectory(tmp_path / "t")
    pd.testing.assert_frame_equal(a.index, b.index)
    for k in a.blocks:
        np.testing.assert_array_equal(a.blocks[k], b.blocks[k])


# ------------------------------------------------------------------------------------------ vs the cache
def test_rows_agree_with_the_rows_read_through_the_state_cache(tmp_path, model) -> None:
    """The old path (the draft-training cache: full model, float16 states) and the new pass give the same
    rows up to the cache's float16 rounding; the spec says which precision each used."""
    run, head = make_run(tmp_path / "run", model), save_head(tmp_path / "head", model)
    _compute(run, head, tmp_path / "new", model)
    _compute(run, head, tmp_path / "old", model, cache=tmp_path / "cache")
    a, b = load_trajectory(tmp_path / "new"), load_trajectory(tmp_path / "old")
    assert a.spec["target_states"] == "float32" and b.spec["target_states"] == "float16"
    pd.testing.assert_frame_equal(a.index, b.index)
    for k in a.blocks:
        np.testing.assert_allclose(a.blocks[k], b.blocks[k], rtol=1e-2, atol=1e-2)
