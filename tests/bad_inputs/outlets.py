"""Bad inputs of ``lenpred outlets`` and of ``lenpred generate --length-head`` (rows for tests/test_bad_input.py).

Rows of ``outlets features`` and ``generate --length-head`` (outlets-traj) are in the first block;
rows of ``outlets train`` / ``outlets bench`` (outlets-eval) go in their own block below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bad_input_harness import BadInput

# ------------------------------------------------------------------ outlets features, generate --length-head
_FP = "sha256:" + "ab" * 32


def _tiny_config(vocab: int = 96, hidden: int = 64, layers: int = 8) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2)


def _draft(path: Path, fingerprint: str | None = _FP, hidden: int = 64) -> Path:
    import numpy as np
    import torch

    from lenpred.draft.config import DraftConfig
    from lenpred.draft.io import save_draft, target_summary
    from lenpred.draft.model import Eagle3Draft
    from lenpred.draft.vocab import build_draft_vocab

    tcfg = _tiny_config(hidden=hidden)
    head = Eagle3Draft(DraftConfig.for_target(tcfg, 40))
    head.init_weights(torch.Generator().manual_seed(0))
    d2t, t2d, _ = build_draft_vocab(np.arange(96)[::-1].copy(), 40)
    head.set_vocab(d2t, t2d)
    save_draft(head, path, meta={"target": target_summary(tcfg, fingerprint, "tiny")})
    return path


def _model(path: Path) -> tuple[Path, str]:
    import torch
    from transformers import LlamaForCausalLM

    from lenpred.models.loading import resolve

    torch.manual_seed(0)
    LlamaForCausalLM(_tiny_config()).save_pretrained(path)
    return path, resolve(str(path)).fingerprint


def _run(path: Path, fingerprint: str = _FP, model_id: str = "tiny", token_ids: bool = True) -> Path:
    import pandas as pd

    from lenpred.data.rundir import RunDir
    from lenpred.data.split import Split, SplitConfig, write_split

    card = {"model": {"id": model_id, "fingerprint": fingerprint, "vocab_size": 96},
            "prompts": {"source": "jsonl", "chat_template": False}, "sampling": {"max_new_tokens": 8},
            "engine": {"name": "test"}}
    run = RunDir.create(path, card)
    run.write_prompts(pd.DataFrame({"prompt_id": ["a", "b"], "idx": [0, 1], "text": ["x y", "z w"],
                                    "n_prompt_tokens": [2, 2], "prompt_token_ids": [[5, 6], [7, 8]]}))
    run.append_samples([{"prompt_id": p, "sample_idx": 0, "n_tokens": 3, "stop_reason": "eos", "text": "a b c",
                         "token_ids": [9, 10, 11] if token_ids else [], "seed": 0} for p in ("a", "b")])
    write_split(Split(run.card_hash, SplitConfig(), {"a": "train", "b": "test"}), run)
    return run.path


def _run_and_draft(tmp: Path) -> dict[str, Path]:
    return {"run": _run(tmp / "run"), "head": _draft(tmp / "head")}


def _draft_of_another_target(tmp: Path) -> dict[str, Path]:
    return {"run": _run(tmp / "run"), "head": _draft(tmp / "head", fingerprint="sha256:" + "cd" * 32)}


def _draft_of_another_shape(tmp: Path) -> dict[str, Path]:
    folder, fp = _model(tmp / "model")
    return {"run": _run(tmp / "run", fingerprint=fp, model_id=str(folder)), "head": _draft(tmp / "head", None, hidden=32),
            "model": folder}


def _run_without_token_ids(tmp: Path) -> dict[str, Path]:
    return {"run": _run(tmp / "run", token_ids=False), "head": _draft(tmp / "head")}


def _out_is_file(tmp: Path) -> dict[str, Path]:
    (tmp / "traj").write_text("not a directory")
    return _run_and_draft(tmp)


def _length_head(path: Path, spec: dict[str, Any]) -> Path:
    from lenpred.io.artifacts import ArtifactHeader, write_artifact

    write_artifact(path, ArtifactHeader(kind="head", schema_version=1, meta={"predictor": "outlets", "feature_spec": spec}),
                   json_files={"state.json": {}})
    return path


def _length_head_of_another_draft(tmp: Path) -> dict[str, Path]:
    spec = {"draft": {"sha256": "0" * 64}, "target_fingerprint": _FP, "layers": {"draft_input": [2, 4, 5]}}
    return {"head": _draft(tmp / "draft"), "lh": _length_head(tmp / "lh", spec)}


def _prefill_head(tmp: Path) -> dict[str, Path]:
    return {"head": _draft(tmp / "draft"), "lh": _length_head(tmp / "lh", {"model": "tiny", "layers": [10, 15]})}


_F = ["outlets", "features", "--run", "{run}", "--draft", "{head}", "--out", "{tmp}/traj", "--no-progress"]

CASES: list[BadInput] = [
    BadInput("outlets-features-draft-of-another-target", _F, _draft_of_another_target,
             expect="was trained for target tiny"),
    BadInput("outlets-features-draft-of-another-shape", [*_F, "--model", "{model}"],
             _draft_of_another_shape, expect="hidden size mismatch"),
    BadInput("outlets-features-no-token-ids", _F, _run_without_token_ids, expect="without token ids"),
    BadInput("outlets-features-unknown-role", [*_F, "--roles", "train,bogus"], _run_and_draft,
             expect="unknown role 'bogus'"),
    BadInput("outlets-features-shard-out-of-range", [*_F, "--shard", "2/2"], _run_and_draft,
             expect="slice index must be in 0..1"),
    BadInput("outlets-features-too-few-positions", [*_F, "--max-positions", "4"], _run_and_draft,
             expect="must be >= 10"),
    BadInput("outlets-features-out-is-file", _F, _out_is_file, expect="exists and is a file"),
    BadInput("outlets-features-unknown-compute-dtype", [*_F, "--compute-dtype", "fp8"], _run_and_draft,
             expect="invalid choice: 'fp8'"),
    BadInput("outlets-features-merge-without-out", ["outlets", "features", "--merge", "{tmp}/a", "{tmp}/b"], None,
             expect="--merge needs --out"),
    BadInput("outlets-features-no-draft", ["outlets", "features", "--run", "{tmp}", "--out", "{tmp}/traj"], None,
             expect="needs --run RUN and --draft HEAD"),
    BadInput("outlets-features-unknown-device", [*_F, "--device", "quantum"], _run_and_draft,
             expect="--device 'quantum' is not a torch device"),
    BadInput("outlets-features-negative-threads", [*_F, "--threads", "-2"], _run_and_draft,
             expect="--threads must be >= 0"),
    BadInput("generate-length-head-without-draft", ["generate", "--length-head", "{tmp}/lh", "--prompt", "hi"], None,
             expect="--length-head needs --draft"),
    BadInput("generate-length-head-of-another-draft",
             ["generate", "--draft", "{head}", "--length-head", "{lh}", "--prompt", "hi"],
             _length_head_of_another_draft, expect="states of another draft head"),
    BadInput("generate-length-head-is-a-prefill-head",
             ["generate", "--draft", "{head}", "--length-head", "{lh}", "--prompt", "hi"],
             _prefill_head, expect="not trained on trajectory features"),
]

# ------------------------------------------------------------------ outlets train / bench (outlets-eval)
def _eval_run(tmp: Path, spec: dict[str, Any] | None = None) -> dict[str, Path]:
    """A synthetic run with a split and its trajectory artifact (tests/outlets/eval_synth.py)."""
    from outlets.eval_synth import parts, write_run

    return write_run(tmp, parts(n_train=8, n_val=2, n_test=4), spec=spec)


def _eval_foreign_run(tmp: Path) -> dict[str, Path]:
    import copy

    from lenpred.data.rundir import RunDir
    from outlets.eval_synth import CARD

    p = _eval_run(tmp)
    card = copy.deepcopy(CARD)
    card["sampling"]["seed"] = 1
    return {"traj": p["traj"], "run": RunDir.create(tmp / "other-run", card).path}


def _eval_head_of_another_draft(tmp: Path) -> dict[str, Path]:
    import copy

    from lenpred.outlets.head import OutletsHead
    from lenpred.outlets.store import load_trajectory, save_trajectory
    from outlets.eval_synth import CAP, CARD, SPEC

    p = _eval_run(tmp)
    traj = load_trajectory(p["traj"])
    OutletsHead(epochs=2).fit(traj, cap=CAP).save(tmp / "head", card=CARD)
    spec = copy.deepcopy(SPEC)
    spec["draft"]["sha256"] = "e" * 64
    from lenpred.data.rundir import RunDir

    save_trajectory(tmp / "traj2", type(traj)(traj.index, traj.blocks, spec), RunDir.open(p["run"]).card)
    return {**p, "head": tmp / "head", "traj2": tmp / "traj2"}


def _eval_prefill_head(tmp: Path) -> dict[str, Path]:
    import numpy as np

    from lenpred.predictors.registry import make_predictor
    from outlets.eval_synth import CARD

    p = _eval_run(tmp)
    make_predictor("constant").fit(np.zeros((3, 1)), np.array([1.0, 2.0, 3.0])).save(tmp / "const", card=CARD)
    return {**p, "head": tmp / "const"}


def _eval_out_not_artifact(tmp: Path) -> dict[str, Path]:
    (tmp / "h").mkdir()
    (tmp / "h" / "notes.txt").write_text("mine")
    return {}


def _eval_run_and_foreign_out(tmp: Path) -> dict[str, Path]:
    return {**_eval_run(tmp), **_eval_out_not_artifact(tmp)}


def _eval_anchor_no_val(tmp: Path) -> dict[str, Path]:
    """A trajectory that holds only the test prompts' rows: nothing to fit an anchor on."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.outlets.store import load_trajectory, save_trajectory

    p = _eval_run(tmp)
    rd = RunDir.open(p["run"])
    traj = load_trajectory(p["traj"]).for_prompts(sorted(load_split(rd).test))
    save_trajectory(tmp / "traj-test", traj, rd.card, dtype="float32")
    return {**p, "traj": tmp / "traj-test"}


