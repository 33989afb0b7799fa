"""ConsumerState: what a consumer's replicas agree on, changed only by applying ops.

The fields follow nats-server's stored consumer state: the last delivered (consumer seq,
stream seq), the ack floor (everything at or below it is settled), the pending acks
{stream seq: [consumer seq of the first delivery, last delivery time]} and the redelivery
counts {stream seq: times redelivered}. ``apply`` is deterministic: the same ops in the same
order give the same state on every replica.

Pending keys are inserted in increasing stream order (a new delivery always has a stream seq
above every earlier one, redeliveries update an existing key), so the dict's first key is
the lowest pending stream seq; :meth:`ConsumerState.copy` and :meth:`from_doc` keep that.
"""

from __future__ import annotations

from collections.abc import Iterable

from rayjet.engine.ack_sync import AckSummary
from rayjet.engine.consumer.ops import (
    AckOp,
    AdvanceOp,
    ConsumerOp,
    DeliveredOp,
    MaxDeliveredOp,
    PurgedOp,
    ResetOp,
    RestoreStateOp,
    StartOp,
    TouchOp,
)

ACK_NONE, ACK_ALL, ACK_EXPLICIT = 0, 1, 2


class ConsumerState:
    __slots__ = ("ack_mode", "started", "resume", "dcseq", "dsseq", "acseq", "asseq", "pending",
                 "redelivered", "last_delivered_ns", "last_ack_ns", "scan")

    def __init__(self, ack_mode: int = ACK_EXPLICIT) -> None:
        self.ack_mode = ack_mode
        self.started = False
        self.resume = 0  # last_per_subject: end of the per-subject catch-up
        self.dcseq = 0  # last delivered consumer seq
        self.dsseq = 0  # last delivered stream seq
        self.acseq = 0  # ack floor consumer seq
        self.asseq = 0  # ack floor stream seq
        self.pending: dict[int, list[int]] = {}  # sseq -> [cseq, ts]
        self.redelivered: dict[int, int] = {}  # sseq -> times redelivered
        self.last_delivered_ns = 0
        self.last_ack_ns = 0
        self.scan = 0  # every stream seq below this was looked at (filtered-out ones skipped)

    # -- copies and snapshots -------------------------------------------------------------------
    def copy(self) -> ConsumerState:
        out = ConsumerState(self.ack_mode)
        out.started, out.resume = self.started, self.resume
        out.dcseq, out.dsseq, out.acseq, out.asseq = self.dcseq, self.dsseq, self.acseq, self.asseq
        out.pending = {s: [p[0], p[1]] for s, p in self.pending.items()}
        out.redelivered = dict(self.redelivered)
        out.last_delivered_ns, out.last_ack_ns = self.last_delivered_ns, self.last_ack_ns
        out.scan = self.scan
        return out

    def to_doc(self) -> dict:
        return {
            "started": self.started, "resume": self.resume,
            "delivered": [self.dcseq, self.dsseq], "ack_floor": [self.acseq, self.asseq],
            "pending": [[s, p[0], p[1]] for s, p in sorted(self.pending.items())],
            "redelivered": sorted([s, n] for s, n in self.redelivered.items()),
            "ldt": self.last_delivered_ns, "lat": self.last_ack_ns, "scan": self.scan,
        }

    @classmethod
    def from_doc(cls, doc: dict, ack_mode: int) -> ConsumerState:
        out = cls(ack_mode)
        out.started, out.resume = bool(doc["started"]), int(doc.get("resume", 0))
        out.dcseq, out.dsseq = doc["delivered"]
        out.acseq, out.asseq = doc["ack_floor"]
        out.pending = {s: [c, ts] for s, c, ts in sorted(doc["pending"])}
        out.redelivered = {s: n for s, n in doc["redelivered"]}
        out.last_delivered_ns, out.last_ack_ns = doc.get("ldt", 0), doc.get("lat", 0)
        out.scan = doc.get("scan", 0)
        return out

    def same_as(self, other: ConsumerState) -> bool:
        return self.to_doc() == other.to_doc()

    # -- queries ----------------------------------------------------------------------------------
    def first_pending(self) -> int:
        """The lowest pending stream seq (0 when nothing is pending)."""
        for s in self.pending:
            return s
        return 0

    def needs_ack(self, sseq: int) -> bool:
        """Whether this consumer still holds on to stream seq ``sseq`` (interest retention)."""
        if self.ack_mode == ACK_EXPLICIT:
            if sseq > self.asseq and (sseq > self.dsseq or sseq in self.pending):
                return True
        elif sseq > self.asseq:
            return True
        return sseq in self.redelivered

    def ack_summary(self) -> AckSummary:
        """The stream seqs this consumer is done with (see :class:`AckSummary`): what an
        interest or work-queue stream may drop for it. Explicit acks settle what was
        delivered and is not pending; ack-all and ack-none settle up to the floor."""
        last = self.dsseq if self.ack_mode == ACK_EXPLICIT else self.asseq
        outstanding = frozenset(s for s in (*self.pending, *self.redelivered) if s <= last)
        return AckSummary(self.asseq, last, outstanding)

    # -- apply --------------------------------------------------------------------------------------
    def apply(self, op: ConsumerOp) -> list[int]:
        """Apply one committed op; returns the stream seqs it acknowledged (for the stream)."""
        t = type(op)
        if t is DeliveredOp:
            return self._delivered(op)
        if t is AckOp:
            return self._acks(op)
        if t is TouchOp:
            pending = self.pending
            for s in op.seqs:
                p = pending.get(s)
                if p is not None:
                    p[1] = op.ts
            return []
        if t is MaxDeliveredOp:
            # out of pending, the floor where it was: as nats-server 2.15.1's stored state,
            # only an ack moves it (past such a message once it is not the next one, or to
            # the last delivered when nothing is pending any more)
            for s, dc in op.items:
                if self.pending.pop(s, None) is not None and self.redelivered.get(s, 0) < dc - 1:
                    self.redelivered[s] = dc - 1
            return []
        if t is StartOp:
            if not self.started:
                self.started = True
                self.resume = op.resume
                base = max(op.start_seq - 1, 0)
                if base > self.dsseq:
                    self.dsseq = base
                if base > self.asseq:
                    self.asseq = base
            return []
        if t is PurgedOp:
            self._purged(op.first_seq)
            return []
        if t is AdvanceOp:
            self._advance(op)
            return []
        if t is RestoreStateOp:
            self._restore(op.doc)
            return []
        if t is ResetOp:
            self._reset(op.seq)
            return []
        raise TypeError(f"not a consumer op: {op!r}")

    def _delivered(self, op: DeliveredOp) -> list[int]:
        ts = op.ts
        acked: list[int] = []
        self.started = True
        if self.ack_mode == ACK_NONE:
            for cseq, sseq, _dc in op.items:
                if cseq > self.dcseq:
                    self.dcseq = self.acseq = cseq
                if sseq > self.dsseq:
                    self.dsseq = self.asseq = sseq
                acked.append(sseq)
        else:
            pending, redelivered = self.pending, self.redelivered
            for cseq, sseq, dc in op.items:
                if cseq <= self.acseq:
                    continue  # replayed from an old log: already settled
                if sseq <= self.dsseq:
                    p = pending.get(sseq)
                    if p is not None:
                        p[1] = ts  # keep the first delivery's consumer seq
                else:
                    pending[sseq] = [cseq, ts]
                    self.dsseq = sseq
                if cseq > self.dcseq:
                    self.dcseq = cseq
                if dc > 1 and redelivered.get(sseq, 0) < dc - 1:
                    redelivered[sseq] = dc - 1
        if op.items:
            self.last_delivered_ns = ts
        if op.skip > self.scan:
            self.scan = op.skip
        return acked

    def _acks(self, op: AckOp) -> list[int]:
        acked: list[int] = []
        pending, redelivered = self.pending, self.redelivered
        if self.ack_mode == ACK_EXPLICIT:
            for _cseq, sseq in op.items:
                was_counted = redelivered.pop(sseq, None) is not None
                p = pending.pop(sseq, None)
                if p is None:
                    if was_counted:
                        acked.append(sseq)  # past max_deliver: the stream may drop it now
                    continue
                acked.append(sseq)
                self._move_floor(p[0], sseq)
        elif self.ack_mode == ACK_ALL:
            for cseq, sseq in op.items:
                if cseq <= self.acseq or sseq <= self.asseq or sseq > self.dsseq:
                    continue
                self.acseq, self.asseq = min(cseq, self.dcseq), sseq
                done = [s for s in pending if s <= sseq]
                for s in done:
                    del pending[s]
                if redelivered:
                    for s in [s for s in redelivered if s <= sseq]:
                        del redelivered[s]
                if sseq not in done:
                    done.append(sseq)
                acked.extend(done)
        if op.items:
            self.last_ack_ns = op.ts
        return acked

    def _advance(self, op: AdvanceOp) -> None:
        if op.sseq <= self.asseq:
            return  # replayed from an old log, or a later ack already covered it
        self.started = True
        for s in [s for s in self.pending if s <= op.sseq]:
            del self.pending[s]
        for s in [s for s in self.redelivered if s <= op.sseq]:
            del self.redelivered[s]
        if op.sseq > self.dsseq:
            self.dsseq = op.sseq
        if op.cseq > self.dcseq:
            self.dcseq = op.cseq
        self.acseq, self.asseq = min(op.cseq, self.dcseq), op.sseq
        if op.sseq + 1 > self.scan:
            self.scan = op.sseq + 1
        self.last_ack_ns = op.ts

    def _restore(self, doc: dict) -> None:
        other = ConsumerState.from_doc({**doc, "started": True}, self.ack_mode)
        for name in self.__slots__[1:]:
            setattr(self, name, getattr(other, name))

    def _reset(self, seq: int) -> None:
        """Start over at stream seq ``seq``, as nats-server resets a consumer: no pending
        acks or redelivery counts, consumer seqs from 1 again, both floors at ``seq - 1``
        (what went out before is forgotten, whichever way the position moved)."""
        self.started = True
        self.resume = 0
        self.pending = {}
        self.redelivered = {}
        self.dcseq = self.acseq = 0
        self.dsseq = self.asseq = max(seq - 1, 0)
        self.scan = max(seq, 1)
        self.last_delivered_ns = self.last_ack_ns = 0

    def _move_floor(self, cseq: int, sseq: int) -> None:
        """After pending ``sseq`` (first delivered as ``cseq``) left: advance the ack floor."""
        if not self.pending:
            self.acseq, self.asseq = self.dcseq, self.dsseq
        elif cseq == self.acseq + 1:
            nxt = self.first_pending()
            self.acseq, self.asseq = self.pending[nxt][0] - 1, nxt - 1

    def _purged(self, first_seq: int) -> None:
        base = first_seq - 1
        if base <= 0:
            return
        for s in [s for s in self.pending if s <= base]:
            del self.pending[s]
        for s in [s for s in self.redelivered if s <= base]:
            del self.redelivered[s]
        if base > self.dsseq:
            self.dsseq = base
        if base > self.asseq:
            if self.pending:
                nxt = self.first_pending()
                self.acseq, self.asseq = self.pending[nxt][0] - 1, nxt - 1
            else:
                self.acseq, self.asseq = self.dcseq, self.dsseq

    def apply_all(self, ops: Iterable[ConsumerOp]) -> list[int]:
        out: list[int] = []
        for op in ops:
            out.extend(self.apply(op))
        return out


__all__ = ["ACK_ALL", "ACK_EXPLICIT", "ACK_NONE", "ConsumerState"]
