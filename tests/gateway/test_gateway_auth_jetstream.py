"""A read-only user of one stream, through nats.py, on nats-server and on the gateway: it
fetches and acks from its consumer; its publishes, deletes and reads of other consumers are
refused the same way on both (a permissions violation, the request unanswered)."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeout

from benchmarks.natsbase import NatsServer
from tests.cluster.conftest import drop_new_streams, js  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

STREAM = "AUTHORDERS"
ACCOUNTS = f"""
accounts {{
  APP: {{
    jetstream: enabled
    users: [
      {{user: admin, password: admin}}
      {{user: reader, password: reader, permissions: {{
         publish: {{allow: ["$JS.API.CONSUMER.MSG.NEXT.{STREAM}.READER",
                           "$JS.ACK.{STREAM}.READER.>",
                           "$JS.API.CONSUMER.INFO.{STREAM}.READER"]}}
         subscribe: {{allow: ["_INBOX.>"]}} }}}}
    ]
  }}
}}
no_auth_user: admin
"""


async def _scenario(url: str) -> dict:
    admin = await nats.connect(url, user="admin", password="admin")
    errors: list[str] = []

    async def on_error(e):
        errors.append(str(e))

    reader = await nats.connect(url, user="reader", password="reader", error_cb=on_error)
    out: dict = {}
    try:
        ajs = admin.jetstream()
        await ajs.add_stream(name=STREAM, subjects=[f"{STREAM}.>"])
        for i in range(10):
            await ajs.publish(f"{STREAM}.o", f"m{i}".encode())
        await ajs.add_consumer(STREAM, durable_name="READER", ack_policy="explicit")
        await ajs.add_consumer(STREAM, durable_name="OTHER", ack_policy="explicit")
        rjs = reader.jetstream(timeout=1.5)
        sub = await rjs.pull_subscribe_bind("READER", stream=STREAM)
        msgs = await sub.fetch(4, timeout=5)
        for m in msgs:
            await m.ack_sync()
        out["fetched"] = [m.data.decode() for m in msgs]
        info = await rjs.consumer_info(STREAM, "READER")
        out["ack_floor"] = info.ack_floor.stream_seq
        tries = {
            "publish": lambda: rjs.publish(f"{STREAM}.o", b"x"),
            "delete_stream": lambda: rjs.delete_stream(STREAM),
            "other_consumer": lambda: rjs.consumer_info(STREAM, "OTHER"),
            "purge": lambda: rjs.purge_stream(STREAM),
        }
        for name, call in tries.items():
            try:
                await call()
                out[name] = "answered"
            except NatsTimeout:
                out[name] = "timeout"
        await reader.flush()
        out["errors"] = sorted(errors)
        out["stored"] = (await ajs.stream_info(STREAM)).state.messages
    finally:
        await reader.close()
        with pytest.raises(Exception):  # noqa: B017 - a clean-up that may find nothing
            await admin.jetstream().delete_stream(STREAM)
            raise RuntimeError("deleted")
        await admin.close()
    return out


def test_a_read_only_user_is_refused_as_on_nats_server(gateway, drop_new_streams,  # noqa: F811
                                                        tmp_path):
    with NatsServer(config=ACCOUNTS) as server:
        expected = asyncio.run(_scenario(server.url))
    assert expected["fetched"] == ["m0", "m1", "m2", "m3"] and expected["ack_floor"] == 4
    conf = tmp_path / "server.conf"
    conf.write_text(ACCOUNTS)
    gw = gateway(config=str(conf))
    got = asyncio.run(_scenario(f"nats://127.0.0.1:{gw.port}"))
    assert got == expected


def test_the_python_api_as_a_user(gateway, drop_new_streams, tmp_path):  # noqa: F811
    """``rayjet.connect(url, user=..., password=...)`` acts within that user's permissions:
    the reader fetches and acks its consumer; its publish is refused with a typed error."""
    import rayjet
    from rayjet.errors import AuthorizationError, PermissionViolationError
    from rayjet.errors import TimeoutError as RayjetTimeout

    conf = tmp_path / "server.conf"
    conf.write_text(ACCOUNTS)
    gw = gateway(config=str(conf))
    url = f"nats://127.0.0.1:{gw.port}"
    admin = rayjet.connect(url, user="admin", password="admin")
    reader = rayjet.connect(url, user="reader", password="reader")
    try:
        admin.add_stream(name=STREAM, subjects=[f"{STREAM}.>"])
        for i in range(6):
            admin.publish(f"{STREAM}.o", f"m{i}".encode())
        admin.add_consumer(STREAM, durable_name="READER", ack_policy="explicit")
        sub = reader.pull_subscribe(f"{STREAM}.>", durable="READER", stream=STREAM)
        got = sub.fetch(3, timeout=5)
        for m in got:
            m.ack_sync()
        assert [m.data for m in got] == [b"m0", b"m1", b"m2"]
        assert reader.consumer_info(STREAM, "READER").ack_floor.stream_seq == 3
        with pytest.raises((PermissionViolationError, RayjetTimeout)):
            reader.publish(f"{STREAM}.o", b"x")
        with pytest.raises((PermissionViolationError, RayjetTimeout)):
            reader.delete_stream(STREAM)
        assert admin.stream_info(STREAM).state.messages == 6
    finally:
        reader.close()
        admin.delete_stream(STREAM)
        admin.close()
    with pytest.raises(AuthorizationError):
        rayjet.connect(url, user="reader", password="wrong")


def test_an_account_without_jetstream_is_told_so(gateway, tmp_path):  # noqa: F811
    """nats-server's 10039 "JetStream not enabled for account" for each API request of an
    account that has none, whatever the request."""
    from tests.gateway.test_gateway_auth import Client

    config = ACCOUNTS.replace("accounts {", "accounts {\n  PLAIN: { users: [ "
                              "{user: plain, password: p} ] }")

    def answers(port: int) -> list[str]:
        c = Client(port, user="plain", **{"pass": "p"})
        c.send("SUB _INBOX.p.* 1", "PUB $JS.API.INFO _INBOX.p.1 0", "",
               f"PUB $JS.API.STREAM.INFO.{STREAM} _INBOX.p.2 0", "",
               "PUB $JS.API.NOT.A.THING _INBOX.p.3 0", "")
        c.sock.settimeout(10)
        got = []
        while len(got) < 2:  # the two answers, whenever they come
            line = c.line()
            if line.startswith("MSG "):
                got.append(line)
        c.send("PUB $JS.API.INFO _INBOX.p.4 0", "")  # after the third request: its answer
        line = c.line()                              # comes first, or there is none
        while not line.startswith("MSG "):
            line = c.line()
        assert line.startswith("MSG _INBOX.p.4 ")  # nothing for the unknown API's request
        c.close()
        return sorted(got)

    with NatsServer(config=config) as server:
        expected = answers(server.port)
    assert any("10039" in line for line in expected)
    conf = tmp_path / "server.conf"
    conf.write_text(config)
    gw = gateway(config=str(conf))
    assert answers(gw.port) == expected
