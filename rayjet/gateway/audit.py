"""The ``$JS.EVENT.ADVISORY.API`` audit advisory: nats-server publishes one for every
JetStream API request it answers (who asked, the subject, the request and the answer).

The gateway hands it to its own subscribers at once and posts it to the cluster's event
hub, which hands it to the other gateways' subscribers and stores it in the streams that
capture it; when the hub's copy comes back to this gateway it is recognised by its id and
not handed out twice."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any

from rayjet.engine import cluster_advisories as adv
from rayjet.engine.sys_requests import go_time
from rayjet.gateway import jsapi

REMEMBERED = 10_000  # ids of the audits posted here, to know them when they come back


class ApiAudit:
    def __init__(self, bridge: Any) -> None:
        self.bridge = bridge
        self._posted: OrderedDict[str, None] = OrderedDict()

    def client(self) -> dict[str, Any] | None:
        """nats-server's ClientInfo of the client whose message is being handled now."""
        gw = self.bridge.gateway
        conn = getattr(gw, "publishing", None)
        if conn is None:
            return None
        info: dict[str, Any] = {"start": go_time(int(conn.started * 1e9)),
                                "host": conn.peer[0], "id": conn.cid, "acc": adv.ACCOUNT}
        if conn.guard.identity.user:
            info["user"] = conn.guard.identity.user
        info["acc"] = conn.space.name
        for key, field in (("name", "name"), ("lang", "lang"), ("version", "ver")):
            if conn.client.get(key):
                info[field] = conn.client[key]
        if conn.rtt:
            info["rtt"] = int(conn.rtt * 1e9)
        info.update(server=gw.options.server_name, kind="Client", client_type="nats")
        return info

    def answered(self, tokens: list[str], reply: str, request: bytes, response: bytes,
                 client: dict[str, Any] | None) -> None:
        """Send an API answer to its requester, then its audit advisory."""
        gw = self.bridge.gateway
        gw.route(reply, None, None, response)
        body = adv.api_audit(server=gw.options.server_name, client=client,
                             subject=jsapi.API_PREFIX + ".".join(tokens), request=request,
                             response=response, now_ns=time.time_ns(),
                             domain=self.bridge.domain)
        gw.route(adv.AUDIT_SUBJECT, None, None, json.dumps(body, separators=(",", ":")).encode())
        self._posted[body["id"]] = None
        while len(self._posted) > REMEMBERED:
            self._posted.popitem(last=False)
        from rayjet.actors import events

        events.post([(adv.AUDIT_SUBJECT, body)])

    def posted_here(self, subject: str, payload: bytes) -> bool:
        """Is an event from the hub an audit this gateway already handed out?"""
        if subject != adv.AUDIT_SUBJECT or not self._posted:
            return False
        try:
            event_id = json.loads(payload).get("id")
        except (ValueError, AttributeError):
            return False
        return isinstance(event_id, str) and self._posted.pop(event_id, 0) is None
