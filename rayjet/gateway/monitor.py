"""The gateway's HTTP monitoring port, as nats-server's ``-m 8222``: ``/varz``, ``/connz``,
``/subsz``, ``/jsz``, ``/healthz``, ``/accountz``, ``/accstatz``, ``/routez``,
``/gatewayz``, ``/leafz`` in nats-server's JSON shapes (Kubernetes probes,
prometheus-nats-exporter and ``nats server`` commands read them).

A small HTTP/1.1 server of its own: GET (and HEAD) only, one request per connection,
requests bounded in size and time. When the gateway asks NATS clients for credentials the
monitor asks for the same ones (``Authorization: Bearer <token>`` or HTTP Basic
``user:password``): the documents name every client and subscription. Documents that ask
the cluster (``/jsz``, ``/healthz``, the JetStream part of ``/varz``) are built in the
bridge's thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from rayjet.errors import APIError, BadRequestError
from rayjet.gateway import jsapi
from rayjet.gateway import monitor_docs as docs

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD = 16 * 1024  # request line and headers
READ_TIMEOUT = 5.0
ENDPOINTS = ("varz", "connz", "subsz", "subscriptionsz", "jsz", "healthz", "accountz",
             "accstatz", "routez", "gatewayz", "leafz")
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


class HttpError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def parse_request(head: bytes) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """(method, path, query, headers) of a request's head (up to the blank line), or
    HttpError(400) when it is not a well-formed HTTP/1.x request."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400, "undecodable request") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    method, target, _ = parts
    if not target.startswith("/") or any(ch <= " " or ch == "\x7f" for ch in target):
        raise HttpError(400, "malformed request target")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise HttpError(400, "malformed header")
        headers[name.lower()] = value.strip()
    url = urlsplit(target)
    try:
        query = dict(parse_qsl(url.query, keep_blank_values=True, strict_parsing=False,
                               max_num_fields=64))
    except ValueError:
        raise HttpError(400, "too many query fields") from None
    return method.upper(), unquote(url.path), query, headers


def authorized(auth: Any, header: str | None) -> bool:
    """Does an ``Authorization`` header carry credentials a NATS client could connect
    with (``Bearer <token>``, or ``Basic`` with a user's name and password)?"""
    if not auth.auth_required:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return auth.authenticate({"auth_token": value}, None) is not None
    if scheme.lower() == "basic":
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        return bool(sep and user) and auth.authenticate({"user": user, "pass": password},
                                                        None) is not None
    return False


def _response(status: int, body: bytes, content_type: str = "application/json",
              extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"Cache-Control: no-cache\r\nConnection: close\r\n{extra}\r\n")
    return head.encode() + body


def _index(endpoints: tuple[str, ...]) -> bytes:
    links = "".join(f'<a href="/{e}">{e}</a><br/>\n' for e in endpoints)
    return (f"<html><body><h1>rayjet monitoring</h1>\n{links}</body></html>\n").encode()


