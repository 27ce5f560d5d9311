"""The simulator's event vocabulary: what handlers return, and in which order ties are broken.

An event is a plain tuple ``(time [s], priority, kind, payload)``; the
:class:`~lenpred.sim.engine.Simulator` keys its heap ``(time, priority, seq)`` with a counter of
its own, so equal times resolve by priority, then by the order events were returned.

*Timed* events go through the heap. *Notices* (``kind >= NOTICE``) are not scheduled: they tell
the simulator about something that happened in the handler that returned them (a request
finished, a prefilled request needs a decode instance), and it acts on them at once, in the order
returned. That is how an entity hands work on without holding a reference to the simulator.
"""

from __future__ import annotations

from typing import Any

Event = tuple[float, int, int, Any]  # (time [s], priority, kind, payload)

# timed events and their priority at equal times (lower first): steps finish before transfers
# land, transfers before arrivals, and an idle instance is kicked only after all of those.
STEP_DONE, PREFILL_DONE, TRANSFER_DONE, ARRIVAL, KICK = range(5)
PRIO = {STEP_DONE: 0, PREFILL_DONE: 0, TRANSFER_DONE: 1, ARRIVAL: 2, KICK: 3}

# notices (payload: the request)
NOTICE = 10
FINISHED = NOTICE  # the request produced its last token at the event's time
HANDOFF = NOTICE + 1  # prefilled: the simulator dispatches it to a decode instance

NAMES = {STEP_DONE: "step-done", PREFILL_DONE: "prefill-done", TRANSFER_DONE: "transfer-done",
         ARRIVAL: "arrival", KICK: "kick", FINISHED: "finished", HANDOFF: "handoff"}


def finished(r: Any, t: float) -> Event:
    """Notice: ``r`` finished at ``t``."""
    return (t, 0, FINISHED, r)


def handoff(r: Any, t: float) -> Event:
    """Notice: ``r`` was prefilled at ``t`` and needs a decode instance."""
    return (t, 0, HANDOFF, r)
