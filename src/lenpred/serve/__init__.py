"""The prediction service (``lenpred serve``): a trained head behind a micro-batcher and an HTTP API.

* :mod:`lenpred.serve.schema` -- the wire format (pydantic): PredictRequest / PredictResponse / errors;
* :mod:`lenpred.serve.service` -- :class:`PredictionService`, usable in process (the router does);
* :mod:`lenpred.serve.heads` -- what a batch runs: the proxy's text pipeline, or the target's prefill;
* :mod:`lenpred.serve.app` -- ``create_app(service)``: FastAPI with /v1/predict, /healthz, /metrics;
* :mod:`lenpred.serve.wire` -- the OpenAI wire format the router shares: error body, message text,
  the lone-surrogate check;
* :mod:`lenpred.serve.config` / :mod:`lenpred.serve.server` -- ``lenpred serve`` under uvicorn (``bind``
  and ``run_app`` start the router too).

The router (``lenpred route``) lives in :mod:`lenpred.route`.
"""

from lenpred.serve.heads import PrefillOptions, TextOptions
from lenpred.serve.schema import ChatMessage, ErrorResponse, PredictRequest, PredictResponse
from lenpred.serve.service import Batching, PredictionService

__all__ = ["Batching", "ChatMessage", "ErrorResponse", "PredictRequest", "PredictResponse", "PredictionService",
           "PrefillOptions", "TextOptions"]
