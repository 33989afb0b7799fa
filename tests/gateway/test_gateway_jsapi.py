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
    "$JS.API.STREAM.SNAPSHOT", "$JS.API.STREAM.RESTORE.A.B",
]
# served: answered (an error here, the stream does not exist) with the route's response type
SERVED = [
    "$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.A", "$JS.API.CONSUMER.CREATE.A",
    "$JS.API.CONSUMER.CREATE.A.B", "$JS.API.CONSUMER.CREATE.A.B.C.D",
    "$JS.API.CONSUMER.DURABLE.CREATE.A.B", "$JS.API.CONSUMER.INFO.A.B",
    "$JS.API.CONSUMER.NAMES.A", "$JS.API.STREAM.MSG.GET.A", "$JS.API.STREAM.SNAPSHOT.A",
    "$JS.API.STREAM.RESTORE.A",
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


def test_create_and_info_answers_carry_did_create_and_the_api_levels(
        gateway, js, nats_server, stream_name, drop_new_streams):  # noqa: F811
    """nats-server 2.15.1 says ``did_create`` in a stream create's answer and writes the API
    level each stream and consumer needs (``_nats.req.level``) in every config it shows,
    with its version and level (``_nats.ver``, ``_nats.level``) in the answers about one
    stream or consumer; those keys in a request are not kept as the user's metadata."""
    gw = gateway()
    name, ttl = stream_name, stream_name + "T"

    async def observe(url: str) -> dict:
        nc = await nats.connect(url)

        async def ask(subject: str, body: dict | None = None) -> dict:
            payload = json.dumps(body).encode() if body is not None else b""
            doc = json.loads((await nc.request("$JS.API." + subject, payload, timeout=20)).data)
            assert "error" not in doc, (subject, doc)
            return doc

        def seen(doc: dict) -> dict:
            return {"did_create": doc.get("did_create"),
                    "metadata": (doc.get("config") or {}).get("metadata")}

        try:
            plain = {"name": name, "subjects": [f"{name}.>"]}
            with_own = {**plain, "metadata": {"a": "b", "_nats.req.level": "7",
                                              "_nats.ver": "0.0.1"}}
            out = {
                "create": seen(await ask(f"STREAM.CREATE.{name}", plain)),
                "again": seen(await ask(f"STREAM.CREATE.{name}", plain)),
                "update": seen(await ask(f"STREAM.UPDATE.{name}", with_own)),
                "same": seen(await ask(f"STREAM.CREATE.{name}", with_own)),
                "info": seen(await ask(f"STREAM.INFO.{name}")),
                "ttl": seen(await ask(f"STREAM.CREATE.{ttl}", {
                    "name": ttl, "subjects": [f"{ttl}.>"], "allow_msg_ttl": True})),
                "list": sorted((s["config"]["name"], s["config"].get("metadata")) for s in
                               (await ask("STREAM.LIST", {}))["streams"]
                               if s["config"]["name"] in (name, ttl)),
                "consumer": seen(await ask(f"CONSUMER.CREATE.{name}.c", {
                    "stream_name": name, "config": {"durable_name": "c", "ack_policy": "explicit",
                                                    "metadata": {"x": "y", "_nats.level": "1"}}})),
                "paused": seen(await ask(f"CONSUMER.CREATE.{name}.p", {
                    "stream_name": name, "config": {"durable_name": "p", "ack_policy": "explicit",
                                                    "pause_until": "2099-01-01T00:00:00Z"}})),
                "consumer_info": seen(await ask(f"CONSUMER.INFO.{name}.c")),
                "consumer_list": sorted(
                    (c["name"], c["config"].get("metadata")) for c in
                    (await ask(f"CONSUMER.LIST.{name}", {}))["consumers"]),
            }
            for stream in (name, ttl):
                await ask(f"STREAM.DELETE.{stream}")
            return out
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    levels = {"_nats.req.level": "0", "_nats.ver": "2.15.1", "_nats.level": "5"}
    assert expected["create"] == {"did_create": True, "metadata": levels}
    assert expected["info"]["metadata"] == {**levels, "a": "b"}
    assert expected["list"][0][1] == {"_nats.req.level": "0", "a": "b"}
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected

    # what is kept is the user's own metadata only
    js.add_stream(name=name, subjects=[f"{name}.>"])
    asyncio.run(_update_with_levels(gw.port, name))
    assert dict(js.stream_info(name).config.metadata) == {"a": "b"}


async def _update_with_levels(port: int, name: str) -> None:
    """STREAM.UPDATE with the metadata a client read from an info answer."""
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        body = {"name": name, "subjects": [f"{name}.>"],
                "metadata": {"a": "b", "_nats.req.level": "0", "_nats.ver": "2.15.1",
                             "_nats.level": "5"}}
        doc = json.loads((await nc.request(f"$JS.API.STREAM.UPDATE.{name}",
                                           json.dumps(body).encode(), timeout=20)).data)
        assert "error" not in doc, doc
    finally:
        await nc.close()


def test_max_deliver_used_up_leaves_the_ack_floor_where_it_was(
        gateway, js, nats_server, stream_name, drop_new_streams):  # noqa: F811
    """A message that used up max_deliver (2) stays pending past its last delivery's ack
    wait until the consumer next tries to deliver (a pull), then leaves pending; the ack
    floor stays below it (only acks move it), as nats-server 2.15.1 reports; the Python
    API shows the same."""
    from nats.js.api import AckPolicy, ConsumerConfig

    gw = gateway()

    async def observe(url: str) -> list:
        nc = await nats.connect(url)
        js_ = nc.jetstream()

        async def info() -> tuple:
            d = json.loads((await nc.request(f"$JS.API.CONSUMER.INFO.{stream_name}.c", b"",
                                             timeout=10)).data)
            return (d["delivered"]["consumer_seq"], d["delivered"]["stream_seq"],
                    d["ack_floor"]["consumer_seq"], d["ack_floor"]["stream_seq"],
                    d["num_ack_pending"], d["num_redelivered"])

        try:
            await js_.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            await js_.add_consumer(stream_name, ConsumerConfig(
                durable_name="c", ack_policy=AckPolicy.EXPLICIT, max_deliver=2, ack_wait=1.0))
            for i in range(3):
                await js_.publish(f"{stream_name}.a", f"m{i}".encode())
            sub = await js_.pull_subscribe_bind("c", stream_name)
            first = await sub.fetch(3, timeout=5)
            for m in first[1:]:
                await m.ack_sync()
            seen = [[m.metadata.num_delivered for m in first], await info()]
            again = await sub.fetch(3, timeout=5)  # the redelivery, after the ack wait
            seen.append([(m.data.decode(), m.metadata.num_delivered) for m in again])
            await asyncio.sleep(1.5)  # its ack wait ran out again
            seen.append(await info())
            with pytest.raises(NatsTimeout):
                await sub.fetch(1, timeout=1.0)  # the attempt that ends it
            seen.append(await info())
            return seen
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected[3:] == [(4, 3, 0, 0, 1, 1), (4, 3, 0, 0, 0, 1)]
    got = asyncio.run(observe(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected
    i = js.consumer_info(stream_name, "c")
    assert (i.delivered.consumer_seq, i.delivered.stream_seq, i.ack_floor.consumer_seq,
            i.ack_floor.stream_seq, i.num_ack_pending, i.num_redelivered) == expected[-1]


CONSUMER_CREATES = [
    ("durable", "CONSUMER.CREATE.{s}.D1", {"durable_name": "D1", "ack_policy": "explicit"}),
    ("named", "CONSUMER.CREATE.{s}.N1", {"name": "N1", "ack_policy": "explicit"}),
    ("ephemeral", "CONSUMER.CREATE.{s}", {"ack_policy": "none", "deliver_subject": "x.y"}),
    ("zero threshold", "CONSUMER.CREATE.{s}.Z1",
     {"name": "Z1", "ack_policy": "explicit", "inactive_threshold": 0}),
    ("legacy", "CONSUMER.DURABLE.CREATE.{s}.D2",
     {"durable_name": "D2", "ack_policy": "explicit", "filter_subject": "{s}.a"}),
]


def test_consumer_create_answers_as_nats_server(gateway, nats_server, stream_name,  # noqa: F811
                                                drop_new_streams):  # noqa: F811
    """Zero settings left out, a durable's name in its config, the 5 s inactive threshold of
    consumers that are not durable (a clustered server's ``cluster`` section aside)."""
    gw = gateway()

    async def observe(url: str) -> dict:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            out = {}
            for label, subject, cfg in CONSUMER_CREATES:
                cfg = json.loads(json.dumps(cfg).replace("{s}", stream_name))
                msg = await nc.request("$JS.API." + subject.format(s=stream_name), json.dumps(
                    {"stream_name": stream_name, "config": cfg}).encode(), timeout=10)
                doc = json.loads(msg.data)
                for key in ("created", "ts", "cluster"):
                    doc.pop(key, None)
                if label == "ephemeral":  # a generated name
                    doc.pop("name", None)
                    doc["config"].pop("name", None)
                out[label] = doc
            await nc.jetstream().delete_stream(stream_name)
            return out
        finally:
            await nc.close()

    expected = asyncio.run(observe(nats_server.url))
    assert expected["named"]["config"]["inactive_threshold"] == 5_000_000_000
    assert asyncio.run(observe(f"nats://127.0.0.1:{gw.port}")) == expected


def test_idle_ephemerals_of_nats_py_live_as_on_nats_server(gateway, nats_server, stream_name,  # noqa: F811
                                                         drop_new_streams):  # noqa: F811
    """nats.py asks for its ephemerals' inactive_threshold 0, which is nats-server's 5 s:
    idle past it, push subscriptions (ordered, plain, a KV watch) stay while subscribed and
    a pull consumer nobody pulls from is gone."""
    gw = gateway()

    async def observe(url: str) -> dict:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
            ordered = await js.subscribe(f"{stream_name}.>", ordered_consumer=True)
            push = await js.subscribe(f"{stream_name}.>")
            pull = await js.pull_subscribe(f"{stream_name}.>", durable=None,
                                           stream=stream_name)
            kv = await js.create_key_value(bucket=f"{stream_name}_kv")
            watch = await kv.watchall()
            assert await watch.updates(timeout=5) is None  # nothing there yet
            await asyncio.sleep(8)
            await js.publish(f"{stream_name}.a", b"x")
            await kv.put("k", b"v")
            out = {}
            for label, call in (("ordered", lambda: ordered.next_msg(timeout=5)),
                                ("push", lambda: push.next_msg(timeout=5)),
                                ("watch", lambda: watch.updates(timeout=5)),
                                ("pull", lambda: pull.fetch(1, timeout=2))):
                try:
                    await call()
                    out[label] = "got it"
                except Exception as e:  # noqa: BLE001 - the error is the observation
                    out[label] = type(e).__name__
            out["consumers"] = len(await js.consumers_info(stream_name))
            await js.delete_key_value(f"{stream_name}_kv")
            return out
        finally:
            await nc.close()

    async def both() -> list[dict]:  # side by side: the wait is paid once
        return await asyncio.gather(observe(nats_server.url),
                                    observe(f"nats://127.0.0.1:{gw.port}"))

    expected, got = asyncio.run(both())
    assert expected["pull"] != "got it" and expected["consumers"] == 2
    assert got == expected
