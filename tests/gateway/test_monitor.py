"""The gateway's HTTP monitoring port: nats-server's documents (/varz, /connz, /subsz, /jsz,
/healthz, ...) with its numbers and field names, the gateway's credentials asked for, and
a stranger's bytes answered without harm."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import time

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.natsbase import NatsServer
from rayjet.errors import BadRequestError
from rayjet.gateway import GatewayOptions
from rayjet.gateway.monitor import HttpError, parse_request
from tests.cluster.conftest import js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401


def get(port: int, path: str, headers: dict | None = None) -> tuple[int, dict | str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read().decode()
    finally:
        conn.close()
    if resp.getheader("Content-Type", "").startswith("application/json"):
        return resp.status, json.loads(body)
    return resp.status, body


async def _core_traffic(url: str) -> None:
    """nats.py's test_unsubscribe's traffic: 4 publishes, 2 delivered, then an idle client."""
    nc = await nats.connect(url, name="probe")
    got = []

    async def cb(msg):
        got.append(msg)

    sub = await nc.subscribe("foo", cb=cb)
    await nc.publish("foo", b"A")
    await nc.publish("foo", b"B")
    await nc.flush()
    for _ in range(100):
        if len(got) == 2:
            break
        await asyncio.sleep(0.02)
    await sub.unsubscribe()
    await nc.publish("foo", b"C")
    await nc.publish("foo", b"D")
    await nc.flush()
    return nc


def _observe(url: str, http_port: int) -> tuple[dict, dict, dict]:
    async def run():
        nc = await _core_traffic(url)
        try:
            # nats-server counts a read's messages when it is done with the read, which can
            # be after its PONG left: wait (a few seconds at most) until all four counted
            deadline = time.monotonic() + 5
            while True:
                connz = get(http_port, "/connz?subs=1")[1]
                if connz["connections"][0]["in_msgs"] == 4 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            return (connz, get(http_port, "/varz")[1],
                    get(http_port, "/subsz?subs=1&test=foo")[1])
        finally:
            await nc.close()

    return asyncio.run(run())


def test_core_counters_match_nats_server(gateway):  # noqa: F811
    gw = gateway(http_port=0)
    ours = _observe(f"nats://127.0.0.1:{gw.port}", gw.gateway.http_port)
    with NatsServer(monitor=True) as ns:
        theirs = _observe(ns.url, ns.http_port)
    (conn,) = ours[0]["connections"]
    (their_conn,) = theirs[0]["connections"]
    counted = ("in_msgs", "in_bytes", "out_msgs", "out_bytes", "subscriptions", "name", "lang",
               "kind", "type", "ip")
    assert {k: conn[k] for k in counted} == {k: their_conn[k] for k in counted}
    # the fields nats-server writes for a client connection are all there
    assert set(their_conn) - {"subscriptions_list"} <= set(conn)
    # the server's totals: nats-server's also count the harness's JetStream readiness check
    for key in ("in_msgs", "in_bytes", "out_msgs", "out_bytes"):
        assert ours[1][key] == conn[key], key
    assert ours[1]["connections"] == theirs[1]["connections"] == 1
    assert ours[1]["slow_consumers"] == theirs[1]["slow_consumers"] == 0
    # every top-level field of nats-server's /varz but those of features rayjet has not
    assert set(theirs[1]) - {"git_commit", "feature_flags", "disk_io_wait_stats"} <= set(ours[1])
    assert ours[1]["jetstream"]["stats"]["api"]["total"] == 0
    assert ours[2]["total"] == theirs[2]["total"] == 0  # unsubscribed: nobody hears foo
    assert set(theirs[2]) <= set(ours[2])


def test_connz_pages_sorts_and_remembers_closed_connections(gateway):  # noqa: F811
    gw = gateway(http_port=0)
    port = gw.gateway.http_port

    async def run():
        url = f"nats://127.0.0.1:{gw.port}"
        ncs = [await nats.connect(url, name=f"c{i}") for i in range(3)]
        for i, nc in enumerate(ncs):
            for _ in range(i):
                await nc.publish("x", b"12345")
            await nc.subscribe(f"s.{i}")
            await nc.flush()
        by_msgs = get(port, "/connz?sort=msgs_from&limit=2")[1]
        assert [c["name"] for c in by_msgs["connections"]] == ["c2", "c1"]
        assert (by_msgs["total"], by_msgs["num_connections"], by_msgs["limit"]) == (3, 2, 2)
        detail = get(port, f"/connz?cid={by_msgs['connections'][0]['cid']}&subs=detail")[1]
        (one,) = detail["connections"]
        assert [s["subject"] for s in one["subscriptions_list_detail"]][-1] == "s.2"
        await ncs[0].close()
        closed = get(port, "/connz?state=closed")[1]
        (gone,) = [c for c in closed["connections"] if c.get("name") == "c0"]
        assert gone["reason"] == "Client Closed" and "stop" in gone
        assert get(port, "/connz")[1]["total"] == 2
        assert get(port, "/connz?sort=nope")[0] == 400
        assert get(port, "/connz?limit=-1")[0] == 400
        for nc in ncs[1:]:
            await nc.close()

    asyncio.run(run())


def test_jsz_healthz_and_the_other_documents(gateway, js, stream_name):  # noqa: F811
    gw = gateway(http_port=0)
    port = gw.gateway.http_port
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    try:
        js.publish_batch([(f"{stream_name}.a", b"x" * 10)] * 5)
        js.add_consumer(stream_name, durable_name="D")
        status, plain = get(port, "/jsz")
        assert status == 200 and "account_details" not in plain
        assert plain["streams"] >= 1 and plain["messages"] >= 5
        full = get(port, "/jsz?streams=true&consumers=true&config=true")[1]
        (acc,) = full["account_details"]
        (mine,) = [s for s in acc["stream_detail"] if s["name"] == stream_name]
        assert mine["state"]["messages"] == 5 and mine["config"]["name"] == stream_name
        assert [c["name"] for c in mine["consumer_detail"]] == ["D"]
        assert full["meta_cluster"]["leader"]
        assert get(port, "/healthz") == (200, {"status": "ok"})
        assert get(port, "/healthz?js-enabled-only=true") == (200, {"status": "ok"})
        assert get(port, "/healthz?js-server-only=true") == (200, {"status": "ok"})
        assert get(port, "/accountz")[1]["accounts"] == ["$G", "$SYS"]
        assert get(port, "/accountz?acc=$G")[1]["account_detail"]["jetstream_enabled"]
        assert get(port, "/accountz?acc=nobody")[0] == 400
        assert get(port, "/accstatz")[1]["account_statz"][0]["acc"] == "$G"
        routez = get(port, "/routez")[1]
        assert routez["num_routes"] == 0 and routez["ray_nodes"]
        assert get(port, "/gatewayz")[1]["inbound_gateways"] == {}
        assert get(port, "/leafz")[1]["leafs"] == []
        assert get(port, "/nothing")[0] == 404
        status, index = get(port, "/")
        assert status == 200 and "/varz" in index
        assert get(port, "/varz")[1]["http_req_stats"]["/jsz"] == 2
    finally:
        js.delete_stream(stream_name)


def test_monitoring_asks_for_the_gateways_credentials(gateway):  # noqa: F811
    gw = gateway(http_port=0, token="s3cret")
    port = gw.gateway.http_port
    assert get(port, "/varz")[0] == 401
    assert get(port, "/varz", {"Authorization": "Bearer wrong"})[0] == 401
    assert get(port, "/varz", {"Authorization": "Bearer s3cret"})[0] == 200
    gw = gateway(http_port=0, user="ops", password="pw")
    port = gw.gateway.http_port
    good = base64.b64encode(b"ops:pw").decode()
    bad = base64.b64encode(b"ops:nope").decode()
    assert get(port, "/healthz", {"Authorization": f"Basic {good}"})[0] == 200
    assert get(port, "/healthz", {"Authorization": f"Basic {bad}"})[0] == 401
    assert get(port, "/healthz", {"Authorization": "Basic !!!"})[0] == 401


@pytest.mark.parametrize("bad", [-1, 70000, "8222", True])
def test_http_port_is_a_port_or_none(bad):
    with pytest.raises(BadRequestError):
        GatewayOptions(http_port=bad)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_the_request_parser_refuses_what_it_cannot_read(head):
    try:
        method, path, query, headers = parse_request(head)
    except HttpError as err:
        assert err.status == 400
    else:
        assert method.isalpha() and path.startswith("/")
        assert isinstance(query, dict) and isinstance(headers, dict)


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_a_strangers_bytes_get_an_error_and_the_port_stays_up(gateway):  # noqa: F811
    gw = gateway(http_port=0)
    port = gw.gateway.http_port

    @given(st.binary(max_size=200).map(lambda b: b + b"\r\n\r\n"))
    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    def stranger(data):
        out = _raw(port, data)
        assert out == b"" or out.startswith(b"HTTP/1.1 ")

    stranger()
    assert _raw(port, b"POST /varz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert _raw(port, b"GET /varz HTTP/1.1\r\n" + b"X: y\r\n" * 5000 + b"\r\n"
                ).startswith(b"HTTP/1.1 431")
    assert _raw(port, b"GET /varz?limit=1&" + b"a=1&" * 100 + b" HTTP/1.1\r\n\r\n"
                ).startswith(b"HTTP/1.1 400")
    assert get(port, "/varz")[0] == 200
