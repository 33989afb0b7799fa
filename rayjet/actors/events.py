"""Advisories and metrics leave their actors for the cluster's event hub
(:mod:`rayjet.client.event_hub`): the gateways hand them to NATS subscribers of
``$JS.EVENT.>`` and the hub stores them in the streams that capture their subjects, as
nats-server's advisories are.

Posting never waits and never fails its caller: events of one event-loop turn leave in
one actor call, and when no hub runs (or it cannot be reached) they are dropped, as
nats-server drops an advisory nobody listens to."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import ray

from rayjet.actors.names import NAMESPACE, event_hub_name
from rayjet.engine import cluster_advisories as cadv

log = logging.getLogger(__name__)

LOOKUP_BACKOFF = 5.0  # s before a hub not found is looked up again
MAX_PENDING = 10_000  # events kept while the hub is looked up; older ones are dropped


def event_id() -> str:
    return uuid.uuid4().hex[:22]


def timestamp(now_ns: int | None = None) -> str:
    ns = time.time_ns() if now_ns is None else now_ns
    base = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ns % 1_000_000_000:09d}Z"


def stream_action(stream: str, action: str) -> tuple[str, dict[str, Any]]:
    """nats-server's stream_action advisory (action: create, update, delete)."""
    kind = {"create": "CREATED", "update": "UPDATED", "delete": "DELETED"}[action]
    return (f"$JS.EVENT.ADVISORY.STREAM.{kind}.{stream}",
            {"type": "io.nats.jetstream.advisory.v1.stream_action", "id": event_id(),
             "timestamp": timestamp(), "stream": stream, "action": action})


def consumer_action(stream: str, consumer: str, action: str) -> tuple[str, dict[str, Any]]:
    """nats-server's consumer_action advisory (action: create, delete)."""
    kind = {"create": "CREATED", "delete": "DELETED"}[action]
    return (f"$JS.EVENT.ADVISORY.CONSUMER.{kind}.{stream}.{consumer}",
            {"type": "io.nats.jetstream.advisory.v1.consumer_action", "id": event_id(),
             "timestamp": timestamp(), "stream": stream, "consumer": consumer,
             "action": action})


class LeaderWatch(cadv.LeaderWatch):
    """A replica's watch on its role for LEADER_ELECTED and QUORUM_LOST advisories."""

    def __init__(self) -> None:
        super().__init__(replicas=0, created=time.monotonic())


def role_changed(watch: cadv.LeaderWatch, host: Any, stream: str,
                 consumer: str | None = None) -> None:
    """Post the advisory a replicated group's role change calls for (``host``: its
    :class:`rayjet.actors.raft_host.RaftHost`, after the change)."""
    try:
        group = host.group
        watch.replicas = len(group.node.raft.voters)
        what = watch.changed(leader=group.is_leader, term=group.term,
                             leader_known=group.leader is not None, now=time.monotonic())
        if what is None:
            return
        now = time.time_ns()
        if what == "elected":
            replicas = cadv.peers(group.id, host.replicas())
            post([cadv.leader_elected(stream, consumer, group.id, replicas, now)])
        else:  # deposed: it no longer hears from a majority of them
            replicas = [{"name": v, "current": v == group.id, "active": 0, "peer": v}
                        for v in group.node.raft.voters]
            post([cadv.quorum_lost(stream, consumer, replicas, now)])
    except Exception:  # noqa: BLE001 - an advisory must never fail the work it describes
        log.debug("leader advisory not posted", exc_info=True)


class _Poster:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[str, bytes]] = []
        self._handle: Any = None
        self._missing_until = 0.0
        self._flushing = False
        self.stats = {"posted": 0, "dropped": 0}

    def post(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        if not events:
            return
        encoded = []
        for subject, body in events:
            body = dict(body)
            body.setdefault("id", event_id())
            encoded.append((subject, json.dumps(body, separators=(",", ":")).encode()))
        with self._lock:
            self._pending.extend(encoded)
            if len(self._pending) > MAX_PENDING:
                self.stats["dropped"] += len(self._pending) - MAX_PENDING
                del self._pending[:-MAX_PENDING]
            if self._flushing:
                return
            self._flushing = True
        try:
            asyncio.get_running_loop().call_soon(self._flush_soon)
        except RuntimeError:  # no event loop here: a thread of its own
            threading.Thread(target=self._flush, daemon=True).start()

    def _flush_soon(self) -> None:
        if self._handle is not None:
            self._flush()
        else:  # the lookup blocks: off the loop
            asyncio.get_running_loop().run_in_executor(None, self._flush)

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._flushing = False
        if not batch:
            return
        handle = self._hub()
        if handle is None:
            self.stats["dropped"] += len(batch)
            return
        try:
            handle.post.remote(batch)
            self.stats["posted"] += len(batch)
        except Exception:  # noqa: BLE001 - e.g. Ray shutting down: the events are lost
            self._handle = None
            self.stats["dropped"] += len(batch)

    def _hub(self) -> Any:
        if self._handle is not None:
            return self._handle
        if time.monotonic() < self._missing_until:
            return None
        try:
            self._handle = ray.get_actor(event_hub_name(), namespace=NAMESPACE)
        except Exception:  # noqa: BLE001 - no hub (yet): events are dropped meanwhile
            self._missing_until = time.monotonic() + LOOKUP_BACKOFF
            return None
        return self._handle


_poster = _Poster()


def post(events: list[tuple[str, dict[str, Any]]]) -> None:
    """Hand ``(subject, body)`` events to the hub (never blocks, never raises)."""
    try:
        _poster.post(events)
    except Exception:  # noqa: BLE001 - an advisory must never fail the work it describes
        log.debug("events could not be posted", exc_info=True)


def stats() -> dict[str, int]:
    return dict(_poster.stats)
