"""The monitoring documents of the gateway, in nats-server's shapes (``/varz``, ``/connz``,
``/subsz``, ``/accountz``, ``/accstatz``, ``/routez``, ``/gatewayz``, ``/leafz``): built
from the gateway's own state without I/O. ``/jsz`` and ``/healthz`` ask the cluster and
live in :mod:`rayjet.gateway.monitor`.

Field names and units are nats-server's (durations in nanoseconds where it writes numbers,
Go-style strings such as ``"1m3s"`` where it writes strings), so its tools and
prometheus-nats-exporter read them as they read nats-server's."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rayjet.errors import BadRequestError
from rayjet.subjects import subject_matches

ACCOUNT = "$G"  # nats-server's global account: the gateway serves one account
SYSTEM_ACCOUNT = "$SYS"
DEFAULT_LIMIT = 1024  # connections or subscriptions per page, as nats-server
MAX_CLOSED = 1000  # closed connections remembered for /connz?state=closed
CONNZ_SORTS = ("cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to",
               "bytes_from", "last", "idle", "uptime", "stop", "reason")


@dataclass
class Traffic:
    """Messages and bytes in (from clients) and out (to clients)."""

    in_msgs: int = 0
    in_bytes: int = 0
    out_msgs: int = 0
    out_bytes: int = 0

    def received(self, size: int) -> None:
        self.in_msgs += 1
        self.in_bytes += size

    def sent(self, size: int) -> None:
        self.out_msgs += 1
        self.out_bytes += size

    def fields(self) -> dict[str, int]:
        return {"in_msgs": self.in_msgs, "out_msgs": self.out_msgs,
                "in_bytes": self.in_bytes, "out_bytes": self.out_bytes}


@dataclass
class ServerStats:
    """What the gateway counts over its life (``/varz``)."""

    traffic: Traffic = field(default_factory=Traffic)
    total_connections: int = 0
    slow_consumers: int = 0
    stale_connections: int = 0
    permission_violations: int = 0  # publishes and subscriptions refused (-ERR sent)
    http_requests: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.time)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def uptime(seconds: float) -> str:
    """nats-server's uptime strings: ``"3d4h5m6s"``, ``"0s"``."""
    s = int(max(seconds, 0))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    out = ""
    if days:
        out += f"{days}d"
    if days or hours:
        out += f"{hours}h"
    if days or hours or minutes:
        out += f"{minutes}m"
    return out + f"{s}s"


def go_duration(seconds: float) -> str:
    """A Go ``time.Duration`` string: ``"995µs"``, ``"1.5ms"``, ``"2.001s"``."""
    ns = int(seconds * 1e9)
    if ns == 0:
        return "0s"
    for unit, size in (("ms", 1_000_000), ("µs", 1_000)):
        if ns < 1_000_000_000 and ns >= size:
            return f"{ns / size:.3f}".rstrip("0").rstrip(".") + unit
    if ns < 1_000:
        return f"{ns}ns"
    return f"{ns / 1e9:.9f}".rstrip("0").rstrip(".") + "s"


