"""What replica actors export, from their state (no Ray cluster: a sink records it)."""

from __future__ import annotations

from rayjet.actors.metrics import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    LATENCY_SAMPLES,
    ConsumerMetrics,
    RaftMetrics,
    StreamMetrics,
)
from rayjet.api import ConsumerInfo


class FakeSink:
    def __init__(self) -> None:
        self.gauges: dict[tuple, float] = {}
        self.counts: dict[tuple, float] = {}
        self.observed: list[tuple] = []

    @staticmethod
    def key(name, tags):
        assert set(tags) == set(dict(GAUGES, **COUNTERS).get(name, HISTOGRAMS.get(name, (0, ())))[1])
        return (name, *sorted(tags.items()))

    def gauge(self, name, value, tags):
        assert name in GAUGES
        self.gauges[self.key(name, tags)] = value

    def count(self, name, value, tags):
        assert name in COUNTERS and value >= 0
        k = self.key(name, tags)
        self.counts[k] = self.counts.get(k, 0) + value

    def observe(self, name, value, tags):
        assert name in HISTOGRAMS
        self.observed.append((self.key(name, tags), value))


def g(sink, name, **tags):
    return sink.gauges[(name, *sorted(tags.items()))]


def n(sink, name, **tags):
    return sink.counts.get((name, *sorted(tags.items())), 0)


def test_stream_metrics_gauges_and_counters_from_state_deltas():
    sink = FakeSink()
    m = StreamMetrics("ORDERS", sink)
    m.became_leader(last_seq=4, messages=4)
    m.update(messages=10, bytes=360, first_seq=1, last_seq=10, lag={"r1": 0, "r2": 3})
    assert g(sink, "rayjet_stream_messages", stream="ORDERS") == 10
    assert g(sink, "rayjet_stream_bytes", stream="ORDERS") == 360
    assert g(sink, "rayjet_stream_first_seq", stream="ORDERS") == 1
    assert g(sink, "rayjet_stream_last_seq", stream="ORDERS") == 10
    assert g(sink, "rayjet_stream_replica_lag", stream="ORDERS", replica="r2") == 3
    # counted from the state the leader started with
    assert n(sink, "rayjet_stream_published_total", stream="ORDERS") == 6
    assert n(sink, "rayjet_stream_deleted_total", stream="ORDERS") == 0
    assert n(sink, "rayjet_stream_leader_changes_total", stream="ORDERS") == 1

    # 5 published, and 8 removed (a purge, limits...) in the meantime
    m.update(messages=7, bytes=252, first_seq=9, last_seq=15, lag={"r1": 0, "r2": 0})
    assert n(sink, "rayjet_stream_published_total", stream="ORDERS") == 11
    assert n(sink, "rayjet_stream_deleted_total", stream="ORDERS") == 8
    assert g(sink, "rayjet_stream_replica_lag", stream="ORDERS", replica="r2") == 0

    # a work queue: 4 in and 4 out between two updates
    m.update(messages=7, bytes=252, first_seq=13, last_seq=19, lag={})
    assert n(sink, "rayjet_stream_published_total", stream="ORDERS") == 15
    assert n(sink, "rayjet_stream_deleted_total", stream="ORDERS") == 12

    # leadership lost, then regained with more applied meanwhile: counted from there
    m.lost_leadership()
    m.update(messages=7, bytes=252, first_seq=20, last_seq=26, lag={})  # no baseline: 0
    m.became_leader(last_seq=110, messages=98)
    m.update(messages=100, bytes=1, first_seq=13, last_seq=112, lag={})
    assert n(sink, "rayjet_stream_published_total", stream="ORDERS") == 17
    assert n(sink, "rayjet_stream_deleted_total", stream="ORDERS") == 12
    assert n(sink, "rayjet_stream_leader_changes_total", stream="ORDERS") == 2


