"""Metrics on real actors: publish, consume, then read them where Prometheus would, from the
node's Ray metrics agent (``ray.nodes()`` -> ``NodeManagerAddress:MetricsExportPort``)."""

from __future__ import annotations

import re
import urllib.request

import pytest
import ray

from rayjet import AckPolicy, StorageType
from tests import waiting

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Ray exports every 10 s by default and consumers update every 5 s: allow several rounds
DEADLINE = 120.0


def scrape() -> list[tuple[str, dict[str, str], float]]:
    """Every sample of every alive node's metrics endpoint: (name, labels, value)."""
    samples = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if not node.get("Alive") or not port:
            continue
        url = f"http://{node['NodeManagerAddress']}:{port}/metrics"
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if not line.startswith("ray_rayjet_"):
                continue
            head, _, value = line.rpartition(" ")
            name, _, labels = head.partition("{")
            samples.append((name, dict(LABEL.findall(labels)), float(value)))
    return samples


def values(samples, name: str, **labels: str) -> list[float]:
    return [v for n, lab, v in samples
            if n == name and all(lab.get(k) == want for k, want in labels.items())]


def scraped_when(check, what: str) -> list:
    """Scrape until ``check(samples)`` holds (Ray exports on an interval): those samples.
    A scrape per second: each one reads every node's metrics endpoint."""
    samples: list = []

    def holds() -> bool:
        samples[:] = scrape()
        return check(samples)

    try:
        waiting.wait_for(holds, DEADLINE, what, interval=1.0)
        return samples
    except AssertionError:
        pass  # reported below with what was exported, outside the handler: no chained trace
    mine = sorted({(n, tuple(sorted(lab.items())), v) for n, lab, v in samples
                   if "stream" not in lab or lab.get("stream") in what})
    pytest.fail(f"never saw {what} within {DEADLINE:.0f}s; rayjet samples: {mine[:40]}")


def test_metrics_agent_is_running(ray_session):
    """The session's Ray runs a metrics agent on every node (no dashboard needed)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    assert nodes and all(n.get("MetricsExportPort") for n in nodes)


def test_stream_consumer_and_raft_metrics_reach_prometheus(js, stream_name):
    s = stream_name
    js.add_stream(name=s, subjects=[f"{s}.>"], num_replicas=3, storage=StorageType.MEMORY)
    try:
        js.add_consumer(s, durable_name="C", ack_policy=AckPolicy.EXPLICIT)
        js.publish_batch([(f"{s}.x", f"m{i}".encode()) for i in range(25)])
        sub = js.pull_subscribe(stream=s, durable="C")
        msgs = sub.fetch(10, timeout=5)
        assert len(msgs) == 10
        for m in msgs:
            m.ack_sync()
        assert js.delete_msg(s, 25)
        info = js.stream_info(s)
        assert (info.state.messages, info.state.last_seq) == (24, 25)

        def stream_seen(smp):
            return (values(smp, "ray_rayjet_stream_messages", stream=s) == [24.0]
                    and values(smp, "ray_rayjet_stream_last_seq", stream=s) == [25.0])

        smp = scraped_when(stream_seen, f"ray_rayjet_stream_messages{{stream={s!r}}} == 24")
        assert values(smp, "ray_rayjet_stream_first_seq", stream=s) == [1.0]
        assert values(smp, "ray_rayjet_stream_bytes", stream=s) == [float(info.state.bytes)]
        lag = {lab["replica"] for n, lab, _ in smp
               if n == "ray_rayjet_stream_replica_lag" and lab.get("stream") == s}
        assert len(lag) == 3  # the leader reports every replica, itself included

        def counted(smp):
            return (sum(values(smp, "ray_rayjet_stream_published_total", stream=s)) == 25
                    and sum(values(smp, "ray_rayjet_stream_deleted_total", stream=s)) == 1)

        smp = scraped_when(counted, f"published 25 / deleted 1 on {s}")
        assert sum(values(smp, "ray_rayjet_stream_leader_changes_total", stream=s)) >= 1

        def consumer_seen(smp):
            tags = {"stream": s, "consumer": "C"}
            return (values(smp, "ray_rayjet_consumer_num_pending", **tags) == [14.0]
                    and values(smp, "ray_rayjet_consumer_ack_floor_stream_seq", **tags)
                    == [10.0]
                    and values(smp, "ray_rayjet_consumer_num_ack_pending", **tags) == [0.0])

        smp = scraped_when(consumer_seen, f"consumer {s} > C with 14 pending, ack floor 10")
        assert values(smp, "ray_rayjet_consumer_num_redelivered", stream=s,
                      consumer="C") == [0.0]

        def raft_seen(smp):
            return (sum(values(smp, "ray_rayjet_raft_proposals_total", kind="stream",
                               group=s)) >= 2
                    and sum(values(smp, "ray_rayjet_raft_commit_latency_seconds_count",
                                   kind="stream", group=s)) >= 2
                    and sum(values(smp, "ray_rayjet_raft_proposals_total", kind="consumer",
                                   group=f"{s}/C")) >= 1)

        smp = scraped_when(raft_seen, f"raft proposals and commit latency of {s}")
        assert sum(values(smp, "ray_rayjet_raft_commit_latency_seconds_sum", kind="stream",
                          group=s)) > 0
    finally:
        js.delete_stream(s)
