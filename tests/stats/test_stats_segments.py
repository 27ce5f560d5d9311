"""Segment counting in decoded text and the segment-count CV."""

from __future__ import annotations

import pytest
from stats_helpers import covers

from lenpred.stats import BoundConfig, analyse_run
from lenpred.stats import synthetic as sim
from lenpred.stats.segments import count_segments

TEXT = (
    "First sentence. Second one!\nA line without a stop\n\n  \n\nNew paragraph? Yes.\n- item one\n- item two"
)


def test_count_segments_units() -> None:
    assert count_segments([TEXT], "paragraph").tolist() == [2]
    assert count_segments([TEXT], "line").tolist() == [5]  # blank and whitespace-only lines do not count
    assert count_segments([TEXT], "sentence").tolist() == [7]
    assert count_segments([TEXT], regex=r"\n- ").tolist() == [3]
    assert count_segments(["", "   "], "paragraph").tolist() == [0, 0]
    assert count_segments(["3.14 is pi. e.g. this"], "sentence").tolist() == [3]  # no split inside 3.14
    with pytest.raises(ValueError):
        count_segments([TEXT], "word")


def test_synthetic_text_has_the_generated_segments() -> None:
    text = sim.render([3, 2, 4])
    assert text == "w w w.\n\nw w.\n\nw w w w."
    for unit in ("paragraph", "sentence", "line"):
        assert count_segments([text], unit).tolist() == [3]
    assert sim.render([3, 2, 4], limit=6) == "w w w.\n\nw w.\n\nw"  # truncated: the last segment is cut


def test_segment_cv_all_units(segment_run) -> None:
    seg = segment_run.summary.segments
    cv = segment_run.truth.summary()["segment_cv"]
    assert seg.available and seg.unit == "paragraph"
    assert set(seg.all_units_cv_mean) == {"paragraph", "sentence", "line"}
    for unit, value in seg.all_units_cv_mean.items():
        assert value == pytest.approx(cv, abs=0.02), unit
    assert covers(seg.cv_mean_ci, cv)
    # N segments of independent length: CV(L)^2 = CV(N)^2 + CV(X)^2 / E[N] > CV(N)^2 and
    # corr(N, L) = CV(N) / CV(L), about 0.9 for these parameters (0.4 segment CV, 5-30 segments)
    assert seg.length_cv_mean > seg.cv_mean
    assert 0.8 < seg.count_length_corr_mean < 1.0


def test_run_without_text(tmp_path) -> None:
    sim.write_synthetic_run(tmp_path / "r", sim.segment_sum(40, seed=4), sim.Sampling(k=4), text=False)
    a = analyse_run(tmp_path / "r", BoundConfig(n_boot=50, n_boot_robust=5, n_normal_reference=200))
    seg = a.summary.segments
    assert seg.available is False and seg.reason == "the run stores no decoded text"
    assert a.summary.alpha_vs_segment_cv.available is False
    v = a.summary.verdicts["alpha_is_segment_cv"]
    assert v.status == "NOT TESTED" and v.detail == "the run stores no decoded text."
