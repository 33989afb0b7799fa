"""The gateway's publishes go from its event loop to each stream's leader (StreamLink):
they follow streams re-created, re-subjected and re-led under them."""

from __future__ import annotations

import asyncio
import time

import nats
import nats.js.errors
import pytest

from rayjet.actors import direct
from rayjet.api import StreamConfig
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


def _pool_calls(gw) -> list[str]:
    """The names of the blocking calls the gateway's bridge runs in its pool from now on."""
    calls: list[str] = []
    real_call = gw.gateway.bridge.call

    async def counting(fn, *args, **kwargs):
        calls.append(getattr(fn, "__name__", fn))
        return await real_call(fn, *args, **kwargs)

    gw.gateway.bridge.call = counting
    return calls


def test_publishes_reach_the_leader_from_the_gateways_loop(gateway, js, stream_name,  # noqa: F811
                                                          drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    gw = gateway()
    pool_calls = _pool_calls(gw)

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        # a new replica publishes its address a moment after it starts (actor calls
        # until then): publish until one goes over the data plane
        warm = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            before = direct.stats()
            warm.append(await jsc.publish(f"{stream_name}.a", b"warm"))
            after = direct.stats()  # (the catalogue's requests count as direct too)
            if after["direct"] > before["direct"] and after["not_direct"] == before["not_direct"]:
                break
        before = direct.stats()["direct"]
        acks = [await jsc.publish(f"{stream_name}.a", b"%d" % i) for i in range(30)]
        after = direct.stats()["direct"]
        await nc.close()
        return [*warm, *acks], after - before

    acks, direct_requests = asyncio.run(run())
    assert [a.seq for a in acks] == list(range(1, len(acks) + 1))
    assert pool_calls == ["stream_link"]  # looked up once; no publish took a pool thread
    assert direct_requests >= 30, direct.stats()  # each publish a data-plane request
    assert js.get_msg(stream_name, len(acks)).data == b"29"


def test_a_stream_deleted_and_made_again_through_the_gateway_takes_the_next_publish(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        await jsc.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
        first = await jsc.publish(f"{stream_name}.a", b"old")
        await jsc.delete_stream(stream_name)
        await jsc.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3)
        again = await jsc.publish(f"{stream_name}.a", b"new", timeout=5)
        await nc.close()
        return first, again

    first, again = asyncio.run(run())
    assert first.seq == 1 and again.seq == 1
    info = js.stream_info(stream_name)
    assert info.config.num_replicas == 3 and info.state.messages == 1
    assert js.get_msg(stream_name, 1).data == b"new"


def test_a_subject_moved_to_another_stream_under_the_gateway_lands_there(
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    a, b = f"{stream_name}A", f"{stream_name}B"
    js.add_stream(name=a, subjects=[f"{a}.>", f"{stream_name}.moving"])
    js.add_stream(name=b, subjects=[f"{b}.>"])
    gw = gateway()

    async def publish(subject: str, data: bytes):
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        ack = await nc.jetstream().publish(subject, data, timeout=5)
        await nc.close()
        return ack

    assert asyncio.run(publish(f"{stream_name}.moving", b"1")).stream == a
    # the Python API moves the subject: the gateway may still hold the old catalogue
    js.update_stream(StreamConfig(name=a, subjects=[f"{a}.>"]))
    js.update_stream(StreamConfig(name=b, subjects=[f"{b}.>", f"{stream_name}.moving"]))
    ack = asyncio.run(publish(f"{stream_name}.moving", b"2"))
    assert (ack.stream, ack.seq) == (b, 1)
    assert js.stream_info(a).state.messages == 1
    assert js.get_msg(b, 1).data == b"2"


def test_direct_gets_are_answered_from_the_gateways_loop(gateway, js, stream_name,  # noqa: F811
                                                         drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], allow_direct=True)
    js.publish_batch([(f"{stream_name}.{k}", b"%s%d" % (k.encode(), i))
                      for i in range(3) for k in ("a", "b")])
    gw = gateway()
    pool_calls = _pool_calls(gw)

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        by_seq = await jsc.get_msg(stream_name, seq=2, direct=True)
        last = await jsc.get_last_msg(stream_name, f"{stream_name}.a", direct=True)
        nxt = await jsc.get_msg(stream_name, seq=3, next=True, subject=f"{stream_name}.b",
                                direct=True)
        with pytest.raises(nats.js.errors.NotFoundError):
            await jsc.get_msg(stream_name, seq=99, direct=True)
        await nc.close()
        return by_seq, last, nxt

    by_seq, last, nxt = asyncio.run(run())
    assert (by_seq.seq, by_seq.data) == (2, b"b0")
    assert (last.seq, last.data) == (5, b"a2")
    assert (nxt.seq, nxt.data) == (4, b"b1")
    assert pool_calls == ["stream_link"]


@pytest.mark.parametrize("drop", ["stream", "consumer"])
def test_a_pull_right_after_its_consumer_is_made_again_gets_the_new_messages(
        gateway, js, stream_name, drop_new_streams, drop):  # noqa: F811
    """The gateway keeps its links to consumers: a stream (or consumer) deleted and made
    again under the same names is served by the new consumer from the next pull on."""
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        jsc = nc.jetstream()
        await jsc.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
        await jsc.add_consumer(stream_name, durable_name="C", ack_policy="explicit")
        await jsc.publish(f"{stream_name}.a", b"old")
        sub = await jsc.pull_subscribe_bind("C", stream_name)
        old = await sub.fetch(1, timeout=5)
        await old[0].ack()
        if drop == "stream":
            await jsc.delete_stream(stream_name)
            await jsc.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
        else:
            await jsc.delete_consumer(stream_name, "C")
        await jsc.add_consumer(stream_name, durable_name="C", ack_policy="explicit")
        await jsc.publish(f"{stream_name}.a", b"new")
        start = time.monotonic()
        new = await sub.fetch(1, timeout=5)
        took = time.monotonic() - start
        await nc.close()
        return [m.data for m in old], [m.data for m in new], took

    old, new, took = asyncio.run(run())
    assert old == [b"old"]
    assert new == ([b"new"] if drop == "stream" else [b"old"])  # the new consumer starts over
    assert took < 2, took
