"""`lenpred simulate` side by side with DistServe's own simulator on the same trace.

DistServe's simulator (``simdistserve`` in LLMServe/DistServe, Zhong et al., OSDI'24) is pure
Python on simpy. It is never vendored here; fetch it yourself and put it on ``PYTHONPATH`` (this
package edits no import path)::

    git clone https://github.com/LLMServe/DistServe /path/to/DistServe    # checked with 82831f1
    pip install simpy                       # or: pip install --target /tmp/simpy simpy
    PYTHONPATH=/path/to/DistServe[:/tmp/simpy] .venv/bin/python -m benchmarks.bench_distserve \\
        [--n 10000] [--rate 30] [--synthetic]

Both simulators get the same requests: ShareGPT lengths (lenpred's cached token counts; or
lognormal lengths with ``--synthetic``), Poisson arrivals at ``--rate`` requests/s, OPT-13B on
A100-80GB (our ``distserve-opt13b`` profile is their model: the re-aligned fit plus their per-step
overheads), 4 prefill + 8 decode instances, TP = PP = 1. What is matched, and how:

* lengths: DistServe's ``output_lens`` counts decode steps; ours counts output tokens including
  the one prefill makes, so theirs = ours - 1;
* limits: DistServe batches prefills up to the KV size (66,144 tokens) and does not model KV
  memory at decode (a step takes queued requests up to 50,000 context tokens, a constant in
  ``Worker._enter_decodes``); ours gets ``max_prefill_tokens`` 66,144 and a KV capacity and batch
  limit too large to bind (keep the load low enough that 50,000 does not bind either);
* dispatch: prefill to the instance with the fewest queued + in-progress requests, ties to the
  lowest index (DistServe's own rule, our ``least-requests``); decode round-robin on both sides
  (DistServe's decode rule counts queued requests only, which excludes the batch in flight, so it
  is replaced here by round-robin with a small patch of ``Scheduler.schedule_decode``);
* KV transfer: DistServe has none; ours gets a 1 PB/s link (under a microsecond per request).

Reported: per-request agreement of TTFT and end-to-end latency, and the wall time of each
simulator (ours includes building the requests and the predictions table).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time
from typing import Any

import numpy as np

from lenpred.sim.config import ClusterConfig, LengthConfig, PolicyConfig, PredictionConfig, WorkloadConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.workload import build_workload

N_PREFILL, N_DECODE = 4, 8
KV_TOKENS = 66144  # DistServe max_num_tokens.csv, opt-13b tp=1 pp=1


def import_distserve() -> Any:
    """DistServe's simulator from ``PYTHONPATH``, or a one-line exit that says how to put it there."""
    try:
        import simdistserve
        import simpy  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"bench_distserve: error: cannot import DistServe's simulator ({e}) -- fix: clone "
                         "LLMServe/DistServe, install simpy, and run PYTHONPATH=/path/to/DistServe[:/where/simpy/is] "
                         "python -m benchmarks.bench_distserve") from None
    return simdistserve


