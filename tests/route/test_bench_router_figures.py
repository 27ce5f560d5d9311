"""benchmarks/router_ab.py's A/B figures (bench_router.py ab) from hand-made request records."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import router_ab as br


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


def test_block_schedule_reverses_every_other_block():
    sched = br.block_schedule(["rr", "lpt"], 10, 4)
    assert [(b, a) for b, a, _ in sched] == [(0, "rr"), (0, "lpt"), (1, "lpt"), (1, "rr"),
                                            (2, "rr"), (2, "lpt"), (3, "lpt"), (3, "rr")]
    # every request in exactly one block, blocks consecutive, both arms of a block on the same requests
    idx = {b: list(i) for b, _, i in sched}
    assert sum(idx.values(), []) == list(range(10))
    assert [list(i) for b, a, i in sched if b == 2] == [idx[2], idx[2]]
    assert [(b, a) for b, a, _ in br.block_schedule(["a", "b", "c"], 6, 2)] == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a")]


def test_pooled_figures_leave_out_the_time_between_blocks():
    # block 0 runs 0..10 s on server a; block 1 runs 100..104 s, a busy 100..102, b 100..104: 14 s of the
    # arm's own time, not 104
    recs = [{**_rec(0.0, 1.0, 10.0, 91), "block": 0},
            {**_rec(100.0, 1.0, 4.0, 31, "b"), "block": 1}, {**_rec(100.0, 0.5, 2.0, 5, "a"), "block": 1}]
    f = br._pooled_figures(recs, short_thr=50)
    assert f["throughput_tok_s"] == pytest.approx(127 / 14.0, abs=0.01)
    assert f["throughput_req_s"] == pytest.approx(3 / 14.0, abs=1e-4)
    # busy share per block: 1.0 (a alone, all the time); (2/4 + 4/4) / 2 = 0.75; weighted by span 10 and 4
    assert f["utilization"]["per_block"] == [1.0, 0.75]
    assert f["utilization"]["mean"] == pytest.approx((10 * 1.0 + 4 * 0.75) / 14, abs=1e-3)
    assert f["short_p99_e2e_s"] == pytest.approx(2.0 + 0.99 * (4.0 - 2.0), abs=1e-3)  # pooled: outputs 31 and 5


def test_paired_reports_the_speed_gap_between_neighbours():
    # block 0: rr streams at 10 tok/s, lpt at 11 (10% apart); block 1: both at 10
    res = {"rr": [{**_rec(0, 1.0, 11.0, 101), "block": 0}, {**_rec(50, 1.0, 11.0, 101), "block": 1},
                  {**_rec(60, 0.5, 2.0, 8), "block": 1}],
           "lpt": [{**_rec(20, 1.0, 10.0909, 101), "block": 0}, {**_rec(70, 1.0, 11.0, 101), "block": 1},
                   {**_rec(80, 0.5, 1.5, 8), "block": 1}]}
    p = br._paired(res, short_thr=50)
    assert p["neighbour_speed_gap"] == pytest.approx(0.10, abs=0.002)
    assert p["speed_per_block"]["rr"] == [10.0, pytest.approx(10.0)]
    assert p["blocks_won_vs_first_arm"] == {"lpt": 1}  # block 1: 1.5 s < 2.0 s; block 0 has no short request


def _ab_args(**kw):
    base = {"arms": "rr,lpt", "same_estimator": False, "slots": 1, "chars_arm": False, "blocks": 1, "repeat_first": False}
    return argparse.Namespace(**{**base, **kw})


def test_ab_arms_from_the_flags():
    heads = {"proxy": "p", "ridge": "r"}
    arms = br._arms(_ab_args(), heads, 10)
    assert list(arms) == ["round-robin", "lpt-proxy", "lpt-ridge"]
    assert arms["round-robin"] == {"policy": "round-robin", "estimator": {"kind": "chars"}}
    assert arms["lpt-ridge"] == {"policy": "least-predicted-tokens", "head": "ridge"}
    arms = br._arms(_ab_args(arms="recommended,lpt", slots=2, repeat_first=True), {"proxy": "p"}, 10)
    assert list(arms) == ["lpt-proxy", "recommended-proxy", "lpt-proxy-again"]
    assert arms["recommended-proxy"]["slots"] == 2
    assert list(br._arms(_ab_args(arms="lpt"), {}, 10)) == ["lpt-chars"]  # no head: the chars estimate


@pytest.mark.parametrize(("kw", "says"), [({"arms": "rr,fifo"}, "unknown arm kind 'fifo'"),
                                          ({"arms": "recommended"}, "no arm to run"),
                                          ({"blocks": 11}, "--blocks 11"),
                                          ({"blocks": 2, "repeat_first": True}, "use one of them")])
def test_ab_arms_refuse_bad_flags_with_one_line(kw, says):
    with pytest.raises(SystemExit, match=says.replace("(", r"\(")):
        br._arms(_ab_args(**kw), {}, 10)


def _ep_args(**kw) -> argparse.Namespace:
    base = {"episode": "1.3x60s", "capacity": 0.5, "base": 0.7, "episode_start": 60.0, "blocks": 1,
            "repeat_first": False, "rate": None}
    return argparse.Namespace(**{**base, **kw})


def test_episode_arrivals_follow_the_yardstick_episode():
    import numpy as np

    args = _ep_args()
    t = np.concatenate([br.episode_arrivals(args, np.random.default_rng(s)) for s in range(200)])
    assert args.rate == pytest.approx(0.35)
    # 60 s at 0.35/s, 60 s at 0.65/s, then the tail (max(60, 2 x 0.3 x 60 / 0.3) = 120 s) at 0.35/s: 21, 39, 42
    per_draw = [np.sum(t < 60), np.sum((t >= 60) & (t < 120)), np.sum(t >= 120)]
    assert np.array(per_draw) / 200 == pytest.approx([21.0, 39.0, 42.0], rel=0.06)
    assert t.max() <= 240.0


@pytest.mark.parametrize(("kw", "says"), [({"episode": "1.3x"}, "PEAKxSECONDSs"),
                                          ({"capacity": None}, "needs --capacity"),
                                          ({"base": 1.2}, "0 < base < 1"),
                                          ({"blocks": 2}, "run whole by each arm")])
def test_episode_refuses_bad_flags_with_one_line(kw, says):
    import numpy as np

    with pytest.raises(SystemExit, match=says):
        br.episode_arrivals(_ep_args(**kw), np.random.default_rng(0))


def test_load_generator_does_not_collect_while_it_measures():
    """The overhead waves run with the client's collector off (its full collections took ~30 ms, counted as the
    router's added latency), and it is back as it was afterwards."""
    import gc

    from benchmarks import router_load as rl
    runs: list[int] = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    assert gc.isenabled()
    with rl.quiet_gc():
        gc.callbacks.append(count)
        try:
            assert not gc.isenabled() and gc.get_freeze_count() > 0
            junk = [[i] for i in range(200_000)]  # would trigger generation-0 collections
            del junk
        finally:
            gc.callbacks.remove(count)
    assert runs == [] and gc.isenabled() and gc.get_freeze_count() == 0


