"""Online OUTLETS: the rows the length head reads at each speculative cycle are the offline rows, the
events say what they should, a head of another draft or target is refused, and the cost is measured."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from traj_helpers import make_run, save_head, tiny_llama

from lenpred.draft.io import load_draft
from lenpred.draft.speculative import SpeculativeDecoder
from lenpred.draft.target import Target
from lenpred.errors import CardMismatchError, DataError
from lenpred.io.artifacts import ArtifactHeader, write_artifact
from lenpred.outlets.extract import TrajectoryRequest, compute_trajectory, draft_identity
from lenpred.outlets.features import TrajectoryConfig, positions, sample_rows
from lenpred.outlets.online import (
    CostRun,
    OnlineFeatures,
    OnlineLengthHead,
    check_head_spec,
    measure_cost,
    read_head_spec,
    target_forward_seconds,
)
from lenpred.outlets.store import load_trajectory
from lenpred.predictors.dist import Dist

LAYERS = (2, 4, 5)
PROMPTS = [[1, 5, 9, 22], [40, 2, 81, 13, 13, 60, 5], [90, 11]]


# tiny models: thread start-up costs more than the arithmetic (and the CPUs are shared)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture
def draft(model, tmp_path):
    return load_draft(save_head(tmp_path / "head", model))


class StandIn:
    """A tiny length head with the outlets contract: remaining tokens from the draft state and t."""

    def __init__(self) -> None:
        self.seen: list[dict[str, np.ndarray]] = []

    def predict_dist(self, X) -> Dist:
        self.seen.append({**{k: v.copy() for k, v in X.blocks.items()}, "t": X.index["t"].to_numpy().copy()})
        m = np.maximum(100.0 - X.index["t"].to_numpy() + 10 * X.block("draft").mean(1), 0.0)
        return Dist(m, np.full_like(m, 10.0), np.maximum(m - 13, 0), m, m + 13)

    def predict(self, X) -> np.ndarray:
        return self.predict_dist(X).q50


def _online_rows(model, head, prompt, n_new=40, k=3):
    """Greedy speculative generation; every row the online builder can make, cycle by cycle."""
    feats = OnlineFeatures(len(prompt), LAYERS)
    rows: dict[int, dict[str, np.ndarray]] = {}
    latest: list[int] = []

    def on_cycle(c) -> None:
        before = feats.builder.t_latest
        t = feats.add_cycle(c)
        latest.append(t)
        for tt in range(before + 1, t + 1):
            rows[tt] = {b: v[0] for b, v in feats.builder.rows([tt]).items()}

    dec = SpeculativeDecoder(Target(model, LAYERS), head, k=k, sampling=None, max_new_tokens=n_new, eos_ids=[])
    g = dec.generate(prompt, on_cycle=on_cycle)
    return g, rows, latest


def test_online_rows_equal_offline_rows_on_a_greedy_sequence(model, draft) -> None:
    for prompt in PROMPTS:
        g, rows, latest = _online_rows(model, draft.model, prompt)
        assert len(g.tokens) == 40 and rows
        ids = prompt + g.tokens
        with torch.inference_mode():
            _, aux = Target(model, LAYERS).forward(torch.tensor([ids]))
        ts = np.array(sorted(rows))
        assert ts.tolist() == list(range(len(ts)))  # every t from 0 on, each once
        off = sample_rows(draft.model, aux[0].numpy(), np.array(ids), len(prompt), ts, LAYERS)
        for b, v in off.items():
            on = np.stack([rows[t][b] for t in ts.tolist()])
            scale = float(np.abs(v).max())
            np.testing.assert_allclose(on, v, rtol=0, atol=1e-5 * max(scale, 1.0), err_msg=b)


def test_online_rows_equal_the_extracted_trajectory(model, draft, tmp_path) -> None:
    prompt = PROMPTS[0]
    g, rows, _ = _online_rows(model, draft.model, prompt)
    run = make_run(tmp_path / "run", model, prompts=[prompt], responses=[[g.tokens]], roles={"p0": "test"})
    cfg = TrajectoryConfig(stride=8, dtype="float32", compute_dtype="float32")
    compute_trajectory(TrajectoryRequest(run.path, draft.path, tmp_path / "traj", cfg, cache=False, progress=False),
                       target=Target(model, LAYERS))
    traj = load_trajectory(tmp_path / "traj")
    ts = traj.index["t"].to_numpy()
    assert ts.tolist() == positions(40, 8).tolist()
    for b, v in traj.blocks.items():
        on = np.stack([rows[int(t)][b] for t in ts if int(t) in rows])
        np.testing.assert_allclose(on, v[[int(t) in rows for t in ts]], rtol=0,
                                   atol=1e-5 * max(float(np.abs(v).max()), 1.0), err_msg=b)
    assert sum(int(t) in rows for t in ts) >= len(ts) - 1  # all but maybe the last position were reached online


def test_length_head_events(model, draft) -> None:
    prompt = PROMPTS[1]
    head = StandIn()
    got = []
    online = OnlineLengthHead(head, len(prompt), LAYERS, emit=got.append)
    dec = SpeculativeDecoder(Target(model, LAYERS), draft.model, k=2, sampling=None, max_new_tokens=30, eos_ids=[])
    seen_n = [1]  # the prefill commits the first token
    cycles = []

    def on_cycle(c) -> None:
        cycles.append((c.index, c.n_generated, list(c.committed)))
        online(c)

    g = dec.generate(prompt, on_cycle=on_cycle)
    assert len(got) == len(cycles) == len(online.events) == len(head.seen)
    for ev, (idx, n, committed) in zip(got, cycles, strict=True):
        assert ev.cycle == idx and ev.n_generated == n and ev.committed == committed
        assert ev.t == seen_n[-1]  # the prediction reads the newest state: t = tokens before this cycle
        seen_n.append(n)
        assert ev.remaining_q10 <= ev.remaining <= ev.remaining_q90
        assert ev.total == pytest.approx(ev.t + ev.remaining)
        assert ev.remaining_now == pytest.approx(max(ev.total - ev.n_generated, 0.0))
        assert ev.head_seconds > 0
        json.dumps(ev.to_json())
    # what the head saw is the offline row at its t (the one-row Trajectory is refilled in place)
    ids = prompt + g.tokens
    with torch.inference_mode():
        _, aux = Target(model, LAYERS).forward(torch.tensor([ids]))
    ts = np.array([int(s["t"][0]) for s in head.seen])
    off = sample_rows(draft.model, aux[0].numpy(), np.array(ids), len(prompt), ts, LAYERS)
    for i, s in enumerate(head.seen):
        for b in off:
            np.testing.assert_allclose(s[b][0], off[b][i], atol=1e-4)


def _fake_head(path, spec) -> None:
    write_artifact(path, ArtifactHeader(kind="head", schema_version=1, meta={"predictor": "outlets", "feature_spec": spec}),
                   json_files={"state.json": {}})


def test_head_of_another_draft_or_target_is_refused(model, draft, tmp_path) -> None:
    ident = draft_identity(draft)
    spec = {"draft": ident, "target_fingerprint": "sha256:" + "ab" * 32, "layers": {"draft_input": list(LAYERS)}}
    check_head_spec(spec, draft=ident, target_fingerprint="sha256:" + "ab" * 32, layers=LAYERS)
    other = {**spec, "draft": {**ident, "sha256": "0" * 64}}
    with pytest.raises(CardMismatchError, match="another draft head"):
        check_head_spec(other, draft=ident, target_fingerprint=None, layers=LAYERS)
    with pytest.raises(CardMismatchError, match="another target"):
        check_head_spec(spec, draft=ident, target_fingerprint="sha256:" + "cd" * 32, layers=LAYERS)
    with pytest.raises(CardMismatchError, match="target layers"):
        check_head_spec(spec, draft=ident, target_fingerprint=None, layers=(1, 4, 5))
    _fake_head(tmp_path / "lh", spec)
    assert read_head_spec(tmp_path / "lh")["draft"]["sha256"] == ident["sha256"]
    _fake_head(tmp_path / "prefill", {"model": "tiny", "layers": [10, 15]})
    with pytest.raises(DataError, match="not trained on trajectory features"):
        read_head_spec(tmp_path / "prefill")


def test_cost_per_cycle_is_measured(model, draft) -> None:
    target = Target(model, LAYERS)
    assert target_forward_seconds(target, PROMPTS[0] * 4, repeats=5) > 0
    rep = measure_cost(target, draft.model, StandIn(), PROMPTS[1], layers=LAYERS,
                       run=CostRun(max_new_tokens=24, repeats=5))
    assert rep.cycles > 0 and rep.row_ms > 0 and rep.head_ms > 0 and rep.target_forward_ms > 0
    assert rep.share == pytest.approx((rep.row_ms + rep.head_ms) / rep.target_forward_ms)
    assert "% of one target forward pass" in rep.line()


# ------------------------------------------------------------------------------------------ real model
@pytest.mark.slow
def test_online_equals_offline_on_smollm2_with_a_random_draft(tmp_path) -> None:
    from lenpred.draft.config import DraftConfig
    from lenpred.draft.model import Eagle3Draft
    from lenpred.models import load

    lm = load("smollm2-135m")
    target = Target(lm.model)
    head = Eagle3Draft(DraftConfig.for_target(lm.model.config, 1024))
    head.init_weights(torch.Generator().manual_seed(0))
    d2t = torch.zeros(1024, dtype=torch.long)
    t2d = torch.zeros(lm.model.config.vocab_size, dtype=torch.bool)
    t2d[:1024] = True
    head.set_vocab(d2t, t2d)
    head.eval()
    prompt = lm.tokenizer("Name three colours.")["input_ids"]
    feats = OnlineFeatures(len(prompt), target.layers)
    rows: dict[int, dict[str, np.ndarray]] = {}

    def on_cycle(c) -> None:
        before = feats.builder.t_latest
        t = feats.add_cycle(c)
        for tt in range(before + 1, t + 1):
            rows[tt] = {b: v[0] for b, v in feats.builder.rows([tt]).items()}

    g = SpeculativeDecoder(target, head, k=2, sampling=None, max_new_tokens=16, eos_ids=[]).generate(prompt, on_cycle=on_cycle)
    ids = prompt + g.tokens
    with torch.inference_mode():
        _, aux = target.forward(torch.tensor([ids]))
    ts = np.array(sorted(rows))
    off = sample_rows(head, aux[0].numpy(), np.array(ids), len(prompt), ts, target.layers)
    assert set(off) == {"draft", "fused", "target.15", "draft_running"}
    for b, v in off.items():
        on = np.stack([rows[int(t)][b] for t in ts])
        np.testing.assert_allclose(on, v, rtol=0, atol=1e-4 * max(float(np.abs(v).max()), 1.0), err_msg=b)


def _random_smollm2_draft(path, lm):
    from lenpred.draft.config import DraftConfig
    from lenpred.draft.io import save_draft, target_summary
    from lenpred.draft.model import Eagle3Draft

    head = Eagle3Draft(DraftConfig.for_target(lm.model.config, 1024))
    head.init_weights(torch.Generator().manual_seed(0))
    t2d = torch.zeros(lm.model.config.vocab_size, dtype=torch.bool)
    t2d[:1024] = True
    head.set_vocab(torch.zeros(1024, dtype=torch.long), t2d)
    save_draft(head, path, meta={"target": target_summary(lm.model.config, lm.spec.fingerprint, "smollm2-135m")})
    return path


@pytest.mark.slow
def test_features_and_generate_json_on_smollm2(tmp_path, monkeypatch, capsys) -> None:
    """The real target, a random draft, two short real samples of the reference run: the CLI writes the
    trajectory (and fills the cache), and `generate --json --length-head` streams one event per cycle."""
    from lenpred.cli import main
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import Split, SplitConfig, write_split
    from lenpred.models import load

    ref = RunDir.open("data/runs/smollm2-sharegpt")
    pid = "ng7qVs8_0"  # a test prompt of 34 tokens with short answers
    s = ref.samples()
    s = s[s.prompt_id == pid].sort_values("n_tokens").head(2)
    run = RunDir.create(tmp_path / "run", ref.card)
    p = ref.prompts()
    run.write_prompts(p[p.prompt_id == pid].reset_index(drop=True))
    run.append_samples(s.reset_index(drop=True))
    write_split(Split(run.card_hash, SplitConfig(), {pid: "test"}), run)
    lm = load("smollm2-135m")
    draft = _random_smollm2_draft(tmp_path / "draft", lm)
    argv = ["outlets", "features", "--run", str(run.path), "--draft", str(draft), "--out", str(tmp_path / "traj"),
            "--cache", str(tmp_path / "cache"), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    traj = load_trajectory(tmp_path / "traj", card=ref.card)
    assert set(traj.blocks) == {"draft", "fused", "target.15", "draft_running"}
    assert traj.index["t"].max() < traj.index["length"].max() and traj.spec["target_states"] == "float16"
    assert main([*argv[:7], str(tmp_path / "traj2"), *argv[8:]]) == 0
    assert "2 of them from the state cache" in capsys.readouterr().err
    # generate: a length head that names this draft (loaded through a stand-in: no outlets head exists here)
    spec = {**traj.spec}
    _fake_head(tmp_path / "lh", spec)
    monkeypatch.setattr("lenpred.outlets.online.load_length_head", lambda path: StandIn())
    rc = main(["generate", "--draft", str(draft), "--length-head", str(tmp_path / "lh"), "--json", "--greedy",
               "--max-new-tokens", "12", "--k", "2", "--prompt", "Name three colours.", "--threads", "1"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = [json.loads(x) for x in out.strip().splitlines()]
    cyc = [x for x in lines if x["event"] == "cycle"]
    assert cyc and lines[-1]["event"] == "done" and lines[-1]["n_generated"] == cyc[-1]["n_generated"]
    for x in cyc:
        assert {"tokens", "text", "n_generated", "t", "remaining", "remaining_q10", "remaining_q90", "total"} <= set(x)
        assert x["remaining_q10"] <= x["remaining"] <= x["remaining_q90"]
    assert "% of the loop's mean target pass" in err


# ------------------------------------------------------------------------------------------ outlets heads online
def _rows_traj(rows_by_prompt: dict[str, dict[int, dict[str, np.ndarray]]], spec, ts=None):
    """A Trajectory of online rows (per prompt: t -> blocks); placeholder lengths (t_max + 1)."""
    import pandas as pd

    from lenpred.outlets.store import Trajectory

    idx, blocks = [], {}
    for pid, rows in rows_by_prompt.items():
        keep = sorted(rows) if ts is None else [int(t) for t in ts]
        L = max(rows) + 1
        idx.append(pd.DataFrame({"prompt_id": pid, "sample_idx": 0, "t": keep, "length": L,
                                 "remaining": [L - t for t in keep], "truncated": False}))
        for b in rows[keep[0]]:
            blocks.setdefault(b, []).extend(rows[t][b] for t in keep)
    return Trajectory(pd.concat(idx, ignore_index=True), {b: np.stack(v) for b, v in blocks.items()}, spec)


TINY_HEADS = {
    "probe": {"blocks": ("target",), "progress": False, "loss": "softlabel", "bins": "linear", "n_bins": 6,
              "smoothing": 0.0, "refine": True, "hidden": 16, "depth": 1, "epochs": 3},
    "outlets": {"blocks": ("draft", "draft_running"), "hidden": 16, "epochs": 3},
}


@pytest.mark.parametrize("name", sorted(TINY_HEADS))
def test_outlets_head_online_equals_offline_on_a_tiny_sequence(name, model, draft) -> None:
    """A real outlets head in the speculative loop: each cycle's event is, bit for bit, the offline
    predict_dist of the same rows at that t -- for the refining probe too, whose posterior the online
    object carries from cycle to cycle (folding the checkpoints t = 0, 8, 16, ... and 32 as it passes them)."""
    from lenpred.outlets.features import positions
    from lenpred.outlets.head import OutletsHead

    spec = {"positions": {"stride": 8, "fixed_tokens": [32]}, "draft": {"sha256": "tiny"}}
    train = {f"p{i}": _online_rows(model, draft.model, PROMPTS[i])[1] for i in (0, 2)}
    head = OutletsHead(**TINY_HEADS[name]).fit(_rows_traj(train, spec))
    prompt = PROMPTS[1]
    online = OnlineLengthHead(head, len(prompt), LAYERS)
    assert online.fast is not None
    rows: dict[int, dict[str, np.ndarray]] = {}

    def on_cycle(c) -> None:
        before = online.features.builder.t_latest
        online(c)
        for tt in range(before + 1, online.features.builder.t_latest + 1):
            rows[tt] = {b: v[0] for b, v in online.features.builder.rows([tt]).items()}

    g = SpeculativeDecoder(Target(model, LAYERS), draft.model, k=3, sampling=None, max_new_tokens=40,
                           eos_ids=[]).generate(prompt, on_cycle=on_cycle)
    assert len(online.events) > 10
    if online.fast.refiner is not None:  # every checkpoint passed was folded in
        assert online.fast.refiner.c == 8 * (online.events[-1].t // 8)
    off = head.predict_dist(_rows_traj({"q": rows}, head.feature_spec_))  # every t from 0 on
    for ev in online.events:
        assert (ev.remaining, ev.remaining_q10, ev.remaining_q90, ev.remaining_mean) == (
            off.q50[ev.t], off.q10[ev.t], off.q90[ev.t], off.mean[ev.t])
    # offline on the stored positions of the scheme alone: the same numbers there (the refinement
    # carries only the checkpoints, which the scheme holds), and online asked at exactly those positions too
    ts = [int(t) for t in positions(len(g.tokens), 8) if t in rows]
    stored = head.predict_dist(_rows_traj({"q": rows}, head.feature_spec_, ts))
    np.testing.assert_array_equal(stored.q50, off.q50[ts])
    on = head.online()
    np.testing.assert_array_equal([on.predict(t, rows.__getitem__).q50[0] for t in ts], stored.q50)
