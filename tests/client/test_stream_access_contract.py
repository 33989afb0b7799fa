"""The StreamAccess contract (rayjet.api.stream_access): what KV buckets and object stores
need of a JetStream, checked the same way on both implementations: the cluster's client
(rayjet.client.JetStream) and a connection through a gateway (GatewayJetStream)."""

from __future__ import annotations

import socket
import uuid

import pytest

from rayjet.api.stream_access import StoredMessage, StreamAccess
from rayjet.errors import APIError, BadRequestError, NotFoundError
from rayjet.gateway import GatewayOptions, GatewayThread
from rayjet.remote.connection import Requester
from rayjet.remote.jetstream import GatewayJetStream
from tests.cluster.conftest import drop_new_streams, js  # noqa: F401


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def through_gateway(js):  # noqa: F811
    gw = GatewayThread(js, GatewayOptions(port=_free_port()))
    gw.start()
    client = GatewayJetStream(Requester(f"nats://127.0.0.1:{gw.port}", 20))
    yield client
    client.close()
    gw.stop()


@pytest.fixture(params=["cluster client", "through a gateway"])
def access(request, js, through_gateway):  # noqa: F811
    return js if request.param == "cluster client" else through_gateway


@pytest.fixture
def stream(js):  # noqa: F811
    name = "SA" + uuid.uuid4().hex[:8]
    js.add_stream(name=name, subjects=[f"{name.lower()}.>"], hosting="shared")
    yield name
    js.delete_stream(name)


def test_both_implement_the_protocol(js, through_gateway):  # noqa: F811
    assert isinstance(js, StreamAccess)
    assert isinstance(through_gateway, StreamAccess)


def test_publishing_to_a_stream_answers_each_message_in_order(access, stream):
    pre = stream.lower()
    answers = access.publish_to_stream(stream, [
        (f"{pre}.a", b"1", None),
        (f"{pre}.b", "two", {"X-Key": "v"}),
        (f"{pre}.a", b"3", {"Nats-Expected-Last-Subject-Sequence": "1"}),
        (f"{pre}.a", b"4", {"Nats-Expected-Last-Subject-Sequence": "1"}),  # refused: 3 is last
    ])
    assert [a.seq for a in answers[:3]] == [1, 2, 3]
    assert all(a.stream == stream for a in answers[:3])
    assert isinstance(answers[3], APIError) and answers[3].err_code == 10071
    assert access.stream_info(stream).state.messages == 3


def test_a_scan_yields_stored_messages_in_order_with_filter_and_range(access, stream):
    pre = stream.lower()
    access.publish_to_stream(stream, [(f"{pre}.{'ab'[i % 2]}", b"x%d" % i,
                                       {"N": str(i)} if i == 4 else None)
                                      for i in range(10)])
    every = list(access.scan_stream(stream))
    assert [m.seq for m in every] == list(range(1, 11))
    assert all(isinstance(m, StoredMessage) for m in every)
    assert every[0].subject == f"{pre}.a" and every[0].data == b"x0" and every[0].header == b""
    assert b"N: 4" in every[4].header
    assert every[0].ts_ns <= every[-1].ts_ns and every[0].ts_ns > 0
    only_b = list(access.scan_stream(stream, f"{pre}.b"))
    assert [m.seq for m in only_b] == [2, 4, 6, 8, 10]
    ranged = list(access.scan_stream(stream, ">", start_seq=4, end_seq=7))
    assert [m.seq for m in ranged] == [4, 5, 6, 7]
    # a small page still reads everything, a page at a time
    assert len(list(access.scan_stream(stream, page_bytes=1))) == 10


def test_a_missing_stream_is_not_found(access):
    with pytest.raises(NotFoundError) as err:
        access.publish_to_stream("SA_NOPE" + uuid.uuid4().hex[:6], [("sa.nope", b"x", None)])
    assert err.value.err_code in (10059, 10060)  # stream not found / no stream captures it
    with pytest.raises(NotFoundError):
        list(access.scan_stream("SA_NOPE" + uuid.uuid4().hex[:6]))


def test_buckets_work_over_either(access):
    name = "sa" + uuid.uuid4().hex[:8]
    kv = access.create_key_value(bucket=name, history=2)
    try:
        kv.put("k", b"1")
        kv.put("k", b"2")
        assert kv.get("k").value == b"2"
        assert [e.value for e in kv.history("k")] == [b"1", b"2"]
        assert kv.keys() == ["k"]
    finally:
        access.delete_key_value(name)
    obs = access.create_object_store(bucket=name)
    try:
        obs.put("blob", b"y" * 300_000)
        assert obs.get("blob").data == b"y" * 300_000
    finally:
        access.delete_object_store(name)


def test_object_refs_only_inside_the_cluster(js, through_gateway):  # noqa: F811
    import ray

    name = "sa" + uuid.uuid4().hex[:8]
    obs = js.create_object_store(bucket=name)
    try:
        obs.put("blob", b"z" * 1000)
        assert ray.get(obs.get_ref("blob"), timeout=60) == b"z" * 1000
        with pytest.raises(BadRequestError, match="inside the Ray cluster"):
            through_gateway.object_store(name).get_ref("blob")
    finally:
        js.delete_object_store(name)
