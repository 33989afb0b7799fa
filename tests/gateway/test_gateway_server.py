"""The gateway with real clients: nats.py and raw sockets against a GatewayThread over the
session's rayjet (core routing, auth, bad input, batching of publishes)."""

from __future__ import annotations

import asyncio
import socket

import nats
import pytest
from nats.errors import NoRespondersError

from rayjet.gateway import GatewayOptions, GatewayThread
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gateway(js):  # noqa: F811
    def start(**options):
        gw = GatewayThread(js, GatewayOptions(port=_free_port(), **options))
        gw.start()
        started.append(gw)
        return gw

    started: list[GatewayThread] = []
    yield start
    for gw in started:
        gw.stop()


async def _raw(port: int, data: bytes, read: int = 4096) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()  # INFO
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        while len(out) < read:
            chunk = await asyncio.wait_for(reader.read(read), 2)
            if not chunk:
                break
            out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


def test_core_routing_queue_groups_and_no_responders(gateway):
    gw = gateway()
    url = f"nats://127.0.0.1:{gw.port}"

    async def run():
        a, b = await nats.connect(url), await nats.connect(url)
        plain, workers = [], {"a": 0, "b": 0}

        async def everything(m):
            plain.append(m.subject)

        await a.subscribe("jobs.>", cb=everything)

        async def work_a(m):
            workers["a"] += 1

        async def work_b(m):
            workers["b"] += 1
            if m.reply:
                await m.respond(b"done:" + m.data)

        await a.subscribe("jobs.*", queue="w", cb=work_a)
        await b.subscribe("jobs.*", queue="w", cb=work_b)
        await a.flush()
        await b.flush()
        for i in range(200):
            await b.publish(f"jobs.{i}", b"x")
        await b.flush()
        await a.flush()
        await asyncio.sleep(0.2)
        with pytest.raises(NoRespondersError):
            await a.request("nobody.listens", b"?", timeout=2)
        await a.close()
        await b.close()
        return plain, workers

    plain, workers = asyncio.run(run())
    assert sorted(plain) == sorted(f"jobs.{i}" for i in range(200))
    assert workers["a"] + workers["b"] == 200 and workers["a"] and workers["b"]


def test_bad_input_gets_nats_server_errors(gateway):
    gw = gateway(max_payload=64)
    ok = b'CONNECT {"verbose":true,"headers":true}\r\n'
    out = asyncio.run(_raw(gw.port, ok + b"SUB a..b 1\r\nSUB a.* 2\r\nPUB a.x 2\r\nhi\r\n"
                                   b"PING\r\n"))
    assert b"-ERR 'Invalid Subject'" in out  # the connection stays
    assert out.count(b"+OK") >= 3 and b"MSG a.x 2 2\r\nhi\r\n" in out and b"PONG" in out
    out = asyncio.run(_raw(gw.port, ok + b"PUB a 65\r\n" + b"x" * 65 + b"\r\nPING\r\n"))
    assert b"-ERR 'Maximum Payload Violation'" in out and b"PONG" not in out
    out = asyncio.run(_raw(gw.port, ok + b"NOPE\r\nPING\r\n"))
    assert b"-ERR 'Unknown Protocol Operation'" in out and b"PONG" not in out


@pytest.mark.parametrize("options,good,bad", [
    ({"token": "t0k"}, b'{"auth_token":"t0k"}', b'{"auth_token":"nope"}'),
    ({"user": "u", "password": "p"}, b'{"user":"u","pass":"p"}', b'{"user":"u","pass":"x"}'),
])
def test_auth(gateway, options, good, bad):
    gw = gateway(**options)
    assert b"PONG" in asyncio.run(_raw(gw.port, b"CONNECT " + good + b"\r\nPING\r\n"))
    out = asyncio.run(_raw(gw.port, b"CONNECT " + bad + b"\r\nPING\r\n"))
    assert b"-ERR 'Authorization Violation'" in out and b"PONG" not in out
    out = asyncio.run(_raw(gw.port, b"PING\r\n"))  # nothing before CONNECT
    assert b"-ERR 'Authorization Violation'" in out


def test_publishes_that_arrive_together_leave_in_few_calls(gateway, js, stream_name,  # noqa: F811
                                                           drop_new_streams, monkeypatch):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    calls = []
    real = js.publish_batch

    def counting(msgs, **kw):
        calls.append(len(msgs))
        return real(msgs, **kw)

    monkeypatch.setattr(js, "publish_batch", counting)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        futs = [await jsc.publish_async(f"{stream_name}.{i % 7}", str(i).encode())
                for i in range(500)]
        acks = await asyncio.gather(*futs)
        await nc.close()
        return acks

    acks = asyncio.run(run())
    assert [a.seq for a in acks] == list(range(1, 501))  # in order, each once
    assert sum(calls) == 500 and len(calls) < 100
    msg = js.get_msg(stream_name, 321)
    assert msg.data == b"320" and msg.subject == f"{stream_name}.{320 % 7}"
