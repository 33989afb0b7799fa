"""The gateway's asyncio server: connections, core NATS routing, and the hand-off of
JetStream subjects to :class:`rayjet.gateway.jetstream.JetStreamBridge`.

Everything here runs on one event loop and never waits on Ray: the bridge runs client
calls in a thread pool. Frames for a connection are gathered and written once per loop
turn, so a batch of deliveries leaves in one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from rayjet.auth import GLOBAL
from rayjet.errors import BadRequestError, ServerConfigError
from rayjet.gateway import protocol as P
from rayjet.gateway.accounts import (
    ANONYMOUS,
    RESPONSE_PREFIX,
    AccountGateway,
    Crossings,
    Guard,
    Space,
    auth_from_options,
    certificate_names,
    jetstream_accounts,
    publish_violation,
    request_info,
    subscribe_violation,
    tls_from_config,
)
from rayjet.gateway.interest import Interest, Subscription
from rayjet.gateway.monitor_docs import MAX_CLOSED, ServerStats, Traffic
from rayjet.gateway.protocol import SERVER_VERSION, no_responders_header

log = logging.getLogger(__name__)

SLOW_CONSUMER_BYTES = 64 * 1024 * 1024  # a client this far behind is cut off
JS_API = "$JS.API."
TLS_HANDSHAKE_TIMEOUT = 5.0


@dataclass
class GatewayOptions:
    host: str = "127.0.0.1"
    port: int = 4222
    token: str | None = None
    user: str | None = None
    password: str | None = None
    # a server configuration file in nats-server's syntax: accounts, users, permissions
    # (rayjet.auth); read at start and by reload()
    config: str | None = None
    tls: ssl.SSLContext | None = None
    max_payload: int = P.DEFAULT_MAX_PAYLOAD
    server_name: str = "rayjet"
    ping_interval: float = 120.0
    max_pings_out: int = 2
    # a JetStream domain: the API answers under $JS.<domain>.API. too (clients that name the
    # domain, e.g. nats.py's jetstream(domain=...)), and INFO and account info report it
    domain: str | None = None
    # HTTP monitoring (/varz, /connz, /jsz, /healthz, ...) on this port; None: off, 0: any
    # free port. It listens on http_host (default: host) and asks for the credentials
    # NATS clients must give.
    http_port: int | None = None
    http_host: str | None = None
    # a taken http_port leaves the gateway serving without monitoring (said in the log and
    # in monitor_error) instead of failing: the CLI's default port 8222 may be another's
    http_optional: bool = False

    def __post_init__(self) -> None:
        if self.domain is not None and (not self.domain or not P.valid_subject(
                self.domain, wildcards=False) or "." in self.domain):
            raise BadRequestError(
                f"a JetStream domain is one subject token, not {self.domain!r}")
        if self.http_port is not None and (isinstance(self.http_port, bool) or not isinstance(
                self.http_port, int) or not 0 <= self.http_port <= 65535):
            raise BadRequestError(f"http_port must be a port number (0: any free one) or "
                                  f"None (off), not {self.http_port!r}")

    @property
    def auth_required(self) -> bool:
        return bool(self.token or self.user or self.config)


class Connection:
    """One client connection: parses what it sends, writes what it is sent."""

    def __init__(self, gateway: Gateway, cid: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.gateway = gateway
        self.cid = cid
        self.reader = reader
        self.writer = writer
        self.parser = P.Parser(gateway.options.max_payload)
        self.subs: dict[str, Subscription] = {}
        self.verbose = False
        self.pedantic = False
        self.headers = False
        self.no_responders = False
        self.echo = True
        self.connected = False  # CONNECT accepted
        self.closed = False
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._pings_out = 0
        # what /connz reports
        self.traffic = Traffic()
        self.started = self.last_activity = time.time()
        self.stopped = 0.0
        self.reason = ""
        self.rtt = 0.0
        self._ping_sent = 0.0
        self.client: dict[str, Any] = {}  # name, lang, version from CONNECT
        # who it is (set at CONNECT) and the account whose subjects it sees
        self.guard: Guard = ANONYMOUS
        self.space: Space = gateway.default_space
        self.connect_options: dict[str, Any] = {}
        self.protocol = 0
        self._told_account = False
        self.nonce = secrets.token_urlsafe(16).encode() if gateway.auth.needs_nonce else None
        peer = writer.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else ("", 0)

    # -- output --------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed or not self._out:
            return
        data = b"".join(self._out)
        self._out.clear()
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > SLOW_CONSUMER_BYTES:
            log.warning("client %d is a slow consumer: closing it", self.cid)
            self.gateway.stats.slow_consumers += 1
            self.gateway.loop.create_task(self.close("Slow Consumer (Pending Bytes)"))

    def backlog(self) -> int:
        """Bytes written to this client and not yet taken by the socket."""
        if self.closed:
            return 0
        return self.writer.transport.get_write_buffer_size() + sum(map(len, self._out))

    def deliver(self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> None:
        if hdr and not self.headers:
            return  # a client without headers support cannot read HMSG
        if self.subs.get(sub.sid) is not sub:
            return  # unsubscribed meanwhile (e.g. its UNSUB count reached in this batch)
        if self.guard is not ANONYMOUS and not self.guard.may_receive(subject, reply):
            return
        self.send(P.frame(subject, sub.sid, reply, hdr, payload))
        size = len(payload) + (len(hdr) if hdr else 0)
        self.traffic.sent(size)
        self.gateway.stats.traffic.sent(size)
        sub.delivered += 1
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self._drop_sub(sub.sid)

    # -- input ---------------------------------------------------------------------------
    async def serve(self) -> None:
        opts = self.gateway.options
        if opts.tls is not None:
            # as nats-server: INFO in plain text (tls_required), then the TLS handshake
            self.writer.write(P.info(self.gateway.info_fields(self)))
            try:
                await self.writer.drain()
                await asyncio.wait_for(self.writer.start_tls(opts.tls), TLS_HANDSHAKE_TIMEOUT)
            except (ConnectionError, OSError, ssl.SSLError, TimeoutError):
                await self.close("TLS Handshake Error")
                return
        else:
            self.send(P.info(self.gateway.info_fields(self)))
        ping_task = self.gateway.loop.create_task(self._pinger())
        try:
            while not self.closed:
                try:
                    data = await self.reader.read(256 * 1024)
                except (ConnectionError, OSError, ssl.SSLError):
                    break
                if not data:
                    break
                self._pings_out = 0
                self.last_activity = time.time()
                try:
                    ops = self.parser.feed(data)
                except P.ProtocolError as exc:
                    self._handle_all(exc.ops)
                    self.send(P.err(exc.text))
                    self.reason = self.reason or "Protocol Violation"
                    break
                if not self._handle_all(ops):
                    break
                if self.backlog() > opts.max_payload * 4:
                    await self._drain()
        finally:
            ping_task.cancel()
            await self.close(self.reason or "Client Closed")

    def _handle_all(self, ops: list[tuple]) -> bool:
        for op in ops:
            if not self._handle(op):
                return False
        return True

    def _handle(self, op: tuple) -> bool:
        kind = op[0]
        if not self.connected and kind != P.CONNECT and self.gateway.auth.auth_required:
            self.send(P.err(P.AUTH_VIOLATION))
            self.reason = "Authentication Failure"
            return False
        if kind == P.PUB:
            _, subject, reply, hdr, payload = op
            size = len(payload) + (len(hdr) if hdr else 0)
            self.traffic.received(size)
            self.gateway.stats.traffic.received(size)
            # as nats-server: wildcard tokens in a published subject are refused only from
            # pedantic clients (nats.py puts a consumer's filter in its create subject); a
            # reply subject is taken as it comes (nats-server checks none)
            if not P.valid_subject(subject, wildcards=not self.pedantic):
                self.send(P.err(P.INVALID_PUBLISH_SUBJECT))
                return True
            if hdr is not None and not self.headers:
                self.send(P.err(P.UNKNOWN_OP))
                return False
            if not self.guard.may_publish(subject):
                self.gateway.stats.permission_violations += 1
                self.send(P.err(publish_violation(subject)))
                return True
            if self.verbose:
                self.send(P.OK)
            self.gateway.publish(subject, reply, hdr, payload, origin=self)
        elif kind == P.SUB:
            _, subject, queue, sid = op
            if not P.valid_subject(subject, wildcards=True) or (
                    queue is not None and not P.valid_subject(queue, wildcards=False)):
                self.send(P.err(P.INVALID_SUBJECT))
                return True
            if not self.guard.may_subscribe(subject, queue):
                self.gateway.stats.permission_violations += 1
                self.send(P.err(subscribe_violation(subject, queue)))
                return True
            if sid in self.subs:
                self._drop_sub(sid)
            sub = Subscription(self, sid, subject, queue)
            self.subs[sid] = sub
            self.space.interest.add(sub)
            if self.space.bridge is not None:
                self.space.bridge.subscribed(subject)
            if self.verbose:
                self.send(P.OK)
        elif kind == P.UNSUB:
            _, sid, max_msgs = op
            sub = self.subs.get(sid)
            if sub is not None:
                if max_msgs and sub.delivered < max_msgs:
                    sub.max_msgs = max_msgs
                else:
                    self._drop_sub(sid)
            if self.verbose:
                self.send(P.OK)
        elif kind == P.PING_OP:
            self.send(P.PONG)
            if self.connected and not self._told_account:
                # as nats-server: after the first PONG, a client that reads async INFO
                # (protocol 1) learns the account it is bound to
                self._told_account = True
                if self.protocol >= 1:
                    self.send(P.info({**self.gateway.info_fields(self),
                                      "connect_info": True, "remote_account": self.space.name,
                                      **({"is_system_account": True}
                                         if self.space.name == self.gateway.auth.system_account
                                         else {})}))
        elif kind == P.PONG_OP:
            self._pings_out = 0
            if self._ping_sent:
                self.rtt = time.monotonic() - self._ping_sent
                self._ping_sent = 0.0
        elif kind == P.CONNECT:
            return self._connect(op[1])
        return True

    def _connect(self, options: dict[str, Any]) -> bool:
        identity = self.gateway.auth.authenticate(options, self.nonce, self._cert_names())
        if identity is None:
            self.send(P.err(P.AUTH_VIOLATION))
            self.reason = "Authentication Failure"
            return False
        if self.connected and identity.account != self.space.name:
            self.send(P.err(P.AUTH_VIOLATION))  # a second CONNECT cannot change accounts
            self.reason = "Authentication Failure"
            return False
        self.connect_options = options
        if not self.rtt:  # a first estimate, as nats-server's: the time CONNECT took
            self.rtt = max(time.time() - self.started, 1e-9)
        protocol = options.get("protocol", 0)
        self.protocol = protocol if isinstance(protocol, int) else 0
        self.guard = Guard(identity)
        self.space = self.gateway.space(identity.account)
        self.client = {k: str(options[k]) for k in ("name", "lang", "version")
                       if isinstance(options.get(k), str | int | float) and options.get(k)}
        self.verbose = bool(options.get("verbose"))
        self.pedantic = bool(options.get("pedantic"))
        self.headers = bool(options.get("headers"))
        self.no_responders = bool(options.get("no_responders")) and self.headers
        self.echo = options.get("echo", True) is not False
        self.connected = True
        if self.verbose:
            self.send(P.OK)
        return True

    def _drop_sub(self, sid: str) -> None:
        sub = self.subs.pop(sid, None)
        if sub is not None:
            self.space.interest.remove(sub)

    def _cert_names(self) -> list[str] | None:
        if not self.gateway.auth.tls_map:
            return None
        return certificate_names(self.writer.get_extra_info("ssl_object"))

    def recheck(self) -> bool:
        """After a configuration reload: False when this client's credentials no longer
        hold (it is told and closed by the caller); subscriptions its new permissions
        refuse are ended, each with nats-server's violation."""
        if not self.connected:
            return True
        identity = self.gateway.auth.authenticate(self.connect_options, self.nonce,
                                                  self._cert_names())
        if identity is None or identity.account != self.space.name:
            return False
        self.guard = Guard(identity)
        for sid, sub in list(self.subs.items()):
            if not self.guard.may_subscribe(sub.subject, sub.queue):
                self._drop_sub(sid)
                self.send(P.err(subscribe_violation(sub.subject, sub.queue, sid)))
        return True

    async def _drain(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            self._flush()
            await self.writer.drain()

    async def _pinger(self) -> None:
        opts = self.gateway.options
        while not self.closed:
            await asyncio.sleep(opts.ping_interval)
            if self._pings_out >= opts.max_pings_out:
                self.send(P.err("Stale Connection"))
                self.gateway.stats.stale_connections += 1
                await self.close("Stale Connection")
                return
            self._pings_out += 1
            if not self._ping_sent:
                self._ping_sent = time.monotonic()  # its PONG measures the round trip
            self.send(P.PING)

    async def close(self, reason: str = "Server Shutdown") -> None:
        if self.closed:
            return
        self._flush()
        self.closed = True
        self.stopped = time.time()
        self.reason = reason
        self.gateway.remember_closed(self)
        for sid in list(self.subs):
            self._drop_sub(sid)
        self.gateway.connections.discard(self)
        with contextlib.suppress(Exception):
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)


