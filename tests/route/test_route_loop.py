"""The router's own loop: the garbage collector's pauses as a metric, the running outstanding-tokens total of
each backend, and the per-chunk SSE accounting."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench_scripts import load_benchmark
from lenpred.route.metrics import GcTimer

report = load_benchmark("router_report")


def test_gc_timer_counts_each_collection_by_generation_while_installed():
    hist = Histogram("t_gc_pause_seconds", "x", ["generation"], registry=(reg := CollectorRegistry()),
                     buckets=(0.001, 0.005))
    timer = GcTimer(hist)
    timer.install()
    timer.install()  # once only
    try:
        gc.collect(0)
        gc.collect(1)
        gc.collect(1)
    finally:
        timer.remove()
    gc.collect(0)  # after remove: not counted
    assert timer not in gc.callbacks
    figs = report.gc_pauses(generate_latest(reg).decode(), "t_gc_pause_seconds")
    # a collection of generation 0 may also run on its own between the calls (allocations): at least one
    assert figs["0"]["count"] >= 1 and figs["1"]["count"] == 2 and figs["2"]["count"] == 0
    assert figs["1"]["over_5ms"] <= figs["1"]["over_1ms"] <= 2 and figs["1"]["mean_ms"] > 0


def test_gc_pauses_reads_the_metrics_text_by_hand():
    text = "\n".join([
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="0.0005"} 1.0',
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="0.001"} 2.0',
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="0.005"} 3.0',
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="+Inf"} 4.0',
        'lenpred_route_gc_pause_seconds_count{generation="1"} 4.0',
        'lenpred_route_gc_pause_seconds_sum{generation="1"} 0.0124',
        'lenpred_route_other_count 9.0'])
    assert report.gc_pauses(text) == {"1": {"count": 4, "total_ms": 12.4, "mean_ms": 3.1, "over_1ms": 2, "over_5ms": 1}}
