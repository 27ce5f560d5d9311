"""The router's lean HTTP/1.1 client (lenpred.route.upstream) against scripted raw servers on loopback:
chunked bodies cut anywhere (with extensions and trailers), Content-Length and close-delimited bodies,
keep-alive reuse, a kept-alive connection the server closed (resent once), the read watchdog, and
connections that break or answer something that is not HTTP."""

from __future__ import annotations

import asyncio

import pytest

from lenpred.route.upstream import Upstream, UpstreamError, Watchdog


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


async def _get(up: Upstream, read_s: float = 2.0) -> tuple[int, bytes, list[bytes]]:
    r = await up.post("/v1/x", [("content-type", "application/json")], b"{}", read_s)
    pieces = [p async for p in r.chunks()]
    r.close()
    return r.status, b"".join(pieces), pieces


def test_chunked_body_cut_anywhere_then_reused_connection():
    body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n"
    cut = [CHUNKED + body[:3], body[3:9], body[9:20], body[20:]]

    async def go():
        async with Raw(cut, [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]) as srv:
            wd = Watchdog()
            wd.start()
            up = Upstream(srv.url + "/prefix", 1.0, wd)
            status, data, _ = await _get(up)
            assert (status, data) == (200, b"hello world")
            status, data, _ = await _get(up)
            assert (status, data) == (200, b"ok")
            assert srv.connections == 1  # kept alive and reused
            assert srv.requests[0].startswith(b"POST /prefix/v1/x HTTP/1.1\r\n") and b"Content-Length: 2" in srv.requests[0]
            await wd.stop()

    _run(go())


def test_close_delimited_body_and_http10():
    async def go():
        async with Raw([b"HTTP/1.0 200 OK\r\n\r\npart one, ", b"part two", None]) as srv:
            wd = Watchdog()
            status, data, _ = await _get(Upstream(srv.url, 1.0, wd))
            assert (status, data) == (200, b"part one, part two")

    _run(go())


def test_a_closed_keepalive_connection_is_resent_once():
    async def go():
        ok = [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", None]  # answers, then closes the idle connection
        async with Raw(ok, [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"]) as srv:
            wd = Watchdog()
            up = Upstream(srv.url, 1.0, wd)
            assert (await _get(up))[1] == b"a"
            await asyncio.sleep(0.05)
            assert (await _get(up))[1] == b"b"
            assert srv.connections == 2

    _run(go())


def test_watchdog_times_out_a_silent_backend_and_errors_are_kinds():
    async def go():
        async with Raw([CHUNKED + b"3\r\nabc\r\n", "hang"]) as srv:
            wd = Watchdog(tick_s=0.05)
            wd.start()
            up = Upstream(srv.url, 1.0, wd)
            r = await up.post("/v1/x", [], b"{}", read_s=0.3)
            it = r.chunks().__aiter__()
            assert await it.__anext__() == b"abc"
            with pytest.raises(UpstreamError) as e:
                await it.__anext__()
            assert e.value.kind == "timeout"
            r.close()
            assert not wd.active
            await wd.stop()
        async with Raw([b"SSH-2.0-OpenSSH\r\n\r\n"]) as srv:
            with pytest.raises(UpstreamError, match="not HTTP/1.x") as e:
                await Upstream(srv.url, 1.0, Watchdog()).post("/v1/x", [], b"{}", 1.0)
            assert e.value.kind == "broken"
        async with Raw([CHUNKED + b"zz\r\n"]) as srv:
            r = await Upstream(srv.url, 1.0, Watchdog()).post("/v1/x", [], b"{}", 1.0)
            with pytest.raises(UpstreamError, match="malformed chunked"):
                await r.read()
        async with Raw([CHUNKED + b"5\r\nab", None]) as srv:
            r = await Upstream(srv.url, 1.0, Watchdog()).post("/v1/x", [], b"{}", 1.0)
            with pytest.raises(UpstreamError, match="closed before the answer ended") as e:
                await r.read()
            assert e.value.kind == "broken"
        with pytest.raises(UpstreamError) as e:
            await Upstream("http://127.0.0.1:9", 1.0, Watchdog()).post("/v1/x", [], b"{}", 1.0)
        assert e.value.kind == "connect"

    _run(go())
