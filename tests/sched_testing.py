"""A hand-checkable queue the queue-policy tests (tests/sched) and the simulator's policy tests
(tests/sim) both order."""

from __future__ import annotations

from lenpred.sim.request import Request


def queue() -> list[Request]:
    # rid: arrival, true output, predicted output
    return [
        Request(0, 0.00, 50, 400, pred=100),  # long, predicted short
        Request(1, 0.01, 50, 50, pred=300),  # short, predicted long
        Request(2, 0.02, 50, 200, pred=200),
        Request(3, 0.03, 50, 10, pred=20),
    ]
