"""OpenAI-compatible engine: any server speaking ``/v1/completions`` (vLLM, SGLang, llama.cpp).

This is how collection scales out: point it at a vLLM deployment and ask for ``n`` samples per
request. Prompts are sent as the *rendered* text (chat template already applied locally, so the
card's template is the one used) to ``/v1/completions``. Per-sample token ids come from the
server when it returns them (vLLM: ``return_token_ids``), otherwise from tokenizing the returned
text with the run's tokenizer (the card records which, under ``engine_runtime``). ``finish_reason == "length"`` marks a censored sample.

Requests run on a bounded thread pool (``concurrency``) with retries and exponential backoff on
connection errors, timeouts, 429 and 5xx; other HTTP errors stop the run with the server's status
and the first line of its message (an HTML error page is reduced to its title).

The HTTP client can be injected (``client=`` or ``transport=``, e.g. ``httpx.MockTransport``), so the
retry logic is tested in-process; ``sleep=`` replaces the backoff wait.
"""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import groupby
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from lenpred.collect.base import ENGINES, EngineOptions, EngineSetup, Job, Result, SamplingConfig
from lenpred.errors import EngineError, FieldError

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Transient(Exception):
    """A failure worth another try (its message says what happened)."""


class OpenAIOptions(EngineOptions):
    """Options of the OpenAI-compatible engine. ``api_model`` (the name the server serves) is part of
    the card; where the server is and how hard it is driven are runtime only. The API key is read
    from ``OPENAI_API_KEY`` and never recorded."""

    card_fields: ClassVar[tuple[str, ...]] = ("api_model",)

    base_url: str | None = Field(None, description="openai: server URL, e.g. http://127.0.0.1:8000/v1")
    api_model: str | None = Field(None, description="openai: model name the server expects (unset: --model; part of the card)")
    concurrency: int = Field(8, ge=1, description="openai: requests in flight")
    n_per_request: int = Field(0, ge=0, description="openai: samples per request (n); 0 = all K at once")
    timeout: float = Field(600.0, gt=0, description="openai: seconds per request")
    retries: int = Field(3, ge=0, description="openai: retries per request")

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        """A URL the client can call: http(s) and a host (a typo is not an unreachable server)."""
        if v is None:
            return v
        u = urlsplit(v)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise FieldError(f"{v!r} is not an http(s) URL", "pass the server's URL, e.g. --base-url http://127.0.0.1:8000/v1")
        return v


def server_message(r: Any) -> str:
    """The first line worth reading of an error response: a JSON error's message, an HTML page's
    title (or first line of text), else the body's first line; at most 200 characters."""
    text = r.text or ""
    if "json" in r.headers.get("content-type", ""):
        try:
            data = r.json()
        except ValueError:
            data = None
        if isinstance(data, dict):
            err = data.get("error", data)
            msg = err.get("message") if isinstance(err, dict) else err
            msg = msg or data.get("detail") or data.get("message")
            if msg:
                text = str(msg)
    if re.search(r"<(html|head|body|title|!doctype)", text[:2000], re.I):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        text = title.group(1) if title else re.sub(r"<[^>]+>", "\n", text)
        text = html.unescape(text)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "(empty body)")
    return " ".join(first.split())[:200]