def test_ab_late_arms_are_the_default_and_sjf_on_a_head():
    """``late``: the router's default since issue 37 (least-requests behind the router's FCFS queue, no
    estimator); ``late-sjf``: the same, the queue ordered by SJF with aging 100 on each head; their router
    configs say so, and ``late-sjf`` without a head is refused."""
    from lenpred.route.config import RouterConfig

    arms = br._arms(_ab_args(arms="late,late-sjf", slots=1), {"proxy": "p"}, 10)
    assert list(arms) == ["late", "late-sjf-proxy"]
    assert arms["late"] == {"policy": "least-requests", "estimator": {"kind": "none"}, "slots": 1, "priority": {}}
    assert arms["late-sjf-proxy"]["priority"] == {"queue": {"name": "sjf", "aging": 100}}
    plan = argparse.Namespace(args=argparse.Namespace(priority_json='{"queue": "boost2"}', prompt_weight=0.5))

    class _S:
        def __init__(self, name: str) -> None:
            self.url, self.name = f"http://127.0.0.1:{9 + len(name)}", name

    serves = {"proxy": argparse.Namespace(url="http://127.0.0.1:8100")}
    late = RouterConfig.from_dict(br._router_cfg(plan, arms["late"], [_S("a"), _S("bb")], serves))
    assert late.policy == "least-requests" and late.queue_policy.name == "fcfs"
    assert [b.max_outstanding for b in late.backends] == [1, 1]
    sjf = RouterConfig.from_dict(br._router_cfg(plan, arms["late-sjf-proxy"], [_S("a"), _S("bb")], serves))
    assert sjf.queue_policy.name == "sjf" and sjf.estimator.kind == "remote"
    with pytest.raises(SystemExit, match="late-sjf arm orders its queue by a prediction"):
        br._arms(_ab_args(arms="late,late-sjf"), {}, 10)


