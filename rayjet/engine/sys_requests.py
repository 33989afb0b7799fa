"""nats-server's system requests (``$SYS.REQ.SERVER.PING[.<NAME>]`` and
``$SYS.REQ.SERVER.<server id>.<NAME>``) without I/O: which names exist, the JSON options
each takes (those of the HTTP monitoring query, with nats-server's JSON field names, plus
the filters every server applies before it answers), and the envelope of the answer.

Options are read as nats-server's Go decoder reads them: keys match their fields whatever
their case, unknown keys are ignored, ``null`` leaves a field alone, and a value of the
wrong JSON type refuses the whole request (code 400). Any bytes are answered, never
raised on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

PREFIX = "$SYS.REQ.SERVER."
PING = PREFIX + "PING"

BOOL, INT, UINT, STR, STRS = "bool", "int", "uint64", "string", "[]string"
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)

FILTERS: dict[str, str] = {"server_name": STR, "cluster": STR, "host": STR,
                           "exact_match": BOOL, "tags": STRS, "domain": STR}

# name -> (nats-server's Go type of the options, {json field: type})
ENDPOINTS: dict[str, tuple[str, dict[str, str]]] = {
    "STATSZ": ("StatszEventOptions", {}),
    "IDZ": ("", {}),  # answers without reading the body
    "VARZ": ("VarzEventOptions", {}),
    "CONNZ": ("ConnzEventOptions", {
        "sort": STR, "auth": BOOL, "subscriptions": BOOL, "subscriptions_detail": BOOL,
        "offset": INT, "limit": INT, "cid": UINT, "mqtt_client": STR, "state": INT,
        "user": STR, "acc": STR, "filter_subject": STR}),
    "SUBSZ": ("SubszEventOptions", {"offset": INT, "limit": INT, "subscriptions": BOOL,
                                    "account": STR, "test": STR}),
    "JSZ": ("JszEventOptions", {
        "account": STR, "accounts": BOOL, "streams": BOOL, "consumer": BOOL,
        "direct_consumer": BOOL, "config": BOOL, "leader_only": BOOL, "offset": INT,
        "limit": INT, "raft": BOOL, "stream_leader_only": BOOL}),
    "HEALTHZ": ("HealthzEventOptions", {
        "js-enabled": BOOL, "js-enabled-only": BOOL, "js-server-only": BOOL,
        "js-meta-only": BOOL, "account": STR, "stream": STR, "consumer": STR,
        "details": BOOL}),
    "ACCOUNTZ": ("AccountzEventOptions", {"account": STR}),
    "ROUTEZ": ("RoutezEventOptions", {"subscriptions": BOOL, "subscriptions_detail": BOOL}),
    "GATEWAYZ": ("GatewayzEventOptions", {
        "name": STR, "accounts": BOOL, "account_name": STR, "subscriptions": BOOL,
        "subscriptions_detail": BOOL}),
    "LEAFZ": ("LeafzEventOptions", {"subscriptions": BOOL, "account": STR}),
    "PROFILEZ": ("ProfilezEventOptions", {"name": STR, "debug": INT, "duration": INT}),
    "EXPVARZ": ("ExpvarzEventOptions", {}),
    "IPQUEUESZ": ("IpqueueszEventOptions", {"all": BOOL, "filter": STR}),
    "RAFTZ": ("RaftzEventOptions", {"account": STR, "group": STR}),
}

# JetStreamEnabled, nats-server's first capability flag (the others concern its routes)
FLAG_JETSTREAM = 1


class _Pairs(list):
    """A decoded JSON object as its (key, value) pairs in order: Go lets the last of keys
    that match one field (whatever their case) win."""


class OptionsError(ValueError):
    """A request body nats-server would refuse (answered with code 400)."""


def endpoint(subject: str, server_id: str) -> str | None:
    """The endpoint a request subject names (``STATSZ`` for the bare ping), or None when
    it is not one this server answers."""
    if subject == PING:
        return "STATSZ"
    if not subject.startswith(PREFIX):
        return None
    target, dot, name = subject[len(PREFIX):].partition(".")
    if not dot or target not in ("PING", server_id) or name not in ENDPOINTS:
        return None
    return name


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, _Pairs) else "array"


def _number_text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _convert(value: Any, kind: str, where: str) -> Any:
    """``value`` as a field of type ``kind``, or OptionsError in Go's words."""
    ok = False
    if kind == BOOL:
        ok = isinstance(value, bool)
    elif kind == STR:
        ok = isinstance(value, str)
    elif kind == STRS:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if isinstance(value, list) and not ok:
            bad = next(v for v in value if not isinstance(v, str))
            raise OptionsError(f"json: cannot unmarshal {_kind(bad)} into Go struct field "
                               f"{where} of type string")
    elif kind in (INT, UINT) and isinstance(value, int) and not isinstance(value, bool):
        low, high = _INT64 if kind == INT else _UINT64
        if not low <= value <= high:
            raise OptionsError(f"json: cannot unmarshal number {value} into Go struct field "
                               f"{where} of type {kind}")
        ok = True
    if ok:
        return value
    if kind in (INT, UINT) and isinstance(value, float):
        raise OptionsError(f"json: cannot unmarshal number {_number_text(value)} into Go "
                           f"struct field {where} of type {kind}")
    raise OptionsError(f"json: cannot unmarshal {_kind(value)} into Go struct field {where} "
                       f"of type {kind}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid number {name}")


