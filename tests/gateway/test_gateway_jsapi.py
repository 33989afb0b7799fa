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
