"""A client's publish as the gateway queues it for the stream that captures its subject."""

from __future__ import annotations

from typing import NamedTuple


class InboundPublish(NamedTuple):
    """One PUB/HPUB on its way to a stream: the header block as the client sent it (None
    without headers; stored byte for byte) and the reply subject its PubAck goes to."""

    subject: str
    reply: str | None
    header: bytes | None
    payload: bytes
