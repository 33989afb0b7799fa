"""Fast batch publish (``allow_batched``, nats-server 2.14+): the reply-subject form that
marks a message as part of a fast batch, and the flow-control state of the batches open on
one stream, as nats-server 2.15.1 keeps them for a stream of one replica.

A fast batch's messages are stored as they arrive (unlike an atomic batch's); the publisher
learns how far the stream got from the answers sent to each message's reply subject:

* ``{"type":"ack","seq":N,"msgs":M}``: messages up to batch sequence N are stored, the next
  ack comes M messages later (sent for the first message with N = 0, then every M);
* ``{"type":"gap","last_seq":E,"seq":N}``: messages from E up to N were not received (a
  batch in gap mode ``fail`` ends there, one in mode ``ok`` goes on);
* ``{"type":"err","seq":N,"error":{...}}``: message N was refused;
* on the commit, the PubAck of the last stored message with ``batch`` and ``count``.

The reply subject reads ``<prefix>.<batch id>.<flow>.<ok|fail>.<batch seq>.<op>.$FI``;
op 0 begins the batch (seq 1), 1 appends, 2 commits with this message, 3 commits without
storing this message (end of batch), 4 asks for the flow state again (ping).

:class:`FastTable` decides each message's answers and whether it is stored; the outcome of
storing comes from a callback, so the gateway can store many messages in one call and
replay the decisions once it knows the outcomes (see :mod:`rayjet.gateway.fast_batch`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from rayjet.api import headers as H

SUFFIX = ".$FI"
OP_START, OP_APPEND, OP_COMMIT, OP_EOB, OP_PING = range(5)
MAX_ID_LEN = 64  # bytes of a batch id
MAX_ACK_MSGS = 500  # the most messages between two flow acks
DEFAULT_FLOW = 10  # the flow a reply asks for when its token is 0 or not a number
_U64 = (1 << 64) - 1
_SERVICE_REPLY = "_R_."
_OPS = {str(op): op for op in range(5)}
_REQUEST_INFO = "Nats-Request-Info"


class FastRef(NamedTuple):
    """What a fast batch reply subject says of its message."""

    id: str
    seq: int
    flow: int
    gap_ok: bool
    op: int

    @property
    def ping(self) -> bool:
        return self.op == OP_PING

    @property
    def eob(self) -> bool:
        return self.op == OP_EOB

    @property
    def commit(self) -> bool:
        return self.op in (OP_COMMIT, OP_EOB)


def _go_int(token: str) -> int:
    """A token read as nats-server reads a signed number: -1 when empty or not all
    ASCII digits; digits past 63 bits wrap around as a 64-bit integer does."""
    if not token or not token.isascii() or not token.isdigit():
        return -1
    n = int(token) & _U64
    return n - (1 << 64) if n >> 63 else n


def _go_uint(token: str) -> int | None:
    if not token or not token.isascii() or not token.isdigit():
        return None
    n = int(token)
    return n if n <= _U64 else None


def _original_reply(hdr: bytes | None) -> str:
    """The reply subject a service import kept in the Nats-Request-Info header ("" when
    none can be read)."""
    if not hdr or _REQUEST_INFO.encode() not in hdr:
        return ""
    try:
        info = json.loads(H.decode_headers(hdr).get(_REQUEST_INFO, ""))
    except (ValueError, UnicodeDecodeError, TypeError):
        return ""
    except Exception:  # noqa: BLE001 - a stranger's header block: not a fast batch
        return ""
    reply = info.get("reply") if isinstance(info, dict) else None
    return reply if isinstance(reply, str) else ""


def parse_reply(reply: str | None, hdr: bytes | None = None) -> tuple[FastRef | None, bool]:
    """``(ref, malformed)``: the fast batch a publish's reply subject names; ``(None,
    False)`` when the reply is not a fast batch one, ``(None, True)`` when it ends in
    ``.$FI`` but cannot be read (answered "batch publish pattern is invalid")."""
    if not reply:
        return None, False
    if len(reply) <= len(SUFFIX) or not reply.endswith(SUFFIX):
        if not reply.startswith(_SERVICE_REPLY):
            return None, False
        reply = _original_reply(hdr)
        if len(reply) <= len(SUFFIX) or not reply.endswith(SUFFIX):
            return None, False
    # prefix (one token at least, maybe empty, dots allowed), id, flow, gap mode, seq, op;
    # any part that cannot be read makes the whole reply unreadable
    toks = reply[:-len(SUFFIX)].rsplit(".", 5)
    if len(toks) != 6:
        return None, True
    _, bid, flow_tok, gap, seq_tok, op_tok = toks
    op = _OPS.get(op_tok)
    if op is None:
        op = _go_int(op_tok)
        if not OP_START <= op <= OP_PING:
            return None, True
    seq = _go_uint(seq_tok)
    if seq is None or seq == 0 or seq == _U64:
        return None, True
    if (seq == 1 and op == OP_EOB) or (op == OP_START and seq != 1) or (
            op == OP_APPEND and seq <= 1):
        return None, True
    if gap != "ok" and gap != "fail":
        return None, True
    flow = _go_int(flow_tok)
    flow = DEFAULT_FLOW if flow <= 0 else min(flow, 0xFFFF)
    return FastRef(bid, seq, flow, gap == "ok", op), False


# -- answers ------------------------------------------------------------------------------
def flow_ack(seq: int, msgs: int) -> bytes:
    return b'{"type":"ack","seq":%d,"msgs":%d}' % (seq, msgs)


def flow_gap(last_seq: int, seq: int) -> bytes:
    return b'{"type":"gap","last_seq":%d,"seq":%d}' % (last_seq, seq)


def flow_err(seq: int, error: dict[str, Any]) -> bytes:
    return b'{"type":"err","seq":%d,"error":%s}' % (
        seq, json.dumps(error, separators=(",", ":")).encode())


def quoted(text: str) -> str:
    """A string as nats-server quotes a batch id in a PubAck."""
    return json.dumps(text, ensure_ascii=not text.isprintable())


class Pending:
    """The stream sequence of a message not stored yet (the ``at``-th of a run)."""

    __slots__ = ("at",)

    def __init__(self, at: int) -> None:
        self.at = at


@dataclass(slots=True)
class BatchAck:
    """A commit's PubAck, written once ``seq`` is known."""

    seq: int | Pending
    batch: str
    count: int
    duplicate: bool = False

    def render(self, prefix: bytes, seqs: dict[int, int]) -> bytes:
        seq = seqs[self.seq.at] if isinstance(self.seq, Pending) else self.seq
        dup = b',"duplicate": true' if self.duplicate else b""
        return b'%s%d%s,"batch":%s,"count":%d}' % (prefix, seq, dup,
                                                   quoted(self.batch).encode(), self.count)


