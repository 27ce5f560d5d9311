"""Trajectory features: the position scheme, the rows (against a hand computation), labels and
censoring, the state cache, resume after a kill, shards, and the CLI on a tiny target."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from traj_helpers import CAP, LENGTHS, make_run, save_head, save_model, tiny_llama

from bad_input_harness import read_only, writable
from lenpred.draft.io import load_draft
from lenpred.draft.speculative import teacher_forced_draft_states
from lenpred.draft.target import Target
from lenpred.errors import ConfigError, DataError
from lenpred.io.fileio import file_sha256
from lenpred.outlets.extract import TrajectoryRequest, compute_trajectory, parse_roles
from lenpred.outlets.features import TrajectoryConfig, fixed_positions, positions, sample_rows, state_position
from lenpred.outlets.store import Trajectory, load_trajectory, merge_trajectories

LAYERS = (2, 4, 5)  # default_layers(8) of the tiny target


# tiny models: thread start-up costs more than the arithmetic (and the CPUs are shared)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture
def setup(tmp_path, model):
    run = make_run(tmp_path / "run", model)
    head = save_head(tmp_path / "head", model)
    return run, head


def _compute(run, head, out, model, *, cfg=None, kill_after=None, **kw):
    """compute_trajectory on the tiny target, float32 unless the test asks otherwise; ``kill_after=n``
    raises KeyboardInterrupt after the n-th chunk, as a kill would."""
    kw.setdefault("cache", False)
    cfg = cfg or TrajectoryConfig()
    if "compute_dtype" not in cfg.model_fields_set:
        cfg = cfg.model_copy(update={"compute_dtype": "float32"})

    def on_chunk(n: int) -> None:
        if kill_after is not None and n >= kill_after:
            raise KeyboardInterrupt

    return compute_trajectory(TrajectoryRequest(run.path, head, out, cfg, progress=False, **kw),
                              target=Target(model, LAYERS), on_chunk=on_chunk)


# ------------------------------------------------------------------------------------------ positions
def test_positions_on_hand_made_lengths() -> None:
    assert positions(0).tolist() == [0]  # an empty response keeps its t = 0 row
    assert positions(1).tolist() == [0]
    assert positions(10).tolist() == [0, 1, 2, 5, 7]  # floor(0.1, 0.25, 0.5, 0.75 x 10)
    assert positions(100, stride=64).tolist() == [0, 10, 25, 32, 50, 64, 75]
    assert positions(100, stride=30).tolist() == [0, 10, 25, 30, 32, 50, 60, 64, 75, 90]
    full = positions(1000, stride=64)
    fixed = {0, 100, 250, 500, 750, 32, 64, 128, 256, 512}
    assert fixed <= set(full.tolist()) and set(range(64, 1000, 64)) <= set(full.tolist())
    assert len(full) == len(fixed | set(range(64, 1000, 64)))
    # the cap keeps every fixed point first, then grid points spread over the grid (the first and the last)
    capped = positions(1000, stride=64, max_positions=12)
    assert len(capped) == 12 and fixed <= set(capped.tolist())
    assert set(capped.tolist()) - fixed == {192, 960}
    for L in (0, 1, 2, 7, 33, 64, 65, 129, 511, 1024):
        p = positions(L, stride=16, max_positions=15)
        assert p[0] == 0 and np.all(np.diff(p) > 0) and (L == 0 or p[-1] < L) and len(p) <= 15
        assert set(fixed_positions(L)) <= set(p.tolist())


def test_max_positions_below_the_fixed_points_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_positions.*must be >= 10"):
        TrajectoryConfig(max_positions=5)
    assert TrajectoryConfig(max_positions=10).max_positions == 10


def test_state_position_is_the_newest_state_after_t_tokens() -> None:
    assert state_position(7, 0) == 5  # the prompt's last state: it reads x_6, the last prompt token
    assert state_position(7, 3) == 8  # reads x_8's target state and x_9 = the third generated token


# ------------------------------------------------------------------------------------------ rows
def test_rows_equal_a_hand_computation(model, tmp_path) -> None:
    head = load_draft(save_head(tmp_path / "head", model)).model
    target = Target(model, LAYERS)
    prompt = [4, 9, 17, 3, 30]
    resp = list(np.random.default_rng(3).integers(1, 95, 40))
    ids = prompt + [int(x) for x in resp]
    with torch.inference_mode():
        _, aux = target.forward(torch.tensor([ids]))  # (1, N, 3d)
        hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        fused = head.fuse(aux)[0]
    o = teacher_forced_draft_states(target, head, ids)  # (N - 1, d) at s = 0..N-2
    ts = positions(len(resp), stride=8)
    rows = sample_rows(head, aux[0].numpy(), np.array(ids), len(prompt), ts, LAYERS)
    P = len(prompt)
    for k, t in enumerate(ts.tolist()):
        s = P + t - 2
        np.testing.assert_allclose(rows["draft"][k], o[s].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rows["fused"][k], fused[s].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rows["target.4"][k], hs[4][0, s].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rows["draft_running"][k], o[P - 2 : s + 1].mean(0).numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------ labels, spec
def test_labels_censoring_and_spec(setup, model, tmp_path) -> None:
    run, head = setup
    res = _compute(run, head, tmp_path / "traj", model, cfg=TrajectoryConfig(stride=16))
    traj = load_trajectory(tmp_path / "traj", card=run.card)
    s = run.samples()
    assert res.samples == len(s) == sum(map(len, LENGTHS)) and traj.n == res.rows
    idx = traj.index
    for r in s.itertuples():
        rows = idx[(idx.prompt_id == r.prompt_id) & (idx.sample_idx == r.sample_idx)]
        assert rows["t"].tolist() == positions(int(r.n_tokens), 16).tolist()
        assert (rows["length"] == r.n_tokens).all()
        assert (rows["remaining"] == r.n_tokens - rows["t"]).all()
        assert (rows["truncated"] == (r.n_tokens >= CAP)).all() and (rows["truncated"] == (r.stop_reason == "length")).all()
    assert idx.duplicated(["prompt_id", "sample_idx", "t"]).sum() == 0
    assert list(idx.columns) == ["prompt_id", "sample_idx", "t", "length", "remaining", "truncated"]
    order = idx.sort_values(["prompt_id", "sample_idx", "t"]).index
    assert (order == np.arange(len(idx))).all()
    empty = idx[idx.length == 0]
    assert empty["t"].tolist() == [0] and empty["remaining"].tolist() == [0]
    # the spec names the draft head, the target, the layers and the scheme
    sp = traj.spec
    assert sp["draft"]["sha256"] == file_sha256(head / "model.safetensors")
    assert sp["draft"]["target_fingerprint"] == run.card["model"]["fingerprint"] == sp["target_fingerprint"]
    assert sp["layers"]["draft_input"] == list(LAYERS) and sp["layers"]["target_block"] == 4
    assert sp["positions"]["stride"] == 16 and sp["positions"]["fixed_tokens"] == [32, 64, 128, 256, 512]
    assert set(traj.blocks) == {"draft", "fused", "target.4", "draft_running"} == set(sp["blocks"])
    assert traj.card_hash == run.card_hash
    # each row is sample_rows of that sample (float16 storage)
    p = run.prompts().set_index("prompt_id")
    r = s.iloc[4]
    ids = list(p.loc[r.prompt_id, "prompt_token_ids"]) + list(r.token_ids)
    with torch.inference_mode():
        _, aux = Target(model, LAYERS).forward(torch.tensor([ids]))
    mine = idx.index[(idx.prompt_id == r.prompt_id) & (idx.sample_idx == r.sample_idx)]
    dm = load_draft(head).model.attach_embeddings(model.get_input_embeddings())
    want = sample_rows(dm, aux[0].numpy(), np.array(ids), len(p.loc[r.prompt_id, "prompt_token_ids"]),
                       idx.loc[mine, "t"].to_numpy(), LAYERS)
    for k, v in want.items():
        np.testing.assert_allclose(traj.blocks[k][mine], v, rtol=2e-3, atol=2e-3)


def test_roles_and_limits_select_samples(setup, model, tmp_path) -> None:
    run, head = setup
    from lenpred.data.split import load_split

    split = load_split(run)
    _compute(run, head, tmp_path / "t", model, roles=("test",), max_prompts=2, max_samples_per_prompt=2)
    traj = load_trajectory(tmp_path / "t")
    got = traj.index[["prompt_id", "sample_idx"]].drop_duplicates()
    assert set(got.prompt_id) <= split.test and len(set(got.prompt_id)) == 2 and set(got.sample_idx) == {0, 1}


def test_positions_beyond_the_length_are_refused_by_the_store() -> None:
    idx = pd.DataFrame({"prompt_id": ["a"], "sample_idx": [0], "t": [12], "length": [10], "remaining": [-2],
                        "truncated": [False]})
    with pytest.raises(DataError, match="t=12 exceeds the length 10"):
        Trajectory(idx, {"draft": np.zeros((1, 4), np.float32)})


def test_unknown_role_and_bad_shard(setup, model, tmp_path) -> None:
    run, head = setup
    with pytest.raises(ConfigError, match="unknown role 'bogus'"):
        parse_roles("train,bogus")
    with pytest.raises(ConfigError, match="out of range"):
        _compute(run, head, tmp_path / "t", model, shard=(3, 3))
    assert not (tmp_path / "t").exists() and not (tmp_path / "t.work").exists()


# ------------------------------------------------------------------------------------------ cache
def test_cache_is_filled_then_reused(setup, model, tmp_path) -> None:
    from lenpred.draft.states import StateCache

    run, head = setup
    ref = _compute(run, head, tmp_path / "ref", model)
    a = _compute(run, head, tmp_path / "a", model, cache=tmp_path / "cache")
    assert a.from_cache == 0 and a.tokens > 0
    cache = StateCache.open(tmp_path / "cache")
    assert len(cache.done_keys()) == ref.samples  # filled for draft training too
    assert cache.manifest["card_hash"] == run.card_hash and cache.manifest["layers"] == list(LAYERS)
    b = _compute(run, head, tmp_path / "b", model, cache=tmp_path / "cache")
    assert b.from_cache == b.computed == ref.samples and b.tokens == 0  # no target pass at all
    ta, tb, tr = (load_trajectory(tmp_path / n) for n in ("a", "b", "ref"))
    assert ta.spec["target_states"] == "float16" and tr.spec["target_states"] == "float32"
    for k in tr.blocks:
        np.testing.assert_array_equal(ta.blocks[k], tb.blocks[k])
        np.testing.assert_allclose(ta.blocks[k], tr.blocks[k], rtol=1e-2, atol=1e-2)  # float16 target states


def test_cache_of_another_run_is_refused(setup, model, tmp_path) -> None:
    from lenpred.draft.states import StateCache

    run, head = setup
    StateCache.open_or_create(tmp_path / "c", {"target_fingerprint": "sha256:" + "ab" * 32, "layers": list(LAYERS),
                                               "topk": 64, "dtype": "float16", "card_hash": "0" * 16,
                                               "max_seq_len": 2048})._ensure_dir()
    with pytest.raises(DataError, match="made for another run"):
        _compute(run, head, tmp_path / "t", model, cache=tmp_path / "c")
    assert not (tmp_path / "t.work").exists()


# ------------------------------------------------------------------------------------------ resume, shards
def test_resume_after_a_kill_gives_the_uninterrupted_result(setup, model, tmp_path) -> None:
    run, head = setup
    cfg = TrajectoryConfig(stride=16, chunk_prompts=1)
    full = _compute(run, head, tmp_path / "full", model, cfg=cfg)
    with pytest.raises(KeyboardInterrupt):
        _compute(run, head, tmp_path / "t", model, cfg=cfg, kill_after=2)
    work = tmp_path / "t.work"
    assert len(list(work.glob("chunk-*.safetensors"))) == 2 and not (tmp_path / "t").exists()
    (work / ".chunk-00002.safetensors.x.tmp").write_bytes(b"half a chunk")  # a writer killed mid-write
    again = _compute(run, head, tmp_path / "t", model, cfg=cfg)
    assert again.computed == full.samples - 6  # two chunks of one prompt (3 samples) each were done
    assert not work.exists()
    a, b = load_trajectory(tmp_path / "full"), load_trajectory(tmp_path / "t")
    pd.testing.assert_frame_equal(a.index, b.index)
    assert a.index.duplicated(["prompt_id", "sample_idx", "t"]).sum() == 0
    for k in a.blocks:
        np.testing.assert_array_equal(a.blocks[k], b.blocks[k])
    # a rerun of a finished computation is a no-op
    assert _compute(run, head, tmp_path / "t", model, cfg=cfg).up_to_date


def test_a_failure_before_the_first_chunk_leaves_no_work_folder(setup, model, tmp_path, monkeypatch) -> None:
    """Issue 39: an error before any chunk is written left OUT.work/work.json behind (nothing to resume)."""
    import lenpred.outlets.extract as extract

    run, head = setup

    def fail(*a: object, **k: object) -> None:
        raise RuntimeError("the target pass failed")

    monkeypatch.setattr(extract, "_compute_chunk", fail)
    with pytest.raises(RuntimeError, match="the target pass failed"):
        _compute(run, head, tmp_path / "t", model)
    assert not (tmp_path / "t.work").exists() and not (tmp_path / "t").exists()


def test_an_empty_shard_and_an_unwritable_cache_are_refused_before_any_work(setup, model, tmp_path) -> None:
    run, head = setup  # 6 prompts
    with pytest.raises(ConfigError, match=r"shard 6/7 holds no prompt: the selection has 6 prompt\(s\) for 7 shards"):
        _compute(run, head, tmp_path / "t", model, shard=(6, 7))
    ro = tmp_path / "ro"
    ro.mkdir()
    read_only(ro)
    try:
        with pytest.raises(DataError, match="cannot be written: directory .*ro is read-only"):
            _compute(run, head, tmp_path / "t", model, cache=ro / "cache")
    finally:
        writable(ro)
    assert not (tmp_path / "t.work").exists() and not (tmp_path / "t").exists() and not (ro / "cache").exists()


def test_work_folder_of_other_settings_is_refused(setup, model, tmp_path) -> None:
    run, head = setup
    with pytest.raises(KeyboardInterrupt):
        _compute(run, head, tmp_path / "t", model, cfg=TrajectoryConfig(chunk_prompts=1), kill_after=1)
    with pytest.raises(DataError, match="other settings"):
        _compute(run, head, tmp_path / "t", model, cfg=TrajectoryConfig(chunk_prompts=1, stride=8))


def test_shards_merge_to_the_unsharded_result(setup, model, tmp_path) -> None:
    run, head = setup
    full = _compute(run, head, tmp_path / "full", model)
    parts = [_compute(run, head, tmp_path / f"s{i}", model, shard=(i, 3)) for i in range(3)]
    assert sum(p.samples for p in parts) == full.samples and all(p.samples for p in parts)
    with pytest.raises(DataError, match="shard.*2/3 missing"):
        merge_trajectories(tmp_path / "m", [tmp_path / "s0", tmp_path / "s1"])
    merge_trajectories(tmp_path / "m", [tmp_path / f"s{i}" for i in (2, 0, 1)])
    a, b = load_trajectory(tmp_path / "full"), load_trajectory(tmp_path / "m")
    pd.testing.assert_frame_equal(a.index, b.index)
    for k in a.blocks:
        np.testing.assert_array_equal(a.blocks[k], b.blocks[k])
    assert a.spec == b.spec
    from lenpred.cli import main  # the same through the CLI

    assert main(["outlets", "features", "--merge", *(str(tmp_path / f"s{i}") for i in range(3)),
                 "--out", str(tmp_path / "m2")]) == 0
    assert load_trajectory(tmp_path / "m2").index.equals(a.index)


# ------------------------------------------------------------------------------------------ CLI
def test_cli_end_to_end_on_a_tiny_target(tmp_path, model, capsys) -> None:
    from lenpred.cli import main

    folder, fp = save_model(tmp_path / "model", model)
    run = make_run(tmp_path / "run", model, fingerprint=fp, model_id=str(folder))
    head = save_head(tmp_path / "head", model, fingerprint=fp)
    rc = main(["outlets", "features", "--run", str(run.path), "--draft", str(head), "--out", str(tmp_path / "traj"),
               "--roles", "train,test", "--stride", "32", "--cache", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    traj = load_trajectory(tmp_path / "traj", card=run.card)
    assert traj.spec["target_fingerprint"] == fp and traj.spec["positions"]["stride"] == 32
    assert "samples" in err and "rows" in err


# ------------------------------------------------------------------------------------------ live rows (issue 38)
def test_live_rows_are_the_live_positions_and_equal_the_fraction_runs_rows(setup, model, tmp_path) -> None:
    """``--rows live`` keeps t = 0, 16, 32, ... below L, records the scheme, teacher-forces only up to the
    last kept position, and its rows equal those of a fraction run at the same positions (causal: the
    tokens after a row do not change it); ``--rows both`` is the union of the two schemes."""
    run, head = setup
    f32 = {"dtype": "float32"}
    live = _compute(run, head, tmp_path / "live", model, cfg=TrajectoryConfig(rows="live", **f32))
    frac = _compute(run, head, tmp_path / "frac", model, cfg=TrajectoryConfig(stride=16, **f32))
    both = _compute(run, head, tmp_path / "both", model, cfg=TrajectoryConfig(rows="both", stride=16, **f32))
    tl, tf, tb = (load_trajectory(tmp_path / n, card=run.card) for n in ("live", "frac", "both"))
    assert tl.spec["positions"]["rows"] == "live" and tl.spec["positions"]["live"]["first"] == 16
    assert "fractions" not in tl.spec["positions"] and tb.spec["positions"]["rows"] == "both"
    s = run.samples()
    for r in s.itertuples():
        L = int(r.n_tokens)
        for traj, want in ((tl, positions(L, rows="live")), (tb, positions(L, 16, rows="both"))):
            got = traj.index[(traj.index.prompt_id == r.prompt_id) & (traj.index.sample_idx == r.sample_idx)]["t"]
            assert got.tolist() == want.tolist()
    # forcing stops at the last live point below L: fewer target tokens than the whole responses
    p_tokens = run.prompts().set_index("prompt_id")["n_prompt_tokens"]
    n_prompts = s["prompt_id"].nunique()
    assert live.tokens == sum(int(p_tokens[p]) for p in s["prompt_id"].unique()) + sum(
        int(positions(int(n), rows="live").max()) for n in s["n_tokens"])
    assert live.tokens < frac.tokens and n_prompts == len(LENGTHS)
    key = ["prompt_id", "sample_idx", "t"]
    m = tl.index[key].reset_index().merge(tf.index[key].reset_index(), on=key, suffixes=("_l", "_f"))
    assert len(m) == tl.n  # every live row is also a row of the fraction run here (stride 16)
    for b in tl.blocks:
        a, c = tl.blocks[b][m["index_l"]], tf.blocks[b][m["index_f"]]
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-4 * float(np.abs(c).max()))
    assert both.rows == tb.n