def test_consumer_and_raft_metrics():
    sink = FakeSink()
    info = ConsumerInfo.from_dict({
        "stream_name": "ORDERS", "name": "DISPATCH", "num_pending": 7, "num_ack_pending": 2,
        "num_redelivered": 1, "num_waiting": 3,
        "delivered": {"consumer_seq": 5, "stream_seq": 9},
        "ack_floor": {"consumer_seq": 3, "stream_seq": 6}})
    c = ConsumerMetrics("ORDERS", "DISPATCH", sink)
    c.became_leader()
    c.update(info)
    tags = {"stream": "ORDERS", "consumer": "DISPATCH"}
    assert g(sink, "rayjet_consumer_num_pending", **tags) == 7
    assert g(sink, "rayjet_consumer_num_ack_pending", **tags) == 2
    assert g(sink, "rayjet_consumer_num_redelivered", **tags) == 1
    assert g(sink, "rayjet_consumer_num_waiting", **tags) == 3
    assert g(sink, "rayjet_consumer_delivered_stream_seq", **tags) == 9
    assert g(sink, "rayjet_consumer_ack_floor_stream_seq", **tags) == 6
    assert n(sink, "rayjet_consumer_leader_changes_total", **tags) == 1

    r = RaftMetrics("stream", "ORDERS", sink)
    for _ in range(3):
        r.proposed()
    r.committed(0.004)
    assert n(sink, "rayjet_raft_proposals_total", kind="stream", group="ORDERS") == 0
    assert sink.observed == []  # nothing per entry: observed with the flush
    r.flush()
    r.flush()  # nothing new: nothing counted
    assert n(sink, "rayjet_raft_proposals_total", kind="stream", group="ORDERS") == 3
    assert sink.observed == [(("rayjet_raft_commit_latency_seconds", ("group", "ORDERS"),
                               ("kind", "stream")), 0.004)]


def test_commit_latencies_are_a_bounded_uniform_sample_per_flush():
    sink = FakeSink()
    r = RaftMetrics("stream", "S", sink)
    for i in range(10_000):
        r.committed(i / 10_000)
    r.flush()
    seen = [v for _, v in sink.observed]
    assert len(seen) == LATENCY_SAMPLES
    assert 0.25 < sum(seen) / len(seen) < 0.75  # from the whole run, not its start
    r.committed(0.5)
    r.flush()
    assert len(sink.observed) == LATENCY_SAMPLES + 1


def test_every_metric_is_named_for_prometheus():
    import re

    for name in [*GAUGES, *COUNTERS, *HISTOGRAMS]:
        assert re.fullmatch(r"rayjet_[a-z_]+", name), name
    assert all(name.endswith("_total") for name in COUNTERS)


def test_each_replica_says_whether_it_serves_repairs_or_stopped():
    """rayjet_raft_replica_health, set by every member from its group's state."""
    import asyncio

    from rayjet.actors.raft_host import RaftHost
    from rayjet.replication import GroupOptions, MemoryLog, ReplicaGroup
    from tests.replication.test_group import ListMachine

    sink = FakeSink()
    group = ReplicaGroup("r1", MemoryLog(), ListMachine(), voters=["r1"],
                         options=GroupOptions())
    host = RaftHost(group, lambda peer, msgs: None, tick_seconds=0.01,
                    metrics=RaftMetrics("stream", "S_G", sink))

    key = ("rayjet_raft_replica_health", ("group", "S_G"), ("kind", "stream"),
           ("replica", "r1"))

    async def next_health():
        sink.gauges.pop(key, None)
        for _ in range(500):
            await asyncio.sleep(0.01)
            if key in sink.gauges:
                return sink.gauges[key]
        raise AssertionError("no health reported")

    async def run():
        host.start(lead_at_once=True)
        try:
            seen = [await next_health()]
            group.copying = True
            seen.append(await next_health())
            group.copying = False
            group.failure = "disk error: OSError: EIO"
            seen.append(await next_health())
            return seen
        finally:
            await host.stop()

    assert asyncio.run(run()) == [0, 1, 2]