class Refused:
    """A publish refused before its batch was looked at, or a batch's first message refused
    in gap mode ``fail``: ``{"error":...,"stream":...,"seq":0}``."""

    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:
        self.error = error


class Failed:
    """A message refused while its batch went on: ``{"type":"err",...}``."""

    __slots__ = ("seq", "error")

    def __init__(self, seq: int, error: Any) -> None:
        self.seq = seq
        self.error = error


class Duplicate:
    """The outcome of storing a message whose id the stream had stored as ``seq``."""

    __slots__ = ("seq",)

    def __init__(self, seq: int) -> None:
        self.seq = seq


# -- the batches open on one stream ---------------------------------------------------------
class _Batch:
    __slots__ = ("lseq", "sseq", "pseq", "fseq", "pending", "ack_msgs", "max_ack", "gap_ok",
                 "commit", "gone", "seen")

    def __init__(self, gap_ok: bool, max_ack: int, now: float) -> None:
        self.lseq = 0  # the highest batch sequence received
        self.sseq: int | Pending = 0  # the stream sequence of the last message stored
        self.pseq = 0  # the highest batch sequence stored
        self.fseq = 0  # the batch sequence of the last flow ack
        self.pending = 0  # messages on their way to the store
        self.ack_msgs = 1  # a flow ack every this many messages
        self.max_ack = max_ack  # the most the publisher allows
        self.gap_ok = gap_ok
        self.commit = False
        self.gone = False
        self.seen = now


Outcome = Any  # int (stored at), Duplicate, Pending (assumed stored) or an exception


