"""A stream replica's upkeep between requests: expiry, subject delete markers and fired
message schedules.

A mixin of :class:`~rayjet.engine.stream.StreamEngine`. Every replica expires messages
(max_age, per-message TTL) and prunes the duplicate window with its own clock
(:meth:`~StreamUpkeep.expire`); only the leader turns what that leaves behind into ops:
the subject delete markers the store reported, and the schedules that came due
(:meth:`~StreamUpkeep.due`), each admitted as a new message so every replica stores the
same one. :meth:`~StreamUpkeep.next_upkeep_ns` says when there is work again.
"""

from __future__ import annotations

from rayjet.api import headers as H
from rayjet.engine import checks as C
from rayjet.engine import schedules as S
from rayjet.engine.admission import Admitted, header_block
from rayjet.engine.ops import F_MARKER, F_NO_INTEREST, SCHED_PURGE, MsgOp
from rayjet.engine.results import ExpireResult
from rayjet.errors import APIError, NotFoundError
from rayjet.storage.record import record_size


class StreamUpkeep:
    """Mixed into :class:`~rayjet.engine.stream.StreamEngine`: expiry, delete markers and
    schedules (see the module docstring)."""

    def _on_marker(self, subject: str, hdr: bytes) -> None:
        self._markers.append((subject, hdr))

    def expire(self, now: int | None = None) -> ExpireResult:
        """Local upkeep with this replica's clock: max_age/TTL removal (the store), dedup
        window pruning. On the leader the subject delete markers to propose come back as ops."""
        now = self.clock.now_ns() if now is None else now
        res = ExpireResult(removed=self.store.expire(now))
        if self._window_ns:
            res.pruned_ids = self.dedup.prune(now, self._window_ns)
        markers, self._markers = self._markers, []
        if self._leader:
            for subject, hdr in markers:
                if subject in self.pending.subjects:
                    continue
                if self.store.last_seq_for_subject(subject):
                    continue  # a newer message arrived meanwhile
                size = record_size(len(subject.encode()), len(hdr), 0)
                res.ops.append(self.assign(Admitted(subject, hdr, b"", self._sdm_ttl, "",
                                                    F_MARKER, 0, "", size, None, 0)))
        return res

    def next_upkeep_ns(self) -> int | None:
        """When :meth:`expire` (and on the leader :meth:`due`) next has work to do: the
        earliest max_age or TTL expiry, msg id leaving the duplicate window, or schedule
        firing; at once for delete markers waiting to be proposed. None: nothing is due
        until something is stored, so an idle replica needs no timer."""
        if self._markers:
            return 0
        due = [t for t in (self.store.next_expiry_ns(),
                           self.schedules.next_due() if self._leader else 0) if t]
        if self._window_ns and (oldest := self.dedup.oldest_ts()) is not None:
            due.append(oldest + self._window_ns + 1)  # kept while ts >= now - window
        return min(due, default=None)

    def due(self, now: int | None = None) -> list[MsgOp]:
        """Leader: the ops publishing every schedule due at ``now`` to its target."""
        self.require_leader()
        now = self.clock.now_ns() if now is None else now
        out: list[MsgOp] = []
        sch = self.schedules
        for subject, seq, fire in sch.due(now):
            try:
                msg = self.store.load_msg(seq)
            except NotFoundError:
                sch.remove(subject)
                continue
            h = H.decode_headers(msg.hdr)
            parsed = S.stored_schedule(h.get(S.SCHEDULE), h.get(S.SCHEDULE_TIME_ZONE), msg.ts)
            target = h.get(S.SCHEDULE_TARGET, "")
            nxt = parsed.after(fire, now) if parsed is not None and parsed.repeats \
                else SCHED_PURGE
            if parsed is None or not target or nxt is None:
                sch.remove(subject)
                continue
            data = msg.data
            source = h.get(S.SCHEDULE_SOURCE, "")
            if source:
                try:
                    src = self.store.load_last_msg(source)
                    data, h = src.data, {**H.decode_headers(src.hdr), **{
                        k: v for k, v in h.items() if k.startswith("Nats-Schedule")}}
                except NotFoundError:
                    pass
            fh = S.fired_headers(h, subject, S.SCHEDULE_NEXT_PURGE if nxt == SCHED_PURGE
                                 else parsed.next_header(nxt))
            try:
                flags = C.rollup_flags(fh, True, False)
                ttl = C.check_ttl(fh, True)
                hdr = header_block(fh)
                tsubj = self._subject(target)
            except APIError:
                sch.remove(subject)
                continue
            size = record_size(len(tsubj.encode()), len(hdr), len(data))
            if self._interest_ret and not self.interest.has_interest(tsubj):
                flags |= F_NO_INTEREST
            out.append(self.assign(Admitted(tsubj, hdr, data, ttl, "", flags, 0, subject, size,
                                            None, nxt)))
            sch.inflight.add(subject)
        return out


__all__ = ["StreamUpkeep"]
