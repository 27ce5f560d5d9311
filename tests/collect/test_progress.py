"""The collect progress bar's ETA comes from the sample rate (prompts finish too late to estimate from)."""

from __future__ import annotations

from lenpred.collect.runner import _eta


def test_eta_unknown_before_first_sample():
    assert _eta(0, 100, 0.0) == "-:--:--"
    assert _eta(0, 100, 12.0) == "-:--:--"


def test_eta_from_sample_rate():
    # 10 of 100 samples in 60 s -> 90 left at 6 s each = 540 s
    assert _eta(10, 100, 60.0) == "0:09:00"
    # 1 of 2305 in 4 s -> 2304 * 4 = 9216 s = 2:33:36
    assert _eta(1, 2305, 4.0) == "2:33:36"
    assert _eta(100, 100, 60.0) == "0:00:00"
