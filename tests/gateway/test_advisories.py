"""Advisories on ``$JS.EVENT.ADVISORY.>``: NATS subscribers of a gateway hear the actions
and consumer events of the whole cluster (made from the Python API here), and a stream
capturing them keeps them (dead-letter handling on MAX_DELIVERIES)."""

from __future__ import annotations

import asyncio
import json
import time

import nats

from rayjet import AckPolicy
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401
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


async def _heard_until(heard: list, done, what: str, wait: float = 60.0) -> None:
    deadline = time.monotonic() + wait
    while not done():
        assert time.monotonic() < deadline, f"no {what} within {wait}s: {[m.subject for m in heard]}"
        await asyncio.sleep(0.05)


def test_api_requests_are_audited_once(gateway, js, stream_name):  # noqa: F811
    from rayjet.client import event_hub

    gw = gateway()
    missing = stream_name + "NOPE"

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}", name="auditor")
        heard: list = []

        async def cb(msg):
            heard.append(msg)

        await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=cb)
        await nc.flush()
        info = await nc.request("$JS.API.INFO", b"", timeout=30)
        absent = await nc.request(f"$JS.API.STREAM.INFO.{missing}", b'{"offset":0}', timeout=30)

        def audits():
            return [json.loads(m.data) for m in heard if m.subject == "$JS.EVENT.ADVISORY.API"
                    and json.loads(m.data)["client"]["name"] == "auditor"]

        await _heard_until(heard, lambda: len(audits()) >= 2, "API audits")
        # the hub's copies come back to the gateway after it handed them out: a marker
        # posted to the hub after both arrive there is heard after any second copy would be
        ids = {a["id"] for a in audits()}
        hub = await asyncio.to_thread(event_hub.ensure_event_hub)
        deadline = time.monotonic() + 60
        while True:
            got = await asyncio.to_thread(event_hub.poll, hub, 0, 1.0)
            if ids <= {json.loads(p).get("id") for _, s, p in got["events"]
                       if s == "$JS.EVENT.ADVISORY.API"}:
                break
            assert time.monotonic() < deadline, "the audits never reached the event hub"
            await asyncio.sleep(0.1)
        marker = f"$JS.EVENT.ADVISORY.TEST.{stream_name}"
        await asyncio.to_thread(lambda: hub.post.remote([(marker, b'{"id":"marker"}')]))
        await _heard_until(heard, lambda: any(m.subject == marker for m in heard), "marker")
        await nc.close()
        return info.data, absent.data, audits()

    info, absent, audits = asyncio.run(run())
    assert len(audits) == 2, audits  # once each: the hub's copies were not handed out again
    first, second = audits
    assert first["type"] == "io.nats.jetstream.advisory.v1.api_audit"
    assert first["subject"] == "$JS.API.INFO" and "request" not in first
    assert first["response"].encode() == info
    assert second["subject"] == f"$JS.API.STREAM.INFO.{missing}"
    assert second["request"] == '{"offset":0}' and second["response"].encode() == absent
    assert json.loads(second["response"])["error"]["err_code"] == 10059
    client = first["client"]
    assert client["acc"] == "$G" and client["kind"] == "Client" and client["lang"] == "python3"
    assert client["server"] == gw.options.server_name and client["id"] >= 1
    assert first["server"] == gw.options.server_name and first["timestamp"].endswith("Z")


def test_leader_elected_after_step_downs(gateway, js, stream_name, drop_new_streams):  # noqa: F811
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.>"], num_replicas=3)
    js.add_consumer(s, durable_name="d", num_replicas=3)
    gw = gateway()

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}")
        heard: list = []

        async def cb(msg):
            heard.append(msg)

        await nc.subscribe("$JS.EVENT.ADVISORY.*.LEADER_ELECTED.>", cb=cb)
        await nc.flush()

        async def ask(subject):
            return json.loads((await nc.request("$JS.API." + subject, b"", timeout=30)).data)

        before = (await ask(f"STREAM.INFO.{s}"))["cluster"]["leader"]
        c_before = (await ask(f"CONSUMER.INFO.{s}.d"))["cluster"]["leader"]
        assert (await ask(f"STREAM.LEADER.STEPDOWN.{s}"))["success"] is True
        assert (await ask(f"CONSUMER.LEADER.STEPDOWN.{s}.d"))["success"] is True

        def elected(subject, old):
            return [json.loads(m.data) for m in heard if m.subject == subject
                    and json.loads(m.data)["leader"] != old]

        stream_subject = f"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{s}"
        consumer_subject = f"$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.{s}.d"
        await _heard_until(heard, lambda: elected(stream_subject, before)
                           and elected(consumer_subject, c_before), "leader elected advisories")
        after = (await ask(f"STREAM.INFO.{s}"))["cluster"]["leader"]
        await nc.close()
        return before, after, elected(stream_subject, before), elected(consumer_subject, c_before)

    before, after, streams, consumers = asyncio.run(run())
    stream_adv, consumer_adv = streams[-1], consumers[0]
    assert stream_adv["type"] == "io.nats.jetstream.advisory.v1.stream_leader_elected"
    assert consumer_adv["type"] == "io.nats.jetstream.advisory.v1.consumer_leader_elected"
    assert stream_adv["leader"] == after != before
    assert (stream_adv["stream"], stream_adv["account"]) == (s, "$G")
    assert (consumer_adv["stream"], consumer_adv["consumer"]) == (s, "d")
    for adv in (stream_adv, consumer_adv):
        assert len(adv["replicas"]) == 3 and adv["id"] and adv["timestamp"].endswith("Z")
        assert adv["leader"] in [r["name"] for r in adv["replicas"]]
        for peer in adv["replicas"]:
            assert {"name", "current", "active", "peer"} <= set(peer)
            assert isinstance(peer["active"], int) and isinstance(peer["current"], bool)
