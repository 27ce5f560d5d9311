"""The recommended policy: what `lenpred simulate` runs when predictions are present and no policy is
named (:data:`RECOMMENDED`), and the router's default queue and dispatch (:data:`ROUTER_DEFAULT`).

It was chosen by the policy study (docs/policies/README.md): the only arms that never backfired in any
cell use the predictions to dispatch, not to reorder a queue: first come, first served at every
instance, and each request sent to the instance with the fewest predicted outstanding tokens.
"""

from __future__ import annotations

__all__ = ["RECOMMENDED", "ROUTER_DEFAULT"]

RECOMMENDED = {"name": "fcfs+lpt", "queue": "fcfs", "dispatch": "least-predicted-tokens"}

# the router's default (``lenpred route``, ``priority.queue`` "auto"): gamma-Boost on the prediction with its
# defaults, calibrated online (``gamma`` and ``s_per_token`` "auto": lenpred.route.calibrate), when the estimator
# gives a model's prediction (kinds inline, head, remote); FCFS when it gives none or a prompt-length
# guess (chars, none). Why gboost: docs/yardstick/README.md, steady loads 0.90-0.99 on 1P + 2D, found
# gboost/mlp never worse than FCFS + RR (short and overall P99 <= 1.02x) in 40 of 40 cells x seeds, with
# short P99 0.59-0.79x at batch 16, and within 1.02x in 97 of 100 overload-episode (cell, seed) pairs (at
# worst 1.03x short, 1.04x overall); docs/route.md's real A/B (two one-slot llama.cpp servers, an
# overload episode, 3 draws) cut the short-request P99 38-55% and the overall P99 27-38% against FCFS +
# round robin with the router's queue ordered by gboost. The backend's priority field is not sent by
# default (``priority.enabled`` null: only for a queue set explicitly), so a vLLM started without
# ``--scheduling-policy priority`` sees the same requests as before. `lenpred simulate`'s recommended
# arm (RECOMMENDED above) is not changed here.
# A policy's parameters and their defaults are its own (lenpred.sched.queue / boost: ``Params``), not here.
ROUTER_DEFAULT = {"queue": "auto", "with_prediction": "gboost", "without_prediction": "fcfs",
                  "dispatch": RECOMMENDED["dispatch"]}
