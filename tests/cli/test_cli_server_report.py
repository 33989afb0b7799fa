"""`rayjet server status` with per-stream and per-consumer numbers, and `rayjet server
report` (`--json`: shaped like nats-server's /jsz?streams=true&consumers=true)."""

from __future__ import annotations

import pytest

from rayjet import AckPolicy, StorageType


@pytest.fixture
def busy(js, stream_name):
    """An R3 stream with 12 messages and a consumer that got 5 and acked 3 of them."""
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.>"], num_replicas=3, storage=StorageType.MEMORY)
    js.add_consumer(s, durable_name="WORK", ack_policy=AckPolicy.EXPLICIT, ack_wait=300)
    js.publish_batch([(f"{s}.job", f"j{i}".encode()) for i in range(12)])
    msgs = js.pull_subscribe(stream=s, durable="WORK").fetch(5, timeout=5)
    assert len(msgs) == 5
    for m in msgs[:3]:
        m.ack_sync()
    yield s
    js.delete_stream(s)


def test_server_status_shows_stream_and_consumer_numbers(cli, js, busy):
    s = busy
    status = cli.json("server", "status")
    (row,) = [r for r in status["streams"] if r["stream"] == s]
    info = js.stream_info(s)
    assert (row["messages"], row["bytes"], row["first_seq"], row["last_seq"]) == (
        12, info.state.bytes, 1, 12)
    assert row["replicas"] == 3 and row["consumers"] == 1
    assert row["leader"] == info.cluster.leader and len(row["peers"]) == 2
    assert row["lag"] == max(p["lag"] for p in row["peers"])
    (crow,) = [r for r in status["consumers"] if r["stream"] == s]
    assert crow["consumer"] == "WORK"
    assert (crow["num_pending"], crow["num_ack_pending"], crow["num_redelivered"],
            crow["ack_floor_stream_seq"], crow["delivered_stream_seq"]) == (7, 2, 0, 3, 5)

    out = cli("server", "status").stdout
    assert "Ray nodes" in out and "Consumers (" in out and "Ack pending" in out
    (line,) = [ln for ln in out.splitlines() if s in ln and "WORK" in ln]
    cells = [cell.strip() for cell in line.split("│")]
    assert cells[3:8] == ["7", "2", "0", "0", "3"]  # pending, ack pending, redel., waiting, floor


def test_server_report_json_is_shaped_like_jsz(cli, js, busy):
    s = busy
    doc = cli.json("server", "report")
    assert doc["now"].endswith("Z") and doc["server_id"]
    assert doc["config"]["store_dir"] == js.meta_cluster()["data_dir"]  # the cluster's
    assert doc["streams"] >= 1 and doc["consumers"] >= 1 and doc["messages"] >= 12
    assert doc["memory"] >= js.stream_info(s).state.bytes and "storage" in doc
    meta = doc["meta_cluster"]
    assert meta["leader"] in ("m0", "m1", "m2") and meta["cluster_size"] == 3
    assert sorted(p["name"] for p in meta["replicas"]) == sorted(
        {"m0", "m1", "m2"} - {meta["leader"]})
    assert all({"name", "current", "active", "lag"} <= set(p) for p in meta["replicas"])

    [account] = doc["account_details"]
    (detail,) = [d for d in account["stream_detail"] if d["name"] == s]
    assert detail["created"] and detail["state"]["messages"] == 12
    assert detail["state"]["first_seq"] == 1 and detail["state"]["last_seq"] == 12
    cluster = detail["cluster"]
    assert cluster["leader"] in ("r0", "r1", "r2") and len(cluster["replicas"]) == 2
    for peer in cluster["replicas"]:
        assert {"name", "current", "active", "lag"} <= set(peer)
    assert "config" not in detail
    (consumer,) = detail["consumer_detail"]
    assert consumer["name"] == "WORK" and consumer["stream_name"] == s
    assert (consumer["num_pending"], consumer["num_ack_pending"],
            consumer["num_redelivered"], consumer["num_waiting"]) == (7, 2, 0, 0)
    assert consumer["delivered"]["stream_seq"] == 5 and consumer["ack_floor"]["stream_seq"] == 3
    assert consumer["cluster"]["leader"] and len(consumer["cluster"]["replicas"]) == 2
    assert "config" not in consumer
    assert doc["streams"] == len(account["stream_detail"])

    with_config = cli.json("server", "report", "--config")
    (detail,) = [d for d in with_config["account_details"][0]["stream_detail"]
                 if d["name"] == s]
    assert detail["config"]["num_replicas"] == 3
    assert detail["consumer_detail"][0]["config"]["durable_name"] == "WORK"

    out = cli("server", "report").stdout
    assert "JetStream report" in out and "Meta leader" in out and s in out
