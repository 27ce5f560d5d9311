"""Resumable draft training: checkpoints under a directory named by what determines the result.

The directory's name is the hash of the training settings that change the weights
(:meth:`DraftTrainConfig.identity`), the run's card, the target's weights and layers and the
training prompts; ``key.json`` there records them. The last two checkpoints (weights, optimiser,
step, history) are kept; a rerun of the same command resumes from the newest.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lenpred.draft.train_config import DraftTrainConfig
from lenpred.errors import DataError
from lenpred.io.fileio import canonical_json

__all__ = ["checkpoint_key", "latest_checkpoint", "resume", "save_checkpoint"]


def checkpoint_key(cfg: DraftTrainConfig, card_hash: str, fingerprint: str, layers: tuple[int, ...],
                   train_sha256: str, n_train: int, ckpt_dir: str | os.PathLike[str] | None = None,
                   labels: str = "soft") -> tuple[dict[str, Any], Path]:
    """(what determines the weights, the checkpoint directory: ``ckpt_dir`` or one under
    ``$LENPRED_HOME/draft-train`` named by that key's hash). ``labels``: the state cache's kind; hard
    labels enter the key (soft ones do not, so the keys of soft runs are what they always were)."""
    from lenpred.io.paths import home

    key = {"config": cfg.identity(), "card_hash": card_hash, "fingerprint": fingerprint, "layers": list(layers),
           "train": train_sha256, "n_train": n_train}
    if labels != "soft":
        key["labels"] = labels
    khash = hashlib.sha256(canonical_json(key).encode()).hexdigest()[:16]
    return key, Path(ckpt_dir) if ckpt_dir else home() / "draft-train" / khash


def save_checkpoint(path: Path, step: int, model: Any, opt: Any, history: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f".ckpt-{step:07d}.pt.tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict(), "history": history}, tmp)
    os.replace(tmp, path / f"ckpt-{step:07d}.pt")
    for old in sorted(path.glob("ckpt-*.pt"))[:-2]:  # keep the last two
        old.unlink(missing_ok=True)


def latest_checkpoint(path: Path) -> Path | None:
    c = sorted(path.glob("ckpt-*.pt")) if path.is_dir() else []
    return c[-1] if c else None


def resume(kdir: Path, key: dict[str, Any], model: Any, opt: Any, cfg: DraftTrainConfig, *, main: bool,
           say: Callable[[str], None]) -> tuple[int, dict[str, Any]]:
    """Load the newest checkpoint of ``kdir`` into ``model`` and ``opt``: (its step, its history).
    Without one, (0, an empty history), and the main process writes ``key.json``. Settings changed
    since the checkpoints began (those that do not rename the directory) are said and recorded."""
    last = latest_checkpoint(kdir)
    if last is None:
        if main:
            kdir.mkdir(parents=True, exist_ok=True)
            (kdir / "key.json").write_text(json.dumps(key, indent=2))
        return 0, {"loss": [], "acc": [], "val": []}
    try:  # the settings the checkpoints began with
        began_key = json.loads((kdir / "key.json").read_text())
    except (json.JSONDecodeError, OSError):
        began_key = {}
    began = began_key.get("config", {})
    was, now = began_key.get("labels", "soft"), key.get("labels", "soft")
    if began_key and was != now:  # another loss: not a resume of these weights
        raise DataError(f"checkpoints {kdir} were trained on {was} labels, the state cache holds {now} labels",
                        "pass another --ckpt directory (or leave --ckpt out: the default one differs by label kind)")
    changed = {f: [began[f], v] for f, v in cfg.identity().items() if f in began and began[f] != v}
    ck = torch.load(last, map_location="cpu", weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    step = int(ck["step"])
    history = ck["history"]
    say(f"resuming from {last} (step {step})")
    if changed:
        say("resumed with changed settings (recorded in the head's training card): "
            + ", ".join(f"{f} {a} -> {b}" for f, (a, b) in changed.items()))
        seen = history.setdefault("resumed", [])
        if not seen or seen[-1]["changed"] != changed:
            seen.append({"step": step, "changed": changed})
    return step, history
