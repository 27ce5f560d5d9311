"""Known answers for pooling, entropy weights, chunked entropies and batch planning."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lenpred.features.pooling import (
    entropy_stats,
    entropy_weights,
    pool_entropy,
    pool_last,
    pool_mean,
    token_entropies,
)
from lenpred.features.prefill import default_layers, plan_batches


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row 0 right-padded (3 real of 4), row 1 left-padded (2 real); padded states are NaN."""
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 9.0], [float("nan"), float("nan")]],
                      [[float("nan"), float("nan")], [float("nan"), 7.0], [2.0, 0.0], [4.0, 6.0]]])  # (2, 4, 2)
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])  # (2, 4)
    ent = torch.tensor([[0.0, 1.0, 2.0, 99.0], [99.0, 99.0, 0.5, 0.5]])  # (2, 4); padded values must not count
    return h, mask, ent


def test_mean_ignores_padding_even_nan() -> None:
    h, mask, _ = _batch()
    np.testing.assert_allclose(pool_mean(h, mask).numpy(), [[3.0, 5.0], [3.0, 3.0]])


def test_last_is_last_real_token_for_both_padding_sides() -> None:
    h, mask, _ = _batch()
    np.testing.assert_allclose(pool_last(h, mask).numpy(), [[5.0, 9.0], [4.0, 6.0]])


def test_entropy_weights_are_softmax_of_real_entropies() -> None:
    _, mask, ent = _batch()
    w = entropy_weights(ent, mask, temperature=1.0).numpy()
    e = np.exp([0.0, 1.0, 2.0])
    np.testing.assert_allclose(w[0], [*(e / e.sum()), 0.0], rtol=1e-6)
    np.testing.assert_allclose(w[1], [0.0, 0.0, 0.5, 0.5], rtol=1e-6)
    w2 = entropy_weights(ent, mask, temperature=2.0).numpy()[0]
    e2 = np.exp([0.0, 0.5, 1.0])
    np.testing.assert_allclose(w2[:3], e2 / e2.sum(), rtol=1e-6)


def test_entropy_pool_known_answer_and_limits() -> None:
    h, mask, ent = _batch()
    e = np.exp([0.0, 1.0, 2.0])
    w = e / e.sum()
    want0 = w[0] * np.array([1, 2]) + w[1] * np.array([3, 4]) + w[2] * np.array([5, 9])
    got = pool_entropy(h, mask, ent, 1.0).numpy()
    np.testing.assert_allclose(got[0], want0, rtol=1e-6)
    np.testing.assert_allclose(got[1], [3.0, 3.0], rtol=1e-6)  # equal entropies -> the mean
    # a huge temperature gives the mean, a tiny one the most uncertain position
    np.testing.assert_allclose(pool_entropy(h, mask, ent, 1e6).numpy(), pool_mean(h, mask).numpy(), rtol=1e-5)
    np.testing.assert_allclose(pool_entropy(h, mask, ent, 1e-3).numpy()[0], [5.0, 9.0], rtol=1e-5)


def test_entropy_stats_known_answer() -> None:
    _, mask, ent = _batch()
    s = entropy_stats(ent, mask).numpy()
    np.testing.assert_allclose(s[0], [1.0, math.sqrt(2 / 3), 2.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(s[1], [0.5, 0.0, 0.5, 0.5], rtol=1e-6)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_chunked_entropy_equals_direct(chunk: int) -> None:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 5, 8, generator=g)  # (B, T, d)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 1, 1, 1]])
    head = torch.nn.Linear(8, 50, bias=False)
    torch.nn.init.normal_(head.weight, std=1.0, generator=g)
    calls: list[int] = []

    def lm_head(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return head(x)

    with torch.no_grad():
        got = token_entropies(h, mask, lm_head, chunk=chunk)
        p = torch.softmax(head(h), dim=-1)  # (B, T, V): direct, the whole batch at once
        want = -(p * p.log()).sum(-1) * mask
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert max(calls) <= chunk and sum(calls) == int(mask.sum())  # only real positions, chunk rows at a time
    assert float(got[1, 2:].abs().sum()) == 0.0


def test_softcap_changes_entropy_as_the_formula_says() -> None:
    h = torch.ones(1, 1, 2)
    mask = torch.ones(1, 1, dtype=torch.long)

    def head(x: torch.Tensor) -> torch.Tensor:
        return torch.tensor([[10.0, 0.0]]).expand(x.shape[0], 2)

    z = 2.0 * math.tanh(10.0 / 2.0)
    p = 1 / (1 + math.exp(-z))
    want = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert token_entropies(h, mask, head, softcap=2.0).item() == pytest.approx(want, rel=1e-5)


def test_default_layers() -> None:
    assert default_layers(30) == (10, 15, 30)
    assert default_layers(4) == (1, 2, 4)
    assert default_layers(1) == (1,)


def test_plan_batches_respects_rows_and_tokens() -> None:
    lengths = [2, 2, 3, 3, 3, 10, 10, 40]
    batches = plan_batches(lengths, batch_size=3, batch_tokens=30)
    assert [i for b in batches for i in b] == list(range(len(lengths)))  # every position once, in order
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 30
    assert batches == [[0, 1, 2], [3, 4, 5], [6], [7]]  # 3 rows x longest 10 = 30 fits; 2 x 40 does not
