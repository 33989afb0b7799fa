"""Advisories on ``$JS.EVENT.ADVISORY.>``: NATS subscribers of a gateway hear the actions
and consumer events of the whole cluster (made from the Python API here), and a stream
capturing them keeps them (dead-letter handling on MAX_DELIVERIES)."""

from __future__ import annotations

import asyncio
import json
import time

import nats

from rayjet import AckPolicy
from tests.cluster.conftest import js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


def test_subscribers_hear_stream_and_consumer_actions(gateway, js, stream_name):  # noqa: F811
    gw = gateway()
    s = stream_name

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        heard: list = []

        async def cb(msg):
            heard.append(msg)

        await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=cb)
        await nc.flush()
        await asyncio.to_thread(js.add_stream, name=s, subjects=[f"{s}.>"])
        await asyncio.to_thread(js.add_consumer, s, durable_name="D")
        await asyncio.to_thread(js.delete_consumer, s, "D")
        await asyncio.to_thread(js.delete_stream, s)
        want = [f"$JS.EVENT.ADVISORY.STREAM.CREATED.{s}",
                f"$JS.EVENT.ADVISORY.CONSUMER.CREATED.{s}.D",
                f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.{s}.D",
                f"$JS.EVENT.ADVISORY.STREAM.DELETED.{s}"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            mine = [m for m in heard if s in m.subject]
            if len(mine) >= len(want):
                break
            await asyncio.sleep(0.05)
        await nc.close()
        return [m for m in heard if s in m.subject]

    mine = asyncio.run(run())
    assert [m.subject for m in mine] == [
        f"$JS.EVENT.ADVISORY.STREAM.CREATED.{s}",
        f"$JS.EVENT.ADVISORY.CONSUMER.CREATED.{s}.D",
        f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.{s}.D",
        f"$JS.EVENT.ADVISORY.STREAM.DELETED.{s}"]
    bodies = [json.loads(m.data) for m in mine]
    assert [b["type"] for b in bodies] == [
        "io.nats.jetstream.advisory.v1.stream_action",
        "io.nats.jetstream.advisory.v1.consumer_action",
        "io.nats.jetstream.advisory.v1.consumer_action",
        "io.nats.jetstream.advisory.v1.stream_action"]
    assert [b["action"] for b in bodies] == ["create", "create", "delete", "delete"]
    assert all(b["stream"] == s and b["id"] and b["timestamp"].endswith("Z") for b in bodies)
    assert bodies[1]["consumer"] == "D"


def test_a_stream_keeps_max_deliveries_advisories_for_dead_letters(js, stream_name):  # noqa: F811
    s, dlq = stream_name, stream_name + "DLQ"
    js.add_stream(name=dlq, subjects=[f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{s}.>"])
    js.add_stream(name=s, subjects=[f"{s}.>"])
    try:
        js.publish(f"{s}.job", b"poison")
        js.add_consumer(s, durable_name="W", ack_policy=AckPolicy.EXPLICIT, max_deliver=1,
                        ack_wait=0.5)
        sub = js.pull_subscribe(f"{s}.job", durable="W", stream=s)
        [m] = sub.fetch(1, timeout=10)  # delivered once, never acked
        deadline = time.monotonic() + 30
        while js.stream_info(dlq).state.messages < 1:
            assert time.monotonic() < deadline, "no MAX_DELIVERIES advisory was stored"
            time.sleep(0.1)
        stored = js.get_msg(dlq, seq=1)
        body = json.loads(stored.data)
        assert stored.subject == f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{s}.W"
        assert body["type"] == "io.nats.jetstream.advisory.v1.max_deliver"
        assert (body["stream"], body["consumer"], body["stream_seq"]) == (
            s, "W", m.metadata.sequence.stream)
        assert body["deliveries"] == 1
    finally:
        js.delete_stream(s)
        js.delete_stream(dlq)
