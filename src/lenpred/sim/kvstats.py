"""Preemption figures of one simulation (the KV-bound study, issue 30): how often requests are
preempted, per request, over every request of the run (rejected ones included as 0).

``mean``: preemptions / requests; ``p99``: the 99th percentile of preemptions per request;
``share``: the fraction of requests preempted at least once; ``max``; ``total``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["preemption_stats"]


def preemption_stats(n_preempt: np.ndarray) -> dict[str, float | int]:
    """Mean, P99, max and total preemptions per request, and the share of requests preempted."""
    x = np.asarray(n_preempt, dtype=np.float64)
    if x.size == 0:
        return {"mean": 0.0, "p99": 0.0, "max": 0, "share": 0.0, "total": 0}
    return {"mean": float(x.mean()), "p99": float(np.percentile(x, 99)), "max": int(x.max()),
            "share": float((x > 0).mean()), "total": int(x.sum())}
