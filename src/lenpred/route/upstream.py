"""A lean HTTP/1.1 client for the router's requests to its backends: keep-alive connections per backend,
bodies relayed as they arrive, timeouts kept by one watchdog instead of a timer per read.

Why not httpx here: relaying a token stream is one small read and one small write per token, and with
hundreds of streams the generic client's per-read machinery (httpcore's pool scan over every connection,
h11's event objects, a cancel scope per read) cost the router more CPU than everything else it does
(measured: benchmarks/bench_router.py overhead). This client does only what the router needs:
``POST`` a JSON body, read the status and headers, then the body (``Content-Length``, chunked, or
until the connection closes), de-chunked, as the bytes come. httpx is still used for health checks and
the prediction service.

Errors are :class:`UpstreamError` with ``kind``: ``connect`` (refused, unreachable, connect timeout),
``timeout`` (nothing read for ``read_s``: the watchdog aborted the connection) or ``broken`` (the
connection closed or the response is not HTTP). A pooled connection that the server had closed while
idle is detected and the request resent on a fresh one, before any byte of the answer was read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

__all__ = ["Upstream", "UpstreamError", "UpstreamResponse", "Watchdog"]

_MAX_HEAD = 64 * 1024


class UpstreamError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Conn:
    __slots__ = ("reader", "writer", "last_io", "deadline_s", "timed_out", "reused")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.last_io = time.monotonic()
        self.deadline_s: float | None = None  # silence allowed while a request is active (None: idle)
        self.timed_out = False
        self.reused = False

    def abort(self) -> None:
        self.timed_out = True
        with contextlib.suppress(Exception):
            self.writer.transport.abort()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Watchdog:
    """Aborts connections that read nothing for longer than their request's ``read_s`` (one task for all)."""

    def __init__(self, tick_s: float = 0.25) -> None:
        self.tick_s = tick_s
        self.active: set[_Conn] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            for c in [c for c in self.active if c.deadline_s is not None and now - c.last_io > c.deadline_s]:
                c.abort()
                self.active.discard(c)


