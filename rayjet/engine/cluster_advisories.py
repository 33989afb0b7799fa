"""Advisories about JetStream's API and its replicated groups, as nats-server 2.15.1 sends
them (field names of its ``JSAPIAudit``, ``JSStreamLeaderElectedAdvisory``,
``JSStreamQuorumLostAdvisory`` and their consumer kin), and when a group's replica sends
them (:class:`LeaderWatch`). Pure: no I/O, times passed in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

AUDIT_SUBJECT = "$JS.EVENT.ADVISORY.API"
AUDIT_TYPE = "io.nats.jetstream.advisory.v1.api_audit"
STREAM_ELECTED = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."
STREAM_QUORUM_LOST = "$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST."
CONSUMER_ELECTED = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED."
CONSUMER_QUORUM_LOST = "$JS.EVENT.ADVISORY.CONSUMER.QUORUM_LOST."
TYPES = {STREAM_ELECTED: "io.nats.jetstream.advisory.v1.stream_leader_elected",
         STREAM_QUORUM_LOST: "io.nats.jetstream.advisory.v1.stream_quorum_lost",
         CONSUMER_ELECTED: "io.nats.jetstream.advisory.v1.consumer_leader_elected",
         CONSUMER_QUORUM_LOST: "io.nats.jetstream.advisory.v1.consumer_quorum_lost"}
ACCOUNT = "$G"
# nats-server: a deposed leader reports lost quorum only when its group is older than this,
# and then at most once in QUORUM_LOST_EVERY
QUORUM_LOST_AFTER = 5.0
QUORUM_LOST_EVERY = 10.0


def event_id() -> str:
    return uuid.uuid4().hex[:22]


def timestamp(now_ns: int) -> str:
    base = datetime.fromtimestamp(now_ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{now_ns % 1_000_000_000:09d}Z"


def api_audit(*, server: str, client: dict[str, Any] | None, subject: str, request: bytes,
              response: bytes, now_ns: int, domain: str | None = None) -> dict[str, Any]:
    """The ``api_audit`` advisory of one JetStream API request and the answer it got."""
    body: dict[str, Any] = {"type": AUDIT_TYPE, "id": event_id(),
                            "timestamp": timestamp(now_ns), "server": server,
                            "client": client, "subject": subject}
    if request:
        body["request"] = bytes(request).decode("utf-8", "replace")
    body["response"] = bytes(response).decode("utf-8", "replace")
    if domain:
        body["domain"] = domain
    return body


def peers(leader: str, followers: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """nats-server's PeerInfo list of a group (the leader among them): ``active`` in
    nanoseconds since last heard from, ``lag`` in entries behind; ``followers`` as
    :meth:`rayjet.actors.raft_host.RaftHost.replicas` reports them (seconds)."""
    out = [{"name": leader, "current": True, "active": 0, "peer": leader}]
    for f in followers or ():
        peer: dict[str, Any] = {"name": f["name"], "current": bool(f.get("current"))}
        if f.get("offline"):
            peer["offline"] = True
        peer["active"] = int(float(f.get("active") or 0) * 1e9)
        if f.get("lag"):
            peer["lag"] = int(f["lag"])
        peer["peer"] = f["name"]
        out.append(peer)
    return out


def leader_elected(stream: str, consumer: str | None, leader: str,
                   replicas: list[dict[str, Any]], now_ns: int,
                   domain: str | None = None) -> tuple[str, dict[str, Any]]:
    prefix = STREAM_ELECTED if consumer is None else CONSUMER_ELECTED
    body = _group_body(prefix, stream, consumer, now_ns)
    body.update(leader=leader, replicas=replicas)
    return _subject(prefix, stream, consumer), _with_domain(body, domain)


def quorum_lost(stream: str, consumer: str | None, replicas: list[dict[str, Any]],
                now_ns: int, domain: str | None = None) -> tuple[str, dict[str, Any]]:
    prefix = STREAM_QUORUM_LOST if consumer is None else CONSUMER_QUORUM_LOST
    body = _group_body(prefix, stream, consumer, now_ns)
    body["replicas"] = replicas
    return _subject(prefix, stream, consumer), _with_domain(body, domain)


def _group_body(prefix: str, stream: str, consumer: str | None, now_ns: int
                ) -> dict[str, Any]:
    body: dict[str, Any] = {"type": TYPES[prefix], "id": event_id(),
                            "timestamp": timestamp(now_ns), "account": ACCOUNT,
                            "stream": stream}
    if consumer is not None:
        body["consumer"] = consumer
    return body


def _subject(prefix: str, stream: str, consumer: str | None) -> str:
    return prefix + stream + ("" if consumer is None else "." + consumer)


def _with_domain(body: dict[str, Any], domain: str | None) -> dict[str, Any]:
    if domain:
        body["domain"] = domain
    return body


@dataclass
class LeaderWatch:
    """Which advisory a replica's role change calls for. ``replicas`` of the group: one
    replica groups elect no leader worth telling (nats-server outside a cluster sends none).
    ``created``: when this replica started (seconds, the caller's clock)."""

    replicas: int
    created: float
    _leading_term: int | None = None
    _lost_sent: float | None = None

    def changed(self, *, leader: bool, term: int, leader_known: bool, now: float) -> str | None:
        """``"elected"`` when this replica became leader, ``"quorum_lost"`` when it stopped
        leading in the same term without another leader (it no longer heard from a
        majority: check-quorum deposed it), else None."""
        if self.replicas < 2:
            return None
        if leader:
            self._leading_term = term
            return "elected"
        was, self._leading_term = self._leading_term, None
        if was is None or term != was or leader_known:
            return None  # not leading before, or a newer leader took over
        if now - self.created < QUORUM_LOST_AFTER:
            return None
        if self._lost_sent is not None and now - self._lost_sent < QUORUM_LOST_EVERY:
            return None
        self._lost_sent = now
        return "quorum_lost"
