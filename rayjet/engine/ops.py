"""Replicated stream operations and their compact wire form.

An Op is what the leader proposes to raft and every replica applies in log order. The encoded
form is one type byte followed by a msgpack array of the op's fields. Type bytes and field
positions are append-only: never renumber or reorder; new fields go at the end and decoders
fill missing trailing fields with their defaults, so old logs stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from rayjet.errors import BadRequestError

# -- type bytes (only add to the end) --------------------------------------------------------
OP_MSG = 1
OP_BATCH = 2
OP_SKIP = 3
OP_PURGE = 4
OP_DELETE = 5
OP_CONFIG = 6
OP_ACK = 7
OP_CONSUMER = 8
OP_SOURCE = 9
OP_SWEEP = 10
OP_RUN = 11
OP_RESTORE = 12

# -- MsgOp.flags bits (only add) -----------------------------------------------------------
F_ROLLUP_SUB = 1
F_ROLLUP_ALL = 2
F_NO_INTEREST = 4  # interest retention and nobody listens: record the seq, store nothing
F_COUNTER = 8  # data is a counter value {"val":"N"}
F_MARKER = 16  # a subject delete marker written for an expired subject

SCHED_PURGE = -1  # MsgOp.sched_next: the fired schedule was one-shot, purge it


@dataclass(frozen=True, slots=True)
class MsgOp:
    """Store one message at ``seq`` with the leader's timestamp ``ts``.

    Everything a replica needs is precomputed by the leader: ``ttl`` in seconds (-1 never),
    the dedup id, rollup/counter flags, the schedule this message starts (``sched``: first
    fire time, ns) and, for a message fired by a schedule, the schedule subject and its next
    fire time (``sched_next``, :data:`SCHED_PURGE` for one-shot schedules).
    """

    seq: int
    ts: int
    subject: str
    hdr: bytes = b""
    data: bytes = b""
    ttl: int = 0
    msg_id: str = ""
    flags: int = 0
    sched: int = 0
    scheduler: str = ""
    sched_next: int = 0
    pid: int = 0  # proposer id: a rejected op poisons the later ops of the same proposer

    code = OP_MSG

    def fields(self) -> list[Any]:
        return [self.seq, self.ts, self.subject, self.hdr, self.data, self.ttl, self.msg_id,
                self.flags, self.sched, self.scheduler, self.sched_next, self.pid]


def id_header(msg_id: str) -> bytes:
    """The header block of a message whose only header is its Nats-Msg-Id (as the
    per-message path encodes ``{"Nats-Msg-Id": msg_id}``)."""
    return f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode()


@dataclass(frozen=True, slots=True)
class MsgRunOp:
    """Plain messages at consecutive sequences from ``seq``, all with timestamp ``ts``: one
    op for a run a columnar publish admitted as a whole (no headers but a Nats-Msg-Id, no
    TTL, rollup, counter, schedule or no-interest flag).

    Columns in compact binary form: ``names`` holds each distinct subject once and
    ``which`` (little-endian u32 per message) points into it; payloads are ``data`` cut at
    ``ends`` (little-endian u64 end offsets); ``msg_ids`` is empty when no message has
    one, else one per message ("" for none).
    """

    seq: int
    ts: int
    names: tuple[str, ...]
    which: bytes
    ends: bytes
    data: bytes
    msg_ids: tuple[str, ...] = ()
    pid: int = 0

    code = OP_RUN

    @property
    def count(self) -> int:
        return len(self.which) >> 2

    @property
    def last_seq(self) -> int:
        return self.seq + self.count - 1

    def subjects(self) -> list[str]:
        names = self.names
        if len(names) == 1:
            return [names[0]] * self.count
        return [names[i] for i in np.frombuffer(self.which, dtype="<u4").tolist()]

    def payloads(self) -> list[bytes]:
        data, out, start = self.data, [], 0
        add = out.append
        for end in np.frombuffer(self.ends, dtype="<u8").tolist():
            add(data[start:end])
            start = end
        return out

    def headers(self) -> list[bytes]:
        if not self.msg_ids:
            return [b""] * self.count
        return [id_header(i) if i else b"" for i in self.msg_ids]

    def raw_columns(self) -> tuple[list, list, list, range, list, list]:
        """The run as the store's raw columns: subjects, headers, payloads, seqs,
        timestamps and TTLs (none)."""
        n = self.count
        return (self.subjects(), self.headers(), self.payloads(), range(self.seq, self.seq + n),
                [self.ts] * n, [0] * n)

    def fields(self) -> list[Any]:
        return [self.seq, self.ts, list(self.names), self.which, self.ends, self.data,
                list(self.msg_ids), self.pid]


@dataclass(frozen=True, slots=True)
class BatchOp:
    """An atomic batch: every message is stored, in order, or none is."""

    batch_id: str
    msgs: tuple[MsgOp, ...]
    pid: int = 0

    code = OP_BATCH

    @property
    def seq(self) -> int:
        return self.msgs[0].seq if self.msgs else 0

    def fields(self) -> list[Any]:
        return [self.batch_id, [m.fields() for m in self.msgs], self.pid]


@dataclass(frozen=True, slots=True)
class SkipOp:
    """Advance the last sequence by ``num`` without storing (recorded as deleted)."""

    seq: int
    num: int = 1
    pid: int = 0

    code = OP_SKIP

    def fields(self) -> list[Any]:
        return [self.seq, self.num, self.pid]


@dataclass(frozen=True, slots=True)
class PurgeOp:
    """NATS purge: everything, or messages on ``subject`` below ``seq`` keeping ``keep``."""

    subject: str = ""
    seq: int = 0
    keep: int = 0

    code = OP_PURGE

    def fields(self) -> list[Any]:
        return [self.subject, self.seq, self.keep]


@dataclass(frozen=True, slots=True)
class DeleteOp:
    seq: int
    erase: bool = False

    code = OP_DELETE

    def fields(self) -> list[Any]:
        return [self.seq, self.erase]


@dataclass(frozen=True, slots=True)
class UpdateConfigOp:
    """A new stream configuration, carried as its wire dict (StreamConfig.to_dict())."""

    config: dict = field(default_factory=dict)

    code = OP_CONFIG

    def fields(self) -> list[Any]:
        return [dict(self.config)]

    def stream_config(self):
        from rayjet.api import StreamConfig

        return StreamConfig.from_dict(self.config)


@dataclass(frozen=True, slots=True)
class AckOp:
    """Consumer ``consumer`` acknowledged stream sequence ``seq`` (interest/work-queue)."""

    consumer: str
    seq: int

    code = OP_ACK

    def fields(self) -> list[Any]:
        return [self.consumer, self.seq]


@dataclass(frozen=True, slots=True)
class ConsumerOp:
    """Register (or, with ``remove``, unregister) a consumer's interest through the log."""

    name: str
    filters: tuple[str, ...] = ()
    start_seq: int = 0
    remove: bool = False

    code = OP_CONSUMER

    def fields(self) -> list[Any]:
        return [self.name, list(self.filters), self.start_seq, self.remove]


