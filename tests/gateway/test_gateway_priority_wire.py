"""Pull requests with priority groups through the gateway, as nats-server 2.15.1 answers
them: the same raw ``$JS.API.CONSUMER.MSG.NEXT`` requests (``group``, ``min_pending``,
``min_ack_pending``, ``id``, ``priority``) sent with nats.py to a nats-server started
here and to the gateway; the answers compared with pin ids normalised."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

EXPIRES = 400_000_000  # ns: what a held-back pull waits before its 408


@pytest.fixture(scope="module")
def nats_server():
    with NatsServer() as server:
        yield server


def _answer(msg) -> object:
    """A message's data, or a status as its headers (the pin id kept for the caller)."""
    headers = {str(getattr(k, "value", k)): v for k, v in (msg.headers or {}).items()
               if k not in ("Nats-Time-Stamp",)}
    if "Status" in headers:
        return headers
    if "Nats-Pin-Id" in headers:
        return {"data": msg.data.decode(), "pin": headers["Nats-Pin-Id"]}
    return msg.data.decode()


async def _pull(nc, subject: str, body: dict, timeout: float = 10.0) -> list:
    """What one pull request gets: its messages until the batch is full or a status
    (other than a heartbeat) ends it."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, json.dumps(body).encode(), reply=inbox)
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while sum(not (isinstance(a, dict) and "Status" in a) for a in got) < body["batch"]:
            msg = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.01))
            got.append(_answer(msg))
            if isinstance(got[-1], dict) and got[-1].get("Status", "100") != "100":
                break
    finally:
        await sub.unsubscribe()
    return got


async def _consumer(nc, stream: str, name: str, policy: str, **extra) -> None:
    cfg = {"durable_name": name, "ack_policy": "explicit", "priority_groups": ["A"],
           "priority_policy": policy, **extra}
    reply = await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
                             json.dumps({"stream_name": stream, "config": cfg}).encode(),
                             timeout=20)
    assert "error" not in json.loads(reply.data), reply.data


def _pins(answers: list) -> list:
    """The answers with each pin id replaced by the order it was first seen in."""
    seen: dict[str, str] = {}

    def norm(a):
        if isinstance(a, dict) and "pin" in a:
            return {**a, "pin": seen.setdefault(a["pin"], f"pin{len(seen)}")}
        if isinstance(a, list):
            return [norm(x) for x in a]
        return a

    return [norm(a) for a in answers]


def test_overflow_pinned_and_prioritized_pulls_answer_as_nats_server(
        gateway, nats_server, stream_name, drop_new_streams):  # noqa: F811
    gw = gateway()

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        nxt = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}."
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            for i in range(5):
                await js_.publish(f"{stream_name}.a", b"m%d" % i)
            out = []
            await _consumer(nc, stream_name, "O", "overflow")
            base = {"batch": 1, "expires": EXPIRES}
            for extra in ({}, {"group": "B"}, {"group": "A", "min_pending": 10},
                          {"group": "A", "min_pending": 3}, {"group": "A", "min_ack_pending": 1},
                          {"group": "A", "min_ack_pending": 5}, {"group": "A", "id": "XYZ"},
                          {"group": "A", "priority": 10}, {"group": "A", "min_pending": -1},
                          {"group": "A", "priority": "x"}, {"group": 5}):
                out.append(await _pull(nc, nxt + "O", {**base, **extra}))
            out.append(await _pull(nc, nxt + "O", {"batch": 1, "no_wait": True, "group": "A",
                                                   "min_pending": 10}))
            await _consumer(nc, stream_name, "P", "pinned_client",
                            priority_timeout=5_000_000_000)
            first = await _pull(nc, nxt + "P", {"batch": 2, "expires": EXPIRES, "group": "A"})
            out.append(first)
            pin = first[0]["pin"]
            for extra in ({"id": "nope"}, {}, {"id": pin}, {"min_pending": 1}):
                out.append(await _pull(nc, nxt + "P", {**base, "group": "A", **extra}))
            out.append(await _pull(nc, nxt + "P", {"batch": 1, "no_wait": True, "group": "A"}))
            await _consumer(nc, stream_name, "R", "prioritized")
            for extra in ({"priority": 10}, {"priority": -1}, {"priority": 3}):
                out.append(await _pull(nc, nxt + "R", {**base, "batch": 2, "group": "A",
                                                       **extra}))
            await js_.add_consumer(stream_name, durable_name="Z", ack_policy="explicit")
            for extra in ({}, {"min_pending": 1}, {"id": "x"}, {"priority": 2}):
                out.append(await _pull(nc, nxt + "Z", {**base, "group": "A", **extra}))
            await js_.delete_stream(stream_name)
            return _pins(out)
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected[3] == ["m0"] and expected[12][0] == {"data": "m0", "pin": "pin0"}, expected
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected


def test_a_waiting_pull_with_the_lower_priority_number_is_served_first(
        gateway, js, nats_server, stream_name, drop_new_streams):  # noqa: F811
    """prioritized: of two waiting pulls, the message goes to the one with priority 1,
    the other ends with its 408 (on both servers)."""
    gw = gateway()

    async def observe(url: str, waiting) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        nxt = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.R"
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            await _consumer(nc, stream_name, "R", "prioritized")
            body = {"batch": 1, "expires": 3_000_000_000, "group": "A"}
            low = asyncio.ensure_future(_pull(nc, nxt, {**body, "priority": 5}))
            high = asyncio.ensure_future(_pull(nc, nxt, {**body, "priority": 1}))
            deadline = time.monotonic() + 20
            while await waiting(js_) < 2:  # both pulls wait at the consumer
                assert time.monotonic() < deadline and not low.done() and not high.done(), \
                    [low.done() and low.result(), high.done() and high.result()]
                await asyncio.sleep(0.02)
            await js_.publish(f"{stream_name}.a", b"one")
            out = [await high, await low]
            await js_.delete_stream(stream_name)
            return out
        finally:
            await nc.close()

    async def num_waiting(js_) -> int:
        return (await js_.consumer_info(stream_name, "R")).num_waiting

    expected = asyncio.run(observe(nats_server.url, num_waiting))
    assert expected[0] == ["one"] and expected[1][0]["Status"] == "408", expected
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}", num_waiting))
    assert got == expected


def test_after_an_unpin_the_old_pin_gets_423_and_a_standby_is_pinned(
        gateway, js, nats_server, stream_name, drop_new_streams):  # noqa: F811
    """pinned_client: the pinned client and a standby wait; after CONSUMER.UNPIN the next
    message pins the standby, and the old pin's waiting pull ends with 423
    Nats-Wrong-Pin-Id and its pending counts (on both servers)."""
    gw = gateway()

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()
        nxt = f"$JS.API.CONSUMER.MSG.NEXT.{stream_name}.P"
        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            await _consumer(nc, stream_name, "P", "pinned_client",
                            priority_timeout=30_000_000_000)
            await js_.publish(f"{stream_name}.a", b"m0")
            first = await _pull(nc, nxt, {"batch": 1, "expires": EXPIRES, "group": "A"})
            body = {"batch": 2, "expires": 3_000_000_000, "group": "A"}
            pinned = asyncio.ensure_future(_pull(nc, nxt, {**body, "id": first[0]["pin"]}))
            standby = asyncio.ensure_future(_pull(nc, nxt, body))
            deadline = time.monotonic() + 20
            while (await js_.consumer_info(stream_name, "P")).num_waiting < 2:
                assert time.monotonic() < deadline and not pinned.done() and not standby.done()
                await asyncio.sleep(0.02)
            unpin = await nc.request(f"$JS.API.CONSUMER.UNPIN.{stream_name}.P",
                                     b'{"group":"A"}', timeout=20)
            await js_.publish(f"{stream_name}.a", b"m1")
            out = _pins([first, json.loads(unpin.data), await pinned, await standby])
            await js_.delete_stream(stream_name)
            return out
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected[2] == [{"Status": "423", "Description": "Nats-Wrong-Pin-Id",
                            "Nats-Pending-Messages": "2", "Nats-Pending-Bytes": "0"}], expected
    assert expected[3][0] == {"data": "m1", "pin": "pin1"}, expected
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected
