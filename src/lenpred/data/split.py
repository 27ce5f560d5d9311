"""The fixed split of a run by prompt: train / validation / test, seeded, written beside the run.

Every trainer in lenpred (heads, the draft model, OUTLETS) reads this one split, and nothing trains
on a test prompt's samples. The rule (``SplitConfig``):

* **test** = a seeded half (``test_share``) of the prompts with at least ``test_min_samples``
  samples, so every test prompt's own oracle (the median of its other samples) is known and the
  bound can be computed on exactly the prompts the heads are scored on;
* **val** = a seeded ``val_share`` of the remaining prompts (early stopping, model selection);
* **train** = the rest (in the reference run, mostly the 2-sample prompts of the extension).

Assignment is by a seeded hash of the prompt id, not by position, so a prompt's role never changes
when the run grows: re-running ``lenpred split`` after an extension only adds the new prompts, and
it refuses to write a split whose test set differs from the committed one (that would leak).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from lenpred import __version__
from lenpred.config import Config
from lenpred.data.rundir import RunDir
from lenpred.errors import DataError
from lenpred.io.fileio import atomic_write_json

__all__ = ["SplitConfig", "Split", "build_split", "load_split", "write_split", "SPLIT_FILE", "ROLES"]

SPLIT_FILE = "split.json"
SCHEMA = "lenpred.split/1"
ROLES = ("train", "val", "test")


class SplitConfig(Config):
    seed: int = Field(0, description="seed of the prompt hash that assigns roles")
    test_min_samples: int = Field(8, ge=2, description="prompts need this many samples to be test candidates")
    test_share: float = Field(0.5, gt=0, le=1, description="share of the candidates that become test prompts "
                              "(1 = all of them: an evaluation-only run, e.g. a transfer set)")
    val_share: float = Field(0.1, ge=0, lt=1, description="share of the other prompts that become validation")


def _u(seed: int, salt: str, prompt_id: str) -> float:
    """A uniform [0, 1) number from a stable hash (never Python's salted ``hash``)."""
    h = hashlib.sha256(f"{seed}:{salt}:{prompt_id}".encode()).digest()
    return int.from_bytes(h[:8], "little") / 2.0**64


@dataclass(frozen=True)
class Split:
    """Roles of a run's prompts. ``roles[prompt_id]`` is one of ``ROLES``."""

    card_hash: str
    config: SplitConfig
    roles: Mapping[str, str]

    def ids(self, role: str) -> frozenset[str]:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        return frozenset(p for p, r in self.roles.items() if r == role)

    @property
    def train(self) -> frozenset[str]:
        return self.ids("train")

    @property
    def val(self) -> frozenset[str]:
        return self.ids("val")

    @property
    def test(self) -> frozenset[str]:
        return self.ids("test")

    def counts(self) -> dict[str, int]:
        return {r: len(self.ids(r)) for r in ROLES}

    def role(self, prompt_id: str) -> str:
        try:
            return self.roles[prompt_id]
        except KeyError:
            raise DataError(f"prompt {prompt_id!r} is not in the split",
                            "re-run `lenpred split RUN` after extending the run") from None

    def check_no_test(self, prompt_ids: Iterable[str], what: str = "training data") -> None:
        """Refuse training data that contains a test prompt."""
        bad = sorted(set(prompt_ids) & self.test)
        if bad:
            raise DataError(f"{what} contains {len(bad)} test prompt(s) (first: {bad[0]!r})",
                            "train on split.train (and split.val for early stopping) only")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "card_hash": self.card_hash,
            "config": self.config.to_dict(),
            "counts": self.counts(),
            "lenpred_version": __version__,
            "roles": dict(sorted(self.roles.items())),
        }


