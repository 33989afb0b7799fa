"""StreamEngine: the deterministic state machine of one stream replica.

Leader only: ``prepare_*`` check a request against the applied state plus the proposals in
flight, fix the sequence and timestamp, and return an Op to propose (or a duplicate PubAck,
or raise the typed NATS error). Every replica: ``apply``/``apply_batch`` committed ops in log
order. An op whose seq is not ``last_seq + 1`` (proposed on a stale state) is skipped the
same way everywhere, and so is every later op of the same proposer, whose checks assumed it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import NamedTuple

import msgpack

from rayjet.api import PubAck, StreamConfig
from rayjet.api import headers as H
from rayjet.api.enums import DiscardPolicy, RetentionPolicy
from rayjet.api.validate_stream import validate_stream_config, validate_stream_update
from rayjet.clock import NANOS_PER_SECOND, SYSTEM_CLOCK, Clock
from rayjet.engine import checks as C
from rayjet.engine import schedules as S
from rayjet.engine.ack_sync import AckSummary, sync_seqs
from rayjet.engine.batch import Staged, check_batch_id, check_batch_size
from rayjet.engine.columnar import ColumnarPublish
from rayjet.engine.counters import ack_value, counter_payload, counter_value
from rayjet.engine.dedup import DedupTable
from rayjet.engine.interest_sweep import SWEEP_SCAN, apply_sweep, begin_sweep, prepare_sweep
from rayjet.engine.ops import (
    F_COUNTER,
    F_MARKER,
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
from rayjet.engine.results import ApplyResult, ExpireResult, Republish
from rayjet.engine.retention import Interest
from rayjet.engine.sourcing import SourcePositions, apply_source
from rayjet.engine.storeconf import updated_store_config
from rayjet.errors import (
    APIError,
    DuplicateInProcessError,
    ExpectedStreamMismatchError,
    MessageTooBigError,
    NotFoundError,
    NotLeaderError,
    StreamSealedError,
    SubjectNotCapturedError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
    error_for,
)
from rayjet.storage import limits as L
from rayjet.storage.record import record_size
from rayjet.subjects import (
    SubjectTransform,
    matches_any,
    subject_matches,
    validate_stored_subject,
)

_SNAP_VERSION = 1


class Admitted(NamedTuple):
    """A message the leader accepted (:meth:`StreamEngine.admit`), before it has a sequence
    and a timestamp (:meth:`StreamEngine.assign`)."""

    subject: str
    hdr: bytes
    data: bytes
    ttl: int
    msg_id: str
    flags: int
    sched: int
    scheduler: str
    size: int
    counter: int | None
    sched_next: int


# builds an Admitted from a tuple without NamedTuple's argument handling (once per message)
_admitted = functools.partial(tuple.__new__, Admitted)
_SUBJECT_CACHE = 4096
_RUN_FLAGS = F_ROLLUP_SUB | F_ROLLUP_ALL | F_NO_INTEREST
# a MsgOp as a store_raw_batch item: (subject, hdr, data, seq, ts, ttl)
_RAW_FIELDS = attrgetter("subject", "hdr", "data", "seq", "ts", "ttl")
_SCHED = attrgetter("sched")
_FLAGS = attrgetter("flags")


def _encode(h: Mapping[str, str]) -> bytes:
    if not h:
        return b""
    block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    out = block.encode()
    if len(out) > H.MAX_HEADER_BYTES:
        raise error_for("STREAM_HEADER_TOO_BIG")
    return out


SYNC_SCAN = 16_384  # messages one reconciliation step looks at


class StreamEngine(ColumnarPublish):
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

    # -- publish -------------------------------------------------------------------------------
    def _headers(self, headers) -> tuple[bytes, dict[str, str] | None]:
        if not headers:
            return b"", None
        if isinstance(headers, bytes | bytearray | memoryview):
            hdr = bytes(headers)
            if len(hdr) > H.MAX_HEADER_BYTES:
                raise error_for("STREAM_HEADER_TOO_BIG")
            return hdr, H.decode_headers(hdr)
        h = H.validate_headers(headers)
        return _encode(h), h

    def _subject(self, subject: str) -> str:
        """The stored subject of a publish to ``subject`` (ingest transform applied)."""
        out = self._subject_cache.get(subject)
        if out is not None:
            return out
        # the client refuses wildcard tokens unless told to store them (see publish_batch)
        validate_stored_subject(subject)
        if not matches_any(subject, self._subjects):
            raise SubjectNotCapturedError(
                f"subject {subject!r} is not captured by stream {self.name!r} "
                f"(subjects: {', '.join(self._subjects)})")
        out = subject
        if self._transform is not None:
            out = self._transform.match(subject) or subject
        if len(self._subject_cache) >= _SUBJECT_CACHE:
            self._subject_cache.clear()
        self._subject_cache[subject] = out
        return out

    def _sourced_subject(self, subject: str) -> str:
        """The stored subject of a sourced message (ingest transform applied)."""
        if self._transform is not None:
            return self._transform.match(subject) or subject
        return subject

    def _refuse_writes(self) -> None:
        if self.config.sealed:
            raise StreamSealedError()
        if self.config.mirror is not None:
            raise error_for("MIRROR_DIRECT_PUBLISH")

    def prepare_publish(self, subject: str, data: bytes = b"",
                        headers: Mapping[str, str] | bytes | None = None) -> MsgOp | PubAck:
        """The op storing one published message, or the PubAck of the stored duplicate."""
        self.require_leader()
        self._refuse_writes()
        hdr, h = self._headers(headers)
        out = self.admit(subject, data or b"", hdr, h, None)
        if isinstance(out, PubAck):
            return out
        return self.assign(out)

    def prepare_batch(self, msgs: Iterable, batch_id: str = "") -> BatchOp:
        """One op storing all of ``msgs`` ((subject, data[, headers]) items) or none."""
        self.require_leader()
        self._refuse_writes()
        if not self.config.allow_atomic_publish:
            raise error_for("ATOMIC_PUBLISH_DISABLED")
        if batch_id:
            check_batch_id(batch_id)
        items = list(msgs)
        check_batch_size(len(items))
        stage = Staged()
        checked = []
        for item in items:
            subject, data = item[0], item[1] or b""
            hdr, h = self._headers(item[2] if len(item) > 2 else None)
            if h and H.EXPECTED_LAST_MSG_ID in h:
                raise error_for("ATOMIC_PUBLISH_UNSUPPORTED_HEADER", header=H.EXPECTED_LAST_MSG_ID)
            c = self.admit(subject, data, hdr, h, stage)
            stage.add(c.subject, c.size, c.msg_id, c.counter)
            checked.append(c)
        return BatchOp(batch_id, tuple(self.assign(c) for c in checked), self._pid)

    def admit(self, subject: str, data: bytes, hdr: bytes, h: dict[str, str] | None,
              stage: Staged | None, sourced: bool = False) -> Admitted | PubAck:
        """Leader: every refusal of one message (raised as its typed error); the admitted
        message, or the PubAck of the stored duplicate. ``sourced``: copied from an origin
        stream (need not match the stream's subjects)."""
        cfg = self.config
        subject = self._sourced_subject(subject) if sourced else self._subject(subject)
        if self._max_size and len(hdr) + len(data) > self._max_size:
            raise MessageTooBigError()
        pending = self.pending
        ttl, msg_id, flags, sched, scheduler, sched_next, counter = 0, "", 0, 0, "", 0, None
        dirty = False
        if h:
            incr = C.check_incr(h, data, cfg.allow_msg_counter)
            expected = h.get(H.EXPECTED_STREAM)
            if expected and expected != self.name:
                raise ExpectedStreamMismatchError()
            ttl = C.check_ttl(h, cfg.allow_msg_ttl)
            msg_id = h.get(H.MSG_ID, "")
            if msg_id and self._window_ns:
                if stage is not None and msg_id in stage.ids:
                    raise error_for("ATOMIC_PUBLISH_DUPLICATE")
                seq = self.dedup.get(msg_id, self.clock.now_ns(), self._window_ns)
                if seq:
                    if stage is not None:
                        raise error_for("ATOMIC_PUBLISH_DUPLICATE")
                    return PubAck(stream=self.name, seq=seq, duplicate=True)
                if msg_id in pending.ids:
                    raise DuplicateInProcessError()
            if h.get(H.STREAM_SOURCE) and not sourced:
                raise error_for("MESSAGE_SOURCE_HDR_NOT_ALLOWED")
        else:
            incr = None
        if incr is None and cfg.allow_msg_counter:
            raise error_for("MESSAGE_INCR_MISSING")
        if incr is not None:
            counter = self._counter_base(subject, stage) + incr
            data = counter_payload(counter)
            flags |= F_COUNTER
            if self._max_size and len(hdr) + len(data) > self._max_size:
                raise MessageTooBigError()
        if h:
            self._check_expected(h, subject, stage)
            sched = C.check_schedule(h, subject, self._subjects, cfg.allow_msg_schedules,
                                     cfg.allow_msg_ttl, self.clock.now_ns())
            dirty = bool(sched)
            scheduler = C.check_scheduler(h, subject, cfg.allow_msg_schedules,
                                          self._is_schedule_subject)
            if scheduler:
                sched_next = SCHED_PURGE
            flags |= C.rollup_flags(h, cfg.allow_rollup_hdrs, cfg.deny_purge)
            if flags & (F_ROLLUP_SUB | F_ROLLUP_ALL) and stage is not None:
                if flags & F_ROLLUP_ALL and not stage.first:
                    raise error_for("STREAM_ROLLUP_FAILED", "batch rollup all invalid")
                if flags & F_ROLLUP_SUB and subject in stage.subjects:
                    raise error_for("STREAM_ROLLUP_FAILED", "batch rollup sub invalid")
            last_id = h.get(H.EXPECTED_LAST_MSG_ID)
            if last_id and last_id != pending.last_msg_id:
                raise WrongLastMsgIdError(id=pending.last_msg_id)
            if ttl > 0 and self._sdm_ttl and cfg.max_msgs_per_subject != 1 and ttl < self._sdm_ttl:
                # a marker must outlive the messages it stands for
                ttl = self._sdm_ttl
                h[H.TTL] = str(ttl)
                dirty = True
            if dirty:
                hdr = _encode(h)
        size = record_size(len(subject.encode()), len(hdr), len(data))
        if cfg.discard is DiscardPolicy.NEW:
            self._check_discard_new(subject, size, flags, stage)
        if self._interest_ret and not self.interest.has_interest(subject):
            flags |= F_NO_INTEREST
        return _admitted((subject, hdr, data, ttl, msg_id, flags, sched, scheduler, size,
                          counter, sched_next))

    def assign(self, a: Admitted) -> MsgOp:
        """Leader: the op storing an admitted message at the next sequence and timestamp."""
        pending = self.pending
        seq = pending.next_seq
        pending.next_seq = seq + 1
        ts = self.clock.now_ns()
        if ts <= pending.last_ts:
            ts = pending.last_ts  # never let time run backwards inside the stream
        pending.last_ts = ts
        pending.add(seq, a.subject, a.size, a.msg_id, a.counter, bool(a.sched))
        return MsgOp(seq, ts, a.subject, a.hdr, a.data, a.ttl, a.msg_id, a.flags, a.sched,
                     a.scheduler, a.sched_next, self._pid)

    def _counter_base(self, subject: str, stage: Staged | None) -> int:
        if stage is not None and subject in stage.counters:
            return stage.counters[subject]
        sp = self.pending.subjects.get(subject)
        if sp is not None and sp.counter is not None:
            return sp.counter
        try:
            last = self.store.load_last_msg(subject)
        except NotFoundError:
            return 0
        return counter_value(last.data)

    def _check_expected(self, h: dict[str, str], subject: str, stage: Staged | None) -> None:
        pending = self.pending
        seq = C.int_header(h, H.EXPECTED_LAST_SEQ)
        if seq is not None:
            if stage is not None and not stage.first:
                raise error_for("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
            if seq != pending.next_seq - 1:
                raise WrongLastSequenceError(seq=pending.next_seq - 1)
        seq = C.int_header(h, H.EXPECTED_LAST_SUBJECT_SEQ)
        override = h.get(H.EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, "")
        if seq is None:
            if override:
                raise error_for("STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID")
            return
        target = override or subject
        if stage is not None and any(subject_matches(s, target) for s in stage.subjects):
            raise error_for("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
        sp = pending.subjects.get(target)
        if sp is not None:
            last = sp.last_seq  # pipelined: the last proposal on the subject
        elif override and any(subject_matches(s, target) for s in pending.subjects):
            raise error_for("STREAM_WRONG_LAST_SEQUENCE_CONSTANT")
        else:
            last = self.store.last_seq_for_subject(target)
        if last != seq:
            raise WrongLastSequenceError(seq=last)

    def _check_discard_new(self, subject: str, size: int, flags: int,
                           stage: Staged | None) -> None:
        cfg, pending = self.config, self.pending
        staged_msgs = stage.msgs if stage is not None else 0
        staged_bytes = stage.bytes if stage is not None else 0
        if cfg.max_msgs > 0 or cfg.max_bytes > 0:
            st = self.store.fast_state()
            if cfg.max_msgs > 0 and st.msgs + pending.msgs + staged_msgs + 1 > cfg.max_msgs:
                raise L.limit_error(L.MAX_MSGS)
            if cfg.max_bytes > 0 and st.bytes + pending.bytes + staged_bytes + size > cfg.max_bytes:
                raise L.limit_error(L.MAX_BYTES)
        per = cfg.max_msgs_per_subject
        if cfg.discard_new_per_subject and per > 0 and not flags & (F_ROLLUP_SUB | F_ROLLUP_ALL):
            count = self.store.subjects_totals(subject).get(subject, 0)
            sp = pending.subjects.get(subject)
            count += sp.ops if sp is not None else 0
            count += stage.subjects.get(subject, 0) if stage is not None else 0
            if count + 1 > per:
                raise L.limit_error(L.MAX_MSGS_PER_SUBJECT)

    def _is_schedule_subject(self, subject: str) -> bool:
        """Whether ``subject`` holds a schedule (or nothing): Nats-Schedule-Next purge targets."""
        sp = self.pending.subjects.get(subject)
        if sp is not None:
            return sp.schedule
        if subject in self.schedules.by_subject:
            return True
        try:
            last = self.store.load_last_msg(subject)
        except NotFoundError:
            return True
        return bool(last.hdr) and L.header_value(last.hdr, S.SCHEDULE) is not None

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
    def proposer_id(self) -> str:
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

    # -- upkeep ----------------------------------------------------------------------------------
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
                hdr = _encode(fh)
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
