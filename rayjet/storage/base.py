"""Logic shared by MemStore and FileStore: sequences, limits, TTLs, queries.

Subclasses keep the message bodies (a list in RAM, or block files) and implement the
``_persist_*``/``_read``/``_commit`` hooks; everything a replica must agree on (which seq is
live, what limits remove) lives here once, so both stores behave the same.

A store is not thread-safe: its owner (the replica actor) serialises calls.

Time: the store never starts a timer. ``expire(now)`` removes what max_age and per-message
TTLs say is due; every write calls it first with the injected clock's time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from itertools import chain
from operator import add as _plus

import pyarrow as pa

from rayjet.api.enums import DiscardPolicy
from rayjet.api.headers import TTL
from rayjet.clock import NANOS_PER_SECOND, SYSTEM_CLOCK, Clock
from rayjet.errors import (
    APIError,
    InvalidConfigError,
    StoreFailedError,
    error_for,
)
from rayjet.storage import columns
from rayjet.storage import limits as lim
from rayjet.storage import record as rec
from rayjet.storage.config import StoreConfig
from rayjet.storage.copying import Copying
from rayjet.storage.index import Index
from rayjet.storage.lost import LostSeqs, lost_error
from rayjet.storage.protocol import BatchItem, RawItem, StoredMsg, StoreState
from rayjet.subjects import validate_filter, validate_stored_subject

_add30 = (30).__add__  # record size of a message without headers: 30 + subject + payload


def _not_found(what: str = "no message found") -> Exception:
    return error_for("NO_MESSAGE_FOUND", what)


class BaseStore(Copying):
    _aux_kinds: tuple[str | None, ...] = ()

    def __init__(self, config: StoreConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SYSTEM_CLOCK
        self._idx = Index(self._aux_kinds)
        self._removed: list[int] = []  # seqs removed since the last commit
        self._ttl_heap: list[tuple[int, int]] = []
        self._ttl_exp: dict[int, int] = {}
        self._never: set[int] = set()
        self._closed = False
        # stored seqs lost to damage (FileStore): not live, and never answered as deleted
        self._lost = LostSeqs()
        self.marker_handler = None  # callable(subject, hdr) replacing the local marker write
        # erases and purges so far: a log holding copies of the payloads reads it to know
        # when to drop them
        self.scrubs = 0
        self._apply_config(config)

    # -- config ------------------------------------------------------------------------------
    def _apply_config(self, cfg: StoreConfig) -> None:
        self.config = cfg
        self._max_msgs = cfg.limit("max_msgs")
        self._max_bytes = cfg.limit("max_bytes")
        self._max_per = cfg.limit("max_msgs_per_subject")
        self._max_size = cfg.limit("max_msg_size")
        self._max_age_ns = int(cfg.max_age * NANOS_PER_SECOND)
        self._sdm_ttl = int(cfg.subject_delete_marker_ttl)
        self._discard_new = cfg.discard is DiscardPolicy.NEW
        self._discard_old = not self._discard_new
        self._ttl_headers = cfg.allow_msg_ttl or self._sdm_ttl > 0

    def update_config(self, cfg: StoreConfig) -> None:
        self._check_open()
        if cfg.storage is not self.config.storage:
            raise InvalidConfigError("the storage type of a stream cannot change")
        self._apply_config(cfg)
        self._enforce_per_subject_all()
        self._enforce_limits()
        self.expire()
        self._commit()

    # -- helpers -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StoreFailedError(spec="STREAM_STORE_FAILED", description="store is closed")

    def _ttl_of(self, hdr: bytes, ttl: int) -> int:
        if ttl or not hdr:
            return ttl
        return lim.parse_ttl(lim.header_value(hdr, TTL))

    def _track_ttl(self, seq: int, ts: int, ttl: int) -> None:
        if ttl > 0 and self._ttl_headers:
            exp = ts + ttl * NANOS_PER_SECOND
            self._ttl_exp[seq] = exp
            heapq.heappush(self._ttl_heap, (exp, seq))
        elif ttl < 0:
            self._never.add(seq)

    def _unindex(self, seq: int) -> tuple[str, int] | None:
        out = self._idx.remove(seq)
        if out is not None:
            self._removed.append(seq)
            if self._ttl_exp:
                self._ttl_exp.pop(seq, None)
            if self._never:
                self._never.discard(seq)
        return out

    # -- writes ------------------------------------------------------------------------------
    def _check_new(self, subject: str, hdr: bytes, data: bytes) -> None:
        """Refusals made once, on the leader (discard new, message size)."""
        if self._max_size and len(hdr) + len(data) > self._max_size:
            raise lim.too_big(len(hdr) + len(data), self._max_size)
        if not self._discard_new:
            return
        idx = self._idx
        at_subject_limit = False
        if self._max_per:
            sid = idx.subj_ids.get(subject)
            at_subject_limit = sid is not None and idx.subj_seqs[sid].count() >= self._max_per
            if at_subject_limit and self.config.discard_new_per_subject:
                raise lim.limit_error(lim.MAX_MSGS_PER_SUBJECT)
        if self._max_msgs and idx.msgs >= self._max_msgs and not at_subject_limit:
            raise lim.limit_error(lim.MAX_MSGS)
        if self._max_bytes:
            size = rec.record_size(len(subject.encode()), len(hdr), len(data))
            if idx.bytes + size > self._max_bytes:
                if not at_subject_limit:
                    raise lim.limit_error(lim.MAX_BYTES)
                first = idx.subj_seqs[idx.subj_ids[subject]].first()
                if idx.size[first - idx.base] < size:
                    raise lim.limit_error(lim.MAX_BYTES)

    def store_msg(self, subject: str, hdr: bytes, data: bytes, ttl: int = 0) -> tuple[int, int]:
        """Store with the next seq and the clock's time; ``ttl`` is seconds (-1 = never,
        0 = take it from a Nats-TTL header if there is one)."""
        return self.store_batch(((subject, hdr, data, ttl),))[0]

    def store_batch(self, msgs: Iterable[BatchItem]) -> list[tuple[int, int]]:
        """Store many messages with one write; with sync 'always', one fsync for the batch.

        Each message is checked in turn; a refused one stops the batch after storing those
        before it and raises.
        """
        self._check_open()
        now = self.clock.now_ns()
        self._expire_if_due(now)
        out: list[tuple[int, int]] = []
        items = []
        seq = self._idx.last
        known = self._idx.subj_ids
        check = self._max_size or self._discard_new
        try:
            for item in msgs:
                subject, hdr, data = item[0], item[1] or b"", item[2] or b""
                if subject not in known:
                    validate_stored_subject(subject)
                if check:
                    self._check_new(subject, hdr, data)
                seq += 1
                items.append((seq, now, subject, hdr, data, item[3] if len(item) > 3 else 0))
                out.append((seq, now))
                if self._discard_new:
                    # later items must see this one when checking limits
                    self._add(items)
                    items = []
        finally:
            if items:
                self._add(items)
            self._commit()
        return out

    def store_raw(self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int,
                  ttl: int = 0, discard_new_check: bool = False) -> None:
        """Store a record with the seq and ts the leader chose; seq must be above last_seq
        (a gap is recorded as deleted seqs)."""
        self._check_open()
        hdr, data = hdr or b"", data or b""
        if subject not in self._idx.subj_ids:
            validate_stored_subject(subject)
        if seq <= self._idx.last:
            raise self._seq_error(seq)
        if discard_new_check:
            self._check_new(subject, hdr, data)
        self._expire_if_due(self.clock.now_ns())
        try:
            if seq <= self._idx.last:  # a local subject delete marker took the seq
                raise self._seq_error(seq)
            self._add_cols((seq,), (ts,), (subject,), (hdr,), (data,), (ttl,))
        finally:
            self._commit()

    def _seq_error(self, seq: int) -> Exception:
        return error_for("STREAM_SEQUENCE_NOT_MATCH",
                         f"sequence {seq} is not above the last sequence {self._idx.last}")

    def store_raw_batch(self, items: Sequence[RawItem], discard_new_check: bool = False) -> None:
        """:meth:`store_raw` for many records ``(subject, hdr, data, seq, ts, ttl)`` whose
        seqs are consecutive and above last_seq, with one write and (sync 'always') one fsync.

        The outcome is the one of calling :meth:`store_raw` for each item in turn at the
        clock's current time: limits, per-subject limits, TTLs, max_age and (with
        ``discard_new_check``) discard-new refusals apply per message; a refused item stops
        the batch after storing those before it and raises.
        """
        self._check_open()
        if not isinstance(items, list | tuple):
            items = list(items)
        if not items:
            return
        subjects, hdrs, datas, seqs, tss, ttls = zip(*items)
        self.store_raw_columns(subjects, hdrs, datas, seqs, tss, ttls, discard_new_check)

    def store_raw_columns(self, subjects: Sequence[str], hdrs: Sequence[bytes],
                          datas: Sequence[bytes], seqs: Sequence[int], tss: Sequence[int],
                          ttls: Sequence[int], discard_new_check: bool = False) -> None:
        """:meth:`store_raw_batch` with the records given as columns of equal length."""
        self._check_open()
        if not seqs:
            return
        idx = self._idx
        first = seqs[0]
        n = len(seqs)
        known = idx.subj_ids
        if (first <= idx.last or (n > 1 and seqs[-1] - first != n - 1)
                or (type(seqs) is not range and tuple(seqs) != tuple(range(first, first + n)))
                or None in hdrs or None in datas or not self._valid_subjects(subjects, known)):
            # out of order, empty bodies or a bad subject: store_raw raises at the right item
            for item in zip(subjects, hdrs, datas, seqs, tss, ttls):
                self.store_raw(*item, discard_new_check=discard_new_check)
            return
        check = discard_new_check and bool(self._max_size or self._discard_new)
        now = self.clock.now_ns()
        self._expire_if_due(now)
        try:
            if first <= idx.last:  # a local subject delete marker took the seq
                raise self._seq_error(first)
            if check or self._stepwise(tss, hdrs, ttls, now):
                self._add_stepwise(seqs, tss, subjects, hdrs, datas, ttls, now, check)
            else:
                self._add_cols(seqs, tss, subjects, hdrs, datas, ttls)
        finally:
            self._commit()

    @staticmethod
    def _valid_subjects(subjects: tuple[str, ...], known: dict[str, int]) -> bool:
        try:
            new = set(subjects).difference(known)
            for subject in new:
                validate_stored_subject(subject)
        except (APIError, TypeError):
            return False
        return True

    def _stepwise(self, tss, hdrs, ttls, now: int) -> bool:
        """Whether one :meth:`_add` of the whole batch could end differently from adding the
        messages one at a time: some message is due for expiry at ``now`` (it would go
        before the next one arrives), or limits by bytes and per subject interact (a message
        a later one replaces on its subject may have pushed older ones out by size)."""
        if self._max_per and self._max_bytes and self._discard_old:
            return True
        if self._max_age_ns and min(tss) <= now - self._max_age_ns:
            return True
        if self._ttl_headers and (any(ttls) or any(hdrs)):
            for ts, hdr, ttl in zip(tss, hdrs, ttls):
                if not ttl and hdr and b"Nats-TTL" in hdr:
                    ttl = self._ttl_of(hdr, 0)
                if ttl > 0 and ts + ttl * NANOS_PER_SECOND <= now:
                    return True
        return False

    def _add_stepwise(self, seqs, tss, subjects, hdrs, datas, ttls, now: int,
                      check: bool) -> None:
        """Add the messages one at a time, as separate :meth:`store_raw` calls would, but
        leave the write (and fsync) to the caller's single commit."""
        idx = self._idx
        for seq, ts, subject, hdr, data, ttl in zip(seqs, tss, subjects, hdrs, datas, ttls):
            if check:
                self._check_new(subject, hdr, data)
            self._expire_if_due(now)
            if seq <= idx.last:  # a local subject delete marker took the seq
                raise self._seq_error(seq)
            self._add_cols((seq,), (ts,), (subject,), (hdr,), (data,), (ttl,))

    def _add(self, items: list[tuple]) -> None:
        """Persist and index consecutive messages (seq, ts, subject, hdr, data, ttl), then
        enforce limits (discard old)."""
        self._add_cols(*zip(*items))

    def _add_cols(self, seqs, tss, subjects, hdrs, datas, ttls) -> None:
        """:meth:`_add` with the messages given as columns (sequences of equal length)."""
        cols = self._persist_cols(seqs, tss, subjects, hdrs, datas)
        if all(map(str.isascii, subjects)):
            slens = map(len, subjects)
        else:
            slens = (len(s.encode()) for s in subjects)
        if any(hdrs):
            sizes = [30 + sl + len(d) + (4 + len(h) if h else 0)
                     for sl, h, d in zip(slens, hdrs, datas)]
        else:
            sizes = list(map(_add30, map(_plus, slens, map(len, datas))))
        idx = self._idx
        idx.add_many(seqs, tss, subjects, sizes, cols)
        if any(ttls) or any(hdrs):
            for seq, ts, hdr, ttl in zip(seqs, tss, hdrs, ttls):
                if not ttl and hdr and b"Nats-TTL" in hdr:
                    ttl = self._ttl_of(hdr, 0)
                if ttl:
                    self._track_ttl(seq, ts, ttl)
        max_per = self._max_per
        if max_per:
            ids, per = idx.subj_ids, idx.subj_seqs
            for subject in (dict.fromkeys(subjects) if len(subjects) > 1 else subjects):
                ss = per[ids[subject]]
                while len(ss.seqs) - ss.head > max_per:
                    self._unindex(ss.seqs[ss.head])
        if self._discard_old and (self._max_msgs or self._max_bytes):
            self._enforce_limits()

    def _enforce_limits(self) -> None:
        if not self._discard_old:
            return
        idx = self._idx
        before = idx.first
        if self._max_msgs:
            while idx.msgs > self._max_msgs:
                self._unindex(idx.first)
        if self._max_bytes:
            while idx.bytes > self._max_bytes and idx.msgs:
                self._unindex(idx.first)
        if self._lost and idx.first != before:
            self._lost.drop_range(0, idx.first - 1)  # the limit removed them anyway

    def _enforce_per_subject_all(self) -> None:
        if not self._max_per:
            return
        for ss in list(self._idx.subj_seqs):
            while ss is not None and ss.head < len(ss.seqs) and ss.count() > self._max_per:
                self._unindex(ss.first())

    def skip_msg(self, seq: int = 0) -> int:
        self._check_open()
        seq = self._next_seq(seq)
        self._idx.skip(seq, 1)
        self._persist_skip(seq, 1)
        self._commit()
        return seq

    def skip_msgs(self, seq: int, num: int) -> None:
        self._check_open()
        if num <= 0:
            return
        seq = self._next_seq(seq)
        self._idx.skip(seq, num)
        self._persist_skip(seq, num)
        self._commit()

    def _next_seq(self, seq: int) -> int:
        expected = self._idx.last + 1
        if seq and seq != expected:
            raise error_for("STREAM_SEQUENCE_NOT_MATCH",
                            f"expected sequence {expected}, not {seq}")
        return expected

    # -- expiry ------------------------------------------------------------------------------
    def _expire_if_due(self, now: int) -> None:
        idx = self._idx
        if (self._max_age_ns and idx.msgs and idx.ts[idx.first - idx.base] <= now - self._max_age_ns) \
                or (self._ttl_heap and self._ttl_heap[0][0] <= now):
            self._expire(now)

    def expire(self, now_ns: int | None = None) -> int:
        """Remove messages past max_age or their TTL at ``now_ns`` (default: the clock)."""
        self._check_open()
        n = self._expire(self.clock.now_ns() if now_ns is None else now_ns)
        self._commit()
        return n

    def next_expiry_ns(self) -> int | None:
        """When the oldest message reaches max_age or the next TTL ends (ns), None when no
        message will expire: an idle stream's upkeep sleeps until then. Never late; early
        when a TTL was cut short by a removal."""
        idx = self._idx
        due = self._ttl_heap[0][0] if self._ttl_heap else None
        if self._max_age_ns and idx.msgs:
            aged = idx.ts[idx.first - idx.base] + self._max_age_ns
            due = aged if due is None else min(due, aged)
        return due

    def _expire(self, now: int) -> int:
        idx = self._idx
        markers: list[str] = []
        removed = 0
        if self._max_age_ns and idx.msgs:
            cutoff = now - self._max_age_ns
            seq = idx.first
            while seq and idx.ts[seq - idx.base] <= cutoff:
                nxt = idx.next_live(seq + 1)
                if seq not in self._never:
                    removed += self._expire_one(seq, markers)
                seq = nxt if idx.msgs else 0
        heap = self._ttl_heap
        while heap and heap[0][0] <= now:
            exp, seq = heapq.heappop(heap)
            if self._ttl_exp.get(seq) == exp:
                removed += self._expire_one(seq, markers)
        for subject in markers:
            hdr = lim.marker_header(self._sdm_ttl)
            if self.marker_handler is not None:
                self.marker_handler(subject, hdr)
            else:
                seq = idx.last + 1
                self._add_cols((seq,), (now,), (subject,), (hdr,), (b"",), (self._sdm_ttl,))
        return removed

    def _expire_one(self, seq: int, markers: list[str]) -> int:
        idx = self._idx
        if self._sdm_ttl:
            subject = idx.subject_of(seq)
            if idx.subj_seqs[idx.subj_ids[subject]].count() == 1 \
                    and not lim.is_marker(self._read(seq).hdr):
                markers.append(subject)
        return 1 if self._unindex(seq) is not None else 0

    # -- reads -------------------------------------------------------------------------------
    def load_msg(self, seq: int) -> StoredMsg:
        self._check_open()
        if not self._idx.live(seq):
            if self._lost and seq in self._lost:
                raise lost_error(seq)
            raise _not_found(f"no message found at sequence {seq}")
        return self._read(seq)

    def _no_lost_in(self, lo: int, hi: int) -> None:
        """Raise for a seq lost to damage in ``lo..hi``: a read must not pass over it as if
        the message had been deleted (whether it matched the read's filter is unknown)."""
        seq = self._lost.first_in(lo, hi)
        if seq:
            raise lost_error(seq)

    def load_next_msg(self, filter: str = ">", wildcard: bool = True,
                      start_seq: int = 0) -> tuple[StoredMsg, int]:
        """The first message at or after ``start_seq`` matching ``filter`` and its seq
        (``wildcard`` is accepted for parity with nats-server; the filter's tokens decide)."""
        self._check_open()
        seq = self._idx.next_match(filter, start_seq)
        if self._lost:
            self._no_lost_in(start_seq, seq - 1 if seq else self._idx.last)
        if not seq:
            raise _not_found()
        return self._read(seq), seq

    def read_columns(self, start_seq: int, end_seq: int, filter: str = ">",
                     max_msgs: int = 10_000, max_bytes: int = 8 << 20
                     ) -> tuple[pa.RecordBatch, int]:
        """The messages with ``start_seq <= seq <= end_seq`` matching ``filter``, in order,
        as Arrow columns (:data:`rayjet.storage.columns.SCHEMA`): at most ``max_msgs``, and
        about ``max_bytes`` of records (one at least). Also the seq to go on from, 0 when
        nothing is left up to ``end_seq``."""
        self._check_open()
        seqs = self._idx.live_seqs(start_seq, end_seq, filter, max_msgs, max_bytes)
        end = min(end_seq, self._idx.last)
        bad = self._lost.first_in(start_seq, end) if self._lost else 0
        if bad:
            # the page ends before a lost seq; the read that starts at it raises
            seqs = seqs[seqs < bad]
            if not len(seqs):
                raise lost_error(bad)
            nxt = int(seqs[-1]) + 1
            more = self._idx.next_match(filter, nxt)
            return self._read_columns(seqs), (nxt if more and more < bad else bad)
        if not len(seqs):
            return columns.empty(), 0
        nxt = int(seqs[-1]) + 1
        return self._read_columns(seqs), (nxt if nxt <= end else 0)

    def _read_columns(self, seqs) -> pa.RecordBatch:
        msgs = [self._read(seq) for seq in seqs.tolist()]
        return columns.from_rows([m.seq for m in msgs], [m.ts for m in msgs],
                                 [m.subject for m in msgs], [m.hdr for m in msgs],
                                 [m.data for m in msgs])

    def load_prev_msg(self, start_seq: int, filter: str = ">",
                      wildcard: bool = True) -> tuple[StoredMsg, int]:
        self._check_open()
        seq = self._idx.prev_match(filter, start_seq)
        if self._lost:
            self._no_lost_in(seq + 1, min(start_seq, self._idx.last))
        if not seq:
            raise _not_found()
        return self._read(seq), seq

    def load_last_msg(self, subject: str = ">") -> StoredMsg:
        self._check_open()
        if subject and subject != ">":
            validate_filter(subject)
        seq = self._idx.last_match(subject)
        if self._lost:
            self._no_lost_in(seq + 1, self._idx.last)
        if not seq:
            raise _not_found(f"no message found for subject {subject!r}")
        return self._read(seq)

    def last_seq_for_subject(self, subject: str) -> int:
        """The seq of the last message on ``subject`` (a subject or filter, '>' for any),
        0 when there is none: :meth:`load_last_msg` without reading the message."""
        self._check_open()
        if subject and subject != ">":
            validate_filter(subject)
        seq = self._idx.last_match(subject)
        if self._lost:
            self._no_lost_in(seq + 1, self._idx.last)
        return seq

    # -- deletes -----------------------------------------------------------------------------
    def remove_msg(self, seq: int) -> bool:
        """Remove a message; a seq lost to damage is then deleted (no longer lost)."""
        self._check_open()
        ok = self._unindex(seq) is not None or self._delete_lost(seq)
        self._commit()
        return ok

    def _delete_lost(self, seq: int) -> bool:
        if self._lost and self._lost.discard(seq):
            self._removed.append(seq)  # a delete record, so it stays deleted
            return True
        return False

    def erase_msg(self, seq: int) -> bool:
        """Overwrite the message's bytes with random data, then remove it (a seq lost to
        damage is deleted as :meth:`remove_msg` does)."""
        self._check_open()
        if not self._idx.live(seq):
            ok = self._delete_lost(seq)
            self._commit()
            return ok
        self._erase(seq)
        self._unindex(seq)
        self._commit()
        self.scrubs += 1
        return True

    def purge(self) -> int:
        self._check_open()
        self.scrubs += 1
        return self._compact(self._idx.last + 1)

    def purge_ex(self, subject: str = "", seq: int = 0, keep: int = 0) -> int:
        """NATS PurgeEx: messages on ``subject`` (a filter) below ``seq`` (0 = all), keeping
        the newest ``keep``."""
        self._check_open()
        self.scrubs += 1
        if seq == 1:
            return 0
        if not subject or subject == ">":
            if keep == 0 and seq == 0:
                return self.purge()
            if seq > 1:
                return self._compact(seq)
            subject = ">"
        validate_filter(subject)
        subjects = self._idx.matching(subject)
        seqs = sorted(chain.from_iterable(ss.seqs[ss.head:] for ss in subjects))
        if keep:
            if keep >= len(seqs):
                return 0
            seqs = seqs[:len(seqs) - keep]
        if seq:
            seqs = [s for s in seqs if s < seq]
        for s in seqs:
            self._unindex(s)
        self._commit()
        return len(seqs)

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq`` (0 = purge); the next first_seq is ``seq``."""
        self._check_open()
        if seq == 0:
            return self.purge()
        if self._idx.first > seq:
            return 0
        return self._compact(seq)

    def _compact(self, seq: int) -> int:
        if self._lost:
            self._lost.drop_range(0, seq - 1)
        removed = self._idx.remove_below(seq)
        for s, _subj, _size in removed:
            self._removed.append(s)
            self._ttl_exp.pop(s, None)
            self._never.discard(s)
        self._on_compact(seq)
        self._commit()
        return len(removed)

    def truncate(self, seq: int) -> None:
        """Drop every message after ``seq`` (raft log repair); last_seq becomes ``seq``.

        Seqs above ``seq`` lost to damage are forgotten with the rest; those at or below it
        stay lost (``first_damaged_seq() - 1`` as ``seq`` leaves a store with no damage)."""
        self._check_open()
        idx = self._idx
        if seq >= idx.last:
            return
        self._lost.drop_range(seq + 1, idx.last)
        if seq == 0:
            idx.reset(1, 0, 0)
            self._ttl_heap.clear()
            self._ttl_exp.clear()
            self._never.clear()
            self._removed.clear()
            self._on_truncate(0)
            self._commit()
            return
        last_ts = idx.ts[seq - idx.base] if idx.live(seq) else None
        removed = idx.truncate(seq, last_ts)
        for s, _subj, _size in removed:
            self._ttl_exp.pop(s, None)
            self._never.discard(s)
        self._removed.clear()
        self._on_truncate(seq)
        self._commit()

    # -- state -------------------------------------------------------------------------------
    def _state(self, deleted: list[int] | None) -> StoreState:
        idx = self._idx
        empty = not idx.msgs and not idx.last
        num_deleted = (idx.last - idx.first + 1) - idx.msgs if idx.msgs else 0
        return StoreState(
            msgs=idx.msgs, bytes=idx.bytes, first_seq=0 if empty else idx.first,
            first_ts=idx.first_ts, last_seq=idx.last, last_ts=idx.last_ts,
            num_subjects=len(idx.subj_ids), num_deleted=num_deleted,
            deleted=deleted if deleted is not None else [], lost=list(self._lost))

    def state(self) -> StoreState:
        self._check_open()
        return self._state(self._idx.deleted())

    def fast_state(self) -> StoreState:
        """The state without the list of deleted seqs (O(1) but for ``lost``)."""
        self._check_open()
        return self._state(None)

    def first_damaged_seq(self) -> int:
        """The lowest seq this store lost to damage, 0 when none: a stored message whose
        record failed its checksum or is missing from the files (not one deleted by a
        request or a limit). ``truncate(first_damaged_seq() - 1)`` drops every lost seq."""
        self._check_open()
        return self._lost.first()

    def _mark_lost(self, seqs) -> None:
        """Seqs found damaged: no longer live, with no delete record (they were not
        deleted; a copy from a replica brings them back)."""
        idx = self._idx
        seqs = list(seqs)
        self._lost.update(seqs)
        for seq in seqs:
            if idx.remove(seq) is not None:
                self._ttl_exp.pop(seq, None)
                self._never.discard(seq)

    def subjects_totals(self, filter: str = ">") -> dict[str, int]:
        self._check_open()
        return self._idx.totals(filter)

    def num_pending(self, start_seq: int, filter: str = ">",
                    last_per_subject: bool = False) -> tuple[int, int]:
        """Messages matching ``filter`` at or after ``start_seq``, and the last seq it
        is valid through."""
        self._check_open()
        return self._idx.pending(start_seq, filter, last_per_subject), self._idx.last

    # -- lifecycle ---------------------------------------------------------------------------
    def flush(self) -> None:
        self._check_open()

    def sync(self) -> None:
        self.flush()

    def close(self) -> None:
        self._closed = True

    def stop(self) -> None:
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- hooks -------------------------------------------------------------------------------
    def _persist_cols(self, seqs, tss, subjects, hdrs, datas) -> list:
        """Write the messages (given as columns); returns one sequence per aux column, a
        value per message."""
        raise NotImplementedError

    def _persist_skip(self, seq: int, num: int) -> None:
        pass

    def _persist_last(self, seq: int, ts: int) -> None:
        pass

    def _read(self, seq: int) -> StoredMsg:
        raise NotImplementedError

    def _erase(self, seq: int) -> None:
        pass

    def _on_compact(self, seq: int) -> None:
        pass

    def _on_truncate(self, seq: int) -> None:
        pass

    def _wipe(self) -> None:
        pass

    def _commit(self) -> None:
        self._removed.clear()


__all__ = ["BaseStore"]
