"""Two accounts with JetStream on one gateway, each with a stream ORDERS capturing the same
subjects: neither sees, reads, purges, deletes or consumes the other's, through the
JetStream API, direct gets, KV buckets or a subscription."""

from __future__ import annotations

import asyncio

import nats
from nats.errors import TimeoutError as NatsTimeout

from tests.cluster.conftest import drop_new_streams, js  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

CONFIG = """
accounts {
  A: { jetstream: enabled, users: [ {user: a, password: a} ] }
  B: { jetstream: enabled, users: [ {user: b, password: b} ] }
}
"""


async def _tenant(url: str, user: str, n: int) -> dict:
    nc = await nats.connect(url, user=user, password=user)
    try:
        jsx = nc.jetstream(timeout=10)
        await jsx.add_stream(name="ORDERS", subjects=["orders.>"], allow_direct=True)
        for i in range(n):
            await jsx.publish("orders.new", f"{user}{i}".encode())
        await jsx.add_consumer("ORDERS", durable_name="C", ack_policy="explicit")
        kv = await jsx.create_key_value(bucket="CFG")
        await kv.put("who", user.encode())
        return {"nc": nc, "js": jsx}
    except BaseException:
        await nc.close()
        raise


async def _scenario(url: str) -> dict:
    a = await _tenant(url, "a", 3)
    b = await _tenant(url, "b", 5)
    out: dict = {}
    try:
        for name, t in (("a", a), ("b", b)):
            jsx = t["js"]
            info = await jsx.stream_info("ORDERS")
            names = await jsx.streams_info()
            sub = await jsx.pull_subscribe_bind("C", stream="ORDERS")
            got = await sub.fetch(10, timeout=3)
            for m in got:
                await m.ack()
            kv = await jsx.key_value("CFG")
            direct = await jsx.get_msg("ORDERS", seq=1, direct=True)
            out[name] = {
                "messages": info.state.messages, "name": info.config.name,
                "streams": sorted(s.config.name for s in names),
                "fetched": [m.data.decode() for m in got],
                "reply_stream": got[0].metadata.stream,
                "kv": (await kv.get("who")).value.decode(),
                "direct": direct.data.decode(),
            }
        # a deletes its ORDERS: b's stays
        await a["js"].delete_stream("ORDERS")
        out["b_after_a_deleted"] = (await b["js"].stream_info("ORDERS")).state.messages
        try:
            await a["js"].stream_info("ORDERS")
            out["a_after_delete"] = "found"
        except Exception as exc:  # noqa: BLE001 - what nats.py raises is the observation
            out["a_after_delete"] = type(exc).__name__
        # a subscriber of everything in A sees none of B's messages
        seen: list[str] = []

        async def everything(m):
            seen.append(m.subject)

        sub = await a["nc"].subscribe(">", cb=everything)
        await a["nc"].flush()
        await b["js"].publish("orders.more", b"x")
        await b["nc"].flush()
        await a["nc"].flush()
        await sub.unsubscribe()
        out["a_saw"] = [s for s in seen if s.startswith("orders")]
        out["b_last"] = (await b["js"].stream_info("ORDERS")).state.messages
        # advisories: A hears of its own streams, by its own names, and of none of B's
        adv = await a["nc"].subscribe("$JS.EVENT.ADVISORY.STREAM.CREATED.>")
        await a["nc"].flush()
        await b["js"].add_stream(name="ONLY_B", subjects=["onlyb.>"])
        await a["js"].add_stream(name="ONLY_A", subjects=["onlya.>"])
        first = await adv.next_msg(timeout=30)
        out["a_advisory"] = first.subject
        out["a_advisory_body_names_b"] = b"ONLY_B" in first.data or b"~" in first.data
        await b["js"].delete_stream("ONLY_B")
        await a["js"].delete_stream("ONLY_A")
    finally:
        for t in (a, b):
            try:
                await t["js"].delete_stream("ORDERS")
            except Exception:  # noqa: BLE001,S110 - a's is gone already
                pass
            try:
                await t["js"].delete_key_value("CFG")
            except Exception:  # noqa: BLE001,S110
                pass
            await t["nc"].close()
    return out


def test_two_accounts_each_with_its_own_orders(gateway, drop_new_streams,  # noqa: F811
                                               tmp_path):
    conf = tmp_path / "server.conf"
    conf.write_text(CONFIG)
    gw = gateway(config=str(conf))
    got = asyncio.run(_scenario(f"nats://127.0.0.1:{gw.port}"))
    assert got["a"] == {"messages": 3, "name": "ORDERS", "streams": ["KV_CFG", "ORDERS"],
                        "fetched": ["a0", "a1", "a2"], "reply_stream": "ORDERS", "kv": "a",
                        "direct": "a0"}
    assert got["b"]["messages"] == 5 and got["b"]["fetched"][0] == "b0"
    assert got["b"]["kv"] == "b" and got["b"]["direct"] == "b0"
    assert got["b_after_a_deleted"] == 5 and got["b_last"] == 6
    assert got["a_after_delete"] == "NotFoundError"
    assert got["a_saw"] == []
    assert got["a_advisory"] == "$JS.EVENT.ADVISORY.STREAM.CREATED.ONLY_A"
    assert not got["a_advisory_body_names_b"]


