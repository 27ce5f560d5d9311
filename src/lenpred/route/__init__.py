"""A length-aware OpenAI-compatible router (``lenpred route``).

For each request: a predicted output length (a trained head in-process, a ``lenpred serve`` URL, or a
cheap fallback), a priority for the backend's scheduler (vLLM's ``priority`` field, with aging), and a
backend chosen over live load numbers by the dispatch policies the simulator runs too
(:mod:`lenpred.sched.dispatch`). Modules: ``config`` (the config file), ``estimators``, ``backends``
(load, health), ``priority``, ``openai`` (request checks, errors, SSE counting), ``upstream`` (requests to other servers,
on aiohttp), ``router`` (one request: predict, pick a backend, retry), ``forward`` (one attempt on one
backend: payload, headers, the answer relayed), ``app`` (the FastAPI app), ``server`` (under uvicorn). The stub backend and the server processes that the tests and
benchmarks start live beside the benchmarks: benchmarks/route_stub.py, benchmarks/route_procs.py.
"""

from lenpred.lazy import lazy_exports
from lenpred.route.config import RouterConfig

__all__ = ["RouterConfig", "create_app"]

# FastAPI loads only when the app is built
__getattr__, __dir__ = lazy_exports(__name__, {"create_app": "lenpred.route.app"})