_T = ["outlets", "train", "--traj", "{tmp}/traj", "--run", "{tmp}/run", "--out", "{tmp}/h"]
_B = ["outlets", "bench", "--traj", "{tmp}/traj", "--run", "{tmp}/run", "--out", "{tmp}/o"]

CASES += [
    BadInput("outlets-train-unknown-variant", [*_T, "--variant", "nope"], None, expect="unknown outlets variant 'nope'"),
    BadInput("outlets-train-bad-hyperparameter", [*_T, "--param", "loss=l2"], None,
             expect="hyperparameter loss must be 'l1-log'"),
    BadInput("outlets-train-out-not-an-artifact", _T, _eval_out_not_artifact, expect="not a lenpred artifact"),
    BadInput("outlets-train-trajectory-of-another-run", ["outlets", "train", "--traj", "{traj}", "--run", "{run}",
                                                         "--out", "{tmp}/h"],
             _eval_foreign_run, expect="under another card"),
    # (the synthetic trajectory has fraction rows: the live points it holds are named, t = 16 is not among them)
    BadInput("outlets-bench-head-of-another-draft", [*_B[:3], "{traj2}", *_B[4:], "--heads", "{head}",
                                                     "--live-points", "32,64"],
             _eval_head_of_another_draft, expect="trajectory features come from another draft head"),
    BadInput("outlets-bench-prefill-head-as-outlets-head", [*_B, "--heads", "{head}", "--live-points", "32,64"],
             _eval_prefill_head, expect="is a constant head, not an outlets head"),
    BadInput("outlets-bench-nothing", _B, None, expect="nothing to bench"),
    BadInput("outlets-bench-n-boot", [*_B, "--prefill-predictions", "{tmp}/p.parquet", "--n-boot", "3"], None,
             expect="--n-boot must be at least 10"),
    BadInput("outlets-bench-n-boot-runs-away", [*_B, "--prefill-predictions", "{tmp}/p.parquet", "--n-boot", "2000000000"],
             _eval_run, expect="--n-boot 2,000,000,000 is above the limit of 100,000"),
    BadInput("outlets-predict-out-is-a-directory", ["outlets", "predict", "--head", "{tmp}/h", "--traj", "{tmp}/traj",
                                                    "--run", "{tmp}/run", "--out", "{tmp}"], None, expect="is a directory"),
    BadInput("train-outlets-head-on-prefill-features", ["train", "--run", "{run}", "--predictor", "outlets",
                                                        "--out", "{tmp}/h"], _eval_run,
             expect="reads trajectory features, not prefill features"),
    BadInput("outlets-schedule-out-inside-the-run", ["outlets", "schedule", "--run", "{run}", "--prefill-predictions",
                                                     "{tmp}/p.parquet", "--outlets-predictions", "{tmp}/o.parquet",
                                                     "--out", "{run}/schedule"], _eval_run,
             expect="is inside the command's own input --run"),
    BadInput("outlets-schedule-out-not-ours", ["outlets", "schedule", "--run", "{run}", "--prefill-predictions",
                                               "{tmp}/p.parquet", "--outlets-predictions", "{tmp}/o.parquet",
                                               "--out", "{tmp}/h"], _eval_run_and_foreign_out,
             expect="not a lenpred artifact"),
    BadInput("outlets-schedule-loads-nan", ["outlets", "schedule", "--run", "{tmp}", "--prefill-predictions",
                                            "{tmp}/p.parquet", "--outlets-predictions", "{tmp}/o.parquet",
                                            "--loads", "1,nan", "--out", "{tmp}/s"], None,
             expect="--loads must be finite numbers, got nan"),  # the one --loads parser simulate uses too
    BadInput("outlets-anchor-bands-not-from-zero", ["outlets", "anchor", "--traj", "{traj}", "--run", "{run}", "--head",
                                                    "{tmp}/h", "--prefill-predictions", "{tmp}/p.parquet", "--bands",
                                                    "5,1", "--out", "{tmp}/a"], _eval_run,
             expect="--bands [5, 1] must be increasing token counts starting at 0"),
    BadInput("outlets-anchor-no-validation-rows", ["outlets", "anchor", "--traj", "{traj}", "--run", "{run}", "--head",
                                                   "{tmp}/h", "--prefill-predictions", "{tmp}/p.parquet", "--out",
                                                   "{tmp}/a"], _eval_anchor_no_val, expect="no row of a validation prompt"),
]

