"""nats-server's system requests on the gateway: ``$SYS.REQ.SERVER.PING`` (statsz),
``$SYS.REQ.SERVER.PING.<NAME>`` and ``$SYS.REQ.SERVER.<server id>.<NAME>`` for VARZ,
CONNZ, SUBSZ, JSZ, HEALTHZ, ACCOUNTZ, ROUTEZ, GATEWAYZ, LEAFZ, IDZ, STATSZ, PROFILEZ,
EXPVARZ, IPQUEUESZ and RAFTZ, so that ``nats server list / info / report ...`` work against
a gateway as against a nats-server.

The documents are those of the HTTP monitoring port (:mod:`rayjet.gateway.monitor`), asked
with the request's JSON options and wrapped as nats-server wraps them:
``{"server": <ServerInfo>, "data": <document>}``, or ``"error": {"code", "description"}``
(400 for options it cannot read, 500 when the document cannot be made). A request whose
filter (``server_name``, ``host``, ``cluster``, ``tags``, ``domain``) leaves this gateway
out gets no answer, as from a nats-server that is not the one asked for.

nats-server answers these only to users of its system account. The gateway serves one
account: every client that gave the gateway's credentials may ask (the monitoring port
asks for the same credentials).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

from rayjet.engine import sys_requests as sr
from rayjet.errors import APIError
from rayjet.gateway.protocol import SERVER_VERSION, no_responders_header

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64  # requests being answered at once; more are dropped (clients retry)
STATS_SUBJECT = "$SYS.SERVER.{}.STATSZ"  # where a statsz ping without a reply is answered


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


class _Handler:
    def __init__(self, owner: SysRequests) -> None:
        self.owner = owner

    def deliver(self, sub: Any, subject: str, reply: str | None, hdr: bytes | None,
                payload: bytes) -> None:
        self.owner.on_request(sub, subject, reply, payload)


class SysRequests:
    """The gateway's internal subscriptions on ``$SYS.REQ.SERVER.>`` and their answers."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.seq = 0  # numbers every answer's ServerInfo, as nats-server's
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task] = set()
        self._monitor: Any = None  # documents when the gateway has no monitoring port
        self.dropped = 0

    def start(self) -> None:
        gw = self.gateway
        handler = _Handler(self)
        for subject in (sr.PING, sr.PING + ".*", f"{sr.PREFIX}{gw.server_id}.*"):
            self._subs.append(gw.subscribe_internal(subject, handler, gw.system_account))

    def stop(self) -> None:
        for sub in self._subs:
            self.gateway.unsubscribe_internal(sub)
        self._subs.clear()
        for task in list(self._tasks):
            task.cancel()

    # -- requests ------------------------------------------------------------------------
    def on_request(self, sub: Any, subject: str, reply: str | None, payload: bytes) -> None:
        gw = self.gateway
        name = sr.endpoint(subject, gw.server_id)
        if name is None:
            # a name nats-server does not serve here: nobody answers, unless a client
            # listens on that subject too
            space = gw.space(gw.system_account)
            if reply and space.interest.sole_listener(sub):
                gw.route(reply, None, no_responders_header(subject), b"",
                         account=gw.system_account)
            return
        if not reply:
            if name != "STATSZ":
                return  # nothing to answer to
            reply = STATS_SUBJECT.format(gw.server_id)
        if len(self._tasks) >= MAX_IN_FLIGHT:
            self.dropped += 1
            return
        task = asyncio.get_running_loop().create_task(self._answer(name, reply, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, name: str, reply: str, payload: bytes) -> None:
        try:
            body = await self.answer(name, payload)
        except Exception:  # noqa: BLE001 - a request must never take the gateway down
            log.exception("system request %s failed", name)
            return
        if body is not None:
            self.gateway.route(reply, None, None, body, account=self.gateway.system_account)

    async def answer(self, name: str, payload: bytes) -> bytes | None:
        """The answer to a request for ``name`` with body ``payload`` (None: this gateway
        does not answer it)."""
        if name == "IDZ":
            gw = self.gateway
            return _json({"name": gw.options.server_name, "host": gw.options.host,
                          "id": gw.server_id})
        try:
            options = sr.parse_options(name, payload)
        except sr.OptionsError as err:
            return _json({"server": self.server_info(),
                          "error": {"code": 400, "description": str(err)}})
        if self._filtered_out(options):
            return None
        try:
            data = await self.document(name, options)
        except APIError as err:
            return _json({"server": self.server_info(), "data": None,
                          "error": {"code": 500, "description": err.description}})
        except Exception as exc:  # noqa: BLE001 - the reason goes back to the asker
            log.debug("system request %s failed", name, exc_info=True)
            return _json({"server": self.server_info(), "data": None,
                          "error": {"code": 500, "description": f"{type(exc).__name__}: {exc}"}})
        if name == "STATSZ":
            return _json({"server": self.server_info(), "statsz": data})
        return _json({"server": self.server_info(), "data": data})

    def _filtered_out(self, options: dict[str, Any]) -> bool:
        opts = self.gateway.options
        domain = opts.domain if self.gateway.bridge is not None else None
        return sr.filtered_out(options, name=opts.server_name, host=opts.host,
                               domain=domain or "")

    def server_info(self) -> dict[str, Any]:
        gw = self.gateway
        self.seq += 1
        domain = gw.options.domain if gw.bridge is not None else None
        return sr.server_info(name=gw.options.server_name, host=gw.options.host,
                              server_id=gw.server_id, version=SERVER_VERSION,
                              jetstream=gw.bridge is not None, seq=self.seq,
                              now_ns=time.time_ns(), domain=domain or "")

    # -- documents -----------------------------------------------------------------------
    def _documents(self) -> Any:
        """The monitoring port's document builder (one of its own when there is none)."""
        if self.gateway.monitor is not None:
            return self.gateway.monitor
        if self._monitor is None:
            from rayjet.gateway.monitor import Monitor

            self._monitor = Monitor(self.gateway, self.gateway.options.host, 0)
        return self._monitor

    async def document(self, name: str, options: dict[str, Any]) -> Any:
        gw = self.gateway
        docs = self._documents()
        if name == "STATSZ":
            return sr.statsz((await docs.document("varz", {}))[1])
        if name == "PROFILEZ":
            return {"profile": None, "error": "Profile name not specified"
                    if not options.get("name") else "profiles are not available on rayjet"}
        if name == "EXPVARZ":
            return {"cmdline": list(sys.argv), "memstats": {}}
        if name in ("IPQUEUESZ", "RAFTZ"):
            return {}
        if name == "CONNZ" and (options.get("acc") not in (None, "", "$G")
                                or options.get("state", 0) not in (0, 1, 2)):
            from rayjet.gateway import monitor_docs

            # another account's connections, or a state nats-server knows none in
            return monitor_docs.connz(gw.server_id, [], [], sr.http_query(name, options),
                                      time.time())
        _, doc = await docs.document(name.lower(), sr.http_query(name, options))
        if name == "HEALTHZ":
            doc.setdefault("status_code", 200)
        return doc
