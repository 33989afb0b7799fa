"""JetStream API levels through the gateway as nats-server 2.15.1 answers them: requests
with a ``Nats-Required-Api-Level`` header above the server's level (or not a number) get
error 10185 (412 statuses for pulls and direct gets), and account info says the level."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

LEVEL = "Nats-Required-Api-Level"


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


async def _ask(nc, subject: str, body: bytes, level: str | None) -> object:
    """The one answer to a request: its JSON (error and api level only), or its status."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox, headers={LEVEL: level} if level else None)
    msg = await sub.next_msg(timeout=10)
    await sub.unsubscribe()
    if msg.headers and "Status" in msg.headers:
        return {str(getattr(k, "value", k)): v for k, v in msg.headers.items()}
    if not msg.data.startswith(b"{"):
        return msg.data.decode()
    doc = json.loads(msg.data)
    return {k: doc[k] for k in ("type", "error") if k in doc} | (
        {"level": doc["api"]["level"]} if "api" in doc else {})


def test_required_api_levels_answer_as_nats_server(gateway, nats_server, stream_name,  # noqa: F811
                                                   drop_new_streams):  # noqa: F811
    gw = gateway()

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"],
                                 allow_direct=True)
            await js_.publish(f"{stream_name}.a", b"x")
            await js_.add_consumer(stream_name, durable_name="C", ack_policy="explicit")
            out = []
            for level in (None, "5", "6", "abc", "+1"):
                out.append(await _ask(nc, "$JS.API.INFO", b"", level))
            out.append(await _ask(nc, f"$JS.API.STREAM.INFO.{stream_name}", b"", "6"))
            out.append(await _ask(nc, "$JS.API.STREAM.INFO.NOSUCH", b"", "6"))
            out.append(await _ask(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.C",
                                  b'{"batch":1,"no_wait":true}', "6"))
            missing = await _ask(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.NOPE",
                                 b'{"batch":1,"no_wait":true}', "6")
            out.append(missing["Status"])
            out.append(await _ask(nc, f"$JS.API.DIRECT.GET.{stream_name}", b'{"seq":1}', "9"))
            out.append(await _ask(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.C",
                                  b'{"batch":1,"no_wait":true}', "5"))
            await js_.delete_stream(stream_name)
            return out
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected[0]["level"] == 5 and expected[2]["error"]["err_code"] == 10185, expected
    assert expected[7]["Status"] == "412", expected
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert expected[-1] == "x"  # level 5 is served
    assert got == expected
