"""What ``rayjet server status`` and ``rayjet server report`` show: every stream and
consumer with their numbers, and a document shaped like nats-server's
``/jsz?streams=true&consumers=true`` (field names as nats-server's monitor writes them).

:func:`gather` asks the cluster; the rest turns infos into rows and documents without I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rayjet.api import ConsumerInfo, StorageType, StreamInfo
from rayjet.errors import APIError

ACCOUNT = "$G"  # nats-server's global account: rayjet has one account


@dataclass
class StreamReport:
    """One stream: its info (or the error that kept it from answering) and its consumers'."""

    name: str
    info: StreamInfo | None = None
    error: str | None = None
    consumers: list[ConsumerInfo] = field(default_factory=list)
    consumer_errors: dict[str, str] = field(default_factory=dict)
    health: dict[str, dict] = field(default_factory=dict)  # replica -> its own account


def health_note(h: dict[str, Any]) -> str | None:
    """A replica's trouble in a few words (None: healthy)."""
    if h.get("error"):
        return f"not answering ({h['error']})"
    if h.get("failure"):
        return f"stopped: {h['failure']}"
    if h.get("rejoining"):
        return "damaged, rejoining: catching up before it votes"
    if h.get("copying"):
        return "repairing: copying its store from a peer"
    if h.get("damage"):
        return f"repaired after damage: {h['damage']}"
    return None


def _describe(err: APIError) -> str:
    return getattr(err, "description", None) or str(err)


def gather(js: Any, *, consumers: bool = True) -> list[StreamReport]:
    """Every stream's info and, with ``consumers``, its consumers' infos. A stream or
    consumer that does not answer (no quorum, no leader) is reported with its error
    instead of failing the whole report."""
    reports = []
    for name in sorted(js.stream_names()):
        rep = StreamReport(name)
        try:
            rep.info = js.stream_info(name)
        except APIError as err:
            rep.error = _describe(err)
        try:
            rep.health = js.stream_replica_health(name)
        except APIError:
            pass  # the stream went away meanwhile
        if consumers and rep.info is not None:
            try:
                names = js.consumer_names(name)
            except APIError as err:
                names = []
                rep.consumer_errors["*"] = _describe(err)
            for cname in sorted(names):
                try:
                    rep.consumers.append(js.consumer_info(name, cname))
                except APIError as err:
                    rep.consumer_errors[cname] = _describe(err)
        reports.append(rep)
    return reports


# -- rows (server status) ---------------------------------------------------------------------
def _replicas(cluster: Any) -> list[dict[str, Any]]:
    if cluster is None:
        return []
    return [{"name": p.name, "current": p.current, "offline": p.offline, "lag": p.lag}
            for p in cluster.replicas]


def _troubles(rep: StreamReport) -> dict[str, str]:
    notes = {rid: health_note(h) for rid, h in sorted(rep.health.items())}
    return {rid: n for rid, n in notes.items() if n}


def stream_row(rep: StreamReport) -> dict[str, Any]:
    """A stream's numbers: size, sequences, leader and each replica's lag."""
    i = rep.info
    if i is None:
        return {"stream": rep.name, "error": rep.error}
    st = i.state
    return {"stream": rep.name, "storage": i.config.storage.value,
            "replicas": i.config.num_replicas,
            "placement": i.config.placement.to_dict() if i.config.placement else None,
            "messages": st.messages, "bytes": st.bytes,
            "first_seq": st.first_seq, "last_seq": st.last_seq,
            "consumers": st.consumer_count, "deleted": st.num_deleted,
            "leader": i.cluster.leader if i.cluster else None,
            "peers": _replicas(i.cluster),
            "lag": max((p.lag for p in i.cluster.replicas), default=0) if i.cluster else 0,
            "troubles": _troubles(rep)}


def consumer_row(stream: str, ci: ConsumerInfo) -> dict[str, Any]:
    """A consumer's numbers, as ``nats consumer report`` shows them."""
    return {"stream": stream, "consumer": ci.name,
            "leader": ci.cluster.leader if ci.cluster else None,
            "num_pending": ci.num_pending, "num_ack_pending": ci.num_ack_pending,
            "num_redelivered": ci.num_redelivered, "num_waiting": ci.num_waiting,
            "delivered_stream_seq": ci.delivered.stream_seq,
            "ack_floor_stream_seq": ci.ack_floor.stream_seq,
            "ack_floor_consumer_seq": ci.ack_floor.consumer_seq}


