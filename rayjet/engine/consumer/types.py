"""Values the consumer engine hands to its actor: deliveries, pull statuses, advisories."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rayjet.engine.consumer.ops import ConsumerOp
from rayjet.storage.protocol import StoredMsg

ACK_PREFIX = "$JS.ACK"

# advisory subjects (suffixed ".<stream>.<consumer>") and event types, as nats-server sends them
ACK_METRIC = "$JS.EVENT.METRIC.CONSUMER.ACK"
MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
MSG_NAKED = "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED"
MSG_TERMINATED = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED"
ACK_METRIC_TYPE = "io.nats.jetstream.metric.v1.consumer_ack"
MAX_DELIVER_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"
NAK_TYPE = "io.nats.jetstream.advisory.v1.nak"
TERMINATED_TYPE = "io.nats.jetstream.advisory.v1.terminated"
# the term reason used when a message to redeliver has left the stream
TERM_REASON_DELETED = "Unacknowledged message was deleted"
# priority groups (pinned_client): the pin header, and the advisories when a pin is set or lost
PIN_ID_HEADER = "Nats-Pin-Id"
GROUP_PINNED = "$JS.EVENT.ADVISORY.CONSUMER.PINNED"
GROUP_UNPINNED = "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED"
GROUP_PINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_pinned"
GROUP_UNPINNED_TYPE = "io.nats.jetstream.advisory.v1.consumer_group_unpinned"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a client, with the metadata its ack reply subject carries.

    ``due_ns`` is when the actor may send it (replay original, rate limit); 0 means now.
    """

    subject: str
    hdr: bytes
    data: bytes
    stream: str
    consumer: str
    stream_seq: int
    consumer_seq: int
    num_delivered: int
    timestamp: int  # ns, when the stream stored the message
    num_pending: int
    due_ns: int = 0

    @property
    def reply(self) -> str:
        """``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``."""
        return (f"{ACK_PREFIX}.{self.stream}.{self.consumer}.{self.num_delivered}."
                f"{self.stream_seq}.{self.consumer_seq}.{self.timestamp}.{self.num_pending}")

    @property
    def size(self) -> int:
        """The bytes a pull request's max_bytes counts: subject, reply, headers and data."""
        return len(self.subject) + len(self.reply) + len(self.hdr) + len(self.data)


@dataclass(frozen=True, slots=True)
class DeliveryRun:
    """New messages handed out one after the other, each for the first time, at once:
    consumer seqs from ``first_cseq`` on, the first with ``pending`` messages after it and
    each next one with one less (never below 0). What a run of :class:`Delivery` objects
    would say, without an object per message."""

    msgs: list[StoredMsg]
    stream: str
    consumer: str
    first_cseq: int
    pending: int

    def __len__(self) -> int:
        return len(self.msgs)

    def deliveries(self) -> list[Delivery]:
        c, p = self.first_cseq, self.pending
        return [Delivery(m.subject, m.hdr, m.data, self.stream, self.consumer, m.seq, c + i, 1,
                         m.ts, max(p - i, 0)) for i, m in enumerate(self.msgs)]


@dataclass(frozen=True, slots=True)
class AckReply:
    stream: str
    consumer: str
    num_delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp: int
    num_pending: int


