"""A push consumer's delivery of a message leaves the gateway before the message's PubAck,
as with nats-server (clients and their tests count on it: nats.py's ordered consumer test,
slow-consumer limits per subscription), while a slow subscriber never holds PubAcks long."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from rayjet.gateway import publishing, pushing
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


def test_each_delivery_precedes_its_puback(gateway, stream_name, drop_new_streams,  # noqa: F811
                                           monkeypatch):
    # a generous hold: on a loaded machine a delivery still comes first
    monkeypatch.setattr(publishing, "PUSH_HOLD", 10.0)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        js_ = nc.jetstream()
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            got: list[bytes] = []

            async def cb(m):
                got.append(m.data)

            sub = await js_.subscribe(f"{stream_name}.>", cb=cb)
            other = await js_.subscribe(f"{stream_name}.b", cb=cb)  # filtered: not held
            seen = []
            for i in range(60):
                await js_.publish(f"{stream_name}.a", b"%d" % i)
                # the delivery was read before the PubAck: received or queued already
                seen.append(len(got) + sub.pending_msgs >= i + 1)
            await other.unsubscribe()
            return seen
        finally:
            await nc.close()

    assert all(asyncio.run(run()))


def test_a_stalled_push_subscriber_does_not_hold_pubacks(gateway, stream_name,  # noqa: F811
                                                         drop_new_streams,  # noqa: F811
                                                         monkeypatch):
    """A consumer that cannot deliver (max_ack_pending reached) holds a PubAck once at most
    for PUSH_HOLD, then no more until it delivers again."""
    monkeypatch.setattr(publishing, "PUSH_HOLD", 0.5)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        js_ = nc.jetstream()
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])

            async def never_acks(m):
                pass

            await js_.subscribe(f"{stream_name}.>", cb=never_acks, manual_ack=True,
                                config=nats.js.api.ConsumerConfig(max_ack_pending=2))
            started = time.monotonic()
            for i in range(40):
                await js_.publish(f"{stream_name}.a", b"%d" % i)
            return time.monotonic() - started
        finally:
            await nc.close()

    # 40 publishes held 0.5 s each would take 20 s; at most a few holds may time out
    assert asyncio.run(run()) < 5 * publishing.PUSH_HOLD + 4


@pytest.mark.parametrize("filters,subject,held", [
    ({}, "s.a", True), ({"filter_subject": "s.b"}, "s.a", False),
    ({"filter_subjects": ["s.x", "s.*"]}, "s.a", True)])
def test_holds_follow_the_consumer_filter(filters, subject, held):
    class Interest:
        def has_interest(self, subject):
            return True

    class Gateway:
        interest = Interest()

    class Bridge:
        gateway = Gateway()

    pump = pushing.PushPump(Bridge(), "S", "C", {"deliver_subject": "d", **filters})
    assert pump.holds_for(subject) is held