def test_short_prompts_are_fixed_from_the_prompt_set():
    """Short = a prompt whose median sampled length is below the median of every test sample: fixed by the
    run, not by any arm's outputs; prompts outside the test split are not labelled."""
    import pandas as pd

    class _Run:
        def samples(self, columns=None):
            return pd.DataFrame({"prompt_id": ["a", "a", "b", "b", "c", "c", "x"],
                                 "n_tokens": [10, 20, 100, 300, 40, 60, 1]})

    # test samples 10, 20, 100, 300, 40, 60: median 50; medians a 15, b 200, c 50 (not below)
    assert br.short_prompts(_Run(), {"a", "b", "c"}) == {"a": True, "b": False, "c": False}


def test_draws_summary_pairs_arms_inside_each_draw(tmp_path):
    """Per draw the arm's P99 over the reference's, from the committed per-request records; the geometric
    mean and a bootstrap interval over draws that crosses 1 when the draws disagree."""
    import json

    from benchmarks import router_ab_draws as rd

    def rec(arm: str, e2e: float, short: bool) -> dict:
        return {"arm": arm, "e2e": e2e, "short_fixed": short, "done": True, "error": None}

    for d, (fast, slow) in enumerate([(1.0, 2.0), (1.0, 0.5), (1.0, 1.0)]):
        recs = [rec("late", 10.0 * fast, True), rec("late", 30.0, False),
                rec("late-sjf-p", 10.0 * slow, True), rec("late-sjf-p", 30.0, False),
                {**rec("late-sjf-p", 99.0, True), "done": False}]  # an unfinished request counts in no figure
        (tmp_path / f"draw-{d}.requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (tmp_path / f"draw-{d}.json").write_text(json.dumps({"load_vs_decode_capacity": 0.5 + 0.25 * d} if d else {}))
    s = rd.summarize(tmp_path)
    assert s["load_vs_decode_capacity"] == {"0": None, "1": 0.75, "2": 1.0}
    assert "| 1 | 0.75x | late |" in rd._markdown(s) and "| 0 | - | late |" in rd._markdown(s)
    e = s["arms"]["late-sjf-p"]["short_p99_s"]
    assert e["per_draw"] == [2.0, 0.5, 1.0]
    assert e["geomean"] == pytest.approx(1.0)
    assert e["ci95"][0] < 1.0 < e["ci95"][1] and e["crosses_1"]
    # the overall P99 of two requests interpolates: late 10 + 0.99 x 20 = 29.8 s; sjf 20 + 0.99 x 10, 5 + 0.99 x 25
    assert s["arms"]["late-sjf-p"]["p99_s"]["per_draw"] == pytest.approx([29.9 / 29.8, 29.75 / 29.8, 1.0], abs=1e-4)
    assert s["per_draw"]["0"]["late-sjf-p"]["ok"] == 2
    gm, lo, hi = rd.bootstrap_ratio([0.8, 0.8, 0.8])
    assert gm == pytest.approx(0.8) and lo == pytest.approx(0.8) and hi == pytest.approx(0.8)
    with pytest.raises(SystemExit, match="reference arm 'rr'"):
        rd.summarize(tmp_path, reference="rr")


def test_draw_request_bootstrap_pairs_the_same_requests():
    """Inside one draw: the ratio over the requests both arms finished, paired by block, prompt and arrival;
    an arm exactly half as slow on every pair has ratio 0.5 and a zero-width interval."""
    import math

    from benchmarks import router_ab_draws as rd

    def rec(arm: str, i: int, e2e: float, short: bool = True, **kw) -> dict:
        return {"arm": arm, "block": i % 2, "prompt_id": f"p{i}", "arrival_s": 0.5 * i, "e2e": e2e,
                "short_fixed": short, "done": True, "error": None, **kw}

    recs = [rec("late", i, 10.0 + i) for i in range(40)] + [rec("sjf", i, (10.0 + i) / 2) for i in range(40)]
    recs += [rec("sjf", 99, 1000.0), rec("late", 98, 1000.0, done=False)]  # unpaired: counted in neither
    recs += [rec("late", i, 500.0, short=False) for i in range(50, 60)]  # long prompts: not in the short ratio
    recs += [rec("sjf", i, 500.0, short=False) for i in range(50, 60)]
    r, lo, hi = rd.request_bootstrap(recs, "sjf", "late", 0.99, short=True)
    assert r == pytest.approx(0.5) and lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    r, lo, hi = rd.request_bootstrap(recs, "sjf", "late", 0.99, short=False)
    assert r == pytest.approx(1.0) and lo < 1.0 + 1e-9  # the P99 over all pairs sits among the equal long ones
    assert rd.request_bootstrap(recs, "none", "late", 0.99, short=True) is None
    # the committed records hold no NaN: the router's missing prediction is written as null
    assert rd._json_value(math.nan) is None and rd._json_value(3.5) == 3.5 and rd._json_value("x") == "x"