def parse_ack_reply(subject: str) -> AckReply | None:
    """Decode a :attr:`Delivery.reply` subject (also the 11+ token form with domain and
    account hash); None when it is not an ack subject."""
    tokens = subject.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    if len(tokens) == 9:
        off = 2
    elif len(tokens) >= 11:
        off = 4
    else:
        return None
    try:
        nums = [int(t) for t in tokens[off + 2:off + 7]]
    except ValueError:
        return None
    if any(n < 0 for n in nums):
        return None
    return AckReply(tokens[off], tokens[off + 1], *nums)


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A pull (fetch) request: ``expires``/``heartbeat`` in seconds, 0 for none.

    Priority groups (consumers with a ``priority_policy``): ``group`` names the group the
    pull belongs to; ``min_pending``/``min_ack_pending`` hold it back until the consumer is
    that far behind (overflow); ``pin_id`` is the id a pinned client got in ``Nats-Pin-Id``
    (pinned_client, ``id`` on the wire); ``priority`` 0..9, lower is served first
    (prioritized) or pinned first (pinned_client).
    """

    reply: str = ""
    batch: int = 1
    max_bytes: int = 0
    expires: float = 0.0
    no_wait: bool = False
    heartbeat: float = 0.0
    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    pin_id: str = ""
    priority: int = 0


@dataclass(frozen=True, slots=True)
class RequestStatus:
    """A status message for a pull request's reply subject (the NATS status header line),
    with what was still owed to it (``Nats-Pending-Messages``/``Nats-Pending-Bytes``)."""

    reply: str
    code: int
    description: str
    pending_msgs: int = 0
    pending_bytes: int = 0

    @property
    def done(self) -> bool:
        """Whether the request is over (everything but an idle heartbeat)."""
        return self.code != 100


@dataclass(frozen=True, slots=True)
class Advisory:
    """An event to publish on ``subject``: ``body`` is its JSON object."""

    subject: str
    body: dict[str, Any]


@dataclass(slots=True)
class Batch:
    """What one delivery decision produced.

    ``sends`` pairs each delivery (or run of them) with the reply subject of the pull
    request it answers ("" when delivered outside a pull request). Propose ``ops`` in order and send the
    deliveries once they are applied (so a new leader never forgets a sent message);
    ``statuses`` end or inform pull requests; publish ``advisories``.
    """

    sends: list[tuple[str, Delivery | DeliveryRun]] = field(default_factory=list)
    ops: list[ConsumerOp] = field(default_factory=list)
    statuses: list[RequestStatus] = field(default_factory=list)
    advisories: list[Advisory] = field(default_factory=list)
    stalled: bool = False  # max_ack_pending reached: more messages wait for acks

    @property
    def deliveries(self) -> list[tuple[str, Delivery]]:
        """``sends`` with every run spelled out message by message."""
        return [(reply, one) for reply, d in self.sends
                for one in (d.deliveries() if isinstance(d, DeliveryRun) else (d,))]

    @property
    def messages(self) -> list[Delivery]:
        return [d for _, d in self.deliveries]

    @property
    def op(self) -> ConsumerOp | None:
        """The last op (the DeliveredOp when messages went out); None: nothing to propose."""
        return self.ops[-1] if self.ops else None


@dataclass(slots=True)
class AckOutcome:
    """What an ack, nak, in-progress or term decided.

    ``op`` (if any) must be proposed; a double ack (ack_sync) is answered once it is applied.
    With ``op`` None there is nothing to replicate and the answer can go out at once.
    """

    op: ConsumerOp | None = None
    advisories: list[Advisory] = field(default_factory=list)
    ok: bool = True  # False: the ack named nothing this consumer delivered


@dataclass(slots=True)
class ConsumerApplyResult:
    """One applied op; ``acked`` are the stream seqs the stream may now release (interest and
    work-queue retention: forward them to the stream as its ``prepare_ack``)."""

    op: ConsumerOp
    acked: list[int] = field(default_factory=list)


__all__ = [
    "ACK_METRIC", "ACK_METRIC_TYPE", "GROUP_PINNED", "GROUP_PINNED_TYPE", "GROUP_UNPINNED",
    "GROUP_UNPINNED_TYPE", "MAX_DELIVERIES", "MAX_DELIVER_TYPE", "MSG_NAKED",
    "MSG_TERMINATED", "NAK_TYPE", "PIN_ID_HEADER", "TERMINATED_TYPE", "TERM_REASON_DELETED",
    "AckOutcome",
    "AckReply", "Advisory", "Batch", "ConsumerApplyResult", "Delivery", "DeliveryRun",
    "PullRequest",
    "RequestStatus", "parse_ack_reply",
]
