"""The demo's live OUTLETS generation: the committed EAGLE-3 head decodes, the committed length head
re-predicts the remaining length every cycle; a length head trained on another draft is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lenpred.commands.demo import DRAFT, LENGTH_HEAD
from lenpred.errors import CardMismatchError, ConfigError, DataError
from lenpred.outlets.live import GenerationSpec, live_generation

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_committed_heads_re_predict_along_a_live_generation() -> None:
    assert DRAFT.is_dir() and LENGTH_HEAD.is_dir(), "the demo's committed heads are missing"
    r = live_generation("Name three colours.", GenerationSpec(DRAFT, LENGTH_HEAD, max_new_tokens=40, greedy=True),
                        every=8)
    assert 0 < r.n_tokens <= 40 and r.stop_reason in {"eos", "length"} and r.tau >= 1.0
    assert r.points, "no prediction was printed"
    gens = [p.n_generated for p in r.points]
    assert gens == sorted(gens) and all(b - a >= 1 for a, b in zip(gens, gens[1:], strict=False))
    # at most one line per 8 tokens, the first at the first cycle
    assert len(gens) <= r.n_tokens // 8 + 1 and gens[0] <= 8
    for p in r.points:
        assert p.t <= p.n_generated  # the head reads states the loop already has, never ahead
        assert 0.0 <= p.remaining_q10 <= p.remaining <= p.remaining_q90 or p.remaining == 0.0
        assert p.total == pytest.approx(p.n_generated + p.remaining, abs=1.0) or p.remaining == 0.0
    assert r.errors() == [p.total - r.n_tokens for p in r.points]
    assert r.head_ms_per_cycle is not None and r.head_ms_per_cycle < r.target_ms_per_pass


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="empty"):
        live_generation("  ", GenerationSpec(DRAFT, LENGTH_HEAD))
    with pytest.raises(DataError, match="length head"):
        live_generation("hi", GenerationSpec(DRAFT, tmp_path / "nope"))
    # a length head trained on another draft head's states: refused, naming it, before any decoding
    from lenpred.draft.io import load_draft, save_draft
    from lenpred.draft.model import Eagle3Draft

    real = load_draft(DRAFT)
    other = Eagle3Draft(real.config)
    other.init_weights(torch.Generator().manual_seed(5))
    other.set_vocab(real.model.d2t, real.model.t2d)
    save_draft(other, tmp_path / "other", meta={k: v for k, v in (real.meta or {}).items() if k == "target"})
    with pytest.raises(CardMismatchError, match="another draft head"):
        live_generation("hi", GenerationSpec(tmp_path / "other", LENGTH_HEAD))
