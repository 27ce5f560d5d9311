"""Speed of the serving simulator: wall time for N requests on 8 decode + 4 prefill instances.

    .venv/bin/python -m benchmarks.bench_sim_speed                 # 100k requests, synthetic lengths
    .venv/bin/python -m benchmarks.bench_sim_speed --sharegpt      # ShareGPT lengths (needs the tokenizer cache)

Lengths: ShareGPT-like lognormals (prompt median 100, output median 250 tokens) unless --sharegpt.
The arrival rate defaults to 0.95x the cluster's saturation throughput measured by a burst probe,
so decode batches are large (the expensive regime: long steps, deep queues, many events).
Wall time excludes building the workload and its predictions table (made once, as a sweep does);
it includes joining the table to the workload and building the Request objects.
"""

from __future__ import annotations

import argparse
import platform
import time

from lenpred.sim.config import ClusterConfig, LengthConfig, PolicyConfig, SimConfig, WorkloadConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.summary import summarize
from lenpred.sim.sweep import RunSetup, measure_capacity
from lenpred.sim.workload import build_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="requests (default 100000)")
    ap.add_argument("--n-decode", type=int, default=8)
    ap.add_argument("--n-prefill", type=int, default=4)
    ap.add_argument("--profile", default="llama8b-h100")
    ap.add_argument("--load", type=float, default=0.95, help="x saturation throughput (default 0.95)")
    ap.add_argument("--sharegpt", action="store_true", help="ShareGPT token lengths instead of lognormals")
    args = ap.parse_args()

    lengths = LengthConfig(source="sharegpt") if args.sharegpt else LengthConfig(
        source="synthetic", prompt_median=100, prompt_sigma=1.0, output_median=250, output_sigma=0.8)
    cfg = SimConfig(
        name="bench",
        cluster=ClusterConfig(n_prefill=args.n_prefill, n_decode=args.n_decode, profile=args.profile),
        workload=WorkloadConfig(n_requests=args.n, lengths=lengths),
    )
    t0 = time.perf_counter()
    wl = build_workload(cfg.workload, seed=0)
    t_build = time.perf_counter() - t0
    cap = measure_capacity(RunSetup.of(cfg), wl, PolicyConfig())
    preds = wl.predictions(cfg.prediction, seed=0)
    rate = args.load * cap
    print(f"python {platform.python_version()} on {platform.machine()}; {args.n} requests, "
          f"{args.n_decode} decode + {args.n_prefill} prefill, {args.profile}, lengths "
          f"{'sharegpt' if args.sharegpt else 'lognormal'} (built in {t_build:.1f} s)")
    print(f"saturation throughput {cap:.1f} req/s; running at {args.load:g}x = {rate:.1f} req/s")
    for pol in (PolicyConfig(name="fcfs+rr"),
                PolicyConfig(name="sjf+lpt", queue="sjf", dispatch="least-predicted-tokens"),
                PolicyConfig(name="srpt+p2c", queue="srpt", dispatch="power-of-two")):
        t1 = time.perf_counter()
        reqs = wl.requests(rate, preds)
        res = Simulator(reqs, cfg.cluster, pol.policy).run()
        wall = time.perf_counter() - t1
        s = summarize(res)
        mean_batch = sum(s["decode_imbalance"]["mean_batch"]) / len(s["decode_imbalance"]["mean_batch"])
        print(f"  {pol.name:<9} wall {wall:6.2f} s (engine {res.wall_s:5.2f} s), {res.n_events:>8} events "
              f"({res.n_events / res.wall_s / 1e3:.0f}k/s), simulated {s['makespan_s']:.0f} s, "
              f"mean decode batch {mean_batch:.0f}, {s['output_tokens_per_s']:.0f} output tok/s")


if __name__ == "__main__":
    main()