class Monitor:
    """Serves the monitoring documents of ``gateway`` on ``host:port``."""

    def __init__(self, gateway: Any, host: str, port: int) -> None:
        self.gateway = gateway
        self.host = host
        self.requested_port = port
        self.cpu = docs.CpuMeter()
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            return self._server.sockets[0].getsockname()[1]
        return self.requested_port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.requested_port,
                                                  reuse_address=True, limit=MAX_REQUEST_HEAD)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
                status, body, ctype, extra = await self.answer(head)
            except asyncio.LimitOverrunError:
                status, body, ctype, extra = 431, b"request head too large\n", "text/plain", ""
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                return  # the peer went away or never finished its request: nothing to say
            writer.write(_response(status, body, ctype, extra))
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def answer(self, head: bytes) -> tuple[int, bytes, str, str]:
        """(status, body, content type, extra headers) for one request's head."""
        try:
            method, path, query, headers = parse_request(head[:-4])
        except HttpError as err:
            return err.status, (err.text + "\n").encode(), "text/plain", ""
        if method not in ("GET", "HEAD"):
            return 405, b"method not allowed\n", "text/plain", "Allow: GET, HEAD\r\n"
        if not authorized(self.gateway.auth, headers.get("authorization")):
            return 401, b"authorization required\n", "text/plain", \
                'WWW-Authenticate: Basic realm="rayjet"\r\n'
        name = path.strip("/")
        if name == "":
            return 200, _index(ENDPOINTS), "text/html; charset=utf-8", ""
        if name not in ENDPOINTS:
            return 404, b"404 page not found\n", "text/plain", ""
        stats = self.gateway.stats.http_requests
        stats[f"/{name}"] = stats.get(f"/{name}", 0) + 1
        try:
            status, doc = await self.document(name, query)
        except BadRequestError as err:
            return 400, (f"{err.description}\n").encode(), "text/plain", ""
        except Exception as exc:  # noqa: BLE001 - the port stays up; the reason goes back
            log.exception("monitoring /%s failed", name)
            return 500, (f"{type(exc).__name__}: {exc}\n").encode(), "text/plain", ""
        body = json.dumps(doc, indent=2).encode()
        return status, (b"" if method == "HEAD" else body), "application/json", ""

    async def document(self, name: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        gw = self.gateway
        now = time.time()
        info = gw.info_fields()
        sid = info["server_id"]
        live = list(gw.connections)
        n_subs = gw.subscription_count()
        if name == "varz":
            js_doc = await self._jetstream_varz() if gw.bridge is not None else None
            return 200, docs.varz(
                info, gw.stats, connections=len(live), subscriptions=n_subs,
                http_host=self.host, http_port=self.port,
                ping_interval=gw.options.ping_interval, max_pings_out=gw.options.max_pings_out,
                cpu=self.cpu.percent(), jetstream=js_doc, now=now)
        if name == "connz":
            return 200, docs.connz(sid, live, gw.closed, query, now)
        if name in ("subsz", "subscriptionsz"):
            return 200, docs.subsz(sid, gw.subscriptions(), gw.interest_counters(), query, now)
        if name == "accountz":
            return 200, docs.accountz(sid, query, accounts=gw.account_counts(live),
                                      system_account=gw.auth.system_account, now=now,
                                      counters=gw.interest_counters())
        if name == "accstatz":
            return 200, docs.accstatz(sid, gw.stats, connections=len(live),
                                      subscriptions=n_subs, now=now)
        if name == "routez":
            nodes = None
            if gw.bridge is not None:
                with contextlib.suppress(Exception):
                    nodes = await gw.bridge.call(_ray_nodes, gw.bridge.cluster_js)
            return 200, docs.routez(info, nodes, now)
        if name == "gatewayz":
            return 200, docs.gatewayz(sid, now)
        if name == "leafz":
            return 200, docs.leafz(sid, now)
        if name == "healthz":
            return await self._healthz(query)
        return 200, await self._jsz(query, sid, now)

    async def _jetstream_varz(self) -> dict[str, Any]:
        bridge = self.gateway.bridge
        try:
            acc = await bridge.call(bridge.cluster_js.account_info)
        except APIError as err:
            return {"config": {}, "stats": {}, "error": err.description}
        limits = acc["limits"]
        return {
            "config": {"max_memory": limits.max_memory, "max_storage": limits.max_storage,
                       "store_dir": str(getattr(bridge.cluster_js, "data_dir", "") or "")},
            "stats": {"memory": acc["memory"], "storage": acc["storage"],
                      "reserved_memory": acc["reserved_memory"],
                      "reserved_storage": acc["reserved_storage"], "accounts": 1,
                      "ha_assets": acc["streams"] + acc["consumers"] + 1,
                      "api": bridge.api_counts()},
            "limits": {},
        }

    async def _healthz(self, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """nats-server's health check: ``js-enabled-only`` asks only whether JetStream is
        on; ``js-server-only`` also whether the meta group has a leader; the default also
        whether every stream answers with a leader."""
        bridge = self.gateway.bridge
        if bridge is None or docs.query_flag(query, "js-enabled-only"):
            return 200, {"status": "ok"}
        try:
            problem = await bridge.call(_health_problem, bridge.cluster_js,
                                        not docs.query_flag(query, "js-server-only"))
        except Exception as exc:  # noqa: BLE001 - any failure to ask is a failed check
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            return 503, {"status": "unavailable", "status_code": 503, "error": problem}
        return 200, {"status": "ok"}

    async def _jsz(self, query: dict[str, str], server_id: str, now: float) -> dict[str, Any]:
        from datetime import UTC, datetime

        from rayjet.client import report

        bridge = self.gateway.bridge
        if bridge is None:
            raise BadRequestError("JetStream is not enabled on this gateway")
        streams = docs.query_flag(query, "streams") or docs.query_flag(query, "consumers")
        accounts = docs.query_flag(query, "accounts") or streams
        consumers = docs.query_flag(query, "consumers")
        config = docs.query_flag(query, "config")
        raft = docs.query_flag(query, "raft")

        def gather() -> tuple[list, dict | None, Any]:
            reps = report.gather(bridge.cluster_js, consumers=consumers) if accounts else []
            try:
                meta = bridge.cluster_js.meta_cluster()
            except APIError:
                meta = None
            acc = bridge.cluster_js.account_info()
            if accounts:
                states = [r.info.state for r in reps if r.info is not None]
            else:
                states = [i.state for i in bridge.cluster_js.streams_info()]
            acc["messages"] = sum(s.messages for s in states)
            acc["bytes"] = sum(s.bytes for s in states)
            return reps, meta, acc

        reps, meta, acc = await bridge.call(gather)
        doc = report.jsz(reps, meta, now=datetime.fromtimestamp(now, UTC),
                         server_id=server_id, store_dir=str(getattr(bridge.cluster_js, "data_dir", "")),
                         config=config)
        # totals from the account, whether or not the streams were listed
        doc.update({"memory": acc["memory"], "storage": acc["storage"],
                    "reserved_memory": acc["reserved_memory"],
                    "reserved_storage": acc["reserved_storage"], "streams": acc["streams"],
                    "consumers": acc["consumers"], "messages": acc["messages"],
                    "bytes": acc["bytes"], "api": bridge.api_counts(),
                    "limits": {}})
        limits = acc["limits"]
        doc["config"].update(max_memory=limits.max_memory, max_storage=limits.max_storage)
        if not accounts:
            doc.pop("account_details", None)
        elif not streams:
            for detail in doc.get("account_details", []):
                detail.pop("stream_detail", None)
        else:
            offset = docs.query_int(query, "offset", 0)
            limit = docs.query_int(query, "limit", docs.DEFAULT_LIMIT) or docs.DEFAULT_LIMIT
            for detail in doc.get("account_details", []):
                detail["stream_detail"] = detail["stream_detail"][offset:offset + limit]
        doc["total"] = acc["streams"]
        if raft:  # every stream and consumer has a leader somewhere: the gateway speaks for
            # all (nats-server counts those this server leads, all of them when alone)
            doc["streams_leader"] = sum(1 for r in reps if r.info is not None) \
                if accounts else acc["streams"]
            doc["consumers_leader"] = sum(len(r.consumers) for r in reps) \
                if consumers else acc["consumers"]
            for key in ("streams_leader", "consumers_leader"):
                if not doc[key]:
                    del doc[key]
        account_api = {"level": 0, "total": doc["api"]["total"], "errors": doc["api"]["errors"]}
        for detail in doc.get("account_details", []):
            detail["api"] = account_api
            for stream in detail.get("stream_detail", []):
                _as_nats_server(stream, raft)
        return doc


def _as_nats_server(stream: dict[str, Any], raft: bool) -> None:
    """One ``stream_detail`` of :func:`rayjet.client.report.jsz` as nats-server writes it:
    configs, states and consumers in the JetStream API's shapes (as in a list answer), the
    raft groups only when asked for (``raft=true``)."""
    if "config" in stream:
        jsapi.shape_stream_config(stream["config"], one=False)
    if "state" in stream:
        jsapi.shape_stream_state(stream["state"])
    groups = []
    for consumer in stream.get("consumer_detail", []):
        jsapi.shape_consumer(consumer, one=False)
        group = (consumer.get("cluster") or {}).get("raft_group")
        if group:
            groups.append({"name": consumer["name"], "raft_group": group})
    if not raft:
        stream.pop("stream_raft_group", None)
    elif "stream_raft_group" in stream:
        stream["consumer_raft_groups"] = groups


def _ray_nodes(js: Any) -> list[dict[str, Any]]:
    return [{"node_id": n["node_id"], "address": n["address"], "labels": n["labels"]}
            for n in js.nodes()]


def _health_problem(js: Any, streams: bool) -> str | None:
    """Why JetStream is not healthy, or None."""
    meta = js.meta_cluster()
    if not meta.get("leader"):
        return "JetStream has not established contact with a meta leader"
    if streams:
        for info in js.streams_info():
            if info.cluster is not None and not info.cluster.leader:
                return f"JetStream stream '{docs.ACCOUNT} > {info.config.name}' is not current"
    return None
