"""Direct gets through the gateway (``$JS.API.DIRECT.GET.<stream>[.<subject>]``), answered
as nats-server 2.15.1 answers them: one message with the Nats-Stream / -Subject /
-Sequence / -Time-Stamp headers, or for a ``batch`` or ``multi_last`` request (ADR-31)
several messages and a ``204 EOB`` status, read by one call to a replica
(:mod:`rayjet.engine.direct_get`); bad requests get nats-server's 408 statuses, nothing
found its 404."""

from __future__ import annotations

from typing import Any

from rayjet.engine import direct_get as DG
from rayjet.errors import (
    APIError,
    NotFoundError,
    ServiceUnavailableError,
    StreamNotFoundError,
    TimeoutError,
)


async def answer(bridge: Any, tokens: list[str], reply: str, payload: bytes) -> None:
    """Answer one direct get on ``reply`` (``bridge``: the gateway's JetStreamBridge)."""
    await bridge.stored_so_far()
    route = bridge.gateway.route
    stream = tokens[2]
    # DIRECT.GET.<stream>.<subject>: last by subject (an empty subject is a bad request)
    req = DG.parse_request(payload, ".".join(tokens[3:]) if len(tokens) > 3 else None)
    if isinstance(req, tuple):
        route(reply, None, DG.status_block(*req), b"")
        return
    try:
        got = await _read(bridge, stream, req)
    except NotFoundError:
        route(reply, None, DG.status_block(404, "Message Not Found"), b"")
        return
    except APIError as exc:
        route(reply, None, DG.status_block(exc.code, exc.description), b"")
        return
    for hdr, data in DG.wire(got, got.get("stream") or stream):
        route(reply, None, hdr, data)


async def _read(bridge: Any, stream: str, req: dict[str, Any]) -> dict[str, Any]:
    """The answer of one replica, asked from the gateway's loop; what the link cannot
    answer (a stream gone or without a reachable replica: a ``mirror_direct`` mirror may)
    the client answers in the pool."""
    try:
        link = await bridge.publisher.link(stream)
        return await link.get_msgs(req)
    except (ServiceUnavailableError, TimeoutError, StreamNotFoundError):
        bridge.publisher.forget_streams(stream)
    return await bridge.call(bridge.js.direct_read, stream, req)
