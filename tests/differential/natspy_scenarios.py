"""Scenarios of nats.py (the ``nats-py`` package), run the same way against nats-server and the
rayjet gateway: each returns what a user observes (counts, values, the fields of answers as
nats.py parses them, errors), free of ids and times; printed as one JSON line.

    python natspy_scenarios.py <nats url> <prefix> <scenario>...

A plain script (no rayjet, no tests package) so it runs as a client process of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import os
import sys

import nats
from nats.js.api import AckPolicy, ConsumerConfig, ObjectMeta

N = 300
# times, and ids one server or run picks differently (a cluster's leader is a server name;
# a push consumer's deliver subject and an object's nuid are the client's inboxes and ids)
UNSTABLE = {"created", "last_active", "first_ts", "last_ts", "mtime", "time", "cluster",
            "deliver_subject", "nuid"}


def plain(value):
    """A parsed answer as JSON: dataclasses as dicts without unset fields or UNSTABLE keys."""
    if dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if v is not None and k not in UNSTABLE}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def failure(e: BaseException) -> dict:
    """What a user's code can tell apart: the error's class, the API error's codes and text."""
    if isinstance(e, nats.js.errors.APIError):
        fields = {k: getattr(e, k, None) for k in ("code", "err_code", "description")}
        return {"name": type(e).__name__, **{k: v for k, v in fields.items() if v is not None}}
    return {"name": type(e).__name__, "error": str(e)}


async def outcome(call) -> dict:
    """``call()``'s answer (a scalar, else "a value") or its failure."""
    try:
        answer = await call()
    except Exception as e:  # noqa: BLE001 - the error is the observation
        return failure(e)
    return {"answer": answer if answer is None or isinstance(answer, bool | int | str)
            else "a value"}


async def stream(js, name: str) -> int:
    await js.add_stream(name=name, subjects=[name + ".>"])
    acks = [await js.publish_async(name + ".m", f"m{i}".encode()) for i in range(N)]
    return (await asyncio.gather(*acks))[-1].seq


def seq_of(msg) -> int:
    return msg.metadata.sequence.stream


async def consume(nc, js, prefix):
    # a push consumer with at most 100 unacked: delivery waits on the acks
    name = prefix + "_CONSUME"
    last = await stream(js, name)
    sub = await js.subscribe(name + ".>", durable="C", manual_ack=True,
                             config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                   max_ack_pending=100))
    seqs = []
    for _ in range(N):
        msg = await sub.next_msg(timeout=10)
        seqs.append(seq_of(msg))
        await msg.ack_sync()
    info = await sub.consumer_info()
    await sub.unsubscribe()
    return {"last": last, "consumed": len(seqs), "inOrder": seqs == list(range(1, N + 1)),
            "ackFloor": info.ack_floor.stream_seq, "delivered": info.delivered.stream_seq,
            "ackPending": info.num_ack_pending, "pending": info.num_pending,
            "redelivered": info.num_redelivered, "config": plain(info.config)}


async def fetch(nc, js, prefix):
    name = prefix + "_FETCH"
    await stream(js, name)
    psub = await js.pull_subscribe(name + ".>", durable="F", stream=name)
    batches = []
    for batch in (50, 50, N):  # the last asks for more than is left: it gets the rest
        msgs = await psub.fetch(batch, timeout=3)
        batches.append([len(msgs), seq_of(msgs[0]), seq_of(msgs[-1])])
        for msg in msgs:
            await msg.ack_sync()
    info = await psub.consumer_info()
    empty = {}
    for batch in (1, 10):  # one message and a batch take different paths in nats.py
        try:
            empty[batch] = {"got": len(await psub.fetch(batch, timeout=0.5))}
        except Exception as e:  # noqa: BLE001 - the error is the observation
            empty[batch] = failure(e)
    return {"batches": batches, "ackFloor": info.ack_floor.stream_seq,
            "pending": info.num_pending, "ackPending": info.num_ack_pending,
            "empty": empty, "config": plain(info.config)}


async def ordered(nc, js, prefix):
    name = prefix + "_ORDERED"
    await stream(js, name)
    sub = await js.subscribe(name + ".>", ordered_consumer=True)
    msgs = [await sub.next_msg(timeout=10) for _ in range(N)]
    info = await sub.consumer_info()
    await sub.unsubscribe()
    config = plain(info.config)
    if "name" in config:  # the server chose it (an id): compared is whether it is there
        config["name"] = "<chosen by the server>"
    return {"got": len(msgs), "inOrder": [seq_of(m) for m in msgs] == list(range(1, N + 1)),
            "consumerSeqs": [m.metadata.sequence.consumer for m in msgs] == list(range(1, N + 1)),
            "pending": [m.metadata.num_pending for m in msgs[:3]], "config": config}