CASES += [  # issue 29 part 11: the last bad-input tail
    BadInput("outlets-features-zero-positions", [*_F, "--max-positions", "0"], _run_and_draft,
             expect="kept for the evaluation), got 0 -- fix: pass --max-positions 10 or more"),
]


# ------------------------------------------------------------------ issue 39 part 3: the bad-input tail
def _tiny_world(tmp: Path) -> dict[str, Path]:
    """A tiny target (a local folder), a run of it and a draft head for it: `outlets features` runs for real."""
    folder, fp = _model(tmp / "model")
    return {"run": _run(tmp / "run", fingerprint=fp, model_id=str(folder)), "head": _draft(tmp / "head", fp)}


def _tiny_world_read_only(tmp: Path) -> dict[str, Path]:
    from bad_input_harness import read_only

    (tmp / "ro").mkdir()
    return {**_tiny_world(tmp), "ro": read_only(tmp / "ro")}


def _writable_again(tmp: Path) -> None:
    from bad_input_harness import writable

    if (tmp / "ro").exists():
        writable(tmp / "ro")


CASES += [
    # one prompt per role (2 prompts) in 4 shards: shard 3 holds none (was: a traceback in _assemble, OUT.work left)
    BadInput("outlets-features-empty-shard", [*_F, "--max-prompts", "1", "--shard", "3/4"], _tiny_world,
             expect="shard 3/4 holds no prompt: the selection has 2 prompt(s) for 4 shards -- fix: pass fewer shards"),
    # refused before the target loads (was: an OSError after the model pass, OUT.work left)
    BadInput("outlets-features-cache-read-only", [*_F, "--cache", "{ro}/cache"], _tiny_world_read_only,
             expect="cannot be written: directory", cleanup=_writable_again),
    # argparse took -1/2 for an option ("expected one argument"); the shard check names the valid form
    BadInput("outlets-features-negative-shard", [*_F, "--shard", "-1/2"], _run_and_draft,
             expect="--shard -1/2: slice index must be in 0..1 (and N >= 1) -- fix: pass --shard I/N with 0 <= I < N"),
]