def parse_options(name: str, body: bytes) -> dict[str, Any]:
    """The options (and filters) a request body gives ``name``: ``{}`` for an empty body
    or ``null``; OptionsError for a body nats-server would refuse."""
    if not body:
        return {}
    struct, fields = ENDPOINTS[name]
    try:
        text = bytes(body).decode("utf-8")
        doc = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OptionsError(f"invalid JSON: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, _Pairs):
        raise OptionsError(f"json: cannot unmarshal {_kind(doc)} into Go value of type "
                           f"server.{struct}")
    known = {**fields, **FILTERS}
    by_lower = {k.lower(): k for k in known}
    out: dict[str, Any] = {}
    for key, value in doc:
        field = by_lower.get(key.lower())
        if field is None or value is None:
            continue  # Go ignores unknown keys, and null leaves a field as it was
        out[field] = _convert(_plain(value), known[field], f"{struct}.{field}")
    return out


def _plain(value: Any) -> Any:
    """A decoded value with its objects (pairs, see parse_options) as dicts."""
    if isinstance(value, _Pairs):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def filtered_out(options: dict[str, Any], *, name: str, host: str, cluster: str = "",
                 domain: str = "", tags: tuple[str, ...] = ()) -> bool:
    """Does a request's filter leave this server out (it then does not answer at all)?
    Name, host and cluster match exactly with ``exact_match``, else as substrings; every
    tag asked for must be the server's; the domain must be its own."""
    exact = bool(options.get("exact_match"))
    for key, mine in (("server_name", name), ("host", host), ("cluster", cluster)):
        wanted = options.get(key) or ""
        if wanted and (wanted != mine if exact else wanted not in mine):
            return True
    if any(t not in tags for t in options.get("tags") or ()):
        return True
    wanted_domain = options.get("domain") or ""
    return bool(wanted_domain) and wanted_domain != domain


def http_query(name: str, options: dict[str, Any]) -> dict[str, str]:
    """The HTTP monitoring query that asks ``name`` what these options ask."""
    q: dict[str, str] = {}
    if name in ("CONNZ", "SUBSZ", "JSZ"):
        if options.get("offset", 0) > 0:
            q["offset"] = str(options["offset"])
        if options.get("limit", 0) > 0:
            q["limit"] = str(options["limit"])
    if name == "CONNZ":
        if options.get("sort"):
            q["sort"] = options["sort"]
        if options.get("subscriptions_detail"):
            q["subs"] = "detail"
        elif options.get("subscriptions"):
            q["subs"] = "1"
        if options.get("cid"):
            q["cid"] = str(options["cid"])
        q["state"] = {0: "open", 1: "closed", 2: "any"}.get(options.get("state", 0), "open")
    elif name == "SUBSZ":
        if options.get("subscriptions"):
            q["subs"] = "1"
        if options.get("test"):
            q["test"] = options["test"]
    elif name == "JSZ":
        for key, flag in (("accounts", "accounts"), ("streams", "streams"),
                          ("consumer", "consumers"), ("config", "config")):
            if options.get(key):
                q[flag] = "true"
        if options.get("account"):
            q["accounts"] = "true"
    elif name == "HEALTHZ":
        if options.get("js-enabled-only"):
            q["js-enabled-only"] = "true"
        if options.get("js-server-only") or options.get("js-meta-only"):
            q["js-server-only"] = "true"
    elif name == "ACCOUNTZ" and options.get("account"):
        q["acc"] = options["account"]
    return q


def go_time(ts_ns: int) -> str:
    """A UTC time as Go writes it in JSON (RFC 3339, nanoseconds, trailing zeros cut)."""
    base = datetime.fromtimestamp(ts_ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{ts_ns % 1_000_000_000:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def server_info(*, name: str, host: str, server_id: str, version: str, jetstream: bool,
                seq: int, now_ns: int, domain: str = "", cluster: str = "") -> dict[str, Any]:
    """nats-server's ServerInfo, the ``server`` of every system answer and event."""
    info: dict[str, Any] = {"name": name, "host": host, "id": server_id}
    if cluster:
        info["cluster"] = cluster
    if domain:
        info["domain"] = domain
    info.update({"ver": version, "jetstream": jetstream,
                 "flags": FLAG_JETSTREAM if jetstream else 0, "seq": seq,
                 "time": go_time(now_ns)})
    return info


def statsz(varz: dict[str, Any]) -> dict[str, Any]:
    """nats-server's ServerStats (``statsz``) from the same server's ``/varz``."""
    def sent(msgs: str, nbytes: str) -> dict[str, int]:
        return {"msgs": varz.get(msgs, 0), "bytes": varz.get(nbytes, 0)}

    out: dict[str, Any] = {
        "start": varz.get("start"), "mem": varz.get("mem", 0), "cores": varz.get("cores", 1),
        "cpu": varz.get("cpu", 0), "connections": varz.get("connections", 0),
        "total_connections": varz.get("total_connections", 0),
        "active_accounts": 1 if varz.get("connections") else 0,
        "subscriptions": varz.get("subscriptions", 0),
        "sent": sent("out_msgs", "out_bytes"),
        "sent_to_clients": sent("out_client_msgs", "out_client_bytes"),
        "received": sent("in_msgs", "in_bytes"),
        "received_from_clients": sent("in_client_msgs", "in_client_bytes"),
        "slow_consumers": varz.get("slow_consumers", 0),
    }
    slow = varz.get("slow_consumer_stats") or {}
    if any(slow.values()):
        out["slow_consumer_stats"] = slow
    if varz.get("stale_connections"):
        out["stale_connections"] = varz["stale_connections"]
        out["stale_connection_stats"] = varz.get("stale_connection_stats") or {}
    out["active_servers"] = 1
    js = varz.get("jetstream")
    if js is not None:
        config = {k: v for k, v in (js.get("config") or {}).items() if k != "store_dir"}
        out["jetstream"] = {**js, "config": config}
    out["gomaxprocs"] = varz.get("gomaxprocs", 1)
    return out
