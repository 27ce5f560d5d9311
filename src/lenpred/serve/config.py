"""``ServeConfig``: every setting of ``lenpred serve`` (CLI flags are derived from its fields)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lenpred.config import Config

__all__ = ["ServeConfig"]


class ServeConfig(Config):
    """How the prediction service runs. ``head`` is the only required field."""

    head: str = Field(description="head directory written by `lenpred train`")
    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0: every interface)")
    port: int = Field(8100, ge=0, le=65535, description="TCP port (0: any free port, printed at start)")
    max_batch: int = Field(64, ge=1, le=4096, description="most requests per model call")
    max_wait_ms: float | None = Field(None, ge=0, le=1000, description="longest a request waits for batch mates (ms; "
                                                               "default 0 for the ngram / gbdt heads, whose batch "
                                                               "costs little more than one request, else 2)")
    max_body_bytes: int = Field(1 << 20, ge=256, description="largest request body accepted (bigger: 413)")
    max_queue: int = Field(4096, ge=1, description="most requests waiting for a batch (more: 503 at once)")
    timeout_s: float = Field(60.0, gt=0, description="longest a prediction may take, queueing included (then 504)")
    threads: int = Field(1, ge=1, description="torch CPU threads of the model calls (1 is fastest on a busy CPU)")
    model: str | None = Field(None, description="hidden-state heads: the target model, if not the one the head "
                                                "records (checked by fingerprint)")
    max_prompt_tokens: int | None = Field(None, ge=1, description="hidden-state heads: refuse longer prompts "
                                                                  "(default: the model's context)")
    runtime: Literal["torch", "torch-int8", "onnx", "onnx-int8"] = Field(
        "torch", description="proxy head: the MiniLM encoder's runtime (onnx*: needs onnxruntime, lenpred[onnx]); "
                             "refused when it moves a check prompt's prediction by more than runtime_tolerance")
    runtime_tolerance: float = Field(0.10, ge=0, description="proxy head: the largest relative change of a check "
                                                             "prompt's prediction a runtime may make")
    inline: bool = Field(False, description="text heads: run each request at once on the event loop (no batch "
                                            "wait, no worker thread): for heads of a fraction of a ms (ngram, "
                                            "gbdt); a slow head would stall every other request")
    device: str = Field("cpu", description="torch device of the target's prefill (hidden-state heads)")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field("warning", description="uvicorn log level")
    access_log: bool = Field(False, description="log one line per HTTP request")