class UpstreamResponse:
    """Status, headers and the body of one answer; ``close()`` returns the connection to the pool when the
    body was read to its end, and closes it otherwise."""

    def __init__(self, up: Upstream, conn: _Conn, status: int, headers: dict[str, str], buf: bytes,
                 head_request: bool = False) -> None:
        self.up, self.conn, self.status, self.headers = up, conn, status, headers
        self._buf = buf
        self.complete = False
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("content-length")
        self._left = int(cl) if cl is not None and cl.isdigit() and not self._chunked else None
        self._keep = headers.get("connection", "").lower() != "close"
        if self._left is None and not self._chunked:
            self._keep = False  # the body ends when the connection does
        if head_request or status in (204, 304) or self._left == 0:
            self.complete, self._buf = True, b""
        # chunked decoder state
        self._size: int | None = None  # bytes left in the current chunk; None: expecting a size line
        self._after_data = False
        self._trailers = False

    async def _more(self) -> bytes:
        c = self.conn
        try:
            data = await c.reader.read(65536)
        except (ConnectionError, OSError) as e:
            raise self._lost(e) from None
        if not data:
            raise self._lost(None)
        c.last_io = time.monotonic()
        return data

    def _lost(self, e: BaseException | None) -> UpstreamError:
        if self.conn.timed_out:
            return UpstreamError("timeout", f"nothing read for {self.conn.deadline_s:g} s")
        what = f" ({type(e).__name__})" if e is not None else ""
        return UpstreamError("broken", f"the connection closed before the answer ended{what}")

    async def chunks(self) -> AsyncIterator[bytes]:
        """Pieces of the body as they arrive (de-chunked)."""
        if self.complete:
            if self._buf:
                yield self._buf
            return
        if not self._chunked:
            buf = self._buf
            self._buf = b""
            while True:
                if buf:
                    if self._left is not None:
                        buf = buf[: self._left]
                        self._left -= len(buf)
                    yield buf
                if self._left == 0:
                    self.complete = True
                    return
                try:
                    buf = await self._more()
                except UpstreamError as e:
                    if self._left is None and e.kind == "broken":  # close-delimited: EOF is the end
                        self.complete = True
                        return
                    raise
        buf = self._buf
        self._buf = b""
        while True:
            out, buf = self._dechunk(buf)
            if out:
                yield out
            if self.complete:
                return
            buf += await self._more()

    def _dechunk(self, buf: bytes) -> tuple[bytes, bytes]:
        """Data out of ``buf`` as far as it goes, and what is left to parse once more bytes come."""
        out = []
        while True:
            if self._trailers:  # after the last chunk: optional trailer lines, then a blank line
                if buf.startswith(b"\r\n") or buf.find(b"\r\n\r\n") >= 0:
                    self.complete = True
                    return b"".join(out), b""
                if len(buf) > 8192:
                    raise UpstreamError("broken", "a malformed chunked body (trailers)")
                break
            if self._after_data:  # the CRLF that ends a chunk's data
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise UpstreamError("broken", "a malformed chunked body")
                buf, self._after_data = buf[2:], False
            if self._size is None:
                i = buf.find(b"\r\n")
                if i < 0:
                    if len(buf) > 1024:
                        raise UpstreamError("broken", "a malformed chunked body (size line)")
                    break
                try:
                    size = int(buf[:i].split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise UpstreamError("broken", "a malformed chunked body (size line)") from None
                buf = buf[i + 2 :]
                if size == 0:
                    self._trailers = True
                    continue
                self._size = size
            take = buf[: self._size]
            if take:
                out.append(take)
                self._size -= len(take)
                buf = buf[len(take) :]
            if self._size:
                break
            self._size, self._after_data = None, True
        return b"".join(out), buf

    async def read(self, limit: int = 8 * 1024 * 1024) -> bytes:
        parts, n = [], 0
        async for p in self.chunks():
            parts.append(p)
            n += len(p)
            if n > limit:
                raise UpstreamError("broken", f"the answer is larger than {limit} bytes")
        return b"".join(parts)

    def close(self) -> None:
        self.up._release(self.conn, reuse=self.complete and self._keep)


class Upstream:
    """Connections to one backend (``http(s)://host:port[/prefix]``)."""

    def __init__(self, url: str, connect_s: float, watchdog: Watchdog, max_idle: int = 256,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        u = urlsplit(url)
        self.host = u.hostname or "127.0.0.1"
        self.tls = u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        self.prefix = u.path.rstrip("/")
        self.hostport = u.netloc
        self.connect_s, self.watchdog, self.max_idle = connect_s, watchdog, max_idle
        self.ssl = (ssl_context or ssl.create_default_context()) if self.tls else None
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_s):
                r, w = await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=_MAX_HEAD,
                                                     server_hostname=self.host if self.tls else None)
        except TimeoutError:
            raise UpstreamError("connect", f"no connection within {self.connect_s:g} s") from None
        except (OSError, ssl.SSLError) as e:
            raise UpstreamError("connect", f"{type(e).__name__}: {e.strerror or e}") from None
        return _Conn(r, w)

    def _take(self) -> _Conn | None:
        while self._idle:
            c = self._idle.pop()
            if c.reader.at_eof() or c.writer.is_closing():
                c.close()
                continue
            c.reused = True
            return c
        return None

    def _release(self, c: _Conn, reuse: bool) -> None:
        self.watchdog.active.discard(c)
        c.deadline_s = None
        if reuse and not c.timed_out and len(self._idle) < self.max_idle and not c.writer.is_closing():
            self._idle.append(c)
        else:
            c.close()

    async def close(self) -> None:
        for c in self._idle:
            c.close()
        self._idle.clear()

    async def post(self, path: str, headers: list[tuple[str, str]], body: bytes, read_s: float) -> UpstreamResponse:
        """Send a POST and read the status and headers (the body is read from the response)."""
        return await self.request("POST", path, headers, body, read_s)

    async def request(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes,
                      read_s: float) -> UpstreamResponse:
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.hostport}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers if k.lower() not in ("host", "content-length", "transfer-encoding")]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + body
        c = self._take()
        if c is not None:
            try:
                return await self._exchange(c, data, read_s, method == "HEAD")
            except UpstreamError as e:
                self._release(c, reuse=False)
                if e.kind != "stale":
                    raise
                # a kept-alive connection the server had closed meanwhile: resend once on a new one
            except BaseException:
                self._release(c, reuse=False)
                raise
        c = await self._connect()
        try:
            return await self._exchange(c, data, read_s, method == "HEAD")
        except BaseException:
            self._release(c, reuse=False)
            raise

    async def _exchange(self, c: _Conn, data: bytes, read_s: float, head_request: bool = False) -> UpstreamResponse:
        c.last_io, c.deadline_s, c.timed_out = time.monotonic(), read_s, False
        self.watchdog.active.add(c)
        try:
            c.writer.write(data)
            await c.writer.drain()
            buf = b""
            while True:
                i = buf.find(b"\r\n\r\n")
                if i >= 0:
                    break
                if len(buf) > _MAX_HEAD:
                    raise UpstreamError("broken", "the answer's headers are larger than 64 KiB")
                chunk = await c.reader.read(65536)
                if not chunk:
                    if c.timed_out:
                        raise UpstreamError("timeout", f"no answer within {read_s:g} s")
                    kind = "stale" if c.reused and not buf else "broken"
                    raise UpstreamError(kind, "the connection closed before an answer")
                c.last_io = time.monotonic()
                buf += chunk
        except (ConnectionError, OSError) as e:
            if c.timed_out:
                raise UpstreamError("timeout", f"no answer within {read_s:g} s") from None
            kind = "stale" if c.reused else "broken"
            raise UpstreamError(kind, f"the connection broke ({type(e).__name__})") from None
        lines = buf[:i].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise UpstreamError("broken", f"the answer is not HTTP/1.x: {lines[0][:60]!r}")
        headers: dict[str, str] = {}
        for ln in lines[1:]:
            k, sep, v = ln.partition(":")
            if sep:
                headers[k.strip().lower()] = v.strip()
        status = int(parts[1])
        if parts[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
            headers["connection"] = "close"
        if 100 <= status < 200:  # an interim answer (100 Continue): not sent for our requests; refuse
            raise UpstreamError("broken", f"an unexpected interim answer {status}")
        return UpstreamResponse(self, c, status, headers, buf[i + 4 :], head_request)
