"""``lenpred outlets bench`` / ``schedule``: the bench along the trajectory and the value for scheduling."""

from __future__ import annotations

import argparse
import sys


# ------------------------------------------------------------------------------------------ bench
def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traj", required=True, help="trajectory features of --run (its test prompts are scored)")
    p.add_argument("--run", required=True, help="run directory (split, lengths for the oracle and the bound)")
    p.add_argument("--heads", nargs="*", default=[], metavar="[NAME=]HEAD",
                   help="outlets heads, the probe variant included (name default: the variant trained)")
    p.add_argument("--prefill-predictions", nargs="*", default=[], metavar="[NAME=]FILE",
                   help="prefill predictions tables (lenpred predict), carried along the trajectory")
    p.add_argument("--anchors", nargs="*", default=[], metavar="[NAME=]ANCHOR",
                   help="prefill anchors (lenpred outlets anchor): their head and prefill table blended by progress band")
    p.add_argument("--counters", nargs="*", default=[], metavar="[NAME=]HEAD",
                   help="counter heads (lenpred outlets counters): what the answer so far counts, read from the run")
    p.add_argument("--reference", default=None, help="method the ratios use (default: best carried prefill head at t=0)")
    p.add_argument("--out", required=True, help="report folder (an artifact directory)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of prompts for intervals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--live-points", default=None, metavar="T,T,...",
                   help="the live series: these token counts (0 is always scored; default: the trajectory's live "
                        "scheme, t = 16, 32, 64, ... and its every-K grid)")
    p.add_argument("--live-every", type=int, default=None, metavar="K",
                   help="the live series: t = 0, K, 2K, ... below the cap (the trajectory needs those rows)")
    p.add_argument("--strict-series", action="store_true",
                   help="refuse a head trained on rows of another series than the one scored (default: score it, "
                        "labelled with the rows it was trained on)")


def run_bench(a: argparse.Namespace) -> int:
    from lenpred.outlets.bench_files import BenchRequest
    from lenpred.outlets.evaluate import Bootstrap
    from lenpred.outlets.livebench import LiveRequest
    from lenpred.outlets.pipeline import bench
    from lenpred.report.outlets import write_bench

    req = BenchRequest(a.traj, a.run, heads=a.heads, prefill_predictions=a.prefill_predictions, anchors=a.anchors,
                       counters=a.counters, reference=a.reference, split=a.split, boot=Bootstrap(n_boot=a.n_boot, seed=a.seed),
                       live=LiveRequest(points=_token_list(a.live_points), every=a.live_every, strict=a.strict_series))
    done = bench(req, a.out)
    art, md = write_bench(done, a.out, plots=not a.no_plots)
    print(md)
    print(f"report: {art.path}/outlets_bench.md")
    return 0


def _token_list(text: str | None) -> tuple[int, ...] | None:
    from lenpred.errors import ConfigError

    if text is None:
        return None
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--live-points {text!r} is not a list of token counts", "e.g. --live-points 16,32,64,128") from None
    if not out:
        raise ConfigError("--live-points names no point", "e.g. --live-points 16,32,64,128")
    return out


# ------------------------------------------------------------------------------------------ schedule
def add_schedule_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="experiments/outlets/schedule.json", help="simulator config with placeholders")
    p.add_argument("--run", required=True, help="run directory (its split gives the test prompts)")
    p.add_argument("--prefill-predictions", required=True, help="the best prefill head's table (lenpred predict)")
    p.add_argument("--outlets-head", default=None, help="outlets head: its re-predictions are made here")
    p.add_argument("--traj", default=None, help="trajectory features of the run (with --outlets-head)")
    p.add_argument("--outlets-predictions", default=None, help="or: an outlets table already made (lenpred outlets predict)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--requests", type=int, default=None, help="override workload.n_requests (smoke runs)")
    p.add_argument("--loads", default=None, help="override sweep.loads, comma-separated (smoke runs)")
    p.add_argument("--out", required=True, help="result folder")


def run_schedule(a: argparse.Namespace) -> int:
    from lenpred.checks import parse_loads
    from lenpred.errors import ConfigError
    from lenpred.outlets.pipeline import schedule
    from lenpred.outlets.schedule import ScheduleRequest
    from lenpred.report.outlets import write_schedule

    loads, marked = parse_loads(a.loads) if a.loads else (None, False)
    if marked:
        raise ConfigError(f"outlets schedule --loads {a.loads!r}: loads are in the config's sweep.load_unit",
                          "give plain numbers (set sweep.load_unit to capacity in --config for multiples of capacity)")
    req = ScheduleRequest(a.run, a.prefill_predictions, a.out, config=a.config, outlets_head=a.outlets_head,
                          traj=a.traj, outlets_predictions=a.outlets_predictions, split=a.split,
                          n_requests=a.requests, loads=loads)
    res = schedule(req, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(write_schedule(res, a.out))
    print(f"results: {a.out}/results.json ({res.wall_s:.1f} s)")
    return 0
