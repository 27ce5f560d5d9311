"""The recommended policy: what `lenpred simulate` runs when predictions are present and no policy is
named, and the router's default queue and dispatch.

It was chosen by the policy study (docs/policies/README.md): the only arms that never backfired in any
cell use the predictions to dispatch, not to reorder a queue: first come, first served at every
instance, and each request sent to the instance with the fewest predicted outstanding tokens.
"""

from __future__ import annotations

__all__ = ["RECOMMENDED"]

RECOMMENDED = {"name": "fcfs+lpt", "queue": "fcfs", "dispatch": "least-predicted-tokens"}
