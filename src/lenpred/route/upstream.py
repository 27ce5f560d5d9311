"""The router's requests to other servers (its backends, the prediction service, health checks), on one
aiohttp client session: keep-alive connections pooled per host, bodies relayed as they arrive, and
aiohttp's errors turned into the three kinds the router acts on.

Why aiohttp: relaying a token stream is one small read and one small write per token, so with hundreds
of streams the client's per-read cost is a large part of the router's CPU; aiohttp's parser is compiled
and its pool hands out a connection without scanning the others (the clients compared, with
``benchmarks/bench_router.py overhead``: docs/route.md, "Measured").

Errors are :class:`UpstreamError` with ``kind``: ``connect`` (refused, unreachable, connect timeout),
``timeout`` (nothing read for ``read_s``) or ``broken`` (the connection closed, or the answer is not
HTTP). A request whose connection closes before any of its answer arrived (typically a kept-alive
connection that the server closed while idle) is resent once, as aiohttp itself does for idempotent
methods (RFC 9112, 9.3.1); idle connections are dropped after ``keepalive_s`` (4 s), before uvicorn's
default keep-alive of 5 s (vLLM, SGLang and llama-cpp-python serve on uvicorn; llama.cpp's own server
also keeps 5 s), so that race is rare to begin with.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

__all__ = ["Client", "UpstreamError", "UpstreamResponse"]


class UpstreamError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _kind(e: BaseException) -> UpstreamError:
    """An aiohttp error (or an OSError under it) as an :class:`UpstreamError`."""
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return UpstreamError("connect", f"no connection within the connect timeout ({e})")
    if isinstance(e, aiohttp.ClientConnectorError):
        return UpstreamError("connect", f"{type(e.os_error).__name__}: {e.os_error.strerror or e.os_error}")
    if isinstance(e, aiohttp.ServerTimeoutError):
        return UpstreamError("timeout", "nothing read within the read timeout")
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return UpstreamError("broken", "the connection closed before the answer ended")
    if isinstance(e, aiohttp.ClientPayloadError):
        if "not completed" in str(e):  # the connection ended in the middle of the body
            return UpstreamError("broken", "the connection closed before the answer ended")
        return UpstreamError("broken", f"the answer's body is malformed ({e})")
    if isinstance(e, aiohttp.ClientResponseError | HttpProcessingError):  # the parser refused the answer
        return UpstreamError("broken", f"the answer is not valid HTTP/1.x ({e.message})".replace("\n", " "))
    return UpstreamError("broken", f"the connection broke ({type(e).__name__}: {e})")


class UpstreamResponse:
    """Status, headers and the body of one answer; ``close()`` returns the connection to the pool when the
    body was read to its end, and closes it otherwise (a stream the client left, a broken answer)."""

    __slots__ = ("_r", "status", "headers", "_closed", "__weakref__")

    def __init__(self, r: aiohttp.ClientResponse, closed: asyncio.Future[None] | None) -> None:
        self._r = r
        self.status: int = r.status
        self.headers: Mapping[str, str] = r.headers  # case-insensitive
        self._closed = closed
        if closed is not None:
            closed.add_done_callback(self._lost)

    def _lost(self, _fut: asyncio.Future[None]) -> None:
        """The connection is gone while the body is still being read. Normally aiohttp has told the body
        already; but when its compiled parser refuses a piece of the body (a malformed chunk size after the
        headers) it closes the connection without doing so and drops the read timeout, and the read would
        wait for ever. End the read here instead."""
        content = self._r.content
        if not content.is_eof() and content.exception() is None:
            content.set_exception(UpstreamError("broken", "the connection closed before the answer ended "
                                                          "(the body was not valid HTTP/1.1)"))

    async def chunks(self) -> AsyncIterator[bytes]:
        """Pieces of the body as they arrive (de-chunked)."""
        while data := await self.next_chunk():
            yield data

    async def next_chunk(self) -> bytes:
        """The next piece of the body as it arrives (de-chunked); ``b""`` at its end. The relay's loop calls
        this directly: one awaitable per piece, where an async generator over it costs a second one."""
        try:
            return await self._r.content.readany()
        except UpstreamError:
            raise
        except (aiohttp.ClientError, HttpProcessingError, OSError) as e:
            raise _kind(e) from None

    async def read(self, limit: int = 8 * 1024 * 1024) -> bytes:
        parts, n = [], 0
        async for p in self.chunks():
            parts.append(p)
            n += len(p)
            if n > limit:
                raise UpstreamError("broken", f"the answer is larger than {limit} bytes")
        return b"".join(parts)

    def close(self) -> None:
        if self._closed is not None:
            self._closed.remove_done_callback(self._lost)
            self._closed = None
        if self._r.content.is_eof():
            self._r.release()
        else:
            self._r.close()


class Client:
    """One aiohttp session for every request the router sends (start it inside the running loop)."""

    def __init__(self, connect_s: float, keepalive_s: float = 4.0) -> None:
        self.connect_s = connect_s
        self.keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()  # connections whose end is observed

    async def start(self) -> None:
        if self._session is None:
            # the router limits requests per backend itself (max_outstanding): no second limit in the pool
            conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=self.keepalive_s)
            self._session = aiohttp.ClientSession(connector=conn, cookie_jar=aiohttp.DummyCookieJar(),
                                                  timeout=self._timeout(None), trust_env=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _timeout(self, read_s: float | None) -> aiohttp.ClientTimeout:
        t = self._timeouts.get(read_s)
        if t is None:
            t = self._timeouts[read_s] = aiohttp.ClientTimeout(total=None, connect=self.connect_s, sock_read=read_s)
        return t

    async def request(self, method: str, url: str | URL, headers: Iterable[tuple[str, str]] = (),
                      body: bytes | None = None, read_s: float | None = None) -> UpstreamResponse:
        """Send a request and read the status and headers (the body is read from the response).
        ``read_s``: the longest silence allowed, before the answer and between two pieces of it (None: no
        limit; the caller bounds the whole request)."""
        if self._session is None:
            raise RuntimeError("the upstream client is not started")
        kw: dict[str, Any] = {"headers": list(headers), "data": body, "timeout": self._timeout(read_s),
                              "allow_redirects": False}
        try:
            try:
                r = await self._session.request(method, url, **kw)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                if isinstance(e, aiohttp.ClientConnectorError):
                    raise
                r = await self._session.request(method, url, **kw)  # once: a kept-alive connection went stale
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, OSError) as e:
            raise _kind(e) from None
        except TimeoutError:  # a read timeout before the headers (aiohttp's subclass of TimeoutError)
            raise UpstreamError("timeout", f"no answer within {read_s:g} s") from None
        return UpstreamResponse(r, self._closed_future(r))

    def _closed_future(self, r: aiohttp.ClientResponse) -> asyncio.Future[None] | None:
        """The future that ends with ``r``'s connection, while its body is still to be read (else None)."""
        conn = r.connection
        proto = conn.protocol if conn is not None else None
        if proto is None or r.content.is_eof():
            return None
        fut = proto.closed
        if fut is not None and proto not in self._watched:  # asking creates it: see that its error is read
            self._watched.add(proto)
            fut.add_done_callback(_retrieve)
        return fut

    async def post(self, url: str | URL, headers: Iterable[tuple[str, str]], body: bytes,
                   read_s: float | None) -> UpstreamResponse:
        return await self.request("POST", url, headers, body, read_s)

    async def get(self, url: str | URL, read_s: float | None) -> UpstreamResponse:
        return await self.request("GET", url, (), None, read_s)


def _retrieve(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
