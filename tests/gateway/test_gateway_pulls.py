"""Pull requests through the gateway: heartbeats go only to pulls that wait."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import nats
import pytest

from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

SLOW_PULL = 0.4  # longer than the heartbeat interval the requests ask for


def _slow_pulls(gw) -> None:
    """Every pull the gateway's bridge runs takes SLOW_PULL longer, as on a loaded machine."""
    real_call = gw.gateway.bridge.call

    async def slow(fn, *args, **kwargs):
        if getattr(fn, "__name__", "") == "pull":
            await asyncio.sleep(SLOW_PULL)
        return await real_call(fn, *args, **kwargs)

    gw.gateway.bridge.call = slow


async def _pull(port: int, stream: str, request: dict, until: int, wait: float) -> list:
    """Send one raw pull request; what reaches its inbox, in order: a message's stream
    sequence (int), a status's code (str), until ``until`` messages or ``wait`` seconds."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    got: list = []
    done = asyncio.Event()

    async def on_msg(msg):
        status = msg.headers.get("Status") if msg.headers else None
        got.append(status or int(msg.reply.split(".")[5]))
        if sum(isinstance(g, int) for g in got) >= until:
            done.set()

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_msg)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.C", json.dumps(request).encode(),
                     reply=inbox)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), wait)
    await nc.close()
    return got


def test_a_no_wait_pull_gets_its_messages_and_no_heartbeat(gateway, js, stream_name,  # noqa: F811
                                                           drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.m", b"%d" % i) for i in range(5)])
    js.add_consumer(stream_name, durable_name="C")
    gw = gateway()
    _slow_pulls(gw)
    request = {"batch": 3, "no_wait": True, "expires": 2_000_000_000,
               "idle_heartbeat": 100_000_000}
    got = asyncio.run(_pull(gw.port, stream_name, request, until=3, wait=5))
    # nats.py's fetch reads a heartbeat ahead of the messages as "none there" and pulls
    # again, so the consumer delivers twice the batch
    assert got[:3] == [1, 2, 3], got
    assert "100" not in got, got


def test_a_pull_whose_heartbeat_is_half_its_expiry_is_served(gateway, js, stream_name,  # noqa: F811
                                                             drop_new_streams):  # noqa: F811
    """The JavaScript client's consume() and fetch() ask for heartbeats of exactly half the
    expiry, which nats-server accepts (it refuses more than half)."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.publish_batch([(f"{stream_name}.m", b"%d" % i) for i in range(2)])
    js.add_consumer(stream_name, durable_name="C")
    gw = gateway()
    request = {"batch": 3, "expires": 2_000_000_000, "idle_heartbeat": 1_000_000_000}
    got = asyncio.run(_pull(gw.port, stream_name, request, until=3, wait=1.0))
    assert got[:2] == [1, 2], got  # the rest of the batch waits: no 400
    assert "400" not in got, got
    request["idle_heartbeat"] += 1  # over half: refused as nats-server refuses it
    got = asyncio.run(_pull(gw.port, stream_name, request, until=1, wait=1.0))
    assert got == ["400"], got


@pytest.mark.parametrize("no_wait", [False, True], ids=["waiting", "no_wait_with_expiry"])
def test_a_waiting_pull_gets_heartbeats_while_nothing_comes(gateway, js, stream_name,  # noqa: F811
                                                            drop_new_streams,  # noqa: F811
                                                            no_wait):
    """A no-wait pull with an expiry that finds nothing waits for its expiry, as
    nats-server's does (nats.py's fetch counts on the heartbeats meanwhile)."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.add_consumer(stream_name, durable_name="C")
    gw = gateway()
    _slow_pulls(gw)
    request = {"batch": 1, "expires": 1_000_000_000, "idle_heartbeat": 200_000_000,
               "no_wait": no_wait}
    got = asyncio.run(_pull(gw.port, stream_name, request, until=1, wait=3))
    assert got.count("100") >= 2, got  # about one per 0.2 s of a 1 s wait
    assert got[-1] == "408", got  # and the request's end


def test_a_pull_ends_at_its_expiry_though_the_consumer_answers_later(  # noqa: F811
        gateway, js, stream_name, drop_new_streams):  # noqa: F811
    """The 408 leaves at the expiry on the gateway's clock (nats.py's fetch times out
    then, and would take a later 408 for the next fetch's answer); a message the consumer
    decides for the request after that still goes out."""
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    js.add_consumer(stream_name, durable_name="C")
    gw = gateway()
    answered: list[float] = []
    real_call = gw.gateway.bridge.call

    async def late_answers(fn, *args, **kwargs):
        if getattr(fn, "__name__", "") != "pull":
            return await real_call(fn, *args, **kwargs)
        await asyncio.sleep(SLOW_PULL)  # the consumer's answer comes after the expiry
        js.publish(f"{stream_name}.m", b"late")  # and brings a message
        out = await real_call(fn, *args, **kwargs)
        answered.append(time.monotonic())
        return out

    gw.gateway.bridge.call = late_answers
    request = {"batch": 1, "expires": int(SLOW_PULL / 4 * 1e9)}

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        got: list = []
        inbox = nc.new_inbox()

        async def on_msg(msg):
            status = msg.headers.get("Status") if msg.headers else None
            got.append((status or msg.data, bool(answered)))

        await nc.subscribe(inbox, cb=on_msg)
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.C",
                         json.dumps(request).encode(), reply=inbox)
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await nc.close()
        return got

    got = asyncio.run(run())
    assert got[0] == ("408", False), got  # before the consumer answered
    assert got[1] == (b"late", True), got
