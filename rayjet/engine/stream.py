"""StreamEngine: the deterministic state machine of one stream replica.

Leader only: ``prepare_*`` check a request against the applied state plus the proposals in
flight, fix the sequence and timestamp, and return an Op to propose (or a duplicate PubAck,
or raise the typed NATS error). Every replica: ``apply``/``apply_batch`` committed ops in log
order. An op whose seq is not ``last_seq + 1`` (proposed on a stale state) is skipped the
same way everywhere, and so is every later op of the same proposer, whose checks assumed it.

The leader's checks of published messages are :class:`~.admission.MessageAdmission` (and
:class:`~.columnar.ColumnarPublish` for batches given as columns), its upkeep between
requests (expiry, delete markers, fired schedules) :class:`~.upkeep.StreamUpkeep`; both are
mixed in here. Mirrors and sources (:mod:`.sourcing`), interest sweeps (:mod:`.interest_sweep`)
and restores (:mod:`.restore`) are functions of the engine's parts, called from ``apply``.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

import msgpack

from rayjet.api import StreamConfig
from rayjet.api.enums import RetentionPolicy
from rayjet.api.stream import validate_stream_config, validate_stream_update
from rayjet.clock import NANOS_PER_SECOND, SYSTEM_CLOCK, Clock
from rayjet.engine import schedules as S
from rayjet.engine.ack_sync import AckSummary, sync_seqs
from rayjet.engine.admission import MessageAdmission
from rayjet.engine.columnar import ColumnarPublish
from rayjet.engine.counters import ack_value
from rayjet.engine.dedup import DedupTable
from rayjet.engine.interest_sweep import SWEEP_SCAN, apply_sweep, begin_sweep, prepare_sweep
from rayjet.engine.ops import (
    F_COUNTER,
    F_NO_INTEREST,
    F_ROLLUP_ALL,
    F_ROLLUP_SUB,
    SCHED_PURGE,
    AckOp,
    BatchOp,
    ConsumerOp,
    DeleteOp,
    MsgOp,
    MsgRunOp,
    Op,
    PurgeOp,
    RestoreOp,
    SkipOp,
    SourceOp,
    SweepOp,
    UpdateConfigOp,
)
from rayjet.engine.pending import Pending
from rayjet.engine.recovery import recover_from_store
from rayjet.engine.restore import apply_restore
from rayjet.engine.results import ApplyResult, Republish
from rayjet.engine.retention import Interest
from rayjet.engine.sourcing import SourcePositions, apply_source
from rayjet.engine.storeconf import updated_store_config
from rayjet.engine.upkeep import StreamUpkeep
from rayjet.errors import APIError, NotFoundError, NotLeaderError, StreamSealedError, error_for
from rayjet.subjects import SubjectTransform

_SNAP_VERSION = 1
# a message with one of these flags is applied on its own, never in a run of plain ones
_RUN_FLAGS = F_ROLLUP_SUB | F_ROLLUP_ALL | F_NO_INTEREST
# a MsgOp as a store_raw_batch item: (subject, hdr, data, seq, ts, ttl)
_RAW_FIELDS = attrgetter("subject", "hdr", "data", "seq", "ts", "ttl")
_SCHED = attrgetter("sched")
_FLAGS = attrgetter("flags")
SYNC_SCAN = 16_384  # messages one reconciliation step looks at


class StreamEngine(MessageAdmission, ColumnarPublish, StreamUpkeep):
    def __init__(self, config: StreamConfig, store, clock: Clock = SYSTEM_CLOCK, *,
                 rebuild: bool = True) -> None:
        self.store = store
        self.clock = clock
        self.dedup = DedupTable()
        self.schedules = S.Schedules()
        self.interest = Interest()
        self.pending = Pending()
        self.sources = SourcePositions()  # mirror/source origin positions (replicated)
        self.sweep_from = 0  # where removing what a gone consumer held goes on (replicated)
        self._markers: list[tuple[str, bytes]] = []
        self._last_seq = 0
        self._last_ts = 0
        self._last_msg_id = ""
        self._bad_pid = 0
        self._leader = False
        self._epoch = 0
        self._gen = 0
        self._pid = 0
        # validation also switches on what features imply (schedules and markers need rollups)
        self._set_config(validate_stream_config(config, create=False))
        if hasattr(store, "marker_handler"):
            # markers are proposed by the leader so every replica stores the same ones
            store.marker_handler = self._on_marker
        st = store.fast_state()
        if st.last_seq == 0 and self.config.first_seq > 1:
            store.skip_msgs(1, self.config.first_seq - 1)
        if rebuild:
            self.rebuild()

    # -- config ------------------------------------------------------------------------------
    def _set_config(self, cfg: StreamConfig) -> None:
        self.config = cfg
        self.name = cfg.name
        self._subjects = tuple(cfg.subjects)
        st = cfg.subject_transform
        self._transform = SubjectTransform(st.src, st.dest) if st and st.dest else None
        rp = cfg.republish
        self._republish = SubjectTransform(rp.src or ">", rp.dest) if rp and rp.dest else None
        self._rp_headers_only = bool(rp and rp.headers_only)
        self._window_ns = int((cfg.duplicate_window or 0) * NANOS_PER_SECOND)
        self._max_size = cfg.max_msg_size if cfg.max_msg_size > 0 else 0
        self._interest_ret = cfg.retention is RetentionPolicy.INTEREST
        self.interest.retention = cfg.retention
        self._sdm_ttl = int(cfg.subject_delete_marker_ttl or 0)
        self._subject_cache: dict[str, str] = {}

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def is_leader(self) -> bool:
        return self._leader

    # -- leadership ----------------------------------------------------------------------------
    def set_leader(self, epoch: int) -> None:
        """Start proposing; ``epoch`` must differ between leaderships (e.g. the raft term)."""
        self._leader = True
        self._epoch = epoch
        self._gen = 0
        self._resync()

    def restart_projection(self) -> None:
        """Still leading, but what was projected may never commit (raft dropped a proposal,
        or it failed): project again from the applied state, under a new proposal id so
        the ops projected before are told apart (and refused) when they do apply."""
        self.require_leader()
        self._resync()

    def set_follower(self) -> None:
        self._leader = False
        self.pending.reset(self._last_seq, self._last_ts, self._last_msg_id)
        self.schedules.inflight.clear()

    def _resync(self) -> None:
        self._gen += 1
        self._pid = (self._epoch << 20) | (self._gen & 0xFFFFF)
        self.pending.reset(self._last_seq, self._last_ts, self._last_msg_id)
        self.schedules.inflight.clear()

    def require_leader(self) -> None:
        if not self._leader:
            raise NotLeaderError(group=self.name)

    # -- other requests ------------------------------------------------------------------------
    def prepare_purge(self, subject: str | None = None, seq: int | None = None,
                      keep: int | None = None) -> PurgeOp:
        self.require_leader()
        if self.config.sealed:
            raise StreamSealedError()
        if self.config.deny_purge:
            raise error_for("STREAM_PURGE_FAILED", "stream purge not permitted")
        if seq and keep:
            raise error_for("STREAM_PURGE_FAILED", "can not both set seq and keep")
        if subject and subject != ">":
            from rayjet.subjects import validate_filter

            validate_filter(subject)
        return PurgeOp(subject or "", seq or 0, keep or 0)

    def prepare_delete(self, seq: int, erase: bool = False) -> DeleteOp:
        self.require_leader()
        if self.config.sealed:
            raise StreamSealedError()
        if self.config.deny_delete:
            raise error_for("STREAM_MSG_DELETE_FAILED", "message delete not permitted")
        if not self.pending.holds(seq):
            try:
                self.store.load_msg(seq)
            except NotFoundError:
                raise self._not_deleted(seq) from None
        return DeleteOp(seq, bool(erase))

    def _not_deleted(self, seq: int) -> APIError:
        """nats-server's answers to deleting a sequence that holds no message: past the
        end, the store's EOF; at or below it (deleted already, or never there), 10043."""
        if seq > self.store.fast_state().last_seq:
            return error_for("STREAM_MSG_DELETE_FAILED", "stream store EOF")
        return error_for("SEQUENCE_NOT_FOUND", seq=seq)

    def prepare_update(self, config: StreamConfig) -> UpdateConfigOp:
        """Checks the editable-field rules; the new limits reach the store when applied."""
        self.require_leader()
        new = validate_stream_update(self.config, config.with_defaults())
        return UpdateConfigOp(new.to_dict())

    def prepare_skip(self, num: int = 1) -> SkipOp:
        self.require_leader()
        return SkipOp(self.pending.skip(num), num, self._pid)

    def prepare_ack(self, consumer: str, seq: int) -> AckOp:
        return AckOp(consumer, seq)

    def prepare_consumer(self, name: str, filters: Iterable[str] = (), start_seq: int = 0,
                         remove: bool = False) -> ConsumerOp:
        filters = tuple(filters)
        if not remove and name not in self.interest.consumers:
            mc = self.config.max_consumers
            if mc > 0 and len(self.interest) >= mc:
                raise error_for("CONSUMER_MAX_CONSUMERS")
        return ConsumerOp(name, filters, start_seq, remove)

    def prepare_consumer_sync(self, name: str, summary: AckSummary, start: int = 0,
                              limit: int = SYNC_SCAN) -> tuple[list[AckOp], int]:
        """Reconcile with consumer ``name``'s replicated ack state (leader, outside apply):
        an ack op for every message from ``start`` on that it wants and has acked but this
        stream has not recorded, looking at no more than ``limit`` messages. Returns the
        ops and the seq to continue from (0: done)."""
        c = self.interest.consumers.get(name)
        if c is None or not self.interest.removes_on_ack:
            return [], 0
        store, msgs = self.store, []
        seq = max(start, self.store.fast_state().first_seq, 1)
        while seq <= summary.last and len(msgs) < limit:
            try:
                msg, seq = store.load_next_msg(">", True, seq)
            except NotFoundError:
                return self._acks_for(name, summary, msgs), 0
            if seq > summary.last:
                break
            msgs.append((seq, msg.subject))
            seq += 1
        nxt = seq if seq <= summary.last and len(msgs) >= limit else 0
        return self._acks_for(name, summary, msgs), nxt

    def _acks_for(self, name: str, summary: AckSummary, msgs) -> list[AckOp]:
        return [AckOp(name, seq) for seq in sync_seqs(self.interest, name, summary, msgs)]

    # -- consumers (local hook) ------------------------------------------------------------------
    def register_consumer(self, name: str, filters: Iterable[str] = (), start_seq: int = 0) -> None:
        """A consumer exists with these filters and needs sequences >= ``start_seq``."""
        self.interest.register(name, tuple(filters), start_seq, self.config.max_consumers)

    def unregister_consumer(self, name: str) -> bool:
        """Forget a consumer; under interest retention what nobody needs any more is then
        removed by sweep steps the leader proposes (:mod:`.interest_sweep`), not here."""
        if not self.interest.unregister(name):
            return False
        if self.config.retention is RetentionPolicy.INTEREST:
            begin_sweep(self)
        return True

    def prepare_sweep(self, limit: int = SWEEP_SCAN) -> SweepOp | None:
        """The next bounded step of a pending interest sweep (leader, outside apply)."""
        return prepare_sweep(self, limit)

    # -- apply -----------------------------------------------------------------------------------
    def apply(self, op: Op) -> ApplyResult:
        t = type(op)
        if t is MsgOp:
            if (op.pid and op.pid == self._bad_pid) or op.seq != self._last_seq + 1:
                return self.reject_stale(op)
            rp_last = self._rp_last(op)
            if op.flags & F_NO_INTEREST:
                self.store.skip_msg(op.seq)
            else:
                self.store.store_raw(op.subject, op.hdr, op.data, op.seq, op.ts, op.ttl)
            return self._stored(op, rp_last)
        if t is MsgRunOp:
            return self._apply_run(op)
        if t is BatchOp:
            return self.apply_atomic(op)
        if t is SkipOp:
            if (op.pid and op.pid == self._bad_pid) or op.seq != self._last_seq + 1:
                return self.reject_stale(op)
            self.store.skip_msgs(op.seq, op.num)
            self._last_seq = op.seq + op.num - 1
            if self._leader and self.pending.next_seq <= self._last_seq:
                self.pending.next_seq = self._last_seq + 1
            return ApplyResult(op, value=op.num)
        if t is PurgeOp:
            return self._apply_purge(op)
        if t is DeleteOp:
            return self._apply_delete(op)
        if t is UpdateConfigOp:
            return self._apply_config(op)
        if t is AckOp:
            return self._apply_ack(op)
        if t is ConsumerOp:
            return self._apply_consumer(op)
        if t is SourceOp:
            return apply_source(self, op)
        if t is SweepOp:
            return apply_sweep(self, op)
        if t is RestoreOp:
            return apply_restore(self, op)
        raise TypeError(f"not a stream op: {op!r}")

    def apply_batch(self, ops: Iterable[Op]) -> list[ApplyResult]:
        """Apply committed ops in order; runs of plain messages go to the store in one write."""
        out: list[ApplyResult] = []
        raw_batch = getattr(self.store, "store_raw_batch", None)
        if raw_batch is None:
            return [self.apply(op) for op in ops]
        run: list[MsgOp] = []
        add = run.append
        expect = self._last_seq + 1
        bad = self._bad_pid
        joins_runs = self._republish is None
        for op in ops:
            t = type(op)
            if (t is MsgOp and op.seq == expect and not op.flags & _RUN_FLAGS
                    and not op.scheduler and not (bad and op.pid == bad)):
                add(op)
                expect += 1
                continue
            if t is MsgRunOp and joins_runs and op.seq == expect and not (bad and op.pid == bad):
                add(op)
                expect += op.count
                continue
            if run:
                out += self._store_run(run, raw_batch)
                run = []
                add = run.append
            out.append(self.apply(op))
            expect = self._last_seq + 1
            bad = self._bad_pid
        if run:
            out += self._store_run(run, raw_batch)
        return out

    def _store_run(self, run: list, raw_batch) -> list[ApplyResult]:
        """Store consecutive plain MsgOps (no rollup, no-interest or scheduler) and
        MsgRunOps in one call; the same bookkeeping as :meth:`_stored` for each."""
        if all(type(op) is MsgOp for op in run):
            lasts = self._rp_lasts(run) if self._leader and self._republish is not None else None
            raw_batch(list(map(_RAW_FIELDS, run)))
            return self._after_stored(run, lasts)
        cols: tuple[list, ...] = ([], [], [], [], [], [])
        subjects, hdrs, datas, seqs, tss, ttls = cols
        for op in run:
            if type(op) is MsgRunOp:
                for col, values in zip(cols, op.raw_columns()):
                    col += values
            else:
                for col, value in zip(cols, _RAW_FIELDS(op)):
                    col.append(value)
        self.store.store_raw_columns(subjects, hdrs, datas, seqs, tss, ttls)
        out: list[ApplyResult] = []
        plain: list[MsgOp] = []
        for op in run:
            if type(op) is MsgRunOp:
                if plain:
                    out += self._after_stored(plain)
                    plain = []
                out.append(self._after_run(op))
            else:
                plain.append(op)
        if plain:
            out += self._after_stored(plain)
        return out

    def _after_stored(self, run: list[MsgOp], lasts: list[int] | None = None
                      ) -> list[ApplyResult]:
        """:meth:`_stored` for consecutive plain MsgOps the store took, without its per-op
        branches (``lasts``: :meth:`_rp_lasts` before they were stored, for republish)."""
        last = run[-1]
        self._last_seq = last.seq
        self._last_ts = last.ts
        self._last_msg_id = last.msg_id
        name = self.name
        dedup = self.dedup.add if self._window_ns else None
        sch = self.schedules
        if (not self._leader and dedup is None and not sch.by_subject
                and not any(map(_SCHED, run)) and not any(map(_FLAGS, run))):
            # a follower with no dedup window, schedules or counters: only the results
            return [ApplyResult(op, True, op.seq, None, None, [], name) for op in run]
        applied = self.pending.applied if self._leader else None
        out = []
        append = out.append
        for i, op in enumerate(run):
            seq = op.seq
            if dedup is not None and op.msg_id:
                dedup(op.msg_id, seq, op.ts)
            if op.sched:
                sch.add(op.subject, seq, op.sched)
            elif sch.by_subject:
                sch.remove(op.subject)
            res = ApplyResult(op, True, seq, None, None, [], name)
            if op.flags & F_COUNTER:
                res.val = ack_value(op.data)
            if applied is not None:
                applied(seq)
                if lasts is not None:
                    rp = self._republish_msg(op, lasts[i])
                    if rp is not None:
                        res.republish.append(rp)
            append(res)
        return out

    def _apply_run(self, op: MsgRunOp) -> ApplyResult:
        """Store a run of plain messages in one write; the bookkeeping of :meth:`_stored`
        for each (no flags, schedules or republish: the leader proposes runs only then)."""
        if (op.pid and op.pid == self._bad_pid) or op.seq != self._last_seq + 1:
            return self.reject_stale(op)
        columns = op.raw_columns()
        store_columns = getattr(self.store, "store_raw_columns", None)
        if store_columns is not None:
            store_columns(*columns)
        else:
            for item in zip(*columns):
                self.store.store_raw(*item)
        return self._after_run(op)

    def _after_run(self, op: MsgRunOp) -> ApplyResult:
        """The bookkeeping after the store took a run."""
        last = op.last_seq
        self._last_seq = last
        self._last_ts = op.ts
        self._last_msg_id = op.msg_ids[-1] if op.msg_ids else ""
        if op.msg_ids and self._window_ns:
            add = self.dedup.add
            for seq, msg_id in enumerate(op.msg_ids, op.seq):
                if msg_id:
                    add(msg_id, seq, op.ts)
        if self.schedules.by_subject:
            for subject in op.names:
                self.schedules.remove(subject)
        if self._leader:
            self.pending.applied_run(op.seq)
        return ApplyResult(op, seq=last, stream=self.name, value=op.count)

    def _rp_last(self, op: MsgOp) -> int:
        """Leader with republish: the last seq on the op's subject before it is stored."""
        if self._leader and self._republish is not None and not op.flags & F_NO_INTEREST:
            return self.store.last_seq_for_subject(op.subject)
        return 0

    def _rp_lasts(self, run: list[MsgOp]) -> list[int]:
        """:meth:`_rp_last` of each op of a run, as if they were stored one by one."""
        seen: dict[str, int] = {}
        out = []
        last_for = self.store.last_seq_for_subject
        for op in run:
            last = seen.get(op.subject)
            out.append(last_for(op.subject) if last is None else last)
            seen[op.subject] = op.seq
        return out

    def reject_stale(self, op) -> ApplyResult:
        """Apply: refuse an op whose sequences were projected on a state that is gone."""
        if op.pid:
            self._bad_pid = op.pid
            if self._leader and op.pid == self._pid:
                self._resync()
        seq = getattr(op, "seq", 0)
        err = error_for("STREAM_SEQUENCE_NOT_MATCH",
                        f"expected stream sequence does not match: op for {seq}, "
                        f"last sequence {self._last_seq}")
        return ApplyResult(op, ok=False, error=err, stream=self.name)

    def _stored(self, op: MsgOp, rp_last: int = 0) -> ApplyResult:
        """Bookkeeping after the store took ``op``: dedup, rollup, schedules, acks
        (``rp_last``: the last seq on the subject before ``op``, for republish)."""
        seq = op.seq
        self._last_seq = seq
        self._last_ts = op.ts
        self._last_msg_id = op.msg_id
        flags = op.flags
        if op.msg_id and self._window_ns:
            self.dedup.add(op.msg_id, seq, op.ts)
        if flags & (F_ROLLUP_SUB | F_ROLLUP_ALL):
            keep = 0 if flags & F_NO_INTEREST else 1
            self.store.purge_ex(op.subject if flags & F_ROLLUP_SUB else "", 0, keep)
        sch = self.schedules
        if op.sched:
            sch.add(op.subject, seq, op.sched)
        elif sch.by_subject and not op.scheduler:
            sch.remove(op.subject)
        if op.scheduler:
            if op.sched_next == SCHED_PURGE:
                self.store.purge_ex(op.scheduler)
                sch.remove(op.scheduler)
            else:
                sch.update(op.scheduler, op.sched_next)
        res = ApplyResult(op, seq=seq, stream=self.name)
        if flags & F_COUNTER:
            res.val = ack_value(op.data)
        if self._leader:
            self.pending.applied(seq)
            if self._republish is not None and not flags & F_NO_INTEREST:
                rp = self._republish_msg(op, rp_last)
                if rp is not None:
                    res.republish.append(rp)
        return res

    @property
    def proposer_id(self) -> int:
        """This leadership's id, carried by the ops it proposes (see :meth:`reject_stale`)."""
        return self._pid

    def apply_copied(self, m: MsgOp) -> ApplyResult | None:
        """Apply: store a message copied at its origin's sequence (a mirror), skipping the
        sequences before it; None when the stream already has that sequence."""
        last = self._last_seq
        if m.seq <= last:
            return None
        if m.seq > last + 1:
            self.store.skip_msgs(last + 1, m.seq - last - 1)
            self._last_seq = m.seq - 1
        rp_last = self._rp_last(m)
        self.store.store_raw(m.subject, m.hdr, m.data, m.seq, m.ts, m.ttl)
        return self._stored(m, rp_last)

    def apply_copied_run(self, msgs: list[MsgOp]) -> int:
        """Apply: store plain messages at their own sequences (a restore), consecutive runs
        in one store write, the gaps between them as deleted sequences; how many stored."""
        raw_batch = getattr(self.store, "store_raw_batch", None)
        stored, i = 0, 0
        while i < len(msgs):
            if msgs[i].seq <= self._last_seq:
                i += 1
                continue
            j = i + 1
            while j < len(msgs) and msgs[j].seq == msgs[j - 1].seq + 1:
                j += 1
            run = msgs[i:j]
            if raw_batch is None or len(run) == 1:
                for m in run:
                    self.apply_copied(m)
            else:
                self.skip_to(run[0].seq - 1)
                self._store_run(run, raw_batch)
            stored += len(run)
            i = j
        return stored

    def skip_to(self, last: int) -> None:
        """Apply: record the sequences up to ``last`` as deleted (nothing stored)."""
        if last > self._last_seq:
            self.store.skip_msgs(self._last_seq + 1, last - self._last_seq)
            self._last_seq = last

    def follow_applied(self) -> None:
        """Leader: continue its projection after sequences that apply fixed (a mirror)."""
        if self._leader and self.pending.next_seq <= self._last_seq:
            self.pending.next_seq = self._last_seq + 1
            self.pending.last_ts = max(self.pending.last_ts, self._last_ts)

    def apply_atomic(self, op: BatchOp) -> ApplyResult:
        msgs = op.msgs
        if not msgs or (op.pid and op.pid == self._bad_pid) or msgs[0].seq != self._last_seq + 1:
            return self.reject_stale(op)
        for i, m in enumerate(msgs):
            if m.seq != msgs[0].seq + i:
                return self.reject_stale(op)
        raw_batch = getattr(self.store, "store_raw_batch", None)
        plain = raw_batch is not None and not any(
            m.flags & _RUN_FLAGS or m.scheduler for m in msgs)
        if plain:
            results = self._store_run(list(msgs), raw_batch)
        else:
            results = []
            for m in msgs:
                rp_last = self._rp_last(m)
                if m.flags & F_NO_INTEREST:
                    self.store.skip_msg(m.seq)
                else:
                    self.store.store_raw(m.subject, m.hdr, m.data, m.seq, m.ts, m.ttl)
                results.append(self._stored(m, rp_last))
        last = results[-1]
        res = ApplyResult(op, seq=last.seq, stream=self.name, batch=op.batch_id or None,
                          count=len(msgs), value=[r.seq for r in results])
        for r in results:
            res.republish.extend(r.republish)
        return res

    def _republish_msg(self, op: MsgOp, last: int) -> Republish | None:
        """The republished copy of ``op``; ``last`` is the seq of the subject's previous
        message (Nats-Last-Sequence: the subject's last seq before ``op`` was stored)."""
        try:
            dest = self._republish.match(op.subject)
        except APIError:
            return None
        if not dest:
            return None
        ts = S.format_ns(op.ts)
        extra = (f"Nats-Stream: {self.name}\r\nNats-Subject: {op.subject}\r\n"
                 f"Nats-Sequence: {op.seq}\r\nNats-Time-Stamp: {ts}\r\n"
                 f"Nats-Last-Sequence: {last}\r\n")
        if self._rp_headers_only:
            extra += f"Nats-Msg-Size: {len(op.data)}\r\n"
        base = op.hdr[:-2].decode() if op.hdr else "NATS/1.0\r\n"
        hdr = (base + extra + "\r\n").encode()
        return Republish(dest, hdr, b"" if self._rp_headers_only else op.data)

    def _apply_purge(self, op: PurgeOp) -> ApplyResult:
        if self.config.sealed or self.config.deny_purge:
            err = StreamSealedError() if self.config.sealed else error_for(
                "STREAM_PURGE_FAILED", "stream purge not permitted")
            return ApplyResult(op, ok=False, error=err, value=0)
        if not op.subject and not op.seq and not op.keep:
            n = self.store.purge()
        else:
            n = self.store.purge_ex(op.subject, op.seq, op.keep)
        if self.interest.consumers:
            self.interest.prune(self.store.fast_state().first_seq)
        return ApplyResult(op, value=n)

    def _apply_delete(self, op: DeleteOp) -> ApplyResult:
        if self.config.sealed or self.config.deny_delete:
            err = StreamSealedError() if self.config.sealed else error_for(
                "STREAM_MSG_DELETE_FAILED", "message delete not permitted")
            return ApplyResult(op, ok=False, error=err, value=False)
        ok = self.store.erase_msg(op.seq) if op.erase else self.store.remove_msg(op.seq)
        self.interest.forget(op.seq)
        if not ok:
            return ApplyResult(op, ok=False, value=False, error=self._not_deleted(op.seq))
        return ApplyResult(op, value=True)

    def _apply_config(self, op: UpdateConfigOp) -> ApplyResult:
        cfg = op.stream_config().with_defaults()
        self._set_config(cfg)
        self.store.update_config(updated_store_config(cfg, self.store.config))
        return ApplyResult(op, value=cfg)

    def _apply_ack(self, op: AckOp) -> ApplyResult:
        if not self.interest.removes_on_ack:
            return ApplyResult(op, value=False)
        try:
            msg = self.store.load_msg(op.seq)
        except NotFoundError:
            self.interest.forget(op.seq)
            return ApplyResult(op, value=False)
        if self.interest.ack(op.consumer, op.seq, msg.subject):
            return ApplyResult(op, value=bool(self.store.remove_msg(op.seq)))
        return ApplyResult(op, value=False)

    def _apply_consumer(self, op: ConsumerOp) -> ApplyResult:
        if op.remove:
            return ApplyResult(op, value=self.unregister_consumer(op.name))
        try:
            self.register_consumer(op.name, op.filters, op.start_seq)
        except APIError as err:
            return ApplyResult(op, ok=False, error=err)
        return ApplyResult(op, value=True)

    # -- snapshot / rebuild ------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The engine's own state beyond the store (pair it with the store's snapshot)."""
        return msgpack.packb({
            "v": _SNAP_VERSION, "last_seq": self._last_seq, "last_ts": self._last_ts,
            "last_msg_id": self._last_msg_id, "bad_pid": self._bad_pid,
            "dedup": self.dedup.to_list(), "schedules": self.schedules.to_list(),
            "consumers": self.interest.to_list(), "config": self.config.to_dict(),
            "sources": self.sources.to_list(), "sweep_from": self.sweep_from,
        }, use_bin_type=True)

    def restore(self, snap: bytes) -> None:
        """Load a :meth:`snapshot` taken on another replica (after its store was restored)."""
        doc = msgpack.unpackb(snap, raw=False)
        if doc.get("v") != _SNAP_VERSION:
            raise error_for("STREAM_GENERAL", f"unknown engine snapshot version {doc.get('v')}")
        if doc.get("config"):
            self._set_config(StreamConfig.from_dict(doc["config"]).with_defaults())
        self._last_seq = doc["last_seq"]
        self._last_ts = doc["last_ts"]
        self._last_msg_id = doc["last_msg_id"]
        self._bad_pid = doc["bad_pid"]
        self.dedup = DedupTable.from_list(doc["dedup"])
        self.schedules = S.Schedules.from_list(doc["schedules"])
        self.interest.load(doc["consumers"])
        self.sources = SourcePositions.from_list(doc.get("sources") or [])
        self.sweep_from = doc.get("sweep_from", 0)
        self._markers.clear()
        if self._leader:
            self._resync()

    def rebuild(self) -> None:
        """Recover the engine state from the store after a restart (see :mod:`.recovery`)."""
        r = recover_from_store(self.store, window_ns=self._window_ns,
                               now_ns=self.clock.now_ns(),
                               schedules=self.config.allow_msg_schedules)
        self._last_seq, self._last_ts, self._last_msg_id = r.last_seq, r.last_ts, r.last_msg_id
        self.dedup.clear()
        for msg_id, seq, ts in r.dedup:
            self.dedup.add(msg_id, seq, ts)
        self.schedules = r.schedules
        if self._leader:
            self._resync()


__all__ = ["StreamEngine"]