def query_int(query: dict[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 0:
        raise BadRequestError(f"{name} must not be negative, not {value}")
    return value


def query_flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("1", "true", "t", "yes", "detail")


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class CpuMeter:
    """The process's CPU use in percent since the previous reading (as nats-server's
    ``cpu``: 100 is one core busy)."""

    def __init__(self) -> None:
        self._at = time.monotonic()
        self._used = time.process_time()

    def percent(self) -> float:
        at, used = time.monotonic(), time.process_time()
        span = at - self._at
        out = 100.0 * (used - self._used) / span if span > 0 else 0.0
        self._at, self._used = at, used
        return round(out, 2)


def varz(info: dict[str, Any], stats: ServerStats, *, connections: int, subscriptions: int,
         http_host: str, http_port: int, ping_interval: float, max_pings_out: int,
         cpu: float, jetstream: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """``/varz``: the server's identity, settings and counters."""
    t = stats.traffic
    doc: dict[str, Any] = {
        "server_id": info["server_id"], "server_name": info["server_name"],
        "version": info["version"], "proto": info["proto"], "go": info["go"],
        "host": info["host"], "port": info["port"],
        "auth_required": bool(info.get("auth_required")),
        "tls_required": bool(info.get("tls_required")),
        "tls_verify": bool(info.get("tls_verify")),
        "max_connections": 65536, "ping_interval": int(ping_interval * 1e9),
        "ping_max": max_pings_out, "http_host": http_host, "http_port": http_port,
        "http_base_path": "", "https_port": 0, "auth_timeout": 2,
        "max_control_line": 4096, "max_payload": info["max_payload"],
        "max_pending": 64 * 1024 * 1024, "cluster": {}, "gateway": {}, "leaf": {},
        "mqtt": {}, "websocket": {},
    }
    if jetstream is not None:
        doc["jetstream"] = jetstream
    doc.update({
        "tls_timeout": 2, "write_deadline": 10_000_000_000,
        "start": rfc3339(stats.started), "now": rfc3339(now),
        "uptime": uptime(now - stats.started), "mem": _rss(), "cores": os.cpu_count() or 1,
        "gomaxprocs": os.cpu_count() or 1, "cpu": cpu, "connections": connections,
        "total_connections": stats.total_connections, "routes": 0, "remotes": 0,
        "leafnodes": 0, "in_msgs": t.in_msgs, "in_bytes": t.in_bytes,
        "in_client_msgs": t.in_msgs, "in_client_bytes": t.in_bytes,
        "out_msgs": t.out_msgs, "out_bytes": t.out_bytes,
        "out_client_msgs": t.out_msgs, "out_client_bytes": t.out_bytes,
        "slow_consumers": stats.slow_consumers, "stale_connections": stats.stale_connections,
        "permission_violations": stats.permission_violations,
        "stalled_clients": 0, "subscriptions": subscriptions,
        "http_req_stats": dict(stats.http_requests),
        "config_load_time": rfc3339(stats.started), "config_digest": "",
        "system_account": SYSTEM_ACCOUNT,
        "slow_consumer_stats": {"clients": stats.slow_consumers, "routes": 0, "gateways": 0,
                                "leafs": 0},
        "stale_connection_stats": {"clients": stats.stale_connections, "routes": 0,
                                   "gateways": 0, "leafs": 0},
    })
    return doc


def connection_doc(conn: Any, now: float) -> dict[str, Any]:
    """One entry of ``/connz``'s ``connections`` (``conn``: a live gateway connection or the
    record a closed one left)."""
    if isinstance(conn, dict):
        return dict(conn)
    stopped = conn.stopped or now
    doc: dict[str, Any] = {
        "cid": conn.cid, "kind": "Client", "type": "nats", "ip": conn.peer[0],
        "port": conn.peer[1], "start": rfc3339(conn.started),
        "last_activity": rfc3339(conn.last_activity), "rtt": go_duration(conn.rtt),
        "uptime": uptime(stopped - conn.started), "idle": uptime(now - conn.last_activity),
        "pending_bytes": conn.backlog(), **conn.traffic.fields(),
        "subscriptions": len(conn.subs),
    }
    for key in ("name", "lang", "version"):
        if conn.client.get(key):
            doc[key] = conn.client[key]
    if conn.stopped:
        doc["stop"] = rfc3339(conn.stopped)
        doc["reason"] = conn.reason
    return doc


def _sub_detail(sub: Any, cid: int, with_account: bool = True) -> dict[str, Any]:
    """A subscription as ``/subsz`` lists it (``/connz`` leaves out the account: the
    connection names it)."""
    space = getattr(sub.owner, "space", None)
    account = space.name if space is not None else ACCOUNT
    d: dict[str, Any] = ({"account": account, "account_tag": account} if with_account
                         else {})
    d["subject"] = sub.subject
    if sub.queue:
        d["qgroup"] = sub.queue
    d.update({"sid": sub.sid, "msgs": sub.delivered, "cid": cid})
    if sub.max_msgs:
        d["max"] = sub.max_msgs
    return d


def connz(server_id: str, live: Iterable[Any], closed: Iterable[dict[str, Any]],
          query: dict[str, str], now: float) -> dict[str, Any]:
    """``/connz`` with nats-server's options: ``state`` (open, closed, any), ``sort``,
    ``offset``, ``limit``, ``cid``, ``subs`` (true: subjects, detail: each subscription),
    ``auth`` (the account's ``name_tag``)."""
    state = query.get("state", "open").lower() or "open"
    if state not in ("open", "closed", "any", "all"):
        raise BadRequestError(f"state must be open, closed or any, not {state!r}")
    sort = query.get("sort", "cid").lower() or "cid"
    if sort not in CONNZ_SORTS:
        raise BadRequestError(f"sort must be one of {', '.join(CONNZ_SORTS)}, not {sort!r}")
    if sort in ("stop", "reason") and state == "open":
        raise BadRequestError(f"sort by {sort} is only for closed connections")
    offset = query_int(query, "offset", 0)
    limit = query_int(query, "limit", DEFAULT_LIMIT) or DEFAULT_LIMIT
    subs = query.get("subs", "").lower()
    auth = query_flag(query, "auth")
    live = list(live)
    docs: list[tuple[dict[str, Any], Any]] = []
    if state != "closed":
        docs += [(connection_doc(c, now), c) for c in live]
    if state != "open":
        docs += [(dict(c), None) for c in closed]
    if "cid" in query:
        cid = query_int(query, "cid", 0)
        docs = [d for d in docs if d[0]["cid"] == cid]
    keys = {"cid": "cid", "start": "start", "subs": "subscriptions",
            "pending": "pending_bytes", "msgs_to": "out_msgs", "msgs_from": "in_msgs",
            "bytes_to": "out_bytes", "bytes_from": "in_bytes", "last": "last_activity",
            "idle": "last_activity", "uptime": "start", "stop": "stop", "reason": "reason"}
    key = keys[sort]
    reverse = sort not in ("cid", "idle", "uptime", "start")
    docs.sort(key=lambda d: (d[0].get(key) or 0, d[0]["cid"]), reverse=reverse)
    page = docs[offset:offset + limit]
    out = []
    for doc, conn in page:
        if subs and conn is not None:
            if subs == "detail":
                doc["subscriptions_list_detail"] = [_sub_detail(s, conn.cid, False)
                                                    for s in conn.subs.values()]
            elif query_flag(query, "subs"):
                doc["subscriptions_list"] = sorted(s.subject for s in conn.subs.values())
        if auth:
            account = conn.space.name if conn is not None else doc.get("account", ACCOUNT)
            user = conn.guard.identity.user if conn is not None else None
            if user:
                doc["authorized_user"] = user
            if conn is not None and conn.gateway.auth.auth_required:
                doc["account"] = account
            doc["name_tag"] = account  # the account's name (nats-server names $G so too)
        out.append(doc)
    return {"server_id": server_id, "now": rfc3339(now), "num_connections": len(out),
            "total": len(docs), "offset": offset, "limit": limit, "connections": out}


def subsz(server_id: str, subs: list[tuple[Any, int]], counters: dict[str, float],
          query: dict[str, str], now: float) -> dict[str, Any]:
    """``/subsz``: subscription counts; with ``subs=1`` the subscriptions themselves
    (``test=<subject>``: only those a message on that subject reaches)."""
    offset = query_int(query, "offset", 0)
    limit = query_int(query, "limit", DEFAULT_LIMIT) or DEFAULT_LIMIT
    doc: dict[str, Any] = {"server_id": server_id, "now": rfc3339(now),
                           "num_subscriptions": len(subs), **counters}
    if not query_flag(query, "subs"):
        doc.update({"total": 0, "offset": offset, "limit": limit})
        return doc
    test = query.get("test")
    if test:
        chosen = [(s, cid) for s, cid in subs if subject_matches(test, s.subject)]
    else:
        chosen = subs
    page = chosen[offset:offset + limit]
    doc.update({"total": len(chosen), "offset": offset, "limit": limit,
                "subscriptions_list": [_sub_detail(s, cid) for s, cid in page]})
    return doc


def accountz(server_id: str, query: dict[str, str], *,
             accounts: dict[str, tuple[int, int, bool]], system_account: str, now: float,
             counters: dict[str, float] | None = None) -> dict[str, Any]:
    """``/accountz``: the accounts (``accounts``: name -> client connections,
    subscriptions, JetStream on); with ``acc=<name>`` that account (``counters``: the
    subscription counters of ``/subsz``, for the global account's ``sublist_stats``)."""
    doc: dict[str, Any] = {"server_id": server_id, "now": rfc3339(now),
                           "system_account": system_account}
    acc = query.get("acc")
    if not acc:
        doc["accounts"] = sorted(accounts)
        return doc
    if acc not in accounts:
        raise BadRequestError(f"account {acc!r} not found")
    connections, subscriptions, jetstream = accounts[acc]
    detail: dict[str, Any] = {"account_name": acc, "update_time": rfc3339(now)}
    if acc == system_account:
        detail["is_system"] = True  # nats-server leaves it out when false
    detail.update({
        "expired": False, "complete": True,
        "jetstream_enabled": jetstream,
        "leafnode_connections": 0,
        "client_connections": connections,
        "subscriptions": subscriptions,
        "name_tag": acc,
    })
    if acc == ACCOUNT and counters is not None:
        detail["sublist_stats"] = {"num_subscriptions": subscriptions, **counters}
    doc["account_detail"] = detail
    return doc


def accstatz(server_id: str, stats: ServerStats, *, connections: int, subscriptions: int,
             now: float) -> dict[str, Any]:
    t = stats.traffic
    nothing = {"msgs": 0, "bytes": 0}
    return {"server_id": server_id, "now": rfc3339(now), "account_statz": [{
        "acc": ACCOUNT, "name": ACCOUNT, "conns": connections, "leafnodes": 0,
        "total_conns": connections, "num_subscriptions": subscriptions,
        "sent": {"msgs": t.out_msgs, "bytes": t.out_bytes, "gateways": nothing,
                 "routes": nothing, "leafs": nothing},
        "received": {"msgs": t.in_msgs, "bytes": t.in_bytes, "gateways": nothing,
                     "routes": nothing, "leafs": nothing},
        "slow_consumers": stats.slow_consumers}]}


def routez(info: dict[str, Any], nodes: list[dict[str, Any]] | None, now: float
           ) -> dict[str, Any]:
    """``/routez``: the gateway has no NATS routes; the Ray nodes the cluster runs on are
    listed under ``ray_nodes`` (rayjet's own field) when they could be read."""
    doc: dict[str, Any] = {"server_id": info["server_id"], "server_name": info["server_name"],
                           "now": rfc3339(now), "num_routes": 0, "routes": []}
    if nodes is not None:
        doc["ray_nodes"] = nodes
    return doc


def gatewayz(server_id: str, now: float) -> dict[str, Any]:
    return {"server_id": server_id, "now": rfc3339(now), "outbound_gateways": {},
            "inbound_gateways": {}}


def leafz(server_id: str, now: float) -> dict[str, Any]:
    return {"server_id": server_id, "now": rfc3339(now), "leafnodes": 0, "leafs": []}
