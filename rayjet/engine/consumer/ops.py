"""Replicated consumer operations and their compact wire form.

The consumer leader proposes these to the consumer's raft group; every replica applies them
in log order to its :class:`~rayjet.engine.consumer.state.ConsumerState`. Like the stream
ops, an encoded op is one type byte followed by a msgpack array of the op's fields. Type
bytes and field positions are append-only: never renumber or reorder; new fields go at the
end and decoders fill missing trailing fields with their defaults.

Every timestamp an op needs (delivery time, ack time) is carried in the op, fixed by the
leader's clock, so replicas never read their own clock and stay identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from rayjet.errors import BadRequestError

# -- type bytes (only add to the end) --------------------------------------------------------
OP_START = 1
OP_DELIVERED = 2
OP_ACK = 3
OP_TOUCH = 4
OP_MAX_DELIVERED = 5
OP_PURGED = 6
OP_ADVANCE = 7
OP_RESTORE = 8
OP_RESET = 9


@dataclass(frozen=True, slots=True)
class StartOp:
    """Fix the consumer's starting point: the first stream sequence it may deliver.

    ``resume`` is the stream's last sequence when a last_per_subject consumer started (the
    end of its per-subject catch-up phase), 0 otherwise. Only the first StartOp counts.
    """

    start_seq: int
    resume: int = 0

    code = OP_START

    def fields(self) -> list[Any]:
        return [self.start_seq, self.resume]


@dataclass(frozen=True, slots=True)
class DeliveredOp:
    """Messages handed out at ``ts``: ``items`` are (consumer seq, stream seq, delivery count).

    A delivery count above 1 is a redelivery of a message still pending. ``skip`` > 0 says
    the leader looked at every stream sequence below ``skip`` (non-matching messages were
    passed over), so a new leader can resume there.
    """

    ts: int
    items: tuple[tuple[int, int, int], ...] = ()
    skip: int = 0

    code = OP_DELIVERED

    def fields(self) -> list[Any]:
        return [self.ts, self.items, self.skip]  # msgpack writes tuples as arrays


@dataclass(frozen=True, slots=True)
class AckOp:
    """Acknowledgements at ``ts``: ``items`` are (consumer seq, stream seq).

    Explicit ack policy: each stream seq is acked on its own (term is an ack too). Ack all:
    each item acks everything up to and including its stream seq.
    """

    ts: int
    items: tuple[tuple[int, int], ...] = ()

    code = OP_ACK

    def fields(self) -> list[Any]:
        return [self.ts, self.items]


@dataclass(frozen=True, slots=True)
class TouchOp:
    """Restart the ack-wait clock of pending ``seqs`` from ``ts`` (in progress, nak delay)."""

    ts: int
    seqs: tuple[int, ...] = ()

    code = OP_TOUCH

    def fields(self) -> list[Any]:
        return [self.ts, self.seqs]


@dataclass(frozen=True, slots=True)
class MaxDeliveredOp:
    """Pending messages that reached max_deliver: ``items`` are (stream seq, deliveries).

    They leave the pending set without being acked (no redelivery, and the stream is not
    told it may remove them) and stay counted as redelivered.
    """

    items: tuple[tuple[int, int], ...] = ()

    code = OP_MAX_DELIVERED

    def fields(self) -> list[Any]:
        return [self.items]


@dataclass(frozen=True, slots=True)
class PurgedOp:
    """The stream no longer holds anything below ``first_seq`` (purge, compaction)."""

    first_seq: int

    code = OP_PURGED

    def fields(self) -> list[Any]:
        return [self.first_seq]


@dataclass(frozen=True, slots=True)
class AdvanceOp:
    """An ack-all consumer jumps ahead at ``ts``: every stream seq up to ``sseq`` counts as
    delivered and acknowledged, the last of them as consumer seq ``cseq``.

    The leader counts the matching messages it skips, so the consumer sequence stays what
    delivering them one by one would have made it. Nothing below ``sseq`` is redelivered.
    """

    ts: int
    cseq: int
    sseq: int

    code = OP_ADVANCE

    def fields(self) -> list[Any]:
        return [self.ts, self.cseq, self.sseq]


@dataclass(frozen=True, slots=True)
class RestoreStateOp:
    """The consumer takes a backup's delivery state whole: ``doc`` is a
    :meth:`ConsumerState.to_doc` (delivered, ack floor, pending, redelivered)."""

    doc: dict

    code = OP_RESTORE

    def fields(self) -> list[Any]:
        return [dict(self.doc)]


@dataclass(frozen=True, slots=True)
class ResetOp:
    """Deliver again from stream seq ``seq`` (``$JS.API.CONSUMER.RESET``): nothing is
    pending or counted as redelivered any more, the consumer seq starts again at 1, and
    the ack floor and last delivered stream seq are ``seq - 1``."""

    seq: int

    code = OP_RESET

    def fields(self) -> list[Any]:
        return [self.seq]


ConsumerOp = (StartOp | DeliveredOp | AckOp | TouchOp | MaxDeliveredOp | PurgedOp
              | AdvanceOp | RestoreStateOp | ResetOp)

_PACK = msgpack.Packer(use_bin_type=True).pack


def encode_consumer_op(op: ConsumerOp) -> bytes:
    """One type byte, then the msgpack array of the op's fields."""
    return bytes((op.code,)) + _PACK(op.fields())


def _thawed(value: Any) -> Any:
    """A decoded document with lists again (the decoder reads arrays as tuples)."""
    if isinstance(value, dict):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thawed(v) for v in value]
    return value


# the fields come back as tuples (use_list=False): the ops' own types, no copy per item
_DECODERS = {
    OP_START: lambda f: StartOp(*f[:2]),
    OP_DELIVERED: lambda f: DeliveredOp(f[0], f[1], *f[2:3]),
    OP_ACK: lambda f: AckOp(f[0], f[1]),
    OP_TOUCH: lambda f: TouchOp(f[0], f[1]),
    OP_MAX_DELIVERED: lambda f: MaxDeliveredOp(f[0]),
    OP_PURGED: lambda f: PurgedOp(f[0]),
    OP_ADVANCE: lambda f: AdvanceOp(*f[:3]),
    OP_RESTORE: lambda f: RestoreStateOp(_thawed(f[0])),
    OP_RESET: lambda f: ResetOp(f[0]),
}


def decode_consumer_op(buf: bytes) -> ConsumerOp:
    if not buf:
        raise BadRequestError("empty consumer op")
    decoder = _DECODERS.get(buf[0])
    if decoder is None:
        raise BadRequestError(f"unknown consumer op type {buf[0]}: written by a newer version?")
    return decoder(msgpack.unpackb(memoryview(buf)[1:], raw=False, use_list=False))


__all__ = [
    "OP_ACK", "OP_ADVANCE", "OP_DELIVERED", "OP_MAX_DELIVERED", "OP_PURGED", "OP_RESET",
    "OP_RESTORE", "OP_START", "OP_TOUCH",
    "AckOp", "AdvanceOp", "ConsumerOp", "DeliveredOp", "MaxDeliveredOp", "PurgedOp", "ResetOp",
    "RestoreStateOp", "StartOp", "TouchOp",
    "decode_consumer_op", "encode_consumer_op",
]