class FastTable:
    """The fast batches open on one stream. ``answers`` lists receive, per message, bytes
    or :class:`BatchAck` / :class:`Refused` / :class:`Failed` items, written by the
    caller."""

    def __init__(self) -> None:
        self.open: dict[str, _Batch] = {}

    def snapshot(self) -> dict[str, _Batch]:
        return {k: copy.copy(b) for k, b in self.open.items()}

    def restore(self, saved: dict[str, _Batch]) -> None:
        self.open = saved

    def expire(self, now: float, timeout: float) -> None:
        for bid in [k for k, b in self.open.items() if now - b.seen > timeout]:
            self._drop(bid)

    def _drop(self, bid: str) -> None:
        b = self.open.pop(bid, None)
        if b is not None:
            b.gone = True

    def _init_flow(self, b: _Batch) -> None:
        # alone on the stream a batch gets the window it asks for (up to 500); with others
        # it starts at one and ramps up
        b.ack_msgs = min(MAX_ACK_MSGS, b.max_ack) if len(self.open) <= 1 else 1

    def _check_flow(self, b: _Batch, out: list) -> bool:
        """A flow ack when enough messages were stored since the last; the window grows
        towards (or shrinks to) 500 shared by the open batches, within the client's own."""
        every = b.ack_msgs
        if b.pseq < b.fseq + every:
            return False
        b.fseq += (b.pseq - b.fseq) // every * every
        share = min(max(1, MAX_ACK_MSGS // max(1, len(self.open))), b.max_ack)
        if b.ack_msgs < share:
            b.ack_msgs = min(b.ack_msgs * 2, share)
        elif b.ack_msgs > share:
            b.ack_msgs = max(b.ack_msgs // 2, share)
        out.append(flow_ack(b.fseq, b.ack_msgs))
        return True

    def _commit(self, b: _Batch, bid: str, out: list) -> bool:
        """Mark the batch committing; its PubAck now when everything received is stored
        (True: the batch is over)."""
        if b.gone:
            return True
        b.commit = True
        if b.lseq != b.pseq:
            return False
        self._drop(bid)
        out.append(BatchAck(b.sseq, bid, b.lseq))
        return True

    def step(self, ref: FastRef, out: list, store: Callable[[], Outcome], *, now: float,
             can_respond: bool, per_stream: int, room: Callable[[], bool]) -> None:
        """One message of batch ``ref`` (its stream allows fast batches, its id is at
        most 64 bytes). ``store()`` stores it and gives the outcome; ``room()`` whether
        one more batch may open under the limit of all streams."""
        bid = ref.id
        b = self.open.get(bid)
        if b is None:
            refusal = None
            if ref.seq != 1:
                refusal = "BATCH_PUBLISH_UNKNOWN_BATCH_ID"
            elif len(self.open) + 1 > per_stream or not room():
                refusal = "BATCH_PUBLISH_TOO_MANY_INFLIGHT"
            if refusal is not None:
                if can_respond:
                    out.append(Refused(refusal))
                return
            b = self.open[bid] = _Batch(ref.gap_ok, ref.flow, now)
            self._init_flow(b)
        if not b.commit:
            b.seen = now
        if ref.ping:
            self._ping(b, ref, out)
            return
        if b.commit:
            return  # committing: the publisher waits for the PubAck
        b.lseq += 1
        if b.lseq != ref.seq:
            # reported going back too (nats-server 2.15.1 does; later ones only forward)
            out.append(flow_gap(b.lseq, ref.seq))
            if b.gap_ok and ref.seq > b.lseq:
                b.lseq = ref.seq
            else:  # a gap in mode fail, or a sequence gone back: the batch ends
                b.lseq -= 1
                self._commit(b, bid, out)
                return
        if ref.commit:
            if ref.eob:
                b.lseq -= 1
                if b.pending == 0:
                    b.pseq = b.lseq
            self._commit(b, bid, out)
            if ref.eob:
                return
        if ref.seq == 1 and can_respond and not ref.commit:
            out.append(flow_ack(0, b.ack_msgs))
        outcome = store()
        if isinstance(outcome, (int, Pending)) and not isinstance(outcome, bool):
            self._stored(b, bid, outcome, out)
            return
        self._refused(b, bid, ref, outcome, out)

    def _ping(self, b: _Batch, ref: FastRef, out: list) -> None:
        send = True
        if ref.seq > b.lseq:
            out.append(flow_gap(b.lseq + 1, ref.seq + 1))
            if b.gap_ok:
                b.lseq = ref.seq
                if b.pending == 0:
                    b.pseq = b.lseq
                send = not self._check_flow(b, out)
            elif self._commit(b, ref.id, out):
                send = False
        if send:
            out.append(flow_ack(b.fseq, b.ack_msgs))

    def _stored(self, b: _Batch, bid: str, seq: int | Pending, out: list) -> None:
        if self.open.get(bid) is not b:
            return  # the batch ended before its message was stored
        b.sseq = seq
        b.pseq = b.lseq  # nothing else is on its way: all received is stored
        if b.commit:
            self._drop(bid)
            out.append(BatchAck(seq, bid, b.lseq))
            return
        self._check_flow(b, out)

    def _refused(self, b: _Batch, bid: str, ref: FastRef, outcome: Any, out: list) -> None:
        dup = isinstance(outcome, Duplicate)
        if dup:
            if b.pending == 0:
                b.pseq = ref.seq
                self._check_flow(b, out)
            if not ref.commit:
                return
        if not b.gap_ok and b.lseq == 1:  # the first message: answered as a publish
            if dup and outcome.seq > 0:
                out.append(BatchAck(outcome.seq, bid, ref.seq, duplicate=True))
            else:
                out.append(Refused(outcome))
            self._drop(bid)
            return
        if not dup:
            out.append(Failed(ref.seq, outcome))
            if b.gap_ok and not ref.commit:
                return
            b.lseq -= 1
            if b.pending == 0:
                b.pseq = b.lseq
        self._commit(b, bid, out)

    def resolve(self, seqs: dict[int, int]) -> None:
        """Put the stream sequences of a stored run in place of its :class:`Pending`."""
        for b in self.open.values():
            if isinstance(b.sseq, Pending):
                b.sseq = seqs[b.sseq.at]


__all__ = ["MAX_ID_LEN", "OP_APPEND", "OP_COMMIT", "OP_EOB", "OP_PING", "OP_START",
           "SUFFIX", "BatchAck", "Duplicate", "FastRef", "FastTable", "Failed", "Pending",
           "Refused", "flow_ack", "flow_err", "flow_gap", "parse_reply", "quoted"]
