"""The stream leader's admission of published messages: every check a message must pass
before it is proposed, then its sequence and timestamp.

A mixin of :class:`~rayjet.engine.stream.StreamEngine`. :meth:`~MessageAdmission.admit`
checks one message against the applied state plus the proposals in flight (the engine's
:class:`~rayjet.engine.pending.Pending`): the subject and its ingest transform, size,
headers (expected-*, dedup, TTL, counters, schedules, rollups) and discard-new limits;
:meth:`~MessageAdmission.assign` then fixes its sequence and timestamp. Publishes, atomic
batches, sourced messages, fired schedules and delete markers all come through here;
batches given as columns go through :mod:`.columnar` first.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from rayjet.api import PubAck
from rayjet.api import headers as H
from rayjet.api.enums import DiscardPolicy
from rayjet.engine import checks as C
from rayjet.engine import schedules as S
from rayjet.engine.batch import Staged, check_batch_id, check_batch_size
from rayjet.engine.counters import counter_payload, counter_value
from rayjet.engine.ops import (
    F_COUNTER,
    F_NO_INTEREST,
    F_ROLLUP_ALL,
    F_ROLLUP_SUB,
    SCHED_PURGE,
    BatchOp,
    MsgOp,
)
from rayjet.errors import (
    DuplicateInProcessError,
    ExpectedStreamMismatchError,
    MessageTooBigError,
    NotFoundError,
    StreamSealedError,
    SubjectNotCapturedError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
    error_for,
)
from rayjet.storage import limits as L
from rayjet.storage.record import record_size
from rayjet.subjects import matches_any, subject_matches, validate_stored_subject

_SUBJECT_CACHE = 4096  # stored subjects remembered per publish subject


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


def header_block(h: Mapping[str, str]) -> bytes:
    """The NATS header block of ``h`` (empty for no headers); refused when too big."""
    if not h:
        return b""
    block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    out = block.encode()
    if len(out) > H.MAX_HEADER_BYTES:
        raise error_for("STREAM_HEADER_TOO_BIG")
    return out


class MessageAdmission:
    """Mixed into :class:`~rayjet.engine.stream.StreamEngine`: the leader's checks of
    published messages and the sequence and timestamp each admitted one gets."""

    def _headers(self, headers) -> tuple[bytes, dict[str, str] | None]:
        if not headers:
            return b"", None
        if isinstance(headers, bytes | bytearray | memoryview):
            hdr = bytes(headers)
            if len(hdr) > H.MAX_HEADER_BYTES:
                raise error_for("STREAM_HEADER_TOO_BIG")
            return hdr, H.decode_headers(hdr)
        h = H.validate_headers(headers)
        return header_block(h), h

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
                hdr = header_block(h)
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


__all__ = ["Admitted", "MessageAdmission", "header_block"]
