"""The yardstick's five arms per regime group (lenpred.report.yardstick): known answers on hand-made
rows, the Pareto figure, and the one-line refusals of a malformed cells file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lenpred.errors import DataError
from lenpred.report.page.schedule import group_table, pareto_figure, pretty
from lenpred.report.yardstick import MAX_OVERALL, REFERENCE, Group, load_cells, summarize
from report.report_inputs import YARDSTICK_ARMS, yardstick_row


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _group(tmp_path: Path, rows: list[dict[str, object]]) -> Group:
    (g,) = summarize(load_cells([_write(tmp_path / "cells.jsonl", rows)]))
    return g


def _steady(tmp_path: Path) -> Group:
    return _group(tmp_path, [yardstick_row({a: v[s] for a, v in YARDSTICK_ARMS.items()}, seed=s,
                                           diverging=["mlfq/- p99_s"]) for s in (0, 1)])


def test_the_five_arms_on_hand_made_rows(tmp_path: Path) -> None:
    g = _steady(tmp_path)
    arms = {p.role: p.stats for p in g.picks}
    assert {r: s.arm for r, s in arms.items()} == {
        "best prediction-free": REFERENCE, "FCFS + RR": "fcfs+rr/-", "default": "fcfs late/-",
        # boost2 B=10/mlp (0.4, overall 1.10) and gboost/outlets (0.5, 1.06 in seed 1) are over 1.05x
        "best real predictor": "sjf aging100/mlp",
        "true-length ceiling": "boost2 boost_s10 short_threshold224/true"}  # sjf/true (0.2) is at 1.5x
    # fcfs+rr, fcfs late and uniboost tie at (10, 20): the first; mlfq diverges, so it is no candidate
    assert g.references == (("fcfs+rr/-", 2),)
    best = arms["best real predictor"]
    assert best.short_p99.median == pytest.approx(0.6) and best.overall_p99.median == pytest.approx(1.03)
    assert best.short_p50 is not None and best.short_p50.median == pytest.approx(0.6)
    assert best.pairs == 2 and best.within and (best.n_goal, best.n_never_worse) == (2, 0)
    assert arms["best prediction-free"].short_p99.median == 1.0 and arms["best prediction-free"].n_never_worse == 2
    assert all(p.strict for p in g.picks)
    assert (g.regime, g.cluster, g.batch, g.seeds, g.pairs) == ("steady", "1+2", 16, 2, 2)
    assert not any("ran without a prediction" in n for n in g.notes)  # late binding ran
    g = _group(tmp_path, [yardstick_row({"fcfs+rr/-": (10.0, 20.0), "mlfq/-": (3.0, 40.0)})])
    assert any("only fcfs+rr/-, mlfq/- ran without a prediction" in n for n in g.notes)
    assert any("the default fcfs late/- was not run here" in n for n in g.notes)


def test_the_reference_is_the_best_stable_prediction_free_arm_of_each_pair(tmp_path: Path) -> None:
    """uniboost's backlog outlived the episode and mlfq's overall P99 is over 1.05x: late binding is the
    reference, and every ratio is to it."""
    arms = {"fcfs+rr/-": (10.0, 20.0), "uniboost/-": (4.0, 20.0), "mlfq/-": (3.0, 24.0),
            "fcfs late/-": (6.0, 20.5), "fcfs @jsq/-": (7.0, 20.0), "gboost late/mlp": (4.5, 20.0)}
    row = yardstick_row(arms, regime="episode", where="1.5x30s")
    row["arms"]["uniboost/-"]["drained"] = False  # type: ignore[index]
    g = _group(tmp_path, [row])
    assert g.references == (("fcfs late/-", 1),) and not any("only" in n for n in g.notes)
    picks = {p.role: p.stats for p in g.picks}
    assert picks["FCFS + RR"].short_p99.median == pytest.approx(10.0 / 6.0)
    best = picks["best real predictor"]
    assert best.arm == "gboost late/mlp" and best.short_p99.median == pytest.approx(0.75)
    assert best.overall_p99.median == pytest.approx(20.0 / 20.5) and best.n_goal == 1
    row["arms"]["uniboost/-"]["drained"] = True  # type: ignore[index]
    assert _group(tmp_path, [row]).references == (("uniboost/-", 1),)


def test_spans_over_pairs(tmp_path: Path) -> None:
    """Median and min-max over (place, seed) pairs: three loads, one seed each."""
    base = (10.0, 20.0)
    rows = [yardstick_row({"fcfs+rr/-": base, "fcfs late/-": base, "gboost/mlp": (x, 20.0)}, where=w)
            for w, x in (("0.9", 9.0), ("0.95", 5.0), ("0.99", 7.0))]
    g = _group(tmp_path, rows)
    s = next(p.stats for p in g.picks if p.role == "best real predictor")
    assert (s.short_p99.median, s.short_p99.lo, s.short_p99.hi, s.short_p99.n) == pytest.approx((0.7, 0.5, 0.9, 3))
    assert g.places == ("0.9 poisson", "0.95 poisson", "0.99 poisson")
    assert [p.role for p in g.picks] == ["best prediction-free", "FCFS + RR", "default", "best real predictor"]


def test_no_arm_within_everywhere_shows_the_most_often_within(tmp_path: Path) -> None:
    """No /true arm within 1.05x in both seeds: the one within in one seed is shown, marked, noted."""
    arms = [{"fcfs+rr/-": (10.0, 20.0), "sjf/true": (2.0, 30.0), "boost2 boost_s3 short_threshold224/true": (3.0, y)}
            for y in (20.0, 22.0)]
    g = _group(tmp_path, [yardstick_row(a, seed=s) for s, a in enumerate(arms)])
    ceiling = next(p for p in g.picks if p.role == "true-length ceiling")
    assert ceiling.stats.arm == "boost2 boost_s3 short_threshold224/true" and not ceiling.strict
    assert ceiling.stats.n_within == 1
    assert "within 1.05x in 1 of 2" in group_table(g).rows[-1][0]


def test_pareto_figure_has_five_entries_and_the_constraint(tmp_path: Path) -> None:
    g = _steady(tmp_path)
    fig = pareto_figure(g)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(texts) == 5
    assert texts[0] == "reference: best of the /- arms" and texts[3] == "best real predictor: sjf aging100/mlp"
    assert texts[4] == "true-length ceiling: boost2 B=10s thr=224/true"
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [MAX_OVERALL, MAX_OVERALL]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_table_columns_follow_the_figures_present(tmp_path: Path) -> None:
    row = yardstick_row({"fcfs+rr/-": (10.0, 20.0), "fcfs late/-": (10.0, 20.0), "gboost/mlp": (8.0, 20.0)})
    for a in row["arms"].values():  # type: ignore[union-attr]
        del a["short_p50_s"], a["attain_all"]
    t = group_table(_group(tmp_path, [row]))
    assert [c.header for c in t.columns] == ["arm", "policy/predictor", "short P99 / best free",
                                             "overall P99 / best free", "goal (<= 0.8x short) / never worse (<= 1.02x)",
                                             "pairs (seeds)"]
    assert t.rows[2] == ("default", "fcfs late/-", "1.00 (1.00-1.00)", "1.00 (1.00-1.00)", "0 / 1", "1 (1)")
    assert t.rows[3] == ("best real predictor", "gboost/mlp", "0.80 (0.80-0.80)", "1.00 (1.00-1.00)", "1 / 1", "1 (1)")
    assert pretty("boost2 boost_s3 short_threshold224/outlets") == "boost2 B=3s thr=224/outlets"


@pytest.mark.parametrize(("line", "expect"), [
    ("{not json", "line 2 is not JSON"),
    ("[1, 2]", "line 2 is not a JSON object"),
    (json.dumps({"cell": {"regime": "steady"}, "arms": {}}), "line 2: cell.cluster: Field required"),
    (json.dumps(yardstick_row({"fcfs+rr/-": (10.0, 20.0), "x/mlp": (1.0, "slow")})),  # type: ignore[dict-item]
     "line 2: arms.x/mlp.p99_s: Input should be a valid number"),
    (json.dumps(yardstick_row({"gboost/mlp": (1.0, 2.0)})), "line 2 has no fcfs+rr/- arm"),
])
def test_malformed_rows_are_refused_in_one_line(tmp_path: Path, line: str, expect: str) -> None:
    path = tmp_path / "cells.jsonl"
    path.write_text(json.dumps(yardstick_row({"fcfs+rr/-": (10.0, 20.0)})) + "\n" + line + "\n")
    with pytest.raises(DataError) as e:
        load_cells([path])
    assert str(path) in str(e.value) and expect in str(e.value)
    assert len(str(e.value).splitlines()) == 1


def test_goodput_rows_and_blank_lines_are_skipped_and_duplicates_count_once(tmp_path: Path) -> None:
    row = yardstick_row({"fcfs+rr/-": (10.0, 20.0), "gboost/mlp": (8.0, 20.0)})
    goodput = {"key": "goodput", "cell": {"regime": "goodput"}, "arms": {"gboost/mlp": {"all": {"load": 1.0}}}}
    path = tmp_path / "a-cells.jsonl"
    path.write_text(json.dumps(row) + "\n\n" + json.dumps(goodput) + "\n")
    assert len(load_cells([path, tmp_path])) == 1  # the folder's *cells.jsonl is the same file
    with pytest.raises(DataError, match="no yardstick cells file there"):
        load_cells([tmp_path / "empty"])
