"""Check the first-principles Llama-3.1-8B / H100 profile against NVIDIA's published throughput.

NVIDIA publishes offline max-throughput numbers for Llama-3.1-8B-Instruct-FP8 on one H100-SXM
(TensorRT-LLM ``docs/source/performance/perf-overview.md``, "Llama 3.1 8B", H100 TP1 FP8 column:
every request sent at once, fixed input/output lengths, output tokens per second). We derive the
FP8 variant of our profile with the *same* formulas and efficiencies as ``llama8b-h100`` (only bytes
per weight / KV element and the FP8 tensor rate change), simulate the same benchmark on one
colocated instance (chunk-free mixed prefill + decode steps, batch up to 2048) and compare.

    .venv/bin/python experiments/sim/check_llama8b_profile.py
"""

from __future__ import annotations

import numpy as np

from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import simulate
from lenpred.sim.profiles import get_profile
from lenpred.sim.request import Request

# (ISL, OSL, requests in NVIDIA's run, published output tokens/s on H100 TP1 FP8)
PUBLISHED = [
    (128, 128, 30000, 28312),
    (128, 2048, 3000, 22714),
    (128, 4096, 1500, 14325),
    (500, 2000, 3000, 17660),
    (1000, 1000, 3000, 15220),
    (1000, 2000, 1500, 13899),
    (2048, 128, 3000, 3450),
    (2048, 2048, 1500, 9305),
    (5000, 500, 1500, 3459),
    (20000, 2000, 1000, 1351),
]


def main() -> None:
    prof = get_profile("llama8b-h100-fp8")
    print(f"profile {prof.name}: {prof.source}")
    print(f"  prefill a,b,c = {prof.prefill}; decode a,b,c = {prof.decode}")
    print(f"  KV {prof.kv_bytes_per_token} B/token, capacity {prof.kv_capacity_tokens} tokens, "
          f"max batch {prof.max_batch}")
    print(f"{'ISL/OSL':>11} {'requests':>8} {'published':>10} {'simulated':>10} {'sim/pub':>8}")
    ratios = []
    for isl, osl, n, pub in PUBLISHED:
        reqs = [Request(i, 0.0, isl, osl, osl) for i in range(n)]
        res = simulate(reqs, ClusterConfig(mode="colocated", profile=prof.name, preemption="recompute"),
                       PolicyConfig())
        tput = float(res.output.sum()) / float(res.t_finish.max())
        ratios.append(tput / pub)
        print(f"{isl:>5}/{osl:<5} {n:>8} {pub:>10,} {tput:>10,.0f} {tput / pub:>8.2f}")
    r = np.array(ratios)
    print(f"sim/published: median {np.median(r):.2f}, range {r.min():.2f}-{r.max():.2f}, "
          f"geometric mean {np.exp(np.log(r).mean()):.2f}")


if __name__ == "__main__":
    main()
