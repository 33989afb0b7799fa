"""nats-server's system requests through the gateway (``$SYS.REQ.SERVER.PING[.<NAME>]``,
``$SYS.REQ.SERVER.<id>.<NAME>``): the same raw requests sent to nats-server 2.15.1 (as a
user of its system account) and to a gateway answer with the same envelope and field names;
request bodies of any bytes are answered without harm."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.natsbase import NatsServer
from rayjet.engine import sys_requests as sr
from tests.cluster.conftest import js, stream_name  # noqa: F401
from tests.gateway.test_gateway_server import gateway  # noqa: F401

SYSTEM_ACCOUNT = """
accounts {
  $SYS { users: [{user: sys, password: sys}] }
  APP { jetstream: enabled, users: [{user: app, password: app}] }
}
no_auth_user: app
"""
PING = "$SYS.REQ.SERVER.PING"
# endpoints whose documents rayjet builds from state of its own, compared field by field
DOCUMENTS = ("VARZ", "CONNZ", "SUBSZ", "JSZ", "HEALTHZ", "ACCOUNTZ", "ROUTEZ", "GATEWAYZ",
             "LEAFZ")
# fields of nats-server's that rayjet has no counterpart for
NOT_OURS = {"git_commit", "feature_flags", "disk_io_wait_stats", "tags", "metadata"}
ANSWER_WAIT = 30.0  # s an answer may take on a busy machine


async def _ask(nc, subject: str, body: bytes = b"") -> dict:
    msg = await nc.request(subject, body, timeout=ANSWER_WAIT)
    return json.loads(msg.data)


async def _unanswered_then_answered(nc, subject: str, body: bytes) -> list[dict]:
    """Send ``subject`` with ``body`` and then an IDZ ping to one inbox: what came before the
    IDZ answer (a server that leaves the first unanswered sends nothing before it)."""
    inbox = nc.new_inbox()
    got: asyncio.Queue = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=got.put)
    await nc.publish(subject, body, reply=inbox)
    await nc.publish(PING + ".IDZ", b"", reply=inbox)
    before = []
    while True:
        doc = json.loads((await asyncio.wait_for(got.get(), ANSWER_WAIT)).data)
        if "server" not in doc and "id" in doc:
            break
        before.append(doc)
    await sub.unsubscribe()
    return before


async def _observe(url: str) -> dict:
    nc = await nats.connect(url, name="sysreq")
    try:
        out: dict = {"statsz": await _ask(nc, PING), "idz": await _ask(nc, PING + ".IDZ")}
        deadline = time.monotonic() + ANSWER_WAIT
        while True:  # a server just started may not call itself healthy yet
            out["HEALTHZ"] = await _ask(nc, f"{PING}.HEALTHZ")
            if out["HEALTHZ"]["data"]["status"] == "ok" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        for name in DOCUMENTS + ("STATSZ", "EXPVARZ", "IPQUEUESZ", "RAFTZ", "PROFILEZ"):
            if name != "HEALTHZ":
                out[name] = await _ask(nc, f"{PING}.{name}")
        server_id = out["idz"]["id"]
        out["direct"] = await _ask(nc, f"$SYS.REQ.SERVER.{server_id}.CONNZ",
                                   b'{"subscriptions": true, "state": 0}')
        out["jsz_accounts"] = await _ask(nc, PING + ".JSZ",
                                         b'{"accounts": true, "streams": true}')
        out["junk"] = await _ask(nc, PING + ".VARZ", b"junk")
        out["wrong_type"] = await _ask(nc, PING + ".CONNZ", b'{"state": "open"}')
        out["bad_sort"] = await _ask(nc, PING + ".CONNZ", b'{"sort": "bogus"}')
        out["filtered"] = await _unanswered_then_answered(
            nc, PING + ".VARZ", b'{"server_name": "not-this-one"}')
        out["filtered_exact"] = await _unanswered_then_answered(
            nc, PING + ".VARZ", json.dumps({"server_name": out["idz"]["name"][:3],
                                            "exact_match": True}).encode())
        out["kept"] = await _ask(nc, PING + ".VARZ",
                                 json.dumps({"server_name": out["idz"]["name"][:3]}).encode())
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(PING + ".NOPE", b"", timeout=ANSWER_WAIT)
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(f"$SYS.REQ.SERVER.{server_id}X.VARZ", b"", timeout=ANSWER_WAIT)
        return out
    finally:
        await nc.close()


def _keys(doc: dict) -> set[str]:
    return set(doc) - NOT_OURS


def test_answers_have_nats_servers_shapes(gateway):  # noqa: F811
    gw = gateway()
    ours = asyncio.run(_observe(f"nats://127.0.0.1:{gw.port}"))
    with NatsServer(config=SYSTEM_ACCOUNT) as ns:
        theirs = asyncio.run(_observe(f"nats://sys:sys@127.0.0.1:{ns.port}"))
    # the envelope and the server's identity
    for name in DOCUMENTS + ("direct", "jsz_accounts", "kept"):
        assert set(ours[name]) == set(theirs[name]) == {"server", "data"}, name
        assert _keys(theirs[name]["server"]) == _keys(ours[name]["server"]), name
    for name in ("statsz", "STATSZ"):
        assert set(ours[name]) == set(theirs[name]) == {"server", "statsz"}, name
    info = ours["VARZ"]["server"]
    assert (info["id"], info["name"], info["ver"]) == (
        gw.gateway.server_id, gw.options.server_name, "2.15.1")
    assert info["jetstream"] is True and info["flags"] & 1
    assert info["seq"] > ours["statsz"]["server"]["seq"]  # every answer numbered anew
    assert set(ours["idz"]) == set(theirs["idz"]) == {"name", "host", "id"}
    # the documents: every field nats-server writes (but those of features rayjet lacks)
    for name in DOCUMENTS:
        missing = _keys(theirs[name]["data"]) - set(ours[name]["data"])
        assert not missing, (name, missing)
    assert _keys(theirs["statsz"]["statsz"]) <= set(ours["statsz"]["statsz"])
    assert theirs["HEALTHZ"]["data"] == ours["HEALTHZ"]["data"] == {
        "status": "ok", "status_code": 200}
    (conn,) = ours["direct"]["data"]["connections"]
    (their_conn,) = theirs["direct"]["data"]["connections"]
    assert conn["name"] == their_conn["name"] == "sysreq"
    assert [s[:7] for s in conn["subscriptions_list"]] == ["_INBOX."]
    assert set(their_conn) <= set(conn)
    assert "account_details" in ours["jsz_accounts"]["data"]
    for name in ("EXPVARZ", "IPQUEUESZ", "RAFTZ", "PROFILEZ"):
        assert set(ours[name]) == set(theirs[name]) == {"server", "data"}, name
    assert ours["PROFILEZ"]["data"] == theirs["PROFILEZ"]["data"]
    # refusals: unreadable options 400 (no data), a document that cannot be made 500
    for name, code, keys in (("junk", 400, {"server", "error"}),
                             ("wrong_type", 400, {"server", "error"}),
                             ("bad_sort", 500, {"server", "data", "error"})):
        assert set(ours[name]) == set(theirs[name]) == keys, name
        assert ours[name]["error"]["code"] == theirs[name]["error"]["code"] == code, name
        assert set(ours[name]["error"]) == {"code", "description"}
    assert ours["wrong_type"]["error"]["description"] == \
        theirs["wrong_type"]["error"]["description"].replace("server.ConnState", "int")
    # a filter that leaves the server out: no answer at all
    assert ours["filtered"] == theirs["filtered"] == []
    assert ours["filtered_exact"] == theirs["filtered_exact"] == []


# -- request bodies, without a server ------------------------------------------------------
def test_options_read_as_gos_decoder_reads_them():
    assert sr.parse_options("CONNZ", b"") == {} == sr.parse_options("CONNZ", b"null")
    assert sr.parse_options("CONNZ", b'{"LIMIT": 5, "Limit": 7, "x": {"y": 1}, "acc": null}'
                            ) == {"limit": 7}
    for body, words in ((b"[]", "array into Go value of type server.ConnzEventOptions"),
                        (b'{"limit": 1.5}', "number 1.5 into Go struct field "
                                            "ConnzEventOptions.limit of type int"),
                        (b'{"cid": -1}', "number -1 into Go struct field ConnzEventOptions.cid"),
                        (b'{"tags": "a"}', "string into Go struct field "
                                           "ConnzEventOptions.tags of type []string"),
                        (b'{"subscriptions": 1}', "number into Go struct field"),
                        (b"\xff", "invalid JSON"), (b"NaN", "invalid JSON")):
        with pytest.raises(sr.OptionsError) as err:
            sr.parse_options("CONNZ", body)
        assert words in str(err.value), body
    assert sr.http_query("CONNZ", {"state": 2, "subscriptions_detail": True, "offset": -3,
                                   "limit": 0, "sort": "msgs_to"}) == {
        "state": "any", "subs": "detail", "sort": "msgs_to"}
    assert sr.http_query("JSZ", {"consumer": True, "account": "$G"}) == {
        "consumers": "true", "accounts": "true"}


def test_filters_leave_other_servers_out():
    me = {"name": "gw-east", "host": "127.0.0.1", "domain": "hub"}
    assert not sr.filtered_out({}, **me)
    assert not sr.filtered_out({"server_name": "east"}, **me)
    assert sr.filtered_out({"server_name": "east", "exact_match": True}, **me)
    assert not sr.filtered_out({"server_name": "gw-east", "exact_match": True}, **me)
    assert sr.filtered_out({"host": "10.0.0.1"}, **me)
    assert sr.filtered_out({"tags": ["az:1"]}, **me)
    assert sr.filtered_out({"domain": "leaf"}, **me)
    assert not sr.filtered_out({"domain": "hub", "cluster": ""}, **me)
    assert sr.endpoint("$SYS.REQ.SERVER.PING", "ID") == "STATSZ"
    assert sr.endpoint("$SYS.REQ.SERVER.ID.JSZ", "ID") == "JSZ"
    assert sr.endpoint("$SYS.REQ.SERVER.OTHER.JSZ", "ID") is None
    assert sr.endpoint("$SYS.REQ.SERVER.PING.KICK", "ID") is None


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["limit", "OFFSET", "state", "sort", "tags", "server_name", "cid",
                         "subscriptions", "exact_match", "x"]) | st.text(max_size=6),
        inner, max_size=5),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(sr.ENDPOINTS)),
       body=st.binary(max_size=64) | _json_values.map(lambda v: json.dumps(v).encode()))
def test_any_body_is_read_or_refused(name, body):
    try:
        options = sr.parse_options(name, body)
    except sr.OptionsError as err:
        assert str(err)
        return
    sr.filtered_out(options, name="n", host="h")
    query = sr.http_query(name, options)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in query.items())
