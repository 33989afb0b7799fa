"""rayjet's metrics, exported through Ray's metrics API (Prometheus format, Ray's dashboard).

The replica actors update them from state they already hold, never per message:

- gauges from the leader of each stream or consumer, about once a second. Ray's metrics
  agent forgets a gauge series its process stopped setting (after about two export
  intervals), so the series of a replica that lost its leadership fade out and the current
  leader's remain;
- counters per tick or per raft entry, with the batch's count;
- the commit latency of raft entries (one entry carries a whole client batch), kept in the
  replica and observed with the counters' flush, at most ``LATENCY_SAMPLES`` entries per
  flush (a uniform sample beyond that): a Ray metric update costs tens of microseconds,
  more than a small publish's own work on the leader, so none is made per entry.

Ray prefixes every application metric with ``ray_``: ``rayjet_stream_messages`` is scraped
as ``ray_rayjet_stream_messages``. ``RAYJET_METRICS=0`` in the actors' environment turns
the export off.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import Any, Protocol

STREAM = ("stream",)
REPLICA = ("stream", "replica")
CONSUMER = ("stream", "consumer")
RAFT = ("kind", "group")
RAFT_REPLICA = ("kind", "group", "replica")

# name -> (description, tag keys)
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "rayjet_stream_messages": ("Messages stored in the stream", STREAM),
    "rayjet_stream_bytes": ("Bytes stored in the stream", STREAM),
    "rayjet_stream_first_seq": ("Sequence of the stream's first message", STREAM),
    "rayjet_stream_last_seq": ("Sequence of the stream's last message", STREAM),
    "rayjet_stream_replica_lag": ("Raft entries a replica is behind its leader's log",
                                  REPLICA),
    "rayjet_consumer_num_pending": ("Messages matching the consumer not yet delivered",
                                    CONSUMER),
    "rayjet_consumer_num_ack_pending": ("Messages delivered and awaiting an ack", CONSUMER),
    "rayjet_consumer_num_redelivered": ("Unacked messages delivered more than once",
                                        CONSUMER),
    "rayjet_consumer_num_waiting": ("Pull requests waiting for messages", CONSUMER),
    "rayjet_consumer_delivered_stream_seq": ("Stream sequence of the last delivery",
                                             CONSUMER),
    "rayjet_consumer_ack_floor_stream_seq": ("Stream sequence below which all is acked",
                                             CONSUMER),
    "rayjet_raft_replica_health": ("0 serving; 1 repairing (rejoining after damage to its "
                                   "log, or copying its store from a peer); 2 stopped on a "
                                   "disk error until restarted", RAFT_REPLICA),
}
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "rayjet_stream_published_total": ("Sequences the stream assigned (messages stored)",
                                      STREAM),
    "rayjet_stream_deleted_total": ("Messages removed from the stream (deletes, purges, "
                                    "limits, retention, TTL)", STREAM),
    "rayjet_stream_leader_changes_total": ("Times a replica became the stream's leader",
                                           STREAM),
    "rayjet_consumer_leader_changes_total": ("Times a replica became the consumer's "
                                             "leader", CONSUMER),
    "rayjet_raft_proposals_total": ("Raft entries proposed by a group's leader", RAFT),
}
LATENCY_BOUNDARIES = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
                      2.0, 5.0]
# name -> (description, tag keys, bucket boundaries)
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...], list[float]]] = {
    "rayjet_raft_commit_latency_seconds": (
        "Seconds from a leader's proposal to its apply (quorum write included)", RAFT,
        LATENCY_BOUNDARIES),
}
EVERY = 1.0  # seconds between gauge updates
LATENCY_SAMPLES = 64  # commit latencies observed per group per flush, at most


class Sink(Protocol):
    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None: ...
    def count(self, name: str, value: float, tags: Mapping[str, str]) -> None: ...
    def observe(self, name: str, value: float, tags: Mapping[str, str]) -> None: ...


class NullSink:
    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        pass

    def count(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        pass

    def observe(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        pass


class RaySink:
    """Creates each ``ray.util.metrics`` object on first use, in the actor's process."""

    def __init__(self) -> None:
        self._metrics: dict[str, Any] = {}

    def _metric(self, name: str) -> Any:
        m = self._metrics.get(name)
        if m is None:
            from ray.util import metrics

            if name in GAUGES:
                desc, keys = GAUGES[name]
                m = metrics.Gauge(name, desc, tag_keys=keys)
            elif name in COUNTERS:
                desc, keys = COUNTERS[name]
                m = metrics.Counter(name, desc, tag_keys=keys)
            else:
                desc, keys, bounds = HISTOGRAMS[name]
                m = metrics.Histogram(name, desc, boundaries=bounds, tag_keys=keys)
            self._metrics[name] = m
        return m

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._metric(name).set(value, tags=dict(tags))

    def count(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        if value > 0:
            self._metric(name).inc(value, tags=dict(tags))

    def observe(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._metric(name).observe(value, tags=dict(tags))


_SINK: Sink | None = None


def enabled() -> bool:
    return os.environ.get("RAYJET_METRICS", "1").strip().lower() not in ("0", "false", "no",
                                                                          "off")


def sink() -> Sink:
    """This process's sink: Ray's metrics, or nothing when ``RAYJET_METRICS=0``."""
    global _SINK
    if _SINK is None:
        _SINK = RaySink() if enabled() else NullSink()
    return _SINK


class StreamMetrics:
    """A stream replica's metrics; the leader calls :meth:`update` once a second.

    Published and removed messages come from how ``last_seq`` and ``messages`` moved
    between two updates of the same leader, so every path (publishes, sources, purges,
    limits, retention, TTL) counts without per-message work."""

    def __init__(self, stream: str, out: Sink | None = None) -> None:
        self.out = out or sink()
        self.tags = {"stream": stream}
        self._last: tuple[int, int] | None = None  # (last_seq, messages) at the last update

    def became_leader(self, last_seq: int, messages: int) -> None:
        """Counting starts from the state the new leader has."""
        self._last = (last_seq, messages)
        self.out.count("rayjet_stream_leader_changes_total", 1, self.tags)

    def lost_leadership(self) -> None:
        self._last = None

    def update(self, *, messages: int, bytes: int, first_seq: int, last_seq: int,
               lag: Mapping[str, int]) -> None:
        out, tags = self.out, self.tags
        out.gauge("rayjet_stream_messages", messages, tags)
        out.gauge("rayjet_stream_bytes", bytes, tags)
        out.gauge("rayjet_stream_first_seq", first_seq, tags)
        out.gauge("rayjet_stream_last_seq", last_seq, tags)
        for replica, behind in lag.items():
            out.gauge("rayjet_stream_replica_lag", behind, {**tags, "replica": replica})
        if self._last is not None:
            prev_last, prev_msgs = self._last
            published = max(0, last_seq - prev_last)
            removed = max(0, published - (messages - prev_msgs))
            out.count("rayjet_stream_published_total", published, tags)
            out.count("rayjet_stream_deleted_total", removed, tags)
        self._last = (last_seq, messages)


class ConsumerMetrics:
    """A consumer replica's metrics; the leader calls :meth:`update` once a second."""

    def __init__(self, stream: str, consumer: str, out: Sink | None = None) -> None:
        self.out = out or sink()
        self.tags = {"stream": stream, "consumer": consumer}

    def became_leader(self) -> None:
        self.out.count("rayjet_consumer_leader_changes_total", 1, self.tags)

    def update(self, info: Any) -> None:
        """``info``: the consumer's :class:`rayjet.api.ConsumerInfo`."""
        out, tags = self.out, self.tags
        out.gauge("rayjet_consumer_num_pending", info.num_pending, tags)
        out.gauge("rayjet_consumer_num_ack_pending", info.num_ack_pending, tags)
        out.gauge("rayjet_consumer_num_redelivered", info.num_redelivered, tags)
        out.gauge("rayjet_consumer_num_waiting", info.num_waiting, tags)
        out.gauge("rayjet_consumer_delivered_stream_seq", info.delivered.stream_seq, tags)
        out.gauge("rayjet_consumer_ack_floor_stream_seq", info.ack_floor.stream_seq, tags)


class RaftMetrics:
    """Proposals and commit latency of one raft group (its leader proposes)."""

    def __init__(self, kind: str, group: str, out: Sink | None = None) -> None:
        self.out = out or sink()
        self.tags = {"kind": kind, "group": group}
        self.proposals = 0  # not yet counted out
        self.latencies: list[float] = []  # a uniform sample of those since the last flush
        self._seen = 0  # commit latencies since the last flush

    def proposed(self) -> None:
        self.proposals += 1

    def committed(self, seconds: float) -> None:
        self._seen += 1
        if len(self.latencies) < LATENCY_SAMPLES:
            self.latencies.append(seconds)
        else:  # reservoir sampling: each latency kept with the same chance
            slot = random.randrange(self._seen)
            if slot < LATENCY_SAMPLES:
                self.latencies[slot] = seconds

    def health(self, replica: str, value: int) -> None:
        """Every member says how it is (set by each replica, leader or not)."""
        self.out.gauge("rayjet_raft_replica_health", value, {**self.tags, "replica": replica})

    def flush(self) -> None:
        if self.proposals:
            n, self.proposals = self.proposals, 0
            self.out.count("rayjet_raft_proposals_total", n, self.tags)
        if self.latencies:
            latencies, self.latencies, self._seen = self.latencies, [], 0
            for seconds in latencies:
                self.out.observe("rayjet_raft_commit_latency_seconds", seconds, self.tags)


__all__ = ["COUNTERS", "EVERY", "GAUGES", "HISTOGRAMS", "LATENCY_SAMPLES", "ConsumerMetrics", "NullSink",
           "RaftMetrics", "RaySink", "Sink", "StreamMetrics", "enabled", "sink"]