async def kv(nc, js, prefix):
    kv = await js.create_key_value(bucket=prefix + "_kv", history=5, ttl=60)
    r1 = await kv.put("a.b", b"1")
    r2 = await kv.put("a.b", b"2")
    await kv.put("c", b"3")
    entry = await kv.get("a.b")
    await kv.delete("c")
    out = {"revisions": [r1, r2],
           "entry": plain(dataclasses.replace(entry, created=None)),
           "first": (await kv.get("a.b", revision=r1)).value.decode(),
           "keys": sorted(await kv.keys()),
           "hist": [[h.operation, h.revision, (h.value or b"").decode()]
                    for h in await kv.history("a.b")]}
    tries = {"conflict": lambda: kv.update("a.b", b"x", last=r1),
             "createExisting": lambda: kv.create("a.b", b"y"),
             "createDeleted": lambda: kv.create("c", b"again"),
             "getMissing": lambda: kv.get("zz"),
             "purge": lambda: kv.purge("a.b"),
             "afterPurge": lambda: kv.get("a.b"),
             "missingBucket": lambda: js.key_value(prefix + "_nokv")}
    for key, call in tries.items():  # in order: the purge comes before the get after it
        out[key] = await outcome(call)
    status = await kv.status()
    out["status"] = {"bucket": status.bucket, "values": status.values,
                     "history": status.history, "ttl": status.ttl,
                     "config": plain(status.stream_info.config)}
    return out


async def obj(nc, js, prefix):
    store = await js.create_object_store(bucket=prefix + "_obj")
    data = bytes((i * 7) % 251 for i in range(300_000))
    info = await store.put("blob", data, meta=ObjectMeta(name="blob", description="d"))
    back = await store.get("blob")
    names = [o.name for o in await store.list()]
    await store.delete("blob")
    deleted = await store.get_info("blob", show_deleted=True)
    gone = await outcome(lambda: store.get("blob"))
    return {"info": plain(info), "same": back.data == data, "backInfo": plain(back.info),
            "names": names, "deleted": plain(deleted), "gone": gone,
            "missingBucket": await outcome(lambda: js.object_store(prefix + "_noobj"))}


async def shapes(nc, js, prefix):
    # the fields of answers as nats.py parses them, and the defaults the server filled in
    name = prefix + "_SHAPES"
    created = await js.add_stream(name=name, subjects=[name + ".>"])
    await js.publish(name + ".a", b"x")
    info = await js.stream_info(name)
    listed = [plain(si.config) for si in await js.streams_info() if si.config.name == name]
    consumer = await js.add_consumer(name, durable_name="S", metadata={"a": "b"})
    return {"created": plain(created), "info": plain(info), "listed": listed,
            "consumer": plain(consumer)}


async def errors(nc, js, prefix):
    name = prefix + "_ERRORS"
    await stream(js, name)

    async def delete_twice():
        await js.delete_msg(name, 3)
        return await js.delete_msg(name, 3)

    async def empty_create():
        answer = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{prefix}_EMPTY", b"",
                                              timeout=10)).data)
        return {"keys": sorted(answer), "error": answer.get("error")}

    tries = {"missingStream": lambda: js.stream_info(prefix + "_NOPE"),
             "missingConsumer": lambda: js.consumer_info(name, "nope"),
             "deleteTwice": delete_twice,
             "missingMessage": lambda: js.get_msg(name, 3),
             "pastTheEnd": lambda: js.delete_msg(name, N + 10),
             "otherConfig": lambda: js.add_stream(name=name, subjects=[name + ".other"]),
             "overlap": lambda: js.add_stream(name=prefix + "_OVERLAP", subjects=[name + ".m"]),
             "consumerOfMissing": lambda: js.add_consumer(prefix + "_NOPE", durable_name="X")}
    out = {k: await outcome(call) for k, call in tries.items()}
    out["emptyCreate"] = await empty_create()
    return out


SCENARIOS = {f.__name__: f for f in (consume, fetch, ordered, kv, obj, shapes, errors)}


async def main(url: str, prefix: str, wanted: list[str]) -> dict:
    creds = ({"user": os.environ["NATS_USER"], "password": os.environ["NATS_PASSWORD"]}
             if os.environ.get("NATS_USER") else {})  # a user of the server's configuration
    nc = await nats.connect(url, connect_timeout=10, max_reconnect_attempts=0, **creds)
    js = nc.jetstream(timeout=20)
    out = {}
    for name in wanted:
        try:
            out[name] = await SCENARIOS[name](nc, js, prefix)
        except Exception as e:  # noqa: BLE001 - a scenario that breaks is an observation too
            out[name] = {"failed": failure(e)}
    await nc.close()
    return out


if __name__ == "__main__":
    url, prefix, *wanted = sys.argv[1:]
    print(json.dumps(asyncio.run(main(url, prefix, wanted)), sort_keys=True))
