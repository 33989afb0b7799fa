"""The CLI's blocking NATS client (rayjet.remote) against a core-only gateway (no
Ray): finding a gateway, auth, pipelined requests, status replies and typed errors."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import nats
import pytest

from rayjet.errors import (
    AuthorizationError,
    BadRequestError,
    NotFoundError,
    ServiceUnavailableError,
)
from rayjet.gateway import Gateway, GatewayOptions
from rayjet.remote.connection import Requester, find_gateway
from rayjet.remote.jetstream import GatewayJetStream


@pytest.fixture
def core_gateway():
    """start(**options) -> port of a core-only gateway with an echo responder on svc.echo
    (the reply carries the request's headers back, and its payload reversed)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    running: list = []

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    def start(**options):
        async def up():
            gw = Gateway(GatewayOptions(port=0, **options))
            await gw.start()
            creds = {"token": options["token"]} if options.get("token") else {}
            nc = await nats.connect(f"nats://127.0.0.1:{gw.port}", **creds)

            async def echo(msg):
                await msg.respond(msg.data[::-1]) if not msg.headers else \
                    await nc.publish(msg.reply, msg.data[::-1], headers=msg.headers)

            await nc.subscribe("svc.echo", cb=echo)
            await nc.flush()
            running.append((gw, nc))
            return gw.port

        return run(up())

    yield start

    async def down():
        for gw, nc in running:
            await nc.close()
            await gw.stop()

    run(down())
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_finding_a_gateway(core_gateway, monkeypatch):
    port = core_gateway()
    monkeypatch.setenv("RAYJET_GATEWAY", f"nats://127.0.0.1:{port}")
    found = find_gateway(5)
    assert found is not None
    found.close()
    monkeypatch.setenv("RAYJET_GATEWAY", "off")
    assert find_gateway(5) is None
    monkeypatch.setenv("RAYJET_GATEWAY", f"nats://127.0.0.1:{_free_port()}")  # refused
    assert find_gateway(5) is None
    monkeypatch.setenv("RAYJET_GATEWAY", "nats://127.0.0.1:notaport")  # a typed error
    with pytest.raises(BadRequestError, match="invalid gateway URL"):
        find_gateway(5)

    # a NATS server that is not a rayjet gateway is not used
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()

        def greet():
            conn, _ = other.accept()
            conn.sendall(b'INFO {"server_id":"N","go":"go1.24","max_payload":1048576}\r\n')
            conn.recv(100)
            conn.close()

        threading.Thread(target=greet, daemon=True).start()
        monkeypatch.setenv("RAYJET_GATEWAY", f"nats://127.0.0.1:{other.getsockname()[1]}")
        assert find_gateway(5) is None

    # a busy gateway that greets late is still the one used (not a detour to the Ray path)
    with socket.socket() as slow:
        slow.bind(("127.0.0.1", 0))
        slow.listen()

        def greet_late():
            conn, _ = slow.accept()
            time.sleep(1.5)  # the gateway's loop is busy
            conn.sendall(b'INFO {"server_id":"G","go":"rayjet","max_payload":1048576}\r\n')
            got = b""
            while b"PING" not in got:
                got += conn.recv(1000)
            conn.sendall(b"PONG\r\n")
            conn.recv(100)
            conn.close()

        threading.Thread(target=greet_late, daemon=True).start()
        monkeypatch.setenv("RAYJET_GATEWAY", f"nats://127.0.0.1:{slow.getsockname()[1]}")
        late = find_gateway(5)
        assert late is not None
        late.close()


def test_requests_auth_and_statuses(core_gateway):
    port = core_gateway(token="s3cret")
    with pytest.raises(AuthorizationError, match="refused these credentials"):
        Requester(f"nats://wrong@127.0.0.1:{port}")
    nc = Requester(f"nats://s3cret@127.0.0.1:{port}", timeout=5)
    try:
        assert nc.request("svc.echo", b"abc").data == b"cba"
        got = nc.request("svc.echo", b"xy", headers={"K": "v"})
        assert (got.data, got.headers.get("K"), got.status) == (b"yx", "v", 0)
        # pipelined: every reply finds its request, whatever order they come back in
        replies = [nc.send("svc.echo", str(i).encode()) for i in range(200)]
        got_all = nc.replies(replies)
        assert [got_all[r].data for r in replies] == [str(i).encode()[::-1] for i in range(200)]
        assert nc.request("nobody.home").status == 503
    finally:
        nc.close()


def test_jetstream_calls_without_jetstream_are_typed_errors(core_gateway):
    port = core_gateway()
    js = GatewayJetStream(Requester(f"nats://127.0.0.1:{port}", timeout=5))
    try:
        with pytest.raises(ServiceUnavailableError, match="no responders"):
            js.stream_names()
        with pytest.raises(NotFoundError) as err:  # nothing captures it, as the Ray path says
            js.publish("orders.new", b"x")
        assert err.value.err_code == 10059
        answers = js.publish_batch([("a.b", b"1"), ("a.c", b"2")])
        assert [a.err_code for a in answers] == [10059, 10059]
    finally:
        js.close()



def test_the_cli_and_its_nats_client_load_without_ray():
    """A command through a gateway must not pay for importing Ray (the point of it)."""
    import subprocess
    import sys

    code = ("import sys, rayjet.cli.main, rayjet.remote.jetstream; "
            "sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_a_tls_gateway_is_reached_over_tls_with_the_ca_it_is_told(tmp_path, monkeypatch):
    """The CLI's client upgrades to TLS when the gateway's INFO asks for it (or the URL says
    tls://), checks the certificate against RAYJET_GATEWAY_CA, and says which setting to
    fix when it cannot trust it or cannot read the CA file."""
    import ssl

    from tests.gateway.test_gateway_tls import _self_signed

    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    gw = Gateway(GatewayOptions(port=0, tls=server_ctx))
    asyncio.run_coroutine_threadsafe(gw.start(), loop).result(10)
    try:
        monkeypatch.setenv("RAYJET_GATEWAY_CA", str(cert))
        for url in (f"nats://localhost:{gw.port}", f"tls://localhost:{gw.port}"):
            nc = Requester(url, timeout=5)
            try:
                assert nc.request("svc.nobody", b"hi").status == 503  # no responders
            finally:
                nc.close()
        monkeypatch.setenv("RAYJET_GATEWAY_CA", str(tmp_path / "missing.pem"))
        with pytest.raises(BadRequestError, match="RAYJET_GATEWAY_CA"):
            Requester(f"nats://localhost:{gw.port}")
        monkeypatch.delenv("RAYJET_GATEWAY_CA")
        with pytest.raises(ServiceUnavailableError, match="does not trust") as err:
            Requester(f"nats://localhost:{gw.port}")
        assert "RAYJET_GATEWAY_CA" in str(err.value.hint)
    finally:
        asyncio.run_coroutine_threadsafe(gw.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
