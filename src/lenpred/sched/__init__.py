"""Scheduling: the policies the simulator and the router share.

* :mod:`~lenpred.sched.job` -- what a policy reads of a request (the :class:`Job` protocol; a request
  on arrival, :class:`Arrived`);
* :mod:`~lenpred.sched.queue` -- queue policies (the order of a queue at an instance, policy-driven
  preemption) and their registry :data:`QUEUE_POLICIES`;
* :mod:`~lenpred.sched.dispatch` -- dispatchers (which instance of a pool a request goes to) and their
  registry :data:`DISPATCHERS`;
* :mod:`~lenpred.sched.boost` -- boosted-arrival policies (gamma-Boost on predicted distributions,
  the prediction-free UniBoost, a two-class boost), registered in :data:`QUEUE_POLICIES`, and
  :func:`solve_gamma`;
* :mod:`~lenpred.sched.dists` -- predictive length distributions as a policy reads them, with their
  Gittins ranks and risk scores;
* :mod:`~lenpred.sched.params` -- a queue policy as a config (:data:`~lenpred.sched.params.QueueParams`:
  each policy's ``Params`` model, told apart by its name), what a simulator arm and the router read;
* :mod:`~lenpred.sched.recommended` -- the recommended policy (:data:`RECOMMENDED`) and the router's
  default (:data:`ROUTER_DEFAULT`).

Predictions reach a policy only as data on the request; this package imports neither the simulator
(:mod:`lenpred.sim`) nor the router (:mod:`lenpred.route`): both import it.
"""

from lenpred.sched.boost import Calibration, solve_gamma  # importing it registers the boost policies
from lenpred.sched.dispatch import DISPATCHERS, Dispatcher, Loaded, make_dispatcher
from lenpred.sched.dists import LengthDist
from lenpred.sched.job import Arrived, Job, Running
from lenpred.sched.params import QueueParams
from lenpred.sched.queue import QUEUE_POLICIES, PolicyParams, QueuePolicy, make_queue_policy, queue_params
from lenpred.sched.recommended import RECOMMENDED, ROUTER_DEFAULT

__all__ = [
    "Arrived", "Calibration", "DISPATCHERS", "Dispatcher", "Job", "LengthDist", "Loaded", "QUEUE_POLICIES",
    "PolicyParams", "QueueParams", "QueuePolicy", "RECOMMENDED", "ROUTER_DEFAULT", "Running", "make_dispatcher",
    "make_queue_policy", "queue_params", "solve_gamma",
]