def build_split(run: RunDir | str | os.PathLike[str], config: SplitConfig | None = None) -> Split:
    """Assign a role to every prompt of the run that has samples."""
    from lenpred.data.lengths import sample_lengths

    rd = run if isinstance(run, RunDir) else RunDir.open(run)
    cfg = config or SplitConfig()
    s = sample_lengths(rd, with_prompts=False)
    if s.empty:
        raise DataError(f"{rd.path} has no samples to split", "collect samples first (lenpred collect)")
    k = s.groupby("prompt_id").size()
    cands = sorted((p for p, n in k.items() if n >= cfg.test_min_samples), key=lambda p: _u(cfg.seed, "test", p))
    if len(cands) < 2:
        raise DataError(
            f"{rd.path}: only {len(cands)} prompt(s) have {cfg.test_min_samples}+ samples; the test split needs "
            "prompts whose own oracle is known", f"collect more prompts with --samples {cfg.test_min_samples}")
    n_test = max(1, round(len(cands) * cfg.test_share))
    test = set(cands[:n_test])
    roles = {}
    for p in k.index:
        p = str(p)
        if p in test:
            roles[p] = "test"
        else:
            roles[p] = "val" if _u(cfg.seed, "val", p) < cfg.val_share else "train"
    return Split(rd.card_hash, cfg, roles)


def _path(run: RunDir, path: str | os.PathLike[str] | None) -> Path:
    return Path(path) if path is not None else run.path / SPLIT_FILE


def write_split(split: Split, run: RunDir | str | os.PathLike[str], path: str | os.PathLike[str] | None = None,
                force: bool = False) -> Path:
    """Write the split atomically. An existing split of this run must keep its test set and every
    prompt's role (an extension only adds prompts), unless ``force``."""
    rd = run if isinstance(run, RunDir) else RunDir.open(run)
    dest = _path(rd, path)
    if dest.is_file() and not force:
        old = _read(dest)
        if (old.card_hash, dict(old.roles), old.config) == (split.card_hash, dict(split.roles), split.config):
            return dest  # up to date: left untouched, so its mtime says when the roles last changed
        if old.card_hash == split.card_hash:
            changed = [p for p, r in old.roles.items() if split.roles.get(p, r) != r]
            if changed:
                raise DataError(
                    f"{dest}: the new split would change the role of {len(changed)} prompt(s) (first: "
                    f"{changed[0]!r}: {old.roles[changed[0]]} -> {split.roles[changed[0]]}); test prompts would leak",
                    "keep the committed split (same --seed and shares), or pass --force to replace it knowingly")
    atomic_write_json(dest, split.to_dict())
    return dest


def _read(path: Path) -> Split:
    import json

    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not valid JSON ({e})", "restore it from git or re-run `lenpred split`") from None
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise DataError(f"{path} is not a lenpred split file (schema {SCHEMA})", "re-run `lenpred split RUN`")
    roles = d.get("roles") or {}
    bad = sorted({r for r in roles.values()} - set(ROLES))
    if bad:
        raise DataError(f"{path}: unknown role(s) {bad}", f"roles are {', '.join(ROLES)}")
    return Split(str(d.get("card_hash")), SplitConfig.from_dict(d.get("config") or {}, "split.config"), roles)


def load_split(run: RunDir | str | os.PathLike[str], path: str | os.PathLike[str] | None = None,
               require_complete: bool = True) -> Split:
    """Read the split of a run and check that it belongs to it (same card, known prompts, and -- with
    ``require_complete`` -- a role for every prompt that has samples)."""
    from lenpred.data.lengths import sample_lengths

    rd = run if isinstance(run, RunDir) else RunDir.open(run)
    p = _path(rd, path)
    if not p.is_file():
        raise DataError(f"{p} not found: the run has no split yet", f"run `lenpred split {rd.path}`")
    split = _read(p)
    if split.card_hash != rd.card_hash:
        raise DataError(f"{p} was made for run card {split.card_hash}, this run's card is {rd.card_hash}",
                        f"use the split beside the run it was made for, or run `lenpred split {rd.path}`")
    have = set(sample_lengths(rd, with_prompts=False)["prompt_id"].unique())
    unknown = sorted(set(split.roles) - have)
    if unknown:
        raise DataError(f"{p} names {len(unknown)} prompt(s) that have no samples in {rd.path} (first: {unknown[0]!r})",
                        "the split does not match this run: re-run `lenpred split` on it")
    missing = sorted(have - set(split.roles))
    if missing and require_complete:
        raise DataError(f"{p} covers {len(split.roles)} of the run's {len(have)} prompts with samples "
                        f"(the run grew since; first missing: {missing[0]!r})",
                        f"run `lenpred split {rd.path}` (existing roles are kept)")
    return split
