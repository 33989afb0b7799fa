"""Whole-store snapshots and copying records between replicas (a part of BaseStore).

Nothing here hands out a message the store lost to damage as if it had been deleted: a
snapshot of such a store, an export reaching a lost seq and deleted runs covering one
raise ``StoreCorruptionError``; a copier that took them would hold the loss as the truth.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from rayjet.errors import StoreCorruptionError
from rayjet.storage import record as rec
from rayjet.storage.lost import lost_error

_SNAP_MAGIC = b"RJSNAP01"
_SNAP_HEAD = struct.Struct("<8sQQQQ")


class Copying:
    """Snapshot, restore, export, import and reconcile, over BaseStore's index and hooks."""

    # -- snapshot ----------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole store as portable bytes (plain records), restorable into any store.
        A store that lost messages to damage has no whole copy to give: it raises."""
        self._check_open()
        if self._lost:
            raise lost_error(self._lost[0])
        idx = self._idx
        st = self.fast_state()
        parts = [_SNAP_HEAD.pack(_SNAP_MAGIC, st.first_seq, st.last_seq, st.last_ts, st.msgs)]
        seq = idx.next_live(idx.first) if idx.msgs else 0
        while seq:
            m = self._read(seq)
            parts.append(rec.encode_msg(m.seq, m.ts, m.subject.encode(), m.hdr, m.data))
            seq = idx.next_live(seq + 1)
        body = b"".join(parts)
        return body + rec.frame_hash(body)

    def restore(self, snapshot: bytes | Sequence[bytes]) -> None:
        """Replace the whole content with a :meth:`snapshot`."""
        self._check_open()
        buf = snapshot if isinstance(snapshot, bytes | bytearray) else b"".join(snapshot)
        if len(buf) < _SNAP_HEAD.size + 8 or rec.frame_hash(memoryview(buf)[:-8]) != buf[-8:]:
            raise StoreCorruptionError(err="snapshot failed its checksum")
        magic, first, last, last_ts, count = _SNAP_HEAD.unpack_from(buf, 0)
        if magic != _SNAP_MAGIC:
            raise StoreCorruptionError(err="not a store snapshot")
        self._wipe()
        self._lost.clear()
        idx = self._idx
        idx.reset(max(first, 1), max(first, 1) - 1, 0)
        self._ttl_heap.clear()
        self._ttl_exp.clear()
        self._never.clear()
        self._removed.clear()
        self._on_compact(max(first, 1))
        off, end, items = _SNAP_HEAD.size, len(buf) - 8, []
        while off < end:
            length, flags, _kind, seq, ts = rec.parse_head(buf, off)
            subj, hdr, data = rec.split_body(rec.body_of(buf, off, length), bool(flags & rec.F_HDR))
            items.append((seq, ts, subj, hdr, data, 0))
            off += length
            if len(items) >= 1000:
                self._add_raw(items)
                items = []
        if items:
            self._add_raw(items)
        if last > idx.last:
            n = last - idx.last
            start = idx.last + 1
            idx.skip(start, n)
            self._persist_skip(start, n)
        idx.last_ts = last_ts
        self._persist_last(idx.last, last_ts)
        self._commit()

    # -- copying from another replica ---------------------------------------------------------
    def export_range(self, start_seq: int, max_bytes: int) -> tuple[bytes, int]:
        """Plain records of the live messages from ``start_seq`` on, about ``max_bytes`` of
        them (at least one), and the seq to continue from (last_seq + 1 once done).

        A chunk ends before a seq lost to damage (the seq to continue from is that seq);
        a call starting at it raises ``StoreCorruptionError``: a copy never takes a lost
        message for a deleted one."""
        self._check_open()
        idx = self._idx
        stop = self._lost_stop(start_seq)
        parts: list[bytes] = []
        total = 0
        seq = idx.next_live(start_seq) if idx.msgs else 0
        while seq and total < max_bytes and not (stop and seq > stop):
            m = self._read(seq)
            r = rec.encode_msg(seq, m.ts, m.subject.encode(), m.hdr, m.data)
            parts.append(r)
            total += len(r)
            seq = idx.next_live(seq + 1)
        return b"".join(parts), self._export_next(seq, stop, bool(parts))

    def _lost_stop(self, start_seq: int) -> int:
        """The first seq lost to damage at or after ``start_seq``, 0 when none."""
        return self._lost.first_in(start_seq, self._idx.last) if self._lost else 0

    def _export_next(self, seq: int, stop: int, exported: bool) -> int:
        """Where an export that reached ``seq`` (0: the end) goes on, given the first lost
        seq ``stop`` it may not pass."""
        if stop and (not seq or seq > stop):
            if not exported:
                raise lost_error(stop)
            return stop
        return seq or self._idx.last + 1

    def import_records(self, buf) -> int:
        """Append records another replica's :meth:`export_range` produced (each checksum
        verified; those at or below our last seq are skipped) without applying limits:
        the source applied them. Returns how many were added."""
        self._check_open()
        off, end, last, added, items = 0, len(buf), self._idx.last, 0, []
        while off < end:
            length = rec.parse_head(buf, off)[0] if end - off >= rec.MIN_FRAME else 0
            if length < rec.MIN_FRAME or off + length > end or not rec.check(buf, off, length):
                raise StoreCorruptionError(err=f"copied record at byte {off} failed its checksum")
            _n, flags, kind, seq, ts = rec.parse_head(buf, off)
            if kind != rec.K_MSG:
                raise StoreCorruptionError(err=f"copied record at byte {off} is not a message")
            if seq > last:
                subj, hdr, data = rec.split_body(self._plain_body(buf, off, length, flags),
                                                 bool(flags & rec.F_HDR))
                items.append((seq, ts, subj, hdr, data, 0))
                last = seq
            off += length
            if len(items) >= 1000:
                self._add_raw(items)
                added += len(items)
                items = []
        if items:
            self._add_raw(items)
            added += len(items)
        self._commit()
        return added

    def _plain_body(self, buf, off: int, length: int, flags: int) -> bytes:
        """The plain body of a copied record (a store with a codec decodes its own)."""
        if flags & (rec.F_COMPRESSED | rec.F_ENCRYPTED):
            raise StoreCorruptionError(err="a copied record is compressed or encrypted, "
                                           "which only a file store with the same key reads")
        return rec.body_of(buf, off, length)

    def deleted_runs(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Seqs in ``lo..hi`` (within first..last) that are not live, as (first, last) runs.
        Raises when one of them was lost to damage rather than deleted."""
        self._check_open()
        if self._lost and self._lost.first_in(lo, hi):
            raise lost_error(self._lost.first_in(lo, hi))
        return self._idx.deleted_runs(lo, hi)

    def reconcile(self, first: int, last: int, last_ts: int,
                  deleted: Sequence[tuple[int, int]]) -> None:
        """Take another replica's seq range and deletions: drop what it no longer holds
        (below ``first``, above ``last``, inside the ``deleted`` runs), then end at ``last``."""
        self._check_open()
        idx = self._idx
        if idx.last > last:
            self.truncate(last)
        if first > idx.first:
            self._compact(first)
        for lo, hi in deleted:
            if self._lost:  # deleted there: no longer lost, and deleted here for good
                self._removed.extend(self._lost.drop_range(lo, hi))
            seq = idx.next_live(lo) if idx.msgs else 0
            while seq and seq <= hi:
                self._unindex(seq)
                seq = idx.next_live(seq + 1)
        if last > idx.last:
            start = idx.last + 1
            idx.skip(start, last - start + 1)
            self._persist_skip(start, last - start + 1)
        if idx.last_ts != last_ts:
            idx.last_ts = last_ts
            self._persist_last(idx.last, last_ts)
        self._commit()

    def _add_raw(self, items: list[tuple]) -> None:
        """Index restored messages without applying limits."""
        limits = self._max_per, self._max_msgs, self._max_bytes
        self._max_per = self._max_msgs = self._max_bytes = 0
        try:
            self._add(items)
        finally:
            self._max_per, self._max_msgs, self._max_bytes = limits


__all__ = ["Copying"]
