"""The recommended policy (:data:`RECOMMENDED`), the arm that shows what a prediction adds on top of it
(:data:`PREDICTION_ARM`), and the router's default queue and dispatch (:data:`ROUTER_DEFAULT`).

Chosen by the yardstick against the best prediction-free arm (issue 37, docs/yardstick/README.md): on the
steady loads 0.90-0.99 of 1 prefill + 2 decode at batch 16 (five seeds, every ratio to the best
prediction-free arm of the same cell and seed), **late binding** -- one first-come-first-served queue for
the decode pool, a request sent only when an instance has a free slot (``max_outstanding`` = its batch
limit), to the instance with the fewest outstanding requests -- was that best arm in 14 of 16 pairs and
within 1.02x in all 16. No arm that reads a real prediction (the prefill head, OUTLETS re-predictions) was
within 1.02x of it on both the short-request and the overall P99 in every pair: SJF with aging on the
prefill head cut the short P99 to 0.88-0.97x but raised the overall P99 to 1.01-1.10x; gamma-Boost in the
same queue 0.93-1.00x / 1.01-1.05x; on OUTLETS 0.96-1.01x / 1.00-1.03x. So the recommended policy needs no
prediction; the prediction serves admission, the hints a router adds (``x-lenpred-*``) and the report.
:data:`PREDICTION_ARM` (shortest predicted first, with aging, in the same late-binding queue) is run beside
it when predictions are present, to show what they add.
"""

from __future__ import annotations

__all__ = ["PREDICTION_ARM", "RECOMMENDED", "ROUTER_DEFAULT"]

# late binding: the simulator's max_outstanding is set to the cluster's decode batch limit when run
RECOMMENDED = {"name": "fcfs late", "queue": "fcfs", "dispatch": "least-requests"}
# SJF with aging (100 tokens/s) in the same late-binding queue: it needs only a point prediction (gamma-Boost
# needs a spread, which a request table's predicted_tokens lacks), and was the yardstick's largest short-P99 cut
# by a real prediction on top of late binding (0.88-0.97x, at an overall P99 of 1.01-1.10x)
PREDICTION_ARM = {"name": "sjf late", "queue": {"name": "sjf", "aging": 100.0}, "dispatch": "least-requests"}

# the router's default (``lenpred route``): its wait queue first come, first served (``priority.queue``
# "auto" resolves to fcfs with or without a prediction), each request sent to the backend with the fewest
# outstanding requests among those with a free slot. The late binding itself is ``max_outstanding`` per
# backend: set it to the server's slots (llama.cpp --parallel, vLLM --max-num-seqs). gboost, sjf and boost2
# stay available by name ("queue": "gboost"), and least-predicted-tokens by "policy".
# A policy's parameters and their defaults are its own (lenpred.sched.queue / boost: ``Params``), not here.
ROUTER_DEFAULT = {"queue": "auto", "with_prediction": "fcfs", "without_prediction": "fcfs",
                  "dispatch": RECOMMENDED["dispatch"]}