@dataclass(frozen=True, slots=True)
class SourceOp:
    """Messages copied from one origin of a mirror or sourcing stream, and how far the copy got.

    ``key`` names the origin (nats-server's source index name), ``start`` is the origin
    position the leader read after and ``upto`` the position reached (the last origin seq
    examined; filtered-out and duplicate messages advance it too). A replica whose position
    for ``key`` is not ``start`` rejects the op, so each origin message is stored once.
    Mirror messages (``mirror``) keep their origin seq and timestamp, and the gaps before them
    become deleted seqs; source messages carry the new seqs the leader gave them. ``ident``
    identifies the origin's incarnation (a recreated origin has another).
    """

    key: str
    start: int
    upto: int
    ident: str = ""
    msgs: tuple[MsgOp, ...] = ()
    mirror: bool = False
    pid: int = 0

    code = OP_SOURCE

    @property
    def seq(self) -> int:
        return self.msgs[0].seq if self.msgs else 0

    def fields(self) -> list[Any]:
        return [self.key, self.start, self.upto, self.ident, [m.fields() for m in self.msgs],
                self.mirror, self.pid]


@dataclass(frozen=True, slots=True)
class SweepOp:
    """One bounded step of removing what no consumer needs after one was removed (interest
    retention): ``seqs`` are removed if still unneeded; the sweep that began at ``start``
    has now looked at everything up to ``upto``."""

    start: int
    upto: int
    seqs: tuple[int, ...] = ()

    code = OP_SWEEP

    def fields(self) -> list[Any]:
        return [self.start, self.upto, list(self.seqs)]


