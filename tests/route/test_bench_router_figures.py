"""benchmarks/bench_router.py's A/B figures from hand-made request records."""

from __future__ import annotations

import pytest

from bench_scripts import load_benchmark

br = load_benchmark("bench_router")


def _rec(t_send, first, e2e, out, backend="a"):
    return {"done": True, "error": None, "t_send": t_send, "first": first, "e2e": e2e, "output_tokens": out,
            "backend": backend}


def test_arm_figures_by_hand():
    recs = [_rec(0.0, 1.0, 11.0, 101),               # 100 tokens in 10 s while streaming: 10 tokens/s
            _rec(1.0, 5.0, 9.0, 21, "b"),            # waited 4 s in the server's queue, then 5 tokens/s
            _rec(2.0, 2.5, 3.5, 5),                  # too short to time the server (<= 8 tokens)
            {"done": False, "error": "x", "t_send": 3.0, "first": None, "e2e": 1.0, "output_tokens": 0, "backend": "a"}]
    f = br._arm_figures(recs, short_thr=50)
    assert f["ok"] == 3 and f["requests"] == 4 and f["backends"] == {"a": 2, "b": 1}
    assert f["decode_tok_s_median"] == pytest.approx(7.5)  # median of 10 and 5
    assert f["throughput_tok_s"] == pytest.approx(127 / 11.0, abs=0.01)  # tokens over first send .. last end
    assert f["short_p99_e2e_s"] == pytest.approx(3.5 + 0.99 * (9.0 - 3.5), abs=1e-3)  # outputs 21 and 5 are short