@ENGINES.register("openai")
class OpenAIEngine:
    name: ClassVar[str] = "openai"
    Options: ClassVar[type[OpenAIOptions]] = OpenAIOptions

    def __init__(
        self,
        options: OpenAIOptions,
        sampling: SamplingConfig,
        tokenizer: Any,
        *,
        api_key: str | None = None,
        client: Any = None,
        transport: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``options``: the server (``base_url``, ``api_model``: both needed) and how hard it is driven.
        ``client``: an ``httpx.Client`` to use as it is (its timeout and headers are the caller's); else
        one is made with ``transport`` (default: the network), ``options.timeout`` and ``api_key``."""
        import httpx

        if not options.base_url:
            raise EngineError("the openai engine needs a server URL", "pass --base-url http://HOST:PORT/v1")
        if not options.api_model:
            raise EngineError("the openai engine needs the model name the server serves",
                              "pass --api-model NAME (or set OpenAIOptions.api_model)")
        self.base_url = options.base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.api_model = options.api_model
        self.s = sampling
        self.tok = tokenizer
        self.concurrency = max(1, int(options.concurrency))
        self.n_per_request = int(options.n_per_request)
        self.retries = int(options.retries)
        self.sleep = sleep
        if client is None:
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            client = httpx.Client(timeout=options.timeout, headers=headers, transport=transport)
        self.client = client
        self.check_server()

    # ---------------------------------------------------------------- registry glue
    @classmethod
    def identity(cls, options: OpenAIOptions, setup: EngineSetup) -> dict[str, Any]:
        return {"name": cls.name, "version": "v1-completions", **options.card(), "api_model": options.api_model or setup.model}

    @classmethod
    def create(cls, options: OpenAIOptions, setup: EngineSetup) -> OpenAIEngine:
        return cls(options.replace(api_model=options.api_model or setup.model), setup.sampling, setup.tokenizer,
                   api_key=os.environ.get("OPENAI_API_KEY"))

    # ---------------------------------------------------------------- HTTP
    def check_server(self) -> None:
        import httpx

        try:
            r = self.client.get(f"{self.base_url}/models", timeout=10.0)
        except httpx.HTTPError as e:
            raise EngineError(
                f"cannot reach the OpenAI-compatible server at {self.base_url} ({type(e).__name__})",
                "start the server (e.g. `vllm serve MODEL`) or fix --base-url",
            ) from None
        if r.status_code >= 400:
            raise EngineError(
                f"{self.base_url}/models answered HTTP {r.status_code}: {server_message(r)}", "check --base-url and the API key"
            )

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST one completion; transient failures (connection errors, timeouts, HTTP 408/429/5xx)
        are retried ``retries`` times with exponential backoff (1, 2, 4, ... s, at most 30 s)."""
        from tenacity import (
            RetryError,
            Retrying,
            retry_if_exception_type,
            stop_after_attempt,
            wait_exponential,
        )

        retrying = Retrying(stop=stop_after_attempt(self.retries + 1), wait=wait_exponential(min=1, max=30),
                            retry=retry_if_exception_type(_Transient), sleep=self.sleep)
        try:
            return retrying(self._post_once, body)
        except RetryError as e:
            err = e.last_attempt.exception()
            raise EngineError(
                f"completion request failed after {self.retries + 1} attempts ({err})",
                "check the server's health and logs, then rerun (finished samples are kept)",
            ) from None

    def _post_once(self, body: dict[str, Any]) -> dict[str, Any]:
        """One POST: the response object, :class:`_Transient` for a failure worth another try, or an
        :class:`EngineError` for one that is not."""
        import httpx

        try:
            r = self.client.post(f"{self.base_url}/completions", json=body)
        except httpx.HTTPError as e:  # connection refused / reset, timeouts: worth another try
            raise _Transient(f"{type(e).__name__}: {str(e).splitlines()[0][:120]}" if str(e) else type(e).__name__) from None
        if r.status_code >= 400:
            err = f"HTTP {r.status_code}: {server_message(r)}"
            if r.status_code in _RETRY_STATUS:
                raise _Transient(err)
            raise EngineError(
                f"the server rejected a completion request ({err})",
                "check --api-model and the sampling parameters the server supports",
            )
        try:
            data = r.json()
        except ValueError:
            data = None
        if isinstance(data, dict):
            return data
        raise EngineError(
            f"the server answered HTTP {r.status_code} with a body that is not a JSON object: {server_message(r)}",
            "check that --base-url points at an OpenAI-compatible API (ending in /v1)",
        )

    def _body(self, prompt: str, n: int, seed: int) -> dict[str, Any]:
        s = self.s
        body: dict[str, Any] = {
            "model": self.api_model,
            "prompt": prompt,
            "n": n,
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "seed": seed,
            "return_token_ids": True,  # vLLM extension; ignored by servers that do not know it
        }
        # Extensions vLLM, SGLang and llama.cpp accept; sent only when they change anything.
        if s.frequency_penalty:
            body["frequency_penalty"] = s.frequency_penalty
        if s.presence_penalty:
            body["presence_penalty"] = s.presence_penalty
        if s.top_k > 0:
            body["top_k"] = s.top_k
        if s.min_p > 0:
            body["min_p"] = s.min_p
        if s.repetition_penalty != 1.0:
            body["repetition_penalty"] = s.repetition_penalty
            body["repeat_penalty"] = s.repetition_penalty  # llama.cpp's name
        return body

    def _run_group(self, jobs: list[Job]) -> list[Result]:
        head = jobs[0]
        data = self._post(self._body(head.prompt_text, len(jobs), head.seed))
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != len(jobs):
            raise EngineError(
                f"asked for n={len(jobs)} samples, the server returned {len(choices)}",
                "use --n-per-request 1 for servers that ignore n",
            )
        out = []
        for job, ch in zip(jobs, choices, strict=True):
            text = ch.get("text") or ""
            ids = ch.get("token_ids")
            if ids is None:
                ids = self.tok(text, add_special_tokens=False)["input_ids"]
            ids = [int(t) for t in ids if int(t) != self.tok.eos_token_id]
            fr = ch.get("finish_reason")
            stop = "length" if fr == "length" else "eos"
            if stop == "length":
                ids = ids[: self.s.max_new_tokens]
            out.append(Result(job.prompt_id, job.sample_idx, tuple(ids), stop, text, job.seed))
        return out

    def _groups(self, jobs: Iterator[Job]) -> Iterator[list[Job]]:
        for _, grp in groupby(jobs, key=lambda j: j.prompt_id):
            g = list(grp)
            size = self.n_per_request if self.n_per_request > 0 else len(g)
            for i in range(0, len(g), size):
                yield g[i : i + size]

    def generate(self, jobs: Iterator[Job]) -> Iterator[Result]:
        groups = self._groups(jobs)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            pending: set[Future[list[Result]]] = set()
            try:
                for g in groups:
                    pending.add(pool.submit(self._run_group, g))
                    if len(pending) >= self.concurrency:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for f in done:
                            yield from f.result()
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        yield from f.result()
            finally:
                for f in pending:
                    f.cancel()

    def close(self) -> None:
        self.client.close()