def run_distserve(prompt: np.ndarray, output: np.ndarray, arrival_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(TTFT s, E2E s, wall s) per request from simdistserve, requests in arrival order."""
    import simpy
    from simdistserve.base.scheduler import Scheduler, put_requests_with_interarrivals
    from simdistserve.base.worker import WorkerConfig
    from simdistserve.base.workload import convert_absolutearrival_to_interarrival, convert_pd_pair_to_request
    from simdistserve.clusters.disagg import DisaggCluster
    from simdistserve.constants import ModelTypes

    t0 = time.perf_counter()
    rr = itertools.count()

    def schedule_decode_round_robin(self: Any, req: Any) -> None:  # see the module docstring
        if req.should_finish():
            req.finish_decode()
            return
        worker = self._decode_heads[next(rr) % len(self._decode_heads)]
        req.wait_decode(worker.wid)
        self._sched_request(req, worker, worker.decode_queue)

    Scheduler.schedule_decode = schedule_decode_round_robin
    env = simpy.Environment()
    requests = convert_pd_pair_to_request(list(zip(prompt.tolist(), (output - 1).tolist(), strict=True)))
    cfg = WorkerConfig(model_type=ModelTypes.model_str_to_object("opt_13b"), TP=1, TP_Prefill=1, TP_Decode=1,
                       prefill_max_batch_size=10**7, decode_max_batch_size=10**7, prefill_max_tokens=KV_TOKENS,
                       decode_max_tokens=KV_TOKENS, enable_chunked_prefill=False, engine_type="distserve")
    cluster = DisaggCluster(env=env, N_prefill_instance=N_PREFILL, N_decode_instance=N_DECODE,
                            PP_prefill=1, PP_decode=1, worker_configs=cfg)
    cluster.run()
    put_requests_with_interarrivals(env, cluster.scheduler, convert_absolutearrival_to_interarrival(arrival_s.tolist()),
                                    requests)
    env.run()
    wall = time.perf_counter() - t0
    ttft = np.empty(len(requests))
    e2e = np.empty(len(requests))
    for i, r in enumerate(requests):  # times in ms; first token = first wait_decode (end of prefill)
        start = next(t for t, ev, _ in r.log if ev == "init")
        first = next(t for t, ev, _ in r.log if ev == "wait_decode")
        end = max(t for t, ev, _ in r.log if ev == "exit_system")
        ttft[i], e2e[i] = (first - start) / 1e3, (end - start) / 1e3
    return ttft, e2e, wall


def run_ours(prompt: np.ndarray, output: np.ndarray, arrival_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    from lenpred.sim.workload import Workload

    t0 = time.perf_counter()
    wl = Workload.from_lengths(prompt, output, arrival_s, source="bench")
    reqs = wl.requests(None, wl.predictions(PredictionConfig(model="oracle")))
    cluster = ClusterConfig(n_prefill=N_PREFILL, n_decode=N_DECODE, profile="distserve-opt13b",
                            max_prefill_tokens=KV_TOKENS, kv_capacity_tokens=10**9, max_batch=10**7,
                            link_gbps=1e6)
    res = Simulator(reqs, cluster, PolicyConfig(dispatch="round-robin", prefill_dispatch="least-requests").policy).run()
    wall = time.perf_counter() - t0
    return res.t_first - res.arrival, res.t_finish - res.arrival, wall


def agreement(name: str, a: np.ndarray, b: np.ndarray) -> None:
    d = np.abs(a - b)
    rel = d / np.maximum(np.abs(b), 1e-12)
    within = {f"<= {lab}": float((d <= tol).mean()) for lab, tol in (("1 us", 1e-6), ("10 us", 1e-5), ("1 ms", 1e-3))}
    print(f"  {name}: max |diff| {d.max() * 1e3:.4f} ms, P99 {np.percentile(d, 99) * 1e3:.4f} ms, "
          f"max relative {rel.max():.2e}; share of requests " + ", ".join(f"{k}: {v:.4f}" for k, v in within.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000, help="requests (default 10000)")
    ap.add_argument("--rate", type=float, default=30.0, help="Poisson arrival rate, requests/s (default 30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synthetic", action="store_true", help="lognormal lengths instead of ShareGPT's")
    args = ap.parse_args()
    import_distserve()

    lengths = (LengthConfig(source="synthetic", prompt_median=100, prompt_sigma=1.0, output_median=250,
                            output_sigma=0.8) if args.synthetic else LengthConfig(source="sharegpt"))
    wl = build_workload(WorkloadConfig(n_requests=args.n, lengths=lengths), seed=args.seed)
    arrival = wl.arrival_times(args.rate)
    print(f"python {platform.python_version()} on {platform.machine()}; {args.n} requests "
          f"({'lognormal' if args.synthetic else 'ShareGPT'} lengths: mean prompt {wl.prompt.mean():.0f}, "
          f"output {wl.output.mean():.0f} tokens), Poisson {args.rate:g} req/s, OPT-13B, "
          f"{N_PREFILL} prefill + {N_DECODE} decode")
    ttft_o, e2e_o, wall_o = run_ours(wl.prompt, wl.output, arrival)
    ttft_d, e2e_d, wall_d = run_distserve(wl.prompt, wl.output, arrival)
    print(f"  wall: lenpred {wall_o:.2f} s, DistServe {wall_d:.2f} s -> lenpred is {wall_d / wall_o:.1f}x faster")
    agreement("TTFT", ttft_o, ttft_d)
    agreement("E2E ", e2e_o, e2e_d)
    for name, t, e in (("lenpred  ", ttft_o, e2e_o), ("DistServe", ttft_d, e2e_d)):
        tpot = np.where(wl.output > 1, (e - t) / np.maximum(wl.output - 1, 1), np.nan)
        print(f"  {name}: TTFT P50/P99 {np.percentile(t, 50) * 1e3:.2f} / {np.percentile(t, 99) * 1e3:.2f} ms, "
              f"TPOT mean {np.nanmean(tpot) * 1e3:.2f} ms, E2E P99 {np.percentile(e, 99):.3f} s")


if __name__ == "__main__":
    main()
