"""The leader's decisions on acks: ack (explicit and all), nak, in progress, term, ack
next, advance, a reset of the delivery position, and a purge of the stream below the
consumer.

A mixin of :class:`~rayjet.engine.consumer.ConsumerEngine`: it works on the engine's
leader view, redelivery queue and read position, and returns ops to propose as
:class:`~rayjet.engine.consumer.types.AckOutcome` (plus advisories).
"""

from __future__ import annotations

from collections import deque

from rayjet.api.enums import DeliverPolicy
from rayjet.engine.consumer.ops import AckOp, AdvanceOp, PurgedOp, ResetOp, RestoreStateOp, TouchOp
from rayjet.engine.consumer.state import ACK_ALL, ACK_EXPLICIT, ACK_NONE, ConsumerState
from rayjet.engine.consumer.types import (
    ACK_METRIC,
    ACK_METRIC_TYPE,
    MSG_NAKED,
    MSG_TERMINATED,
    NAK_TYPE,
    TERMINATED_TYPE,
    AckOutcome,
    Batch,
    PullRequest,
)
from rayjet.engine.consumer.util import to_ns
from rayjet.errors import error_for


class AckDecisions:
    def _in_range(self, sseq: int) -> bool:
        return sseq > 0 and (sseq < self._sseq or sseq <= self._view.dsseq)

    def _dequeue(self, sseq: int) -> None:
        self._rdq_set.discard(sseq)

    def prepare_ack(self, sseq: int, now: int | None = None, *, cseq: int = 0) -> AckOutcome:
        """A positive ack of stream seq ``sseq`` (``cseq``: the consumer seq from the reply
        subject, only needed by ack all). Duplicate and late acks change nothing."""
        return self.prepare_acks([(sseq, cseq)], now)

    def prepare_acks(self, acks, now: int | None = None, *, sample: bool = True) -> AckOutcome:
        """Many acks as one op: ``acks`` are stream seqs or (stream seq, consumer seq)."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = AckOutcome()
        if self._ack_mode == ACK_NONE:
            return out
        items: list[tuple[int, int]] = []
        seen: set[int] = set()
        for a in acks:
            sseq, cseq = (a, 0) if isinstance(a, int) else (a[0], a[1])
            if sseq in seen:
                continue
            if not self._in_range(sseq):
                out.ok = False
                continue
            seen.add(sseq)
            item = self._ack_item(view, sseq, cseq, now, out if sample else None)
            if item is not None:
                items.append(item)
        if items:
            out.op = self._propose(AckOp(now, tuple(items)))
            self._active_ns = now
        return out

    def _ack_item(self, view: ConsumerState, sseq: int, cseq: int, now: int,
                  out: AckOutcome | None) -> tuple[int, int] | None:
        if self._ack_mode == ACK_EXPLICIT:
            p = view.pending.get(sseq)
            if p is not None:
                self._dequeue(sseq)
                if out is not None and self._sample and self._should_sample():
                    out.advisories.append(self._advisory(
                        ACK_METRIC, ACK_METRIC_TYPE, now, consumer_seq=cseq or p[0],
                        stream_seq=sseq, ack_time=now - p[1],
                        deliveries=view.redelivered.get(sseq, 0) + 1))
                return (p[0], sseq)
            if sseq in view.redelivered:
                return (0, sseq)
            return None
        # ack all
        if sseq <= view.asseq:
            return None
        if not cseq:
            p = view.pending.get(sseq)
            if p is not None:
                cseq = p[0]
            else:
                below = [q[0] for s, q in view.pending.items() if s <= sseq]
                cseq = max(below) if below else view.acseq + 1
        for s in [s for s in self._rdq_set if s <= sseq]:
            self._rdq_set.discard(s)
        return (cseq, sseq)

    def prepare_advance(self, sseq: int, now: int | None = None) -> AckOutcome:
        """Settle everything up to stream seq ``sseq`` at once, delivered or not (ack all).

        What a job does that reads the stream in bulk elsewhere and keeps its progress in a
        durable consumer: one op however many messages it skips, instead of delivering each
        of them. Limited to ack-all consumers on limits-retention streams (skipped messages
        are never shown to the stream as acked) that are not in a last-per-subject
        catch-up."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        if self._ack_mode != ACK_ALL or self._forward or self._lss:
            raise error_for("BAD_REQUEST", err="only an ack-all consumer of a limits-retention "
                            "stream can advance its ack floor without deliveries")
        first, last = self.reader.bounds()
        if sseq < 1 or sseq > last:
            raise error_for("BAD_REQUEST", err=f"cannot advance to stream seq {sseq}: the "
                            f"stream's last sequence is {last}")
        if sseq <= view.dsseq:
            return self.prepare_acks([sseq], now, sample=False)
        start = max(view.dsseq + 1, view.scan, 1)
        skipped = (self.reader.num_pending(self.filters, start, False)
                   - self.reader.num_pending(self.filters, sseq + 1, False)) if start <= sseq else 0
        self._rdq.clear()
        self._rdq_set.clear()
        out = AckOutcome()
        out.op = self._propose(AdvanceOp(now, view.dcseq + skipped, sseq))
        self._sseq = max(self._sseq, sseq + 1)
        self._active_ns = now
        return out

    def prepare_restore_state(self, doc: dict) -> AckOutcome:
        """Take a backup's delivery state (a :meth:`ConsumerState.to_doc`) whole: what was
        delivered, the ack floor, what is pending and how often it was redelivered."""
        self._check_leader()
        try:
            state = ConsumerState.from_doc({**doc, "started": True}, self._ack_mode)
        except (KeyError, TypeError, ValueError) as exc:
            raise error_for("BAD_REQUEST", err=f"not a consumer state: {exc!r}") from None
        out = AckOutcome()
        out.op = self._propose(RestoreStateOp(state.to_doc()))
        self._restart_view()
        return out

    def _restart_view(self) -> None:
        """After the state changed whole: no queued redelivery, read on from the state."""
        self._rdq.clear()
        self._rdq_set.clear()
        self._lss.clear()
        v = self._view
        self._sseq = max(v.dsseq + 1, v.scan, 1)

    def reset_reads(self, seq: int) -> list[tuple]:
        """The stream read :meth:`prepare_reset` to ``seq`` makes (leader): where a
        by_start_time consumer starts."""
        cfg = self.config
        if (seq and cfg.deliver_policy is DeliverPolicy.BY_START_TIME
                and cfg.opt_start_time is not None):
            return [("seq_for_time", int(cfg.opt_start_time.timestamp() * 1e9))]
        return []

    def prepare_reset(self, seq: int = 0, now: int | None = None) -> tuple[ResetOp, int]:
        """``$JS.API.CONSUMER.RESET``: deliver again from stream seq ``seq``, or (0) from
        just past the ack floor; returns the op and the seq it resets to. As nats-server:
        a consumer that delivers all may go anywhere, a by_start_sequence or by_start_time
        one not below its start, other deliver policies only back to their ack floor.
        Waiting pulls stay and are served from the new position."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise error_for("BAD_REQUEST", err=f"seq must be a sequence number, not {seq!r}")
        cfg = self.config
        policy = cfg.deliver_policy
        if not seq:
            seq = view.asseq + 1
        elif policy is DeliverPolicy.BY_START_SEQUENCE:
            if seq < (cfg.opt_start_seq or 0):
                raise error_for("CONSUMER_INVALID_RESET", err="below start seq")
        elif policy is DeliverPolicy.BY_START_TIME and cfg.opt_start_time is not None:
            start = self.reader.seq_for_time(int(cfg.opt_start_time.timestamp() * 1e9))
            if seq < start:
                raise error_for("CONSUMER_INVALID_RESET", err="below start time")
        elif policy is not DeliverPolicy.ALL:
            raise error_for("CONSUMER_INVALID_RESET", err="not allowed")
        seq = max(seq, 1)
        op = self._propose(ResetOp(seq))
        self._rdq.clear()
        self._rdq_set.clear()
        self._lss.clear()
        self._sseq = seq
        self._replay_lts = self._replay_due = self._rate_next = 0
        self._active_ns = now
        return op, seq

    def _should_sample(self) -> bool:
        return self._sample >= 100 or self._rng.random() * 100 < self._sample

    def prepare_nak(self, sseq: int, delay: float | None = None,
                    now: int | None = None) -> AckOutcome:
        """Negative ack: redeliver at once, or after ``delay`` seconds."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = AckOutcome()
        p = view.pending.get(sseq)
        if p is None:
            out.ok = False
            return out
        out.advisories.append(self._advisory(
            MSG_NAKED, NAK_TYPE, now, consumer_seq=p[0], stream_seq=sseq,
            deliveries=view.redelivered.get(sseq, 0) + 1))
        if delay is not None and delay > 0:
            self._dequeue(sseq)
            ts = now + to_ns(delay) - self._deadline(view, sseq)
            out.op = self._propose(TouchOp(ts, (sseq,)))
        elif sseq not in self._rdq_set:
            self._rdq.append(sseq)
            self._rdq_set.add(sseq)
        self._active_ns = now
        return out

    def prepare_progress(self, sseq: int, now: int | None = None) -> AckOutcome:
        """Work in progress: the ack wait of ``sseq`` starts again from now."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        out = AckOutcome()
        if sseq not in view.pending:
            out.ok = False
            return out
        self._dequeue(sseq)
        out.op = self._propose(TouchOp(now, (sseq,)))
        self._active_ns = now
        return out

    def prepare_term(self, sseq: int, reason: str = "", now: int | None = None, *,
                     cseq: int = 0) -> AckOutcome:
        """Stop redelivering ``sseq`` without processing it (acts as an ack) + advisory."""
        view = self._check_leader()
        now = self.clock.now_ns() if now is None else now
        if not self._in_range(sseq):
            return AckOutcome(ok=False)
        p = view.pending.get(sseq)
        dc = view.redelivered.get(sseq, 0) + 1
        out = self.prepare_acks([(sseq, cseq)], now, sample=False)
        body = {"consumer_seq": cseq or (p[0] if p else 0), "stream_seq": sseq, "deliveries": dc}
        if reason:
            body["reason"] = reason
        out.advisories.append(self._advisory(MSG_TERMINATED, TERMINATED_TYPE, now, **body))
        return out

    def prepare_ack_next(self, sseq: int, req: PullRequest,
                         now: int | None = None) -> tuple[AckOutcome, Batch]:
        """``+NXT``: ack ``sseq`` and pull with ``req``; propose the ack's op first."""
        now = self.clock.now_ns() if now is None else now
        return self.prepare_ack(sseq, now), self.request(req, now)

    def prepare_purged(self, first_seq: int) -> PurgedOp | None:
        """The stream dropped everything below ``first_seq``; None if nothing changes."""
        view = self._check_leader()
        if first_seq - 1 <= view.asseq:
            return None
        for s in [s for s in self._rdq_set if s < first_seq]:
            self._rdq_set.discard(s)
        self._lss = deque(s for s in self._lss if s >= first_seq)
        self._sseq = max(self._sseq, first_seq)
        return self._propose(PurgedOp(first_seq))


__all__ = ["AckDecisions"]
