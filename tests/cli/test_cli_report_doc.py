"""`server status` rows and the nats-server-like jsz document of `server report`, built
from infos (no Ray cluster)."""

from __future__ import annotations

from datetime import UTC, datetime

from rayjet.api import ConsumerInfo, StreamInfo
from rayjet.client.report import StreamReport, consumer_row, jsz, status_rows, stream_row


def _stream(name, storage, msgs, nbytes, consumers, last=None):
    return StreamInfo.from_dict({
        "config": {"name": name, "subjects": [f"{name}.>"], "storage": storage,
                   "num_replicas": 3},
        "created": "2026-01-02T03:04:05Z",
        "state": {"messages": msgs, "bytes": nbytes, "first_seq": 1 if msgs else 0,
                  "last_seq": last if last is not None else msgs,
                  "consumer_count": consumers},
        "cluster": {"raft_group": f"S-{name}", "leader": "r1",
                    "replicas": [{"name": "r2", "current": True, "active": 1000, "lag": 0},
                                 {"name": "r3", "current": False, "active": 2000,
                                  "lag": 4}]}})


def _consumer(stream, name, pending):
    return ConsumerInfo.from_dict({
        "stream_name": stream, "name": name, "created": "2026-01-02T03:04:06Z",
        "config": {"durable_name": name, "ack_policy": "explicit"},
        "delivered": {"consumer_seq": 4, "stream_seq": 4},
        "ack_floor": {"consumer_seq": 2, "stream_seq": 2},
        "num_ack_pending": 2, "num_redelivered": 1, "num_waiting": 0,
        "num_pending": pending, "cluster": {"leader": "r2"}})


def reports():
    return [
        StreamReport("ORDERS", _stream("ORDERS", "file", 10, 400, 2),
                     consumers=[_consumer("ORDERS", "A", 6), _consumer("ORDERS", "B", 0)]),
        StreamReport("CACHE", _stream("CACHE", "memory", 3, 90, 0, last=7)),
        StreamReport("LOST", error="no quorum"),
    ]


def test_jsz_document_has_nats_server_shape():
    now = datetime(2026, 1, 2, 3, 5, tzinfo=UTC)
    meta = {"name": "meta", "leader": "m1", "cluster_size": 3,
            "replicas": [{"name": "m0", "current": True, "active": 0.0, "lag": 0},
                         {"name": "m2", "current": False, "active": 1.0, "lag": 2}]}
    doc = jsz(reports(), meta, now=now, server_id="10.0.0.1:6379", store_dir="/data")
    assert doc["server_id"] == "10.0.0.1:6379" and doc["now"] == "2026-01-02T03:05:00Z"
    assert doc["config"] == {"max_memory": -1, "max_storage": -1, "store_dir": "/data"}
    assert (doc["streams"], doc["consumers"], doc["messages"], doc["bytes"]) == (3, 2, 13, 490)
    assert (doc["memory"], doc["storage"]) == (90, 400)
    assert doc["ha_assets"] == 3 + 2 + 1
    assert doc["meta_cluster"] == {
        "name": "meta", "leader": "m1", "cluster_size": 3,
        "replicas": [{"name": "m0", "current": True, "active": 0, "lag": 0},
                     {"name": "m2", "current": False, "active": 1_000_000_000, "lag": 2}]}
    [acc] = doc["account_details"]
    assert acc["name"] == acc["id"] == "$G"
    orders, cache, lost = acc["stream_detail"]
    assert orders["name"] == "ORDERS" and orders["created"] == "2026-01-02T03:04:05Z"
    assert orders["cluster"]["leader"] == "r1"
    assert [(r["name"], r["current"], r["lag"]) for r in orders["cluster"]["replicas"]] == [
        ("r2", True, 0), ("r3", False, 4)]
    assert orders["state"]["messages"] == 10 and orders["state"]["consumer_count"] == 2
    assert orders["stream_raft_group"] == "S-ORDERS"
    assert "config" not in orders
    a, b = orders["consumer_detail"]
    assert a["name"] == "A" and a["stream_name"] == "ORDERS" and "config" not in a
    assert a["num_pending"] == 6 and a["num_ack_pending"] == 2 and a["num_redelivered"] == 1
    assert a["delivered"]["stream_seq"] == 4 and a["ack_floor"]["stream_seq"] == 2
    assert "num_waiting" in a and b["num_pending"] == 0
    assert cache["state"]["last_seq"] == 7 and "consumer_detail" not in cache
    assert lost == {"name": "LOST", "error": "no quorum"}

    with_cfg = jsz(reports(), None, now=now, config=True)
    assert "meta_cluster" not in with_cfg and with_cfg["ha_assets"] == 5
    detail = with_cfg["account_details"][0]["stream_detail"][0]
    assert detail["config"]["name"] == "ORDERS"
    assert detail["consumer_detail"][0]["config"]["durable_name"] == "A"


def test_status_rows():
    streams, consumers = status_rows(reports())
    orders = streams[0]
    assert (orders["messages"], orders["bytes"], orders["first_seq"], orders["last_seq"],
            orders["lag"], orders["leader"]) == (10, 400, 1, 10, 4, "r1")
    assert streams[2] == {"stream": "LOST", "error": "no quorum"}
    assert consumers[0] == consumer_row("ORDERS", _consumer("ORDERS", "A", 6))
    assert consumers[0]["num_pending"] == 6 and consumers[0]["ack_floor_stream_seq"] == 2
    assert consumers[0]["num_redelivered"] == 1 and consumers[0]["leader"] == "r2"
    assert stream_row(StreamReport("X", error="gone")) == {"stream": "X", "error": "gone"}
