"""prometheus-nats-exporter reads the gateway's monitoring documents as it reads nats-server's.

The same traffic (a stream with messages, a durable pull consumer with unacknowledged
messages, a few connections) goes to a nats-server 2.15 with JetStream and monitoring and to
the gateway; then every URL the exporter requests is fetched from both, and

* every JSON path the exporter reads (``EXPORTER_READS``, from its collector sources) is in
  the gateway's document with nats-server's JSON type (and, for times and durations that it
  parses, in a form it parses);
* every path the two documents share has the same JSON type, and no number is one Go
  would refuse (a float for an integer, a negative for an unsigned): the exporter decodes
  ``/varz`` and ``/jsz`` into nats-server's own Go structs (``server.Varz``,
  ``server.JSInfo``), and one field of the wrong type makes ``json.Unmarshal`` fail and the
  exporter drop the whole server;
* the numbers the same traffic must give agree (stream and consumer counts, each
  connection's messages in and out).

Lists are checked on their first element (or the element the test picked), objects with
keys of their own (``http_req_stats``, ``inbound_gateways``) on the keys both have.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any

import nats
import pytest

from benchmarks.natsbase import NatsServer, find_nats_server
from tests.cluster.conftest import js  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401
from tests.gateway.test_monitor import get

pytestmark = pytest.mark.skipif(find_nats_server() is None, reason="needs nats-server")

STREAM = "EXPORTED"

# What the exporter reads, by the URL it asks for. A path's parts are object keys; "[]" is
# a list's first element; a "?" before a path: nats-server leaves it out for this traffic
# (omitempty), so the gateway may too, but when it writes it, of that kind. The kind after a
# path says how the exporter reads the value:
# "number", "string", "bool", "object", "array", or "time" (an RFC 3339 string it parses),
# "duration" (a Go duration string, time.ParseDuration), "uptime" (nats-server's "1d2h3m4s",
# the exporter's parseDuration).
SERVER = [("server_id", "string"), ("server_name", "string")]
EXPORTER_READS: dict[str, list[tuple[str, str]]] = {
    # collector/collector.go getServerKeyFromVarz: the exporter exits unless both are strings
    # (and the generic varz collector makes a gauge of every number, a label of version...)
    "/varz": [*SERVER, ("version", "string"), ("start", "time"),
              ("config_load_time", "time"), ("connections", "number"),
              ("total_connections", "number"), ("in_msgs", "number"),
              ("out_msgs", "number"), ("in_bytes", "number"), ("out_bytes", "number"),
              ("subscriptions", "number"), ("slow_consumers", "number"), ("mem", "number"),
              ("cpu", "number"), ("jetstream.stats.memory", "number"),
              ("jetstream.stats.storage", "number"), ("jetstream.stats.api.total", "number"),
              ("jetstream.stats.api.errors", "number"),
              ("jetstream.config.max_memory", "number"),
              ("jetstream.config.max_storage", "number"),
              ("jetstream.config.store_dir", "string")],
    # collector/connz.go: Connz and ConnzConnection.UnmarshalJSON (type assertions: a value
    # of another type panics)
    "/connz": [("num_connections", "number"), ("total", "number"), ("offset", "number"),
               ("limit", "number"), ("connections[].cid", "number"),
               ("connections[].kind", "string"), ("connections[].type", "string"),
               ("connections[].ip", "string"), ("connections[].port", "number"),
               ("connections[].start", "time"), ("connections[].last_activity", "time"),
               ("connections[].rtt", "duration"), ("connections[].uptime", "uptime"),
               ("connections[].idle", "uptime"), ("connections[].pending_bytes", "number"),
               ("connections[].in_msgs", "number"), ("connections[].out_msgs", "number"),
               ("connections[].in_bytes", "number"), ("connections[].out_bytes", "number"),
               ("connections[].subscriptions", "number"), ("connections[].name", "string"),
               ("connections[].lang", "string"), ("connections[].version", "string")],
    # collector/connz.go, connz_detailed: the same with ?auth=true (adds the account)
    "/connz?auth=true": [("connections[].cid", "number"),
                         ("connections[].in_msgs", "number"),
                         ("connections[].name_tag", "string"),
                         ("?connections[].account", "string"),
                         ("?connections[].tls_version", "string"),
                         ("?connections[].tls_cipher_suite", "string")],
    # collector/jsz.go (nats.JSInfo) and its /varz read (nats.Varz: the server's name)
    "/jsz": [("server_id", "string"), ("now", "time"), ("config.max_memory", "number"),
             ("config.max_storage", "number"), ("config.store_dir", "string"),
             ("streams", "number"), ("consumers", "number"), ("messages", "number"),
             ("bytes", "number"), ("memory", "number"), ("storage", "number"),
             ("api.total", "number"), ("api.errors", "number")],
    "/jsz?accounts=true": [
        ("account_details[].name", "string"), ("account_details[].id", "string"),
        ("account_details[].memory", "number"), ("account_details[].storage", "number"),
        ("account_details[].reserved_memory", "number"),
        ("account_details[].reserved_storage", "number")],
    "/jsz?streams=true": [
        ("account_details[].stream_detail[].name", "string"),
        ("account_details[].stream_detail[].created", "time"),
        ("?account_details[].stream_detail[].cluster.leader", "string"),
        ("?account_details[].stream_detail[].stream_raft_group", "string"),
        ("account_details[].stream_detail[].state.messages", "number"),
        ("account_details[].stream_detail[].state.bytes", "number"),
        ("account_details[].stream_detail[].state.first_seq", "number"),
        ("account_details[].stream_detail[].state.last_seq", "number"),
        ("account_details[].stream_detail[].state.consumer_count", "number"),
        ("account_details[].stream_detail[].state.num_subjects", "number")],
    "/jsz?consumers=true&config=true&raft=true": [
        ("account_details[].stream_detail[].name", "string"),
        ("account_details[].stream_detail[].config.max_bytes", "number"),
        ("account_details[].stream_detail[].config.max_msgs", "number"),
        ("account_details[].stream_detail[].config.metadata", "object"),
        ("account_details[].stream_detail[].state.messages", "number"),
        ("account_details[].stream_detail[].consumer_detail[].name", "string"),
        ("?account_details[].stream_detail[].consumer_detail[].cluster.leader", "string"),
        ("?account_details[].stream_detail[].consumer_detail[].config.description",
         "string"),
        ("?account_details[].stream_detail[].consumer_detail[].ack_floor.last_active",
         "time"),
        ("account_details[].stream_detail[].consumer_detail[].ts", "time"),
        ("account_details[].stream_detail[].consumer_detail[].config.durable_name",
         "string"),
        ("account_details[].stream_detail[].consumer_detail[].delivered.consumer_seq",
         "number"),
        ("account_details[].stream_detail[].consumer_detail[].delivered.stream_seq",
         "number"),
        ("account_details[].stream_detail[].consumer_detail[].delivered.last_active",
         "time"),
        ("account_details[].stream_detail[].consumer_detail[].ack_floor.consumer_seq",
         "number"),
        ("account_details[].stream_detail[].consumer_detail[].ack_floor.stream_seq",
         "number"),
        ("account_details[].stream_detail[].consumer_detail[].num_ack_pending", "number"),
        ("account_details[].stream_detail[].consumer_detail[].num_redelivered", "number"),
        ("account_details[].stream_detail[].consumer_detail[].num_waiting", "number"),
        ("account_details[].stream_detail[].consumer_detail[].num_pending", "number")],
    # collector/healthz.go (healthz, healthz_js_enabled_only, healthz_js_server_only)
    "/healthz": [("status", "string")],
    "/healthz?js-enabled-only=true": [("status", "string")],
    "/healthz?js-server-only=true": [("status", "string")],
    # collector/accstatz.go
    "/accstatz?unused=1": [
        ("account_statz[].acc", "string"), ("account_statz[].name", "string"),
        ("account_statz[].conns", "number"), ("account_statz[].leafnodes", "number"),
        ("account_statz[].total_conns", "number"),
        ("account_statz[].num_subscriptions", "number"),
        ("account_statz[].sent.msgs", "number"), ("account_statz[].sent.bytes", "number"),
        ("account_statz[].received.msgs", "number"),
        ("account_statz[].received.bytes", "number"),
        ("account_statz[].slow_consumers", "number")],
    # collector/accountz.go: the list, then each account
    "/accountz": [("accounts", "array"), ("accounts[]", "string")],
    "/accountz?acc=$G": [
        ("server_id", "string"), ("account_detail.account_name", "string"),
        ("account_detail.update_time", "time"), ("?account_detail.is_system", "bool"),
        ("account_detail.expired", "bool"), ("account_detail.complete", "bool"),
        ("account_detail.jetstream_enabled", "bool"),
        ("account_detail.leafnode_connections", "number"),
        ("account_detail.client_connections", "number"),
        ("account_detail.subscriptions", "number"), ("account_detail.name_tag", "string"),
        ("?account_detail.decoded_jwt", "object")],
    "/accountz?acc=$SYS": [
        ("account_detail.account_name", "string"), ("account_detail.is_system", "bool"),
        ("account_detail.jetstream_enabled", "bool"),
        ("account_detail.client_connections", "number"),
        ("account_detail.subscriptions", "number"), ("account_detail.name_tag", "string")],
    # collector/leafz.go, collector/gatewayz.go (no leaf nodes, no gateways: the lists)
    "/leafz": [("leafnodes", "number"), ("leafs", "array")],
    "/gatewayz": [("?name", "string"), ("outbound_gateways", "object"),
                  ("inbound_gateways", "object")],
    # collector/collector.go, the generic collector (every number a gauge)
    "/routez": [("server_id", "string"), ("num_routes", "number")],
    "/subsz": [("num_subscriptions", "number"), ("num_cache", "number"),
               ("num_inserts", "number"), ("num_removes", "number"),
               ("num_matches", "number"), ("cache_hit_rate", "number"),
               ("max_fanout", "number"), ("avg_fanout", "number")],
}

_MISSING = object()
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_GO_DURATION = re.compile(r"^(0|(\d+(\.\d*)?(ns|us|µs|μs|ms|s|m|h))+)$")
_UPTIME = re.compile(r"^(\d+y)?(\d+d)?(\d+h)?(\d+m)?\d+s$")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", dict: "object", list: "array"}[type(value)]


def lookup(doc: Any, path: str) -> Any:
    for part in re.split(r"\.|(?=\[\])", path):
        if part == "[]":
            if not isinstance(doc, list) or not doc:
                return _MISSING
            doc = doc[0]
        elif isinstance(doc, dict) and part in doc:
            doc = doc[part]
        else:
            return _MISSING
    return doc


def read_problems(ours: Any, theirs: Any, reads: list[tuple[str, str]]) -> list[str]:
    """What the exporter would read wrong in ``ours`` (nats-server's ``theirs`` beside)."""
    out = []
    for path, kind in reads:
        optional = path.startswith("?")
        path = path.lstrip("?")
        value, model = lookup(ours, path), lookup(theirs, path)
        want = {"time": "string", "duration": "string", "uptime": "string"}.get(kind, kind)
        if model is _MISSING and not optional:
            out.append(f"{path}: not in nats-server's document (the test's list is stale)")
            continue
        if value is _MISSING:
            if not optional:
                out.append(f"{path}: missing (nats-server: {model!r})")
            continue
        if model is not _MISSING and json_type(model) != want:
            out.append(f"{path}: nats-server's is {json_type(model)}, the list says {kind}")
        if json_type(value) != want:
            out.append(f"{path}: {json_type(value)} {value!r}, the exporter reads a {kind}")
        elif kind in ("time", "duration", "uptime"):
            pattern = {"time": _TIME, "duration": _GO_DURATION, "uptime": _UPTIME}[kind]
            if not pattern.match(value):
                out.append(f"{path}: {value!r} is not a {kind} the exporter parses")
    return out


# Go's float64 fields among those the gateway writes: elsewhere a number must be written as
# an integer (an int field refuses 1.0) ...
GO_FLOATS = {"cpu", "cache_hit_rate", "avg_fanout"}
# ... and not negative where nats-server's is not (a uint64 field refuses -1) but in the
# int64 fields where rayjet says "no limit" (it has no server-wide JetStream limits)
GO_SIGNED = {"max_memory", "max_storage"}


def number_problems(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Numbers Go would refuse to decode into nats-server's fields: a float written where
    an integer belongs, a negative one where nats-server's is not."""
    key = path.rsplit(".", 1)[-1].removesuffix("[]")
    if isinstance(ours, dict):
        other = theirs if isinstance(theirs, dict) else {}
        return [p for k, v in ours.items()
                for p in number_problems(v, other.get(k), f"{path}.{k}")]
    if isinstance(ours, list):
        other = theirs[0] if isinstance(theirs, list) and theirs else None
        return [p for v in ours[:1] for p in number_problems(v, other, f"{path}[]")]
    if isinstance(ours, float) and key not in GO_FLOATS:
        return [f"{path}: {ours!r} is a float where Go wants an integer"]
    if (isinstance(ours, int) and not isinstance(ours, bool) and ours < 0
            and isinstance(theirs, int) and theirs >= 0 and key not in GO_SIGNED):
        return [f"{path}: {ours} is negative, nats-server's {theirs} (Go uint?)"]
    return []


def type_problems(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Paths both documents have whose JSON types differ (null in ours decodes as Go's zero
    value; null in nats-server's says nothing about the type)."""
    if ours is None or theirs is None:
        return []
    if json_type(ours) != json_type(theirs):
        return [f"{path or '.'}: {json_type(ours)} {ours!r:.60}, nats-server's "
                f"{json_type(theirs)} {theirs!r:.60}"]
    if isinstance(ours, dict):
        return [p for k in ours.keys() & theirs.keys()
                for p in type_problems(ours[k], theirs[k], f"{path}.{k}")]
    if isinstance(ours, list) and ours and theirs:
        return type_problems(ours[0], theirs[0], f"{path}[]")
    return []


async def _traffic(url: str) -> list[Any]:
    """Three clients: one publishes 5 messages to a stream it creates, one makes a durable
    pull consumer and takes 3 messages without acknowledging them, one hears the stream's
    subjects on a plain subscription."""
    pub = await nats.connect(url, name="publisher")
    puller = await nats.connect(url, name="puller")
    watcher = await nats.connect(url, name="watcher")
    heard = []

    async def hear(msg):
        heard.append(msg)

    await watcher.subscribe(f"{STREAM}.>", cb=hear)
    await watcher.flush()
    pjs = pub.jetstream()
    await pjs.add_stream(name=STREAM, subjects=[f"{STREAM}.>"])
    for i in range(5):
        await pjs.publish(f"{STREAM}.{i % 2}", b"x" * (10 + i))
    cjs = puller.jetstream()
    await cjs.add_consumer(STREAM, durable_name="D", ack_policy="explicit",
                           max_deliver=-1)
    psub = await cjs.pull_subscribe_bind("D", stream=STREAM)
    msgs = await psub.fetch(3, timeout=5)
    assert len(msgs) == 3
    for _ in range(200):
        if len(heard) == 5:
            break
        await asyncio.sleep(0.01)
    assert len(heard) == 5
    for nc in (pub, puller, watcher):
        await nc.flush()
    return [pub, puller, watcher]


def _settled(http_port: int) -> bool:
    """The consumer's acks and deliveries of the traffic are counted (3 pending acks)."""
    status, doc = get(http_port, "/jsz?consumers=true")
    try:
        (consumer,) = _stream(doc)["consumer_detail"]
    except (KeyError, TypeError, ValueError):
        return False
    return status == 200 and (consumer["num_ack_pending"], consumer["num_pending"]) == (3, 2)


def _documents(url: str, http_port: int) -> dict[str, Any]:
    """The documents after the traffic; under "before", /jsz before it (the cluster the
    gateway fronts may hold other tests' streams)."""
    async def run():
        before = get(http_port, "/jsz")[1]
        clients = await _traffic(url)
        try:
            deadline = time.monotonic() + 10
            while not _settled(http_port) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return {"before": before, **{u: get(http_port, u) for u in EXPORTER_READS}}
        finally:
            for nc in clients:
                await nc.close()

    return asyncio.run(run())


def _stream(doc: dict) -> dict:
    (acc,) = doc["account_details"]
    (stream,) = [s for s in acc["stream_detail"] if s["name"] == STREAM]
    return stream


def _by_name(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["connections"] if c.get("name")}


def test_the_exporter_reads_the_gateway_as_it_reads_nats_server(gateway, js):  # noqa: F811
    with NatsServer(monitor=True) as ns:
        theirs = _documents(ns.url, ns.http_port)
    gw = gateway(http_port=0)
    try:
        ours = _documents(f"nats://127.0.0.1:{gw.port}", gw.gateway.http_port)
    finally:
        if STREAM in js.stream_names():
            js.delete_stream(STREAM)
    if os.environ.get("RAYJET_DUMP_MONITOR"):
        with open(os.environ["RAYJET_DUMP_MONITOR"], "w") as f:
            json.dump({"ours": ours, "theirs": theirs}, f, indent=1)
    problems = []
    for url in EXPORTER_READS:
        (status, doc), (their_status, model) = ours[url], theirs[url]
        assert their_status == 200, (url, model)
        if status != 200 or not isinstance(doc, dict):
            problems.append(f"{url}: HTTP {status} {doc!r:.200}")
            continue
        problems += [f"{url} {p}" for p in read_problems(doc, model, EXPORTER_READS[url])]
        problems += [f"{url} {p}" for p in type_problems(doc, model)]
        problems += [f"{url} {p}" for p in number_problems(doc, model)]
    assert not problems, "\n".join(problems)

    # the numbers the same traffic gives
    for url in ("/jsz?streams=true", "/jsz?consumers=true&config=true&raft=true"):
        mine, model = _stream(ours[url][1]), _stream(theirs[url][1])
        for key in ("messages", "bytes", "first_seq", "last_seq", "consumer_count",
                    "num_subjects"):
            assert mine["state"][key] == model["state"][key], (url, key)
    mine = _stream(ours["/jsz?consumers=true&config=true&raft=true"][1])
    model = _stream(theirs["/jsz?consumers=true&config=true&raft=true"][1])
    (consumer,), (their_consumer,) = mine["consumer_detail"], model["consumer_detail"]
    for key in ("num_ack_pending", "num_pending", "num_redelivered", "num_waiting",
                "delivered", "ack_floor"):
        got, want = consumer[key], their_consumer[key]
        if isinstance(want, dict):
            got = {k: v for k, v in got.items() if k != "last_active"}
            want = {k: v for k, v in want.items() if k != "last_active"}
        assert got == want, key
    assert (consumer["num_ack_pending"], consumer["num_pending"]) == (3, 2)
    assert mine["config"]["max_msgs"] == model["config"]["max_msgs"] == -1
    assert mine["config"]["max_bytes"] == model["config"]["max_bytes"] == -1
    for key in ("streams", "consumers", "messages", "bytes"):
        grew = ours["/jsz"][1][key] - ours["before"].get(key, 0)
        assert grew == theirs["/jsz"][1][key] - theirs["before"].get(key, 0), key
    conns, their_conns = _by_name(ours["/connz"][1]), _by_name(theirs["/connz"][1])
    assert set(conns) == set(their_conns) == {"publisher", "puller", "watcher"}
    for name, conn in conns.items():
        # (not out_bytes: nats-server writes its API answers' times to the nanosecond,
        # rayjet to the microsecond, so the same answers differ in length)
        for key in ("in_msgs", "out_msgs", "in_bytes", "subscriptions"):
            assert conn[key] == their_conns[name][key], (name, key)
    assert ours["/connz"][1]["num_connections"] == theirs["/connz"][1]["num_connections"]
    for url in ("/healthz", "/healthz?js-enabled-only=true", "/healthz?js-server-only=true"):
        assert ours[url] == theirs[url] == (200, {"status": "ok"})
    assert "$G" in ours["/accountz"][1]["accounts"]
    assert ours["/leafz"][1]["leafs"] == theirs["/leafz"][1]["leafs"] == []
    assert ours["/varz"][1]["connections"] == theirs["/varz"][1]["connections"] == 3