class Gateway:
    """A NATS protocol server in front of a rayjet connection.

    ``bridge`` serves JetStream: it is told of every publish (``capture``) and answers the
    ``$JS.API`` and ``$JS.ACK`` subjects through internal subscriptions."""

    def __init__(self, options: GatewayOptions | None = None, bridge: Any = None) -> None:
        self.options = options or GatewayOptions()
        self.auth = auth_from_options(self.options)
        if self.options.tls is None and self.auth.tls:
            self.options.tls = tls_from_config(self.auth)
        self.crossings = Crossings(self.auth)
        self.spaces: dict[str, Space] = {}
        self.default_space = self.space(GLOBAL)
        js_accounts = jetstream_accounts(self.auth) if bridge is not None else []
        # the account whose subjects the gateway's own handlers serve ($SYS requests when no
        # accounts are configured, monitoring's JetStream figures)
        self.home = self.space(js_accounts[0] if js_accounts else GLOBAL)
        self.bridges: dict[str, Any] = {}
        for account in js_accounts:
            if account == GLOBAL:
                self.bridges[account] = bridge
            else:  # its own view of the cluster's streams and its own bridge
                from rayjet.client.account_view import AccountJetStream

                self.bridges[account] = type(bridge)(AccountJetStream(
                    bridge.js, account, self.auth.jetstream_of(account)))
            self.space(account).bridge = self.bridges[account]
        js_account = js_accounts[0] if js_accounts else None
        self.connections: set[Connection] = set()
        self.server_id = "RJ" + secrets.token_hex(10).upper()
        self.bridge = self.bridges.get(js_account) if js_account is not None else None
        self.jetstream_served = bridge is not None  # to some account, or none configured
        self._ids = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stats = ServerStats()
        self.closed: deque[dict[str, Any]] = deque(maxlen=MAX_CLOSED)  # for /connz
        self.monitor_error: str | None = None  # why monitoring is off although asked for
        self._matches = [0, 0, 0]  # messages routed, receivers in all, most receivers of one
        self.monitor: Any = None
        self.sys_requests: Any = None  # $SYS.REQ.SERVER.> (rayjet.gateway.sysreq)
        # the client whose message is being handed out now (internal handlers read it, e.g.
        # for the API audit advisory's client info); None for the gateway's own messages
        self.publishing: Connection | None = None

    def space(self, account: str) -> Space:
        """The subject space of ``account`` (made on first use)."""
        space = self.spaces.get(account)
        if space is None:
            space = self.spaces[account] = Space(account)
        return space

    @property
    def interest(self) -> Interest:
        return self.home.interest

    @property
    def system_account(self) -> str:
        """Where ``$SYS.REQ.SERVER`` requests are answered: the system account when
        accounts are configured, else the home account (as before accounts existed)."""
        return self.auth.system_account if self.auth.accounts_configured else self.home.name

    def reload(self) -> None:
        """Read the configuration file again: new users and permissions apply to connected
        clients at once; a client whose user is gone (or moved to another account) is
        disconnected, as nats-server's reload does."""
        auth = auth_from_options(self.options)
        if self.jetstream_served and jetstream_accounts(auth) != sorted(self.bridges):
            raise ServerConfigError("a reload cannot change which accounts have JetStream: "
                                    "restart the gateway")
        crossings = Crossings(auth)
        crossings.responses = self.crossings.responses  # requests on their way keep theirs
        self.auth, self.crossings = auth, crossings
        for conn in list(self.connections):
            if not conn.recheck():  # closed without a word, as nats-server does
                self.loop.create_task(conn.close("Authentication Failure"))

    def info_fields(self, conn: Connection | None = None) -> dict[str, Any]:
        opts = self.options
        fields = {
            "server_id": self.server_id, "server_name": opts.server_name,
            "version": SERVER_VERSION, "proto": 1, "go": "rayjet",
            "host": opts.host, "port": self.port, "headers": True,
            "max_payload": opts.max_payload, "jetstream": self.bridge is not None,
        }
        if conn is not None:
            fields["client_id"] = conn.cid
            fields["client_ip"] = "127.0.0.1"
        if opts.domain and self.bridge is not None:
            fields["domain"] = opts.domain
        if self.auth.auth_required:
            fields["auth_required"] = True
            if conn is not None and conn.nonce is not None:
                fields["nonce"] = conn.nonce.decode()
        if opts.tls is not None:
            fields["tls_required"] = True
            fields["tls_available"] = True
            if opts.tls.verify_mode == ssl.CERT_REQUIRED:
                fields["tls_verify"] = True  # clients must present a certificate
        return fields

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            return self._server.sockets[0].getsockname()[1]
        return self.options.port

    @property
    def http_port(self) -> int | None:
        return self.monitor.port if self.monitor is not None else None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stats = ServerStats()
        for account, bridge in self.bridges.items():
            await bridge.start(self if account == GLOBAL else AccountGateway(self, account))
        from rayjet.gateway.sysreq import SysRequests

        self.sys_requests = SysRequests(self)
        self.sys_requests.start()
        self._server = await asyncio.start_server(
            self._accept, self.options.host, self.options.port,
            reuse_address=True, limit=P.MAX_CONTROL_LINE * 4)
        if self.options.http_port is not None:
            from rayjet.gateway.monitor import Monitor

            host = self.options.http_host or self.options.host
            self.monitor = Monitor(self, host, self.options.http_port)
            try:
                await self.monitor.start()
            except OSError as exc:
                self.monitor = None
                if not self.options.http_optional:
                    await self.stop()
                    raise
                self.monitor_error = (f"monitoring port {host}:{self.options.http_port} "
                                      f"could not be had: {exc.strerror or exc}")
                log.warning("%s; serving without monitoring", self.monitor_error)
            except BaseException:
                self.monitor = None
                await self.stop()
                raise

    async def stop(self) -> None:
        """Stop listening and close every connection (clients see the server go away)."""
        if self.monitor is not None:
            await self.monitor.stop()
            self.monitor = None
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        for conn in list(self.connections):
            await conn.close()
        if self.sys_requests is not None:
            self.sys_requests.stop()
            self.sys_requests = None
        for bridge in self.bridges.values():
            await bridge.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, next(self._ids), reader, writer)
        self.connections.add(conn)
        self.stats.total_connections += 1
        await conn.serve()

    # -- what monitoring reads -----------------------------------------------------------
    def remember_closed(self, conn: Connection) -> None:
        from rayjet.gateway.monitor_docs import connection_doc

        if conn.connected or conn.reason:
            self.closed.append(connection_doc(conn, conn.stopped))

    def subscriptions(self) -> list[tuple[Subscription, int]]:
        """Every subscription with its connection's id (0: the gateway's own)."""
        out = [(sub, conn.cid) for conn in list(self.connections)
               for sub in list(conn.subs.values())]
        return out + [(sub, 0) for space in self.spaces.values()
                      for sub in space.internal_subs]

    def account_counts(self, live: list[Connection]) -> dict[str, tuple[int, int, bool]]:
        """Each account's client connections, subscriptions and whether JetStream serves
        it (for /accountz); the gateway's own handlers count in their account."""
        names = set(self.auth.accounts) | {GLOBAL, self.auth.system_account}
        out = {n: [0, 0, self.space(n).bridge is not None] for n in names}
        for conn in live:
            entry = out.setdefault(conn.space.name, [0, 0, False])
            entry[0] += 1
            entry[1] += len(conn.subs)
        for name, space in self.spaces.items():
            out.setdefault(name, [0, 0, False])[1] += len(space.internal_subs)
        return {n: (c, s, js) for n, (c, s, js) in out.items()}

    def subscription_count(self) -> int:
        return sum(len(c.subs) for c in self.connections) + sum(
            len(space.internal_subs) for space in self.spaces.values())

    def interest_counters(self) -> dict[str, float]:
        m = self._matches
        return {"num_cache": self.interest.cached(), "num_inserts": self.interest.inserts,
                "num_removes": self.interest.removes, "num_matches": m[0],
                "cache_hit_rate": 0.0, "max_fanout": m[2],
                "avg_fanout": m[1] / m[0] if m[0] else 0.0}

    # -- routing -------------------------------------------------------------------------
    def publish(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes,
                origin: Connection | None = None) -> None:
        """A message published by a client (or by the gateway itself, in the home
        account): to every matching subscription of its account, to the stream that
        captures it, and a no-responders status back when a request reached nobody."""
        outer, self.publishing = self.publishing, origin
        try:
            self._publish(subject, reply, hdr, payload, origin)
        finally:
            self.publishing = outer

    def _publish(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes,
                 origin: Connection | None, space: Space | None = None) -> bool:
        """Whether anyone took the message (a subscriber, a stream, another account)."""
        if space is None:
            space = origin.space if origin is not None else self.home
        if subject.startswith("$JS."):
            # acks and API requests: no stream captures them and, unless a client
            # listens there too, only the bridge's own subscription hears them
            for prefix, sub in space.js_internal:
                if subject.startswith(prefix) and space.interest.sole_listener(sub):
                    sub.owner.deliver(sub, subject, reply, hdr, payload)
                    return True
        if space.bridge is None and self.jetstream_served and reply and \
                subject.startswith(JS_API) and not space.interest.has_interest(subject):
            # JetStream runs, not for this account: its requests get nats-server's 10039
            from rayjet.gateway.jsapi import not_enabled

            doc = not_enabled(subject[len(JS_API):].split("."))
            if doc is not None:
                self.route(reply, None, None, json.dumps(doc, separators=(",", ":")).encode(),
                           account=space.name)
                return True
        delivered = self.route(subject, reply, hdr, payload, origin, account=space.name)
        if self.crossings.services:
            delivered += self._to_service(space, subject, reply, hdr, payload, origin)
        bridge = space.bridge
        wants_answer = (not delivered and reply and origin is not None
                        and origin.no_responders)

        def no_responders() -> None:
            if wants_answer:
                self.route(reply, None, no_responders_header(subject), b"",
                           account=space.name)

        waiting = bridge is not None and bridge.rechecks_waiting
        if not waiting and bridge is not None and bridge.capture(subject, reply, hdr, payload):
            return True
        if bridge is not None and not subject.startswith("$JS.") and (
                waiting or (reply and not delivered) or bridge.catalogue_stale()):
            # a stream made since the catalogue was read (by another client) captures it:
            # a request nobody answered looks again at once (its sender waits on the
            # answer), other publishes when the catalogue is old enough
            bridge.recheck(subject, reply, hdr, payload, no_responders)
            return True
        no_responders()
        return bool(delivered)

    def _to_service(self, space: Space, subject: str, reply: str | None, hdr: bytes | None,
                    payload: bytes, origin: Connection | None) -> int:
        """A request on a service another account exports to this one: published there
        under the exported subject, its reply mapped to lead back here, with nats-server's
        ``Nats-Request-Info`` header naming the requesting account."""
        hit = self.crossings.service_route(space.name, subject)
        if hit is None:
            return 0
        route, target = hit
        if origin is not None and origin.headers:
            hdr = request_info(hdr, space.name, origin.rtt)
        mapped = (self.crossings.reply_for(route, space.name, reply, time.monotonic())
                  if reply else None)
        return int(self._publish(target, mapped, hdr, payload, None,
                                 self.space(route.exporter)))

    def route(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes,
              origin: Connection | None = None, account: str | None = None) -> int:
        """Hand a message to the subscriptions of its account (``account``, else the
        origin's, else the home account's) that want it, and to the accounts importing it;
        how many took it. A reply to a service request from another account goes back
        there."""
        if account is not None:
            space = self.space(account)
        else:
            space = origin.space if origin is not None else self.home
        crossings = self.crossings
        if not crossings.empty and subject.startswith(RESPONSE_PREFIX):
            back = crossings.response(space.name, subject, time.monotonic())
            if back is not None:
                return self.route(back[1], reply, hdr, payload, account=back[0])
        n = self._deliver(space, subject, reply, hdr, payload, origin)
        if crossings.streams:
            for importer, mapped in crossings.stream_routes(space.name, subject):
                n += self._deliver(self.space(importer), mapped, reply, hdr, payload, None)
        return n

    def _deliver(self, space: Space, subject: str, reply: str | None, hdr: bytes | None,
                 payload: bytes, origin: Connection | None) -> int:
        n = 0
        for sub in space.interest.receivers(subject):
            owner = sub.owner
            if owner is origin and origin is not None and not origin.echo:
                continue
            owner.deliver(sub, subject, reply, hdr, payload)
            n += 1
        m = self._matches
        m[0] += 1
        m[1] += n
        if n > m[2]:
            m[2] = n
        return n

    def unsubscribe_internal(self, sub: Subscription) -> None:
        """End an internal subscription made by :meth:`subscribe_internal`."""
        for space in self.spaces.values():
            if sub in space.internal_subs:
                space.internal_subs.remove(sub)
                space.interest.remove(sub)
            space.js_internal = [(p, s) for p, s in space.js_internal if s is not sub]

    def subscribe_internal(self, subject: str, handler: Any,
                           account: str | None = None) -> Subscription:
        """An internal subscription in ``account`` (default: the home account):
        ``handler.deliver(sub, subject, reply, hdr, payload)`` is called for each
        message."""
        space = self.home if account is None else self.space(account)
        sub = Subscription(handler, f"internal-{next(self._ids)}", subject)
        space.interest.add(sub)
        space.internal_subs.append(sub)
        if subject.startswith("$JS.") and subject.endswith(".>"):
            space.js_internal.append((subject[:-1], sub))
        return sub
