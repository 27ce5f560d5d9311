"""The router's client for other servers (lenpred.route.upstream, on aiohttp) against scripted raw servers
on loopback: chunked bodies cut anywhere (with extensions and trailers), Content-Length and close-delimited
bodies, keep-alive reuse, a kept-alive connection the server closed under a request (resent once), read
timeouts, and connections that break or answer something that is not HTTP, each as its error kind."""

from __future__ import annotations

import asyncio

import pytest

from lenpred.route.upstream import Client, UpstreamError


class Raw:
    """An asyncio TCP server that answers each request with the next scripted list of byte pieces
    (written with a short pause in between); ``None`` closes the connection, ``"hang"`` sleeps."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0

    async def __aenter__(self) -> Raw:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await r.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                self.requests.append(head + await r.readexactly(n))
                for piece in self.answers.pop(0):
                    if piece is None:
                        w.close()
                        return
                    if piece == "hang":
                        await asyncio.sleep(30)
                    w.write(piece)
                    await w.drain()
                    await asyncio.sleep(0.005)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def _run(coro):
    return asyncio.run(coro)


async def _get(c: Client, url: str, read_s: float = 2.0) -> tuple[int, bytes, list[bytes]]:
    r = await c.post(url + "/v1/x", [("content-type", "application/json")], b"{}", read_s)
    pieces = [p async for p in r.chunks()]
    r.close()
    return r.status, b"".join(pieces), pieces


async def _client() -> Client:
    c = Client(connect_s=1.0)
    await c.start()
    return c


def test_chunked_body_cut_anywhere_then_reused_connection():
    body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n"
    cut = [CHUNKED + body[:3], body[3:9], body[9:20], body[20:]]

    async def go():
        async with Raw(cut, [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]) as srv:
            c = await _client()
            status, data, pieces = await _get(c, srv.url + "/prefix")
            assert (status, data) == (200, b"hello world") and len(pieces) >= 2  # relayed as it came
            status, data, _ = await _get(c, srv.url + "/prefix")
            assert (status, data) == (200, b"ok")
            assert srv.connections == 1  # kept alive and reused
            assert srv.requests[0].startswith(b"POST /prefix/v1/x HTTP/1.1\r\n")
            assert b"Content-Length: 2" in srv.requests[0] and b"content-type: application/json" in srv.requests[0]
            await c.close()

    _run(go())


def test_close_delimited_body_and_http10():
    async def go():
        async with Raw([b"HTTP/1.0 200 OK\r\n\r\npart one, ", b"part two", None]) as srv:
            c = await _client()
            status, data, _ = await _get(c, srv.url)
            assert (status, data) == (200, b"part one, part two")
            await c.close()

    _run(go())


def test_a_closed_keepalive_connection_is_resent_once():
    async def go():
        # answers, then closes the connection as the next request arrives on it (a keep-alive race)
        ok = [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"]
        async with Raw(ok, [None], [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"]) as srv:
            c = await _client()
            assert (await _get(c, srv.url))[1] == b"a"
            assert (await _get(c, srv.url))[1] == b"b"
            assert srv.connections == 2 and len(srv.requests) == 3  # the second one was sent twice
            await c.close()
        async with Raw([None], [None]) as srv:  # a server that always closes: the second failure is an error
            c = await _client()
            with pytest.raises(UpstreamError) as e:
                await _get(c, srv.url)
            assert e.value.kind == "broken" and len(srv.requests) == 2
            await c.close()

    _run(go())


def test_read_timeouts_and_errors_are_kinds():
    async def go():
        c = await _client()
        async with Raw([CHUNKED + b"3\r\nabc\r\n", "hang"]) as srv:
            r = await c.post(srv.url + "/v1/x", [], b"{}", read_s=0.3)
            it = r.chunks().__aiter__()
            assert await it.__anext__() == b"abc"
            with pytest.raises(UpstreamError) as e:
                await it.__anext__()
            assert e.value.kind == "timeout"
            r.close()
        async with Raw(["hang"]) as srv:  # silent before the headers too
            with pytest.raises(UpstreamError) as e:
                await c.post(srv.url + "/v1/x", [], b"{}", read_s=0.3)
            assert e.value.kind == "timeout"
        async with Raw([b"SSH-2.0-OpenSSH\r\n\r\n"]) as srv:
            with pytest.raises(UpstreamError, match="not valid HTTP/1.x") as e:
                await c.post(srv.url + "/v1/x", [], b"{}", 1.0)
            assert e.value.kind == "broken"
        # a malformed chunk size after some data: aiohttp's compiled parser drops the connection without
        # ending the body's read (and stops its read timeout); the client must end it, not wait for ever
        async with Raw([CHUNKED, b"3\r\nabc\r\n", b"zz\r\n"]) as srv:
            r = await c.post(srv.url + "/v1/x", [], b"{}", read_s=30.0)
            it = r.chunks().__aiter__()
            assert await it.__anext__() == b"abc"
            with pytest.raises(UpstreamError) as e:
                await asyncio.wait_for(it.__anext__(), 5.0)
            assert e.value.kind == "broken"
            r.close()
        for answer in ([CHUNKED + b"zz\r\n"], [CHUNKED, b"zz\r\n"], [CHUNKED + b"5\r\nab", None]):
            async with Raw(answer) as srv:  # a malformed or cut chunked body: at the headers or in the body
                with pytest.raises(UpstreamError) as e:
                    r = await c.post(srv.url + "/v1/x", [], b"{}", 1.0)
                    try:
                        await r.read()
                    finally:
                        r.close()
                assert e.value.kind == "broken", answer
        async with Raw([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100]) as srv:
            r = await c.post(srv.url + "/v1/x", [], b"{}", 1.0)
            with pytest.raises(UpstreamError, match="larger than 10 bytes"):
                await r.read(limit=10)
            r.close()
        with pytest.raises(UpstreamError) as e:
            await c.post("http://127.0.0.1:9/v1/x", [], b"{}", 1.0)
        assert e.value.kind == "connect"
        await c.close()

    _run(go())
