"""The recommended policy: what `lenpred simulate` runs when predictions are present and no policy is
named, and the router's default queue and dispatch.

It was chosen by the policy study (docs/policies/README.md): the only arms that never backfired in any
cell use the predictions to dispatch, not to reorder a queue: first come, first served at every
instance, and each request sent to the instance with the fewest predicted outstanding tokens.
"""

from __future__ import annotations

__all__ = ["RECOMMENDED", "RECOMMENDED_BOOST"]

RECOMMENDED = {"name": "fcfs+lpt", "queue": "fcfs", "dispatch": "least-predicted-tokens"}

# the two-class boost's parameters where one is asked for (the router's ``priority.queue`` boost2): the
# yardstick's episodes (docs/yardstick/) found B = 3 s the only boost on a prefill head that never
# backfired, and 224 tokens is the median output of the ShareGPT test split (set it to your workload's)
RECOMMENDED_BOOST = {"boost_s": 3.0, "short_threshold": 224.0}
