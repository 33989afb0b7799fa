"""What a delivered message's ack subject says of it (nats-py's ``Msg.Metadata``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class SequencePair:
    stream: int
    consumer: int


@dataclass(frozen=True)
class MsgMetadata:
    sequence: SequencePair
    num_delivered: int
    num_pending: int
    timestamp: datetime
    stream: str
    consumer: str
    domain: str | None = None

    @classmethod
    def from_ack_subject(cls, reply: str) -> MsgMetadata:
        """From ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``."""
        tokens = reply.split(".")
        delivered, sseq, cseq, ts, pending = (int(t) for t in tokens[-5:])
        return cls(SequencePair(sseq, cseq), delivered, pending,
                   datetime.fromtimestamp(ts / 1e9, tz=UTC), tokens[2], tokens[3])
