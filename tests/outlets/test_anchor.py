"""The prefill anchor: per progress band, the blend of the OUTLETS head and the carried prefill head
chosen on validation rows is never worse than either there, is the prefill head itself where the
prefill head is better, and its 80% interval covers 80% of the band's rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from lenpred.errors import DataError
from lenpred.outlets.anchor import BANDS, PrefillAnchor, band_of, blend, fit_anchor
from lenpred.outlets.baselines import Remaining


def _rows(n: int = 4000, seed: int = 0):
    """Rows where the prefill head is right at t = 0 and the OUTLETS head is noise there, and the
    reverse later: remaining tokens y, each head's quantiles around its own guess."""
    rng = np.random.default_rng(seed)
    t = rng.choice([0, 5, 40, 200, 700], n)
    y = rng.lognormal(5.0, 0.8, n)
    good_prefill = t == 0
    noise = rng.lognormal(0.0, 1.0, n)
    p50 = np.where(good_prefill, y * rng.lognormal(0, 0.05, n), y * noise)
    o50 = np.where(good_prefill, y * noise, y * rng.lognormal(0, 0.05, n))
    pre = Remaining(0.5 * p50, p50, 2.0 * p50)
    out = Remaining(0.5 * o50, o50, 2.0 * o50)
    return t, y, pre, out


def test_the_band_where_prefill_wins_takes_prefill_alone_and_equals_it() -> None:
    t, y, pre, out = _rows()
    a = fit_anchor(out, pre, t, y, np.ones_like(y))
    assert a.weights[0] == 0.0  # t = 0: the prefill head alone
    assert all(w >= 0.9 for w in a.weights[2:])  # t >= 32: (almost) OUTLETS alone
    r = a.apply(out, pre, t)
    z = t == 0
    np.testing.assert_array_equal(r.q50[z], pre.q50[z])  # bit for bit the prefill head's point at t = 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_on_its_validation_rows_the_anchor_is_no_worse_than_either_input_in_any_band(seed) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    t = rng.integers(0, 900, n)
    y = rng.lognormal(5.0, 1.0, n)
    def head(err: float, width: float) -> Remaining:
        q50 = y * rng.lognormal(0, err, n)
        k = rng.lognormal(np.log(width), 0.3, n)
        return Remaining(q50 / k, q50, q50 * k)

    pre, out = head(0.6, 1.5), head(0.7, 2.5)
    w = rng.uniform(0.2, 1.0, n)
    a = fit_anchor(out, pre, t, y, w)
    r = a.apply(out, pre, t)
    b = band_of(t)
    for k in range(len(BANDS)):
        m = b == k
        if m.sum() < 20:
            continue
        def err(q: np.ndarray, m: np.ndarray = m) -> float:
            return float(np.sum(w[m] * np.abs(q[m] - y[m])) / np.sum(w[m]))

        assert err(r.q50) <= min(err(pre.q50), err(out.q50)) + 1e-9
        cover = float(np.sum(w[m] * ((y[m] >= r.q10[m]) & (y[m] <= r.q90[m]))) / np.sum(w[m]))
        assert 0.78 <= cover <= 0.82


def test_blend_is_geometric_in_the_quantiles() -> None:
    o, p = Remaining([1.0], [99.0], [199.0]), Remaining([1.0], [0.0], [9.0])
    assert blend(o, p, np.array([0.5])).q50[0] == pytest.approx(9.0)  # sqrt(100 * 1) - 1


def test_round_trip_and_damaged_anchors_are_refused() -> None:
    t, y, pre, out = _rows(800)
    a = replace(fit_anchor(out, pre, t, y, np.ones_like(y)), head={"path": "h"}, prefill={"name": "prefill-mlp"})
    b = PrefillAnchor.from_dict(a.to_dict())
    assert b == a
    np.testing.assert_array_equal(b.apply(out, pre, t).q90, a.apply(out, pre, t).q90)
    with pytest.raises(DataError, match="not a prefill anchor"):
        PrefillAnchor.from_dict({"schema": "other"})
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        PrefillAnchor.from_dict({**a.to_dict(), "weights": [1.5] * len(BANDS)})
    with pytest.raises(DataError, match="rows"):
        a.apply(out, pre, t[:-1])
    with pytest.raises(DataError, match="validation rows"):
        fit_anchor(Remaining([], [], []), Remaining([], [], []), np.array([]), np.array([]), np.array([]))
