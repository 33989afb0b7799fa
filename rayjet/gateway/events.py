"""A gateway follows the cluster's event hub: advisories and metrics
(``$JS.EVENT.>``) reach its NATS subscribers, from the time the gateway started."""

from __future__ import annotations

import asyncio
from typing import Any

EVENTS_POLL = 20.0  # s one long poll of the event hub waits at most
RETRY_AFTER = 1.0  # s before a hub that could not be asked is asked again


async def follow_events(bridge: Any, following: asyncio.Event) -> None:
    """Advisories and metrics from the cluster's event hub to this gateway's
    subscribers of ``$JS.EVENT.>``, from the time the gateway started."""
    from rayjet.client import event_hub

    hub, after, epoch = None, -1, None
    while not bridge.stopping:
        try:
            if hub is None:
                hub = await bridge.call(event_hub.ensure_event_hub)
            # awaited, not a pool thread blocked in ray.get: a stopped gateway leaves no
            # thread inside Ray (one there when Ray shuts down spins and holds up the exit)
            got = await asyncio.wait_for(
                asyncio.wrap_future(hub.since.remote(after, EVENTS_POLL).future()),
                EVENTS_POLL + 30)
        except Exception:  # noqa: BLE001 - the hub restarts or Ray is busy: again soon
            hub = None
            await asyncio.sleep(RETRY_AFTER)
            continue
        if epoch is not None and got["epoch"] != epoch:
            after = 0  # a new hub: everything it holds came after the old one's
            epoch = got["epoch"]
            continue
        epoch = got["epoch"]
        if after < 0:
            after = got["last"]
            following.set()
            continue
        for seq, subject, payload in got["events"]:
            after = seq
            if bridge.audit.posted_here(subject, payload):
                continue  # handed out when it was made
            event = _for_account(bridge.js, subject, payload)
            if event is None:
                continue  # about another account's streams
            subject, payload = event
            bridge.links.after_event(subject)  # made or deleted elsewhere: links go stale
            bridge.gateway.route(subject, None, None, payload)
        if got["missed"] and not got["events"]:
            after = got["last"]


def _for_account(js: Any, subject: str, payload: bytes) -> tuple[str, bytes] | None:
    """The event as the bridge's account sees it, or None when it is another's."""
    from rayjet.api.account_names import SEP

    shown = getattr(js, "event", None)
    if shown is not None:
        return shown(subject, payload)
    return None if SEP in subject else (subject, payload)