@dataclass(frozen=True, slots=True)
class RestoreOp:
    """Messages of a backup stored at their own sequences and timestamps, into a stream
    whose last sequence is ``after`` (a replica at another position rejects the op: someone
    else wrote to the stream during the restore). ``first`` is the backup's first sequence
    (sequences below it were purged there), ``last`` its last sequence (a non-zero ``last``
    ends the restore: the sequences up to it become deleted ones) and ``sources`` its
    positions in its sources, given with the last op."""

    after: int
    msgs: tuple[MsgOp, ...] = ()
    first: int = 0
    last: int = 0
    sources: tuple = ()

    code = OP_RESTORE

    @property
    def seq(self) -> int:
        return self.msgs[0].seq if self.msgs else 0

    def fields(self) -> list[Any]:
        return [self.after, [m.fields() for m in self.msgs], self.first, self.last,
                [list(p) for p in self.sources]]


Op = (MsgOp | BatchOp | SkipOp | PurgeOp | DeleteOp | UpdateConfigOp | AckOp | ConsumerOp
      | SourceOp | SweepOp | MsgRunOp | RestoreOp)

_PACK = msgpack.Packer(use_bin_type=True).pack
_TYPE_BYTE = [bytes((i,)) for i in range(256)]


def encode_op(op: Op) -> bytes:
    """One type byte, then the msgpack array of the op's fields."""
    return _TYPE_BYTE[op.code] + _PACK(op.fields())


def _msg(f: list[Any]) -> MsgOp:
    # fast path for the current layout; older (shorter) entries take the defaults
    if len(f) == 12:
        return MsgOp(*f)
    return MsgOp(*f[:12])


def _batch(f: list[Any]) -> BatchOp:
    return BatchOp(f[0], tuple(_msg(m) for m in f[1]), *f[2:3])


def _consumer(f: list[Any]) -> ConsumerOp:
    return ConsumerOp(f[0], tuple(f[1]), *f[2:4])


def _source(f: list[Any]) -> SourceOp:
    return SourceOp(f[0], f[1], f[2], f[3], tuple(_msg(m) for m in f[4]), *f[5:7])


_DECODERS = {
    OP_MSG: _msg,
    OP_BATCH: _batch,
    OP_SKIP: lambda f: SkipOp(*f[:3]),
    OP_PURGE: lambda f: PurgeOp(*f[:3]),
    OP_DELETE: lambda f: DeleteOp(*f[:2]),
    OP_CONFIG: lambda f: UpdateConfigOp(f[0]),
    OP_ACK: lambda f: AckOp(*f[:2]),
    OP_CONSUMER: _consumer,
    OP_SOURCE: _source,
    OP_SWEEP: lambda f: SweepOp(f[0], f[1], tuple(f[2])),
    OP_RUN: lambda f: MsgRunOp(f[0], f[1], tuple(f[2]), f[3], f[4], f[5], tuple(f[6]), f[7]),
    OP_RESTORE: lambda f: RestoreOp(f[0], tuple(_msg(m) for m in f[1]), f[2], f[3],
                                    tuple(tuple(p) for p in f[4])),
}


def decode_op(buf: bytes) -> Op:
    if not buf:
        raise BadRequestError("empty stream op")
    decoder = _DECODERS.get(buf[0])
    if decoder is None:
        raise BadRequestError(f"unknown stream op type {buf[0]}: written by a newer version?")
    fields = msgpack.unpackb(memoryview(buf)[1:], raw=False, use_list=True)
    return decoder(fields)


__all__ = [
    "F_COUNTER", "F_MARKER", "F_NO_INTEREST", "F_ROLLUP_ALL", "F_ROLLUP_SUB", "OP_ACK",
    "OP_BATCH", "OP_CONFIG", "OP_CONSUMER", "OP_DELETE", "OP_MSG", "OP_PURGE", "OP_RESTORE", "OP_RUN", "OP_SKIP",
    "OP_SOURCE", "OP_SWEEP", "SCHED_PURGE", "AckOp", "BatchOp", "ConsumerOp", "DeleteOp",
    "MsgOp", "MsgRunOp", "Op", "PurgeOp", "RestoreOp", "SkipOp", "SourceOp", "SweepOp", "UpdateConfigOp", "decode_op",
    "encode_op", "id_header",
]