def status_rows(reports: list[StreamReport]) -> tuple[list[dict], list[dict]]:
    streams = [stream_row(r) for r in reports]
    consumers = [consumer_row(r.name, ci) for r in reports for ci in r.consumers]
    consumers += [{"stream": r.name, "consumer": n, "error": e}
                  for r in reports for n, e in sorted(r.consumer_errors.items())]
    return streams, consumers


# -- the jsz document (server report --json) --------------------------------------------------
def _time(ts: datetime | None) -> str | None:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z") if ts else None


def stream_detail(rep: StreamReport, *, config: bool = False) -> dict[str, Any]:
    """One ``stream_detail`` entry: name, created, cluster, state, consumer_detail."""
    i = rep.info
    if i is None:
        return {"name": rep.name, "error": rep.error}
    out: dict[str, Any] = {"name": rep.name, "created": _time(i.created)}
    if i.cluster is not None:
        cl = i.cluster.to_dict()
        cl.pop("system_account", None)
        out["cluster"] = cl
    if troubles := _troubles(rep):
        out["replica_troubles"] = troubles  # rayjet's own: damage, repair, disk failure
    if config:
        out["config"] = i.config.to_dict()
    out["state"] = i.state.to_dict()
    details = []
    for ci in rep.consumers:
        d = ci.to_dict()
        if not config:
            d.pop("config", None)
        details.append(d)
    if details:
        out["consumer_detail"] = details
    if i.mirror is not None:
        out["mirror"] = i.mirror.to_dict()
    if i.sources:
        out["sources"] = [s.to_dict() for s in i.sources]
    if i.cluster is not None and i.cluster.raft_group:
        out["stream_raft_group"] = i.cluster.raft_group
    if rep.consumer_errors:
        out["consumer_errors"] = dict(rep.consumer_errors)  # rayjet: consumers that failed
    return out


def jsz(reports: list[StreamReport], meta: dict[str, Any] | None, *, now: datetime,
        server_id: str = "", store_dir: str | None = None, config: bool = False
        ) -> dict[str, Any]:
    """A document shaped like nats-server's ``/jsz?streams=true&consumers=true``.

    Totals count each stream once (its leader's state), not once per replica. rayjet has
    no server-wide limits (streams set their own): ``max_memory``/``max_storage`` are -1.
    ``ha_assets`` counts raft groups: streams, consumers and the meta group."""
    memory = storage = messages = nbytes = n_consumers = 0
    for r in reports:
        if r.info is None:
            continue
        st = r.info.state
        messages += st.messages
        nbytes += st.bytes
        n_consumers += st.consumer_count
        if r.info.config.storage is StorageType.MEMORY:
            memory += st.bytes
        else:
            storage += st.bytes
    cfg: dict[str, Any] = {"max_memory": -1, "max_storage": -1}
    if store_dir:
        cfg["store_dir"] = store_dir
    stats = {"memory": memory, "storage": storage, "reserved_memory": 0,
             "reserved_storage": 0, "accounts": 1,
             "ha_assets": len(reports) + n_consumers + (1 if meta else 0)}
    doc: dict[str, Any] = {"server_id": server_id, "now": _time(now), "config": cfg, **stats,
                           "streams": len(reports), "consumers": n_consumers,
                           "messages": messages, "bytes": nbytes}
    if meta:
        doc["meta_cluster"] = meta_cluster(meta)
    doc["account_details"] = [{
        "name": ACCOUNT, "id": ACCOUNT, **stats,
        "stream_detail": [stream_detail(r, config=config) for r in reports]}]
    return doc


def meta_cluster(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta_cluster``: name, leader, cluster_size and (from the leader) its replicas."""
    out: dict[str, Any] = {"name": meta.get("name") or "meta", "leader": meta.get("leader"),
                           "cluster_size": int(meta.get("cluster_size") or 0)}
    replicas = [{"name": p["name"], "current": bool(p.get("current")),
                 "active": int(float(p.get("active") or 0) * 1e9), "lag": int(p.get("lag", 0))}
                for p in meta.get("replicas") or ()]
    if replicas:
        out["replicas"] = replicas
    return out


__all__ = ["StreamReport", "consumer_row", "gather", "jsz", "meta_cluster", "status_rows",
           "stream_detail", "stream_row"]