def test_an_accounts_limits_hold_its_streams_and_consumers(gateway, drop_new_streams,  # noqa: F811
                                                            tmp_path):
    conf = tmp_path / "server.conf"
    conf.write_text("""
accounts {
  SMALL: { jetstream: {max_streams: 1, max_consumers: 1}, users: [ {user: s, password: s} ] }
  BIG: { jetstream: enabled, users: [ {user: b, password: b} ] }
  TIERED: { users: [ {user: t, password: t} ],
            jetstream: { max_file: 10000, max_streams: 2, disk_max_stream_bytes: 7000 } }
}
""")
    gw = gateway(config=str(conf))

    async def run():
        out = {}
        small = await nats.connect(f"nats://127.0.0.1:{gw.port}", user="s", password="s")
        big = await nats.connect(f"nats://127.0.0.1:{gw.port}", user="b", password="b")
        sjs, bjs = small.jetstream(timeout=10), big.jetstream(timeout=10)
        try:
            await sjs.add_stream(name="ONE", subjects=["one.>"])
            await bjs.add_stream(name="ONE", subjects=["one.>"])
            await bjs.add_stream(name="TWO", subjects=["two.>"])  # BIG has no limit
            for call in (lambda: sjs.add_stream(name="TWO", subjects=["two.>"]),):
                try:
                    await call()
                except nats.js.errors.APIError as exc:
                    out["second_stream"] = exc.err_code
            await sjs.add_consumer("ONE", durable_name="C1")
            try:
                await sjs.add_consumer("ONE", durable_name="C2")
            except nats.js.errors.APIError as exc:
                out["second_consumer"] = exc.err_code
            info = await sjs.account_info()
            out["limits"] = (info.limits.max_streams, info.limits.max_consumers)
            out["streams"] = info.streams
            tiered = await nats.connect(f"nats://127.0.0.1:{gw.port}", user="t", password="t")
            tjs = tiered.jetstream(timeout=10)
            try:
                await tjs.add_stream(name="T1", subjects=["t1"], max_bytes=6000,
                                     storage="file")
                for name, kw in (("T2", {"max_bytes": 6000}), ("T4", {"max_bytes": 8000}),
                                 ("T3", {})):  # reserved beyond max_file; above the cap
                    try:
                        await tjs.add_stream(name=name, subjects=[name.lower()], **kw)
                        out[name] = "made"
                    except nats.js.errors.APIError as exc:
                        out[name] = exc.err_code
                for name, kw in (("T5", {}),):
                    try:  # a third stream of two allowed
                        await tjs.add_stream(name=name, subjects=[name.lower()], **kw)
                        out[name] = "made"
                    except nats.js.errors.APIError as exc:
                        out[name] = exc.err_code
            finally:
                for name in ("T1", "T2", "T3", "T4", "T5"):
                    try:
                        await tjs.delete_stream(name)
                    except (nats.js.errors.APIError, NatsTimeout):
                        pass
                await tiered.close()
        finally:
            for name in ("ONE", "TWO"):
                for jsx in (sjs, bjs):
                    try:
                        await jsx.delete_stream(name)
                    except (nats.js.errors.APIError, NatsTimeout):
                        pass
            await small.close()
            await big.close()
        return out

    got = asyncio.run(run())
    assert got == {"second_stream": 10027, "second_consumer": 10026, "limits": (1, 1),
                   "streams": 1, "T2": 10047, "T3": "made", "T4": 10122, "T5": 10027}


def test_an_account_jwts_tiered_limits(gateway, drop_new_streams, tmp_path):  # noqa: F811
    """Operator mode: an account JWT's tiered_limits hold its R1 streams to the R1 tier."""
    from rayjet.auth.jwt import creds, issue
    from rayjet.auth.nkeys import KeyPair

    operator, account, user = KeyPair.create("O"), KeyPair.create("A"), KeyPair.create("U")
    op_jwt = issue({"sub": operator.public_key, "nats": {"type": "operator", "version": 2}},
                   operator)
    acc_jwt = issue({"sub": account.public_key, "nats": {
        "type": "account", "version": 2,
        "tiered_limits": {"R1": {"mem_storage": -1, "disk_storage": -1, "streams": 1,
                                 "consumer": -1}}}}, operator)
    user_jwt = issue({"sub": user.public_key, "nats": {"type": "user", "version": 2}},
                     account)
    (tmp_path / "user.creds").write_text(creds(user_jwt, user.seed))
    conf = tmp_path / "server.conf"
    conf.write_text(f'operator: "{op_jwt}"\nresolver: MEMORY\n'
                    f'resolver_preload: {{ {account.public_key}: "{acc_jwt}" }}\n')
    gw = gateway(config=str(conf))

    async def run():
        nc = await nats.connect(f"nats://127.0.0.1:{gw.port}",
                                user_credentials=str(tmp_path / "user.creds"))
        jsx = nc.jetstream(timeout=10)
        out = {}
        try:
            await jsx.add_stream(name="R1A", subjects=["r1a"])
            try:
                await jsx.add_stream(name="R1B", subjects=["r1b"])
                out["second"] = "made"
            except nats.js.errors.APIError as exc:
                out["second"] = exc.err_code
            out["names"] = sorted(s.config.name for s in await jsx.streams_info())
        finally:
            for name in ("R1A", "R1B"):
                try:
                    await jsx.delete_stream(name)
                except (nats.js.errors.APIError, NatsTimeout):
                    pass
            await nc.close()
        return out

    assert asyncio.run(run()) == {"second": 10027, "names": ["R1A"]}
