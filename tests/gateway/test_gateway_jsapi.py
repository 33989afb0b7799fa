"""``$JS.API`` requests through the gateway answered as nats-server 2.15.1 answers them: the
same requests sent with nats.py to a nats-server started here and to the gateway, what
comes back compared."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


async def _outcome(nc, subject: str, body: bytes = b"", timeout: float = 0.75) -> tuple:
    """What a request gets: ("silent",), ("no responders",) or the answer's type and error
    code."""
    try:
        msg = await nc.request(subject, body, timeout=timeout)
    except NoRespondersError:
        return ("no responders",)
    except NatsTimeout:
        return ("silent",)
    doc = json.loads(msg.data)
    return (doc.get("type"), (doc.get("error") or {}).get("err_code"))


UNSERVED = [
    "$JS.API.NOPE.X", "$JS.API.NOPE", "$JS.API.STREAM.NOPE", "$JS.API.STREAM.INFO",
    "$JS.API.STREAM.INFO.A.B", "$JS.API.CONSUMER.INFO.A", "$JS.API.CONSUMER.NOPE.A.B",
    "$JS.API.STREAM.NAMES.X", "$JS.API.INFO.X", "$JS.API.CONSUMER.DURABLE.CREATE.A",
    "$JS.API.SERVER.REMOVE", "$JS.API.META.RESCUE", "$JS.API.ACCOUNT.PURGE.X",
    "$JS.API.CONSUMER.MSG.NEXT.A", "$JS.API.CONSUMER.MSG.NEXT.A.B.C",
    "$JS.API.STREAM.SNAPSHOT.A", "$JS.API.STREAM.RESTORE.A",
]
# served: answered (an error here, the stream does not exist) with the route's response type
SERVED = [
    "$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.A", "$JS.API.CONSUMER.CREATE.A",
    "$JS.API.CONSUMER.CREATE.A.B", "$JS.API.CONSUMER.CREATE.A.B.C.D",
    "$JS.API.CONSUMER.DURABLE.CREATE.A.B", "$JS.API.CONSUMER.INFO.A.B",
    "$JS.API.CONSUMER.NAMES.A", "$JS.API.STREAM.MSG.GET.A",
]


def test_requests_to_subjects_nats_server_does_not_serve(gateway, nats_server):  # noqa: F811
    """nats-server leaves a request to a ``$JS.API`` subject it has no handler for (an
    unknown one, or a known one with too few or too many tokens) unanswered: the client
    times out. A pull to a subject no consumer can have gets no responders."""
    gw = gateway()

    async def observe(url: str) -> list[tuple]:
        nc = await nats.connect(url)
        try:
            unserved = await asyncio.gather(*(_outcome(nc, s, b"{}") for s in UNSERVED))
            served = await asyncio.gather(*(_outcome(nc, s, b"{}", 10) for s in SERVED))
            return [dict(zip(UNSERVED, unserved)), {s: o[0] for s, o in zip(SERVED, served)}]
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected[0]["$JS.API.NOPE.X"] == ("silent",)  # what nats-server does with it
    assert "silent" not in expected[1].values()
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected


async def _pull_answers(nc, subject: str, body: bytes, wait: float) -> list:
    """Everything a pull request's reply subject gets within ``wait`` seconds: each
    message's data, each status as (code, description, pending messages, pending bytes)."""
    inbox = nc.new_inbox()
    got: list = []

    async def take(msg):
        hdrs = msg.headers or {}
        if "Status" in hdrs:
            got.append((hdrs["Status"], hdrs.get("Description"),
                        hdrs.get("Nats-Pending-Messages"), hdrs.get("Nats-Pending-Bytes")))
        else:
            got.append(msg.data.decode())

    sub = await nc.subscribe(inbox, cb=take)
    await nc.publish(subject, body, reply=inbox)
    await asyncio.sleep(wait)
    await sub.unsubscribe()
    return got


# consumer (a filter that matches nothing: "none") -> its pull request
ZERO_BATCH_PULLS = {
    "none1": b'{"batch":0,"expires":500000000}',
    "none2": b'{"batch":0,"no_wait":true}',
    "none3": b'{"batch":0,"expires":500000000,"no_wait":true}',
    "zero": b'{"batch":0}',
    "nobatch": b'{"expires":500000000}',
    "negative": b'{"batch":-2,"no_wait":true}',
    "text": b"0",
    "textneg": b"-3",
    "bytes": b'{"batch":0,"max_bytes":1000,"expires":500000000}',
    "bytes1": b'{"batch":1,"max_bytes":1000,"expires":500000000}',  # 409 Batch Completed too
}


def test_pulls_with_a_batch_of_zero_or_less(gateway, nats_server, stream_name,  # noqa: F811
                                           drop_new_streams):  # noqa: F811
    """nats-server serves a pull whose batch is 0 (the JavaScript client's ordered consumer
    sends one), negative or missing as a pull for one message, and counts what is still
    owed from the number asked: a 408 says 0 pending messages, a 409 Batch Completed -1."""
    gw = gateway()

    async def observe(url: str) -> dict:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            for i in range(3):
                await js_.publish(f"{stream_name}.a", f"m{i}".encode())
            for name in ZERO_BATCH_PULLS:
                what = "none" if name.startswith("none") else "a"
                await js_.add_consumer(stream_name, durable_name=name, ack_policy="explicit",
                                       filter_subject=f"{stream_name}.{what}")
            answers = await asyncio.gather(*(
                _pull_answers(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.{name}", body, 1.0)
                for name, body in ZERO_BATCH_PULLS.items()))
            await js_.delete_stream(stream_name)
            return dict(zip(ZERO_BATCH_PULLS, answers))
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected["none1"] == [("408", "Request Timeout", "0", "0")]
    assert expected["zero"] == ["m0"] and expected["bytes"][1][:3] == ("409", "Batch Completed",
                                                                     "-1")
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected
