"""The consumer leader's delivery decisions: which messages go out next, and when a
delivered message is due again.

A mixin of :class:`~rayjet.engine.consumer.engine.ConsumerEngine`. One decision is a
:class:`Round`: redeliveries first (the queue :meth:`~DeliveryDecisions.due_redeliveries`
fills when ack waits run out), then the last-per-subject catch-up, then new messages in
stream order while max_ack_pending allows; each message taken is paced (replay original,
rate limit), and the round ends as the ops to propose. :meth:`~DeliveryDecisions.next_batch`
gives one taker its messages; the engine's ``request``/``serve`` share them out among the
waiting pull requests and their priority groups.
"""

from __future__ import annotations

import itertools
from collections import deque

from rayjet.clock import NANOS_PER_SECOND
from rayjet.engine.consumer import waiting as W
from rayjet.engine.consumer.ops import AckOp, DeliveredOp, MaxDeliveredOp
from rayjet.engine.consumer.state import ACK_NONE, ConsumerState
from rayjet.engine.consumer.types import (
    MAX_DELIVER_TYPE,
    MAX_DELIVERIES,
    MSG_TERMINATED,
    PIN_ID_HEADER,
    TERM_REASON_DELETED,
    TERMINATED_TYPE,
    Batch,
    Delivery,
    DeliveryRun,
    RequestStatus,
)
from rayjet.engine.consumer.util import headers_only
from rayjet.storage.protocol import StoredMsg

_READ_AHEAD = 1024  # most messages read from the stream in one call
_NS = NANOS_PER_SECOND


def with_header(hdr: bytes, name: str, value: str) -> bytes:
    """``hdr`` (a NATS/1.0 block, or empty) with one more header line."""
    line = f"{name}: {value}\r\n".encode()
    if not hdr:
        return b"NATS/1.0\r\n" + line + b"\r\n"
    body = hdr[:-2] if hdr.endswith(b"\r\n\r\n") else hdr
    return bytes(body) + line + b"\r\n"


class Candidate:
    """A message chosen to go out next, not yet committed to the round."""

    __slots__ = ("msg", "dc", "kind", "delivery")

    def __init__(self, msg: StoredMsg, dc: int, kind: int, delivery: Delivery) -> None:
        self.msg, self.dc, self.kind, self.delivery = msg, dc, kind, delivery


# a candidate's kind: where it comes from
_REDELIVERY, _SKIPLIST, _NEW = 0, 1, 2


class Round:
    """The bookkeeping of one delivery decision (one ``next_batch``/``serve`` call)."""

    __slots__ = ("now", "batch", "items", "max_items", "term_items", "cseq", "new", "buf",
                 "eof_last", "cand", "npc")

    def __init__(self, now: int, batch: Batch, cseq: int) -> None:
        self.now = now
        self.batch = batch
        self.items: list[tuple[int, int, int]] = []
        self.max_items: list[tuple[int, int]] = []
        self.term_items: list[tuple[int, int]] = []
        self.cseq = cseq  # next consumer seq
        self.new = 0  # new messages taken (they add pending acks)
        self.buf: deque[StoredMsg] = deque()
        self.eof_last = -1  # stream last seq once a read came back short
        self.cand: Candidate | None = None
        self.npc = -1  # messages pending after the read position (-1: not counted yet)


class DeliveryDecisions:
    """Mixed into the consumer engine: choosing, taking and pacing the messages of one
    delivery decision, and queueing the messages whose ack wait ran out."""

    def next_batch(self, now: int | None = None, batch: int = 1, max_bytes: int = 0,
                   reply: str = "") -> Batch:
        """Up to ``batch`` messages (and ``max_bytes`` bytes) for one taker, right now:
        redeliveries that are due first, then new messages in stream order. Used for push
        delivery and one-shot fetches; waiting pull requests go through :meth:`request`."""
        self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = Batch()
        first = self._view.dcseq + 1
        rnd = Round(now, out, first)
        left = max_bytes
        while (taken := rnd.cseq - first) < batch:
            if not max_bytes and self._take_run(rnd, batch - taken, reply):
                continue
            cand = self._peek(rnd, batch - taken)
            if cand is None:
                break
            if max_bytes:
                size = cand.delivery.size
                if size > left:
                    if not taken:
                        out.statuses.append(RequestStatus(reply, *W.MAX_BYTES_EXCEEDED, batch, left))
                    break
                left -= size
            self._take(rnd, cand, reply)
        self._finish(rnd)
        return out

    # -- choosing messages -------------------------------------------------------------------------------
    def _peek(self, rnd: Round, want: int) -> Candidate | None:
        if rnd.cand is not None:
            return rnd.cand
        view = self._view
        # 1. redeliveries
        while self._rdq:
            seq = self._rdq[0]
            if seq not in self._rdq_set or seq not in view.pending:
                self._rdq.popleft()
                self._rdq_set.discard(seq)
                continue
            dc = view.redelivered.get(seq, 0) + 2
            if self._max_deliver and dc > self._max_deliver:
                self._rdq.popleft()
                self._rdq_set.discard(seq)
                self._exceeded(rnd, seq, dc - 1)
                continue
            msg = self.reader.load_msg(seq)
            if msg is None:
                self._rdq.popleft()
                self._rdq_set.discard(seq)
                self._terminate_gone(rnd, seq, dc - 1)
                continue
            rnd.cand = self._cand(rnd, msg, dc, _REDELIVERY)
            return rnd.cand
        # 2. new messages (also the last_per_subject catch-up), while max_ack_pending allows
        if self._max_ack_pending and len(view.pending) + rnd.new >= self._max_ack_pending:
            rnd.batch.stalled = True
            return None
        while self._lss:
            seq = self._lss[0]
            msg = self.reader.load_msg(seq)
            if msg is None:
                self._lss.popleft()
                if not self._lss:
                    self._sseq = max(self._sseq, self._view.resume + 1)
                continue
            rnd.cand = self._cand(rnd, msg, 1, _SKIPLIST)
            return rnd.cand
        if not rnd.buf:
            if rnd.eof_last >= 0:
                return None
            limit = max(1, min(want, _READ_AHEAD))
            if self._max_ack_pending:
                limit = max(1, min(limit, self._max_ack_pending - len(view.pending) - rnd.new))
            msgs, last = self.reader.load_next_batch(self.filters, self._sseq, limit)
            rnd.buf.extend(msgs)
            if len(msgs) < limit:
                rnd.eof_last = last
            if not msgs:
                return None
        rnd.cand = self._cand(rnd, rnd.buf[0], 1, _NEW)
        return rnd.cand

    def _cand(self, rnd: Round, msg: StoredMsg, dc: int, kind: int) -> Candidate:
        if rnd.npc < 0:
            rnd.npc = self._num_pending(self._sseq)
        pending = rnd.npc if kind == _REDELIVERY else max(rnd.npc - 1, 0)
        hdr, data = msg.hdr, msg.data
        if self.config.headers_only:
            hdr, data = headers_only(hdr, data), b""
        d = Delivery(msg.subject, hdr, data, self.stream, self.name, msg.seq, rnd.cseq, dc,
                     msg.ts, pending)
        return Candidate(msg, dc, kind, d)

    def _take(self, rnd: Round, cand: Candidate, reply: str, pin: str = "") -> None:
        rnd.cand = None
        msg, d = cand.msg, cand.delivery
        if pin:  # after the max_bytes check, as nats-server adds it
            d = Delivery(d.subject, with_header(d.hdr, PIN_ID_HEADER, pin), d.data, d.stream,
                         d.consumer, d.stream_seq, d.consumer_seq, d.num_delivered,
                         d.timestamp, d.num_pending)
        if cand.kind == _REDELIVERY:
            self._rdq.popleft()
            self._rdq_set.discard(msg.seq)
        else:
            rnd.new += 1
            rnd.npc = max(rnd.npc - 1, 0)
            if cand.kind == _SKIPLIST:
                self._lss.popleft()
                if not self._lss:
                    self._sseq = max(self._sseq, self._view.resume + 1)
            else:
                rnd.buf.popleft()
                self._sseq = msg.seq + 1
        due = self._due(rnd.now, msg, d)
        if due:
            d = Delivery(d.subject, d.hdr, d.data, d.stream, d.consumer, d.stream_seq,
                         d.consumer_seq, d.num_delivered, d.timestamp, d.num_pending, due)
        rnd.items.append((rnd.cseq, msg.seq, cand.dc))
        rnd.cseq += 1
        rnd.batch.sends.append((reply, d))

    def _take_run(self, rnd: Round, want: int, reply: str) -> int:
        """Take up to ``want`` new messages at once, in stream order: what ``_peek`` and
        ``_take`` would decide one by one when nothing is to be redelivered, paced or
        rewritten. 0: the next message needs the one-by-one path."""
        if (want < 2 or self._rdq or self._lss or self._replay or self._rate_bps > 0
                or self.config.headers_only):
            return 0
        cand = self._peek(rnd, want)
        if cand is None or cand.kind != _NEW:
            return 0
        k = min(want, len(rnd.buf))
        if self._max_ack_pending:
            k = min(k, self._max_ack_pending - len(self._view.pending) - rnd.new)
        if k < 2:
            return 0
        rnd.cand = None
        buf = rnd.buf
        msgs = [buf.popleft() for _ in range(k)]
        cseq, npc = rnd.cseq, rnd.npc
        if self._ack_mode == ACK_NONE and not self._forward:
            rnd.items.append((cseq + k - 1, msgs[-1].seq, 1))  # all _finish keeps of them
        else:
            rnd.items.extend(zip(range(cseq, cseq + k), [m.seq for m in msgs],
                                 itertools.repeat(1)))
        rnd.batch.sends.append(
            (reply, DeliveryRun(msgs, self.stream, self.name, cseq, npc - 1)))
        rnd.cseq += k
        rnd.new += k
        rnd.npc = max(npc - k, 0)
        self._sseq = msgs[-1].seq + 1
        return k

    def _due(self, now: int, msg: StoredMsg, d: Delivery) -> int:
        """When the actor may send ``d`` (0: now): replay original spacing, rate limit."""
        due = now
        if self._replay and self._replay_until and msg.seq <= self._replay_until:
            if self._replay_lts:
                gap = msg.ts - self._replay_lts
                if gap > 1_000_000:  # under a millisecond is sent at once
                    due = max(now, self._replay_due + gap)
                else:
                    due = max(now, self._replay_due)
            self._replay_lts, self._replay_due = msg.ts, due
        if self._rate_bps > 0:
            due = max(due, self._rate_next)
            self._rate_next = due + d.size * 8 * _NS // self._rate_bps
        return due if due > now else 0

    def _finish(self, rnd: Round) -> None:
        """Turn the round into ops (applied to the view) and advance past filtered-out seqs."""
        out = rnd.batch
        if rnd.max_items:
            out.ops.append(self._propose(MaxDeliveredOp(tuple(rnd.max_items))))
        if rnd.term_items:
            out.ops.append(self._propose(AckOp(rnd.now, tuple(rnd.term_items))))
        if rnd.eof_last >= 0 and not rnd.buf and rnd.eof_last + 1 > self._sseq:
            self._sseq = rnd.eof_last + 1  # everything up to the stream's end was looked at
        v = self._view
        known = max(v.dsseq, max((i[1] for i in rnd.items), default=0)) + 1
        skip = self._sseq if self._sseq > known and self._sseq > v.scan else 0
        items = rnd.items
        if len(items) > 1 and self._ack_mode == ACK_NONE and not self._forward:
            # nothing waits for an ack and the stream needs no per-message word: the last
            # delivery says all a replica keeps (delivered = ack floor = it)
            items = items[-1:]
        if items or skip:
            out.ops.append(self._propose(DeliveredOp(rnd.now, tuple(items), skip)))
        if rnd.items:
            self._active_ns = rnd.now

    def _exceeded(self, rnd: Round, seq: int, deliveries: int) -> None:
        rnd.max_items.append((seq, deliveries + 1))
        rnd.batch.advisories.append(self._advisory(
            MAX_DELIVERIES, MAX_DELIVER_TYPE, rnd.now, stream_seq=seq, deliveries=deliveries))

    def _terminate_gone(self, rnd: Round, seq: int, deliveries: int) -> None:
        p = self._view.pending.get(seq)
        rnd.term_items.append((p[0] if p else 0, seq))
        rnd.batch.advisories.append(self._advisory(
            MSG_TERMINATED, TERMINATED_TYPE, rnd.now, consumer_seq=p[0] if p else 0,
            stream_seq=seq, deliveries=deliveries, reason=TERM_REASON_DELETED))

    # -- redelivery timers ------------------------------------------------------------------------------
    def _deadline(self, view: ConsumerState, sseq: int) -> int:
        """How long after its last delivery ``sseq`` waits for an ack (backoff aware)."""
        if self._backoff:
            i = min(view.redelivered.get(sseq, 0), len(self._backoff) - 1)
            return self._backoff[i]
        return self._ack_wait_ns

    def due_redeliveries(self, now: int | None = None) -> Batch:
        """Queue for redelivery every pending message whose ack wait (or backoff step) ran
        out; those past max_deliver leave pending instead (op + advisory). Deliver the queued
        ones with :meth:`serve` / :meth:`next_batch`.

        As nats-server 2.15.1 counts here, a message's count is its redeliveries (at least
        1), so only max_deliver 1 (or a max_deliver lowered below what was delivered) ends
        a message at its ack wait; otherwise its last delivery's expiry queues it once
        more, and the next attempt to deliver (a waiting pull, a push round) ends it: it
        stays pending for an ack until then."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = Batch()
        expired: list[int] = []
        maxed: list[tuple[int, int]] = []
        for sseq, p in view.pending.items():
            if sseq in self._rdq_set or now - p[1] < self._deadline(view, sseq):
                continue
            count = max(view.redelivered.get(sseq, 0), 1)
            if self._max_deliver and count >= self._max_deliver:
                maxed.append((sseq, count))
            else:
                expired.append(sseq)
        for sseq in expired:  # pending keys run in stream order already
            self._rdq.append(sseq)
            self._rdq_set.add(sseq)
        if maxed:
            for sseq, count in maxed:
                if count == self._max_deliver:  # once, as nats-server advises
                    out.advisories.append(self._advisory(
                        MAX_DELIVERIES, MAX_DELIVER_TYPE, now, stream_seq=sseq,
                        deliveries=count))
            out.ops.append(self._propose(MaxDeliveredOp(tuple((s, n + 1) for s, n in maxed))))
        return out

    def next_redelivery_ns(self) -> int:
        """When the next pending message's ack wait runs out (0: none pending)."""
        view = self.view
        best = 0
        for sseq, p in view.pending.items():
            if sseq in self._rdq_set:
                continue
            t = p[1] + self._deadline(view, sseq)
            if not best or t < best:
                best = t
        return best

    @property
    def has_redeliveries(self) -> bool:
        return bool(self._rdq_set)


__all__ = ["DeliveryDecisions", "Round"]
