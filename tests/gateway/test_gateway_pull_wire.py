"""Pull requests through the gateway on the wire as nats-server 2.15.1 answers them: the
same raw requests sent with nats.py to a nats-server started here and to the gateway."""

from __future__ import annotations

import asyncio
import contextlib

import nats
import pytest

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


async def _answers(nc, subject: str, body: bytes, wait: float, *,
                   until_status: bool = False) -> list:
    """What a pull's reply subject gets within ``wait`` seconds: each message's data, each
    status as its headers (``until_status``: up to the first status that ends it)."""
    inbox = nc.new_inbox()
    got: list = []
    ended = asyncio.Event()

    async def take(msg):
        status = msg.headers and "Status" in msg.headers
        got.append({str(k): v for k, v in msg.headers.items()} if status
                   else msg.data.decode())
        if status and msg.headers["Status"] != "100":
            ended.set()

    sub = await nc.subscribe(inbox, cb=take)
    await nc.publish(subject, body, reply=inbox)
    if until_status:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), wait)
    else:
        await asyncio.sleep(wait)
    await sub.unsubscribe()
    return got


def test_a_pull_to_a_consumer_or_stream_that_does_not_exist(gateway, nats_server,  # noqa: F811
                                                           stream_name,  # noqa: F811
                                                           drop_new_streams):  # noqa: F811
    """nats-server has nobody listening on such a pull's subject: no responders (503)."""
    gw = gateway()

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            # a missing consumer's answer: at once from nats-server, once the gateway
            # learnt the consumer is missing from it
            out = [await _answers(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.NOPE",
                                  b'{"batch":1,"expires":500000000}', 10, until_status=True),
                   await _answers(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}X.NOPE",
                                  b'{"batch":1,"no_wait":true}', 10, until_status=True)]
            await js_.delete_stream(stream_name)
            return out
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert [a[0]["Status"] for a in expected] == ["503", "503"], expected
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected


def test_a_pulls_idle_heartbeats_say_the_last_delivered_sequences(
        gateway, nats_server, stream_name, drop_new_streams):  # noqa: F811
    """nats-server's heartbeats to a waiting pull carry the consumer's last delivered
    consumer and stream sequences (Nats-Last-Consumer, Nats-Last-Stream)."""
    gw = gateway()
    pull = b'{"batch":2,"expires":1000000000,"idle_heartbeat":300000000}'

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.C"
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            await js_.add_consumer(stream_name, durable_name="C", ack_policy="explicit",
                                   filter_subject=f"{stream_name}.a")
            before = await _answers(nc, subject, pull, 1.3)
            await js_.publish(f"{stream_name}.b", b"other")
            await js_.publish(f"{stream_name}.a", b"m")
            after = await _answers(nc, subject, pull, 1.3)
            await js_.delete_stream(stream_name)
            return [before, after]
        finally:
            await nc.close()

    def beats(answers: list) -> list:
        return [(a["Nats-Last-Consumer"], a["Nats-Last-Stream"]) for a in answers
                if isinstance(a, dict) and a.get("Status") == "100"]

    expected = asyncio.run(observe(nats_server.url))
    assert set(beats(expected[0])) == {("0", "0")}, expected
    assert expected[1][0] == "m" and set(beats(expected[1])) == {("1", "2")}, expected
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert [set(beats(g)) for g in got] == [set(beats(e)) for e in expected], got
    assert got[1][0] == "m", got