# ------------------------------------------------------------------ issue 38: the live series
def _eval_fraction_head(tmp: Path) -> dict[str, Path]:
    """A head trained on the synthetic fraction rows (its spec has no positions.rows: fraction)."""
    from lenpred.outlets.head import OutletsHead
    from lenpred.outlets.store import load_trajectory
    from outlets.eval_synth import CAP, CARD

    p = _eval_run(tmp)
    OutletsHead(epochs=2).fit(load_trajectory(p["traj"]), cap=CAP).save(tmp / "head", card=CARD)
    return {**p, "head": tmp / "head"}


CASES += [
    BadInput("outlets-bench-trajectory-without-live-rows", [*_B, "--prefill-predictions", "{tmp}/p.parquet"], _eval_run,
             expect="no row at t = 16 for"),  # the message goes on: "... (lenpred outlets features --rows live ..."
    BadInput("outlets-bench-trajectory-without-live-rows-names-the-flag",
             [*_B, "--prefill-predictions", "{tmp}/p.parquet"], _eval_run,
             expect="fix: compute the trajectory with live rows (lenpred outlets features --rows live"),
    BadInput("outlets-bench-strict-series-fraction-head",
             [*_B, "--heads", "{head}", "--live-points", "32,64", "--strict-series"], _eval_fraction_head,
             expect="was trained on fraction rows (t = floor(f L): placed with the true length), not on the live series"),
    BadInput("outlets-bench-live-points-not-numbers", [*_B, "--heads", "{tmp}/h", "--live-points", "16,soon"], None,
             expect="--live-points '16,soon' is not a list of token counts"),
    BadInput("outlets-bench-live-points-and-every", [*_B, "--heads", "{tmp}/h", "--live-points", "16",
                                                     "--live-every", "8"], _eval_run,
             expect="--live-points and --live-every both name the live series"),
    BadInput("outlets-features-live-every-without-live-rows", [*_F, "--live-every", "8"], _run_and_draft,
             expect="--live-every (live_every) needs live rows, but --rows is fraction"),
    BadInput("outlets-features-unknown-row-scheme", [*_F, "--rows", "sometimes"], _run_and_draft,
             expect="invalid choice: 'sometimes'"),
]
