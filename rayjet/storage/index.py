"""The in-RAM index both stores share: compact arrays keyed by ``seq - base``.

Per message: ts (8 bytes), record size (4; 0 marks a deleted seq), subject id (4), plus
what the store adds in ``aux`` arrays (FileStore: location 8 + frame length 4), plus the
seq in its subject's sorted array (8): about 36 bytes a message, no Python object per
message. Per subject: a sorted ``array('Q')`` of its live seqs with a moving head, so the
first/last/count of a subject, "next at or after seq" and "pending from seq" are O(1) or
O(log n) without scanning the stream.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from itertools import repeat

import numpy as np

from rayjet.subjects import FWC, is_literal, subject_matches

_CHUNK = 4096
_EMPTY_Q = array("Q")


class SubjectSeqs:
    """The live seqs of one subject, ascending; ``seqs[head:]`` are the live ones."""

    __slots__ = ("head", "seqs")

    def __init__(self, raw: bytes = b"") -> None:
        self.seqs = _EMPTY_Q.__copy__()  # several times faster than array("Q")
        if raw:
            self.seqs.frombytes(raw)
        self.head = 0

    def count(self) -> int:
        return len(self.seqs) - self.head

    def first(self) -> int:
        return self.seqs[self.head]

    def last(self) -> int:
        return self.seqs[-1]

    def remove(self, seq: int) -> None:
        s, h = self.seqs, self.head
        if s[h] == seq:
            h += 1
            if h >= 32 and h * 2 >= len(s):
                del s[:h]
                h = 0
            self.head = h
        elif s[-1] == seq:
            s.pop()
        else:
            i = bisect_left(s, seq, h)
            if i < len(s) and s[i] == seq:
                del s[i]

    def next_at(self, seq: int) -> int:
        s = self.seqs
        i = bisect_left(s, seq, self.head)
        return s[i] if i < len(s) else 0

    def prev_at(self, seq: int) -> int:
        i = bisect_right(self.seqs, seq, self.head) - 1
        return self.seqs[i] if i >= self.head else 0

    def count_from(self, seq: int) -> int:
        return len(self.seqs) - bisect_left(self.seqs, seq, self.head)


def _extend_blank(container, n: int) -> None:
    if isinstance(container, array):
        container.frombytes(bytes(n * container.itemsize))
    else:
        container.extend(repeat(None, n))


def _scatter(n: int, pos: np.ndarray, values: np.ndarray, dtype) -> np.ndarray:
    out = np.zeros(n, dtype)
    out[pos] = values
    return out


def _dead_mask(n: int, first: int, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Positions 0..n-1 (seq first + i) inside a dead run."""
    lo = np.clip(starts.astype(np.int64) - first, 0, n)
    hi = np.clip(starts.astype(np.int64) + lens.astype(np.int64) - first, 0, n)
    delta = np.zeros(n + 1, np.int64)
    np.add.at(delta, lo, 1)
    np.add.at(delta, hi, -1)
    return np.cumsum(delta[:n]) > 0


def _to_array(kind: str, values: np.ndarray) -> array:
    out = array(kind)
    out.frombytes(np.ascontiguousarray(values, np.dtype(kind)).tobytes())
    return out


class Index:
    """Which seqs are live, their ts, size, subject, and the per-subject arrays."""

    def __init__(self, aux_kinds: tuple[str | None, ...] = ()) -> None:
        # aux containers stay aligned with the main arrays: 'Q'/'I' arrays, None = a list
        self._aux_kinds = aux_kinds
        self.subj_ids: dict[str, int] = {}
        self.subj_names: list[str | None] = []
        self.subj_seqs: list[SubjectSeqs | None] = []
        self._free: list[int] = []
        self._match_cache: dict[str, frozenset[int]] = {}
        self.reset(1, 0, 0)

    # -- whole-index resets ------------------------------------------------------------------
    def reset(self, first: int, last: int, last_ts: int) -> None:
        """Empty index whose next message is ``first`` (last_seq = first - 1 = ``last``)."""
        self.base = first
        self.first = first
        self.last = last
        self.last_ts = last_ts
        self.msgs = 0
        self.bytes = 0
        self.ts = array("q")
        self.size = array("I")
        self.sid = array("I")
        self.aux = [array(k) if k else [] for k in self._aux_kinds]
        self.subj_ids.clear()
        self.subj_names.clear()
        self.subj_seqs.clear()
        self._free.clear()
        self._match_cache.clear()

    def load(self, first: int, last: int, last_ts: int, cols: dict, names: list[str],
             dead: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Fill the index at once from numpy columns (reopening from a checkpoint).

        ``cols`` has ``seq`` (ascending), ``ts``, ``size``, ``sid`` (an index into ``names``)
        and ``aux0``.. for the aux arrays; seqs first..last that are not in ``seq`` or fall in
        the ``dead`` runs (starts, lengths) are deleted. Returns the seqs outside the dead
        runs that ``cols`` lacks (live ones it should have held).
        """
        self.reset(first, last, last_ts)
        n = last - first + 1
        if n <= 0:
            return np.zeros(0, np.int64)
        seqs = cols["seq"]
        keep = (seqs >= first) & (seqs <= last)
        pos = (seqs[keep] - np.uint64(first)).astype(np.intp)
        size = _scatter(n, pos, cols["size"][keep], np.uint32)
        dead_mask = _dead_mask(n, first, *dead)
        size[dead_mask] = 0
        missing = np.flatnonzero((size == 0) & ~dead_mask).astype(np.int64) + first
        del dead_mask
        live = np.flatnonzero(size)
        sid = self._load_subjects(live, _scatter(n, pos, cols["sid"][keep], np.uint32)[live],
                                  names, first)
        full_sid = np.zeros(n, np.uint32)
        full_sid[live] = sid
        self.size = _to_array("I", size)
        self.sid = _to_array("I", full_sid)
        self.ts = _to_array("q", _scatter(n, pos, cols["ts"][keep], np.int64))
        for i, kind in enumerate(self._aux_kinds):
            col = _scatter(n, pos, cols[f"aux{i}"][keep], np.dtype(kind))
            self.aux[i] = _to_array(kind, col)
        self.msgs = len(live)
        self.bytes = int(size.sum(dtype=np.uint64))
        return missing

    def settle_first(self) -> None:
        """Move ``first`` to the first live seq (a load can leave it on a missing one)."""
        if not self.msgs or not self.live(self.first):
            self._advance_first()

    def _load_subjects(self, live: np.ndarray, gsid: np.ndarray, names: list[str],
                       first: int) -> np.ndarray:
        """Build the per-subject arrays of the live positions ``live`` (subject ``gsid``
        each) with bulk sorts; returns the subject id of each live position."""
        if not len(live):
            return gsid
        uniq, first_at = np.unique(gsid, return_index=True)
        ids = uniq[np.argsort(first_at, kind="stable")]  # subjects in order of first use
        lut = np.zeros(int(uniq[-1]) + 1, np.uint32)
        lut[ids] = np.arange(len(ids), dtype=np.uint32)
        sid = lut[gsid]
        by_subject = (live[np.argsort(sid, kind="stable")] + first).astype(np.uint64)
        raw = by_subject.tobytes()
        ends = np.cumsum(np.bincount(sid, minlength=len(ids))).tolist()
        starts = [0, *ends[:-1]]
        subjects = [names[g] for g in ids.tolist()]
        self.subj_names.extend(subjects)
        self.subj_ids.update(zip(subjects, range(len(subjects))))
        self.subj_seqs.extend([SubjectSeqs(raw[8 * a:8 * e]) for a, e in zip(starts, ends)])
        return sid

    # -- subjects ----------------------------------------------------------------------------
    def _subject_id(self, subject: str) -> int:
        sid = self.subj_ids.get(subject)
        if sid is None:
            self._match_cache.clear()
            if self._free:
                sid = self._free.pop()
                self.subj_names[sid] = subject
                self.subj_seqs[sid] = SubjectSeqs()
            else:
                sid = len(self.subj_names)
                self.subj_names.append(subject)
                self.subj_seqs.append(SubjectSeqs())
            self.subj_ids[subject] = sid
        return sid

    def _drop_subject(self, sid: int) -> None:
        del self.subj_ids[self.subj_names[sid]]
        self.subj_names[sid] = None
        self.subj_seqs[sid] = None
        self._free.append(sid)
        self._match_cache.clear()

    def matching(self, filter_: str) -> list[SubjectSeqs]:
        """The subject arrays matching a filter ('' and '>' match all)."""
        if not filter_ or filter_ == FWC:
            return [s for s in self.subj_seqs if s is not None]
        if is_literal(filter_):
            sid = self.subj_ids.get(filter_)
            return [] if sid is None else [self.subj_seqs[sid]]
        ids = self._match_cache.get(filter_)
        if ids is None:
            ids = frozenset(i for name, i in self.subj_ids.items()
                            if subject_matches(name, filter_))
            if len(self._match_cache) > 256:
                self._match_cache.clear()
            self._match_cache[filter_] = ids
        return [self.subj_seqs[i] for i in ids]

    def subject_of(self, seq: int) -> str:
        return self.subj_names[self.sid[seq - self.base]]

    # -- adds and removals -------------------------------------------------------------------
    def add(self, seq: int, ts: int, subject: str, size: int, aux: tuple = ()) -> None:
        """Index a message; ``seq`` must be above ``last`` (a gap counts as deleted seqs)."""
        gap = seq - self.last - 1
        if self.msgs == 0:
            self._rebase(seq)
        elif gap:
            self._extend_blank(gap)
        sid = self._subject_id(subject)
        self.ts.append(ts)
        self.size.append(size)
        self.sid.append(sid)
        for container, value in zip(self.aux, aux):
            container.append(value)
        self.subj_seqs[sid].seqs.append(seq)
        self.msgs += 1
        self.bytes += size
        self.last = seq
        self.last_ts = ts

    def add_many(self, seqs, tss, subjects, sizes, cols) -> None:
        """Index messages at once (the batch path); ``cols`` are aux columns."""
        if seqs[-1] - seqs[0] != len(seqs) - 1:
            for i, seq in enumerate(seqs):
                self.add(seq, tss[i], subjects[i], sizes[i], tuple(col[i] for col in cols))
            return
        gap = seqs[0] - self.last - 1
        if self.msgs == 0:
            self._rebase(seqs[0])
        elif gap:
            self._extend_blank(gap)
        ids = self.subj_ids
        sids = [ids[s] if s in ids else self._subject_id(s) for s in subjects]
        self.ts.extend(tss)
        self.size.extend(sizes)
        self.sid.extend(sids)
        for container, col in zip(self.aux, cols):
            container.extend(col)
        per = self.subj_seqs
        for sid, seq in zip(sids, seqs):
            per[sid].seqs.append(seq)
        self.msgs += len(seqs)
        self.bytes += sum(sizes)
        self.last = seqs[-1]
        self.last_ts = tss[-1]

    def _rebase(self, seq: int) -> None:
        """Start the arrays at ``seq`` (the index is empty)."""
        self.base = self.first = seq
        for name in ("ts", "size", "sid"):
            arr = getattr(self, name)
            del arr[:]
        for c in self.aux:
            del c[:]

    def _extend_blank(self, n: int) -> None:
        for c in (self.ts, self.size, self.sid, *self.aux):
            _extend_blank(c, n)

    def skip(self, seq: int, num: int) -> None:
        """Mark ``seq .. seq+num-1`` used but empty."""
        last = seq + num - 1
        if self.msgs == 0:
            self.last = last
            self._rebase(last + 1)
            return
        self._extend_blank(last - self.last)
        self.last = last

    def live(self, seq: int) -> bool:
        i = seq - self.base
        return 0 <= i < len(self.size) and self.size[i] != 0

    def remove(self, seq: int) -> tuple[str, int] | None:
        """Unindex a live message; returns (subject, size) or None if it was not live."""
        i = seq - self.base
        if i < 0 or i >= len(self.size):
            return None
        size = self.size[i]
        if not size:
            return None
        self.size[i] = 0
        sid = self.sid[i]
        ss = self.subj_seqs[sid]
        ss.remove(seq)
        subject = self.subj_names[sid]
        if ss.head >= len(ss.seqs):
            self._drop_subject(sid)
        self.msgs -= 1
        self.bytes -= size
        if seq == self.first:
            self._advance_first()
        return subject, size

    def _advance_first(self) -> None:
        if self.msgs == 0:
            self.first = self.last + 1
            self._rebase(self.first)
            return
        size, i = self.size, self.first - self.base + 1
        n = len(size)
        while i < n and not size[i]:
            # long runs of deleted seqs: find the next live one at C speed
            raw = size[i:i + _CHUNK].tobytes()
            nz = len(raw) - len(raw.lstrip(b"\0"))
            i += nz // 4
            if nz < len(raw):
                break
        self.first = self.base + i
        if i >= 1024 and i * 2 >= n:
            for c in (self.ts, self.size, self.sid, *self.aux):
                del c[:i]
            self.base += i

    def remove_below(self, seq: int) -> list[tuple[int, str, int]]:
        """Remove every live message below ``seq``; returns (seq, subject, size) each."""
        out = []
        if seq > self.last:
            for s in range(self.first, self.last + 1):
                if self.live(s):
                    out.append((s, self.subject_of(s), self.size[s - self.base]))
            self.last = max(self.last, seq - 1)
            self.reset(seq, self.last, self.last_ts)
            return out
        size = self.size
        for s in range(self.first, seq):
            if size[s - self.base]:
                out.append((s, self.subject_of(s), size[s - self.base]))
        for s, _subj, _size in out:
            self.remove(s)
        return out

    def truncate(self, seq: int, last_ts: int | None) -> list[tuple[int, str, int]]:
        """Remove every message above ``seq``; last_seq becomes ``seq``."""
        out = []
        for s in range(self.last, max(seq, self.first - 1), -1):
            i = s - self.base
            if 0 <= i < len(self.size) and self.size[i]:
                out.append((s, self.subject_of(s), self.size[i]))
        for s, _subj, _size in out:
            self.remove(s)
        keep = max(0, seq - self.base + 1)
        if self.msgs:
            for c in (self.ts, self.size, self.sid, *self.aux):
                del c[keep:]
        self.last = seq
        if self.msgs == 0:
            self._rebase(seq + 1)
        if last_ts is not None:
            self.last_ts = last_ts
        return out

    # -- lookups -----------------------------------------------------------------------------
    @property
    def first_ts(self) -> int:
        return self.ts[self.first - self.base] if self.msgs else 0

    def next_live(self, start: int) -> int:
        """The first live seq >= start, or 0."""
        start = max(start, self.first)
        size, base = self.size, self.base
        i, n = start - base, len(size)
        while i < n:
            if size[i]:
                return base + i
            raw = size[i:i + _CHUNK].tobytes()
            nz = len(raw) - len(raw.lstrip(b"\0"))
            i += nz // 4
        return 0

    def prev_live(self, start: int) -> int:
        """The last live seq <= start, or 0."""
        size, base = self.size, self.base
        i = min(start, self.last) - base
        while i >= 0:
            if size[i]:
                return base + i
            lo = max(0, i - _CHUNK + 1)
            raw = size[lo:i + 1].tobytes()
            stripped = len(raw.rstrip(b"\0"))
            if stripped == 0:
                i = lo - 1
            else:
                i = lo + (stripped - 1) // 4
        return 0

    def live_seqs(self, start: int, end: int, filter_: str, limit: int,
                  max_bytes: int) -> np.ndarray:
        """The live seqs in ``[start, end]`` matching ``filter_``, in order: at most
        ``limit`` of them, and no more than fit in ``max_bytes`` of record sizes (one at
        least). Vectorised over the index arrays, a window at a time."""
        start, end = max(start, self.first), min(end, self.last)
        ids = None
        if filter_ and filter_ != FWC:
            ids = np.fromiter(self._subject_ids(filter_), np.uint32)
            if not len(ids):
                return np.zeros(0, np.int64)
        size = np.frombuffer(self.size, np.uint32)
        sid = np.frombuffer(self.sid, np.uint32) if ids is not None else None
        found: list[np.ndarray] = []
        # a small first window (a pull of a few messages near its stream's end is the
        # common read), growing while the matches are sparse
        count, window = 0, max(4 * limit, 1024)
        lo = start - self.base
        hi_all = end - self.base + 1
        while lo < hi_all and count < limit:
            hi = min(lo + window, hi_all)
            live = size[lo:hi] != 0
            if ids is not None:
                live &= _member(sid[lo:hi], ids)
            got = np.flatnonzero(live)[:limit - count] + lo
            found.append(got)
            count += len(got)
            lo = hi
            window = min(window * 8, 1 << 20)
        seqs = np.concatenate(found) if found else np.zeros(0, np.int64)
        if len(seqs) > 1:
            fits = int(np.searchsorted(np.cumsum(size[seqs], dtype=np.int64), max_bytes,
                                       side="right"))
            seqs = seqs[:max(1, fits)]
        return seqs.astype(np.int64) + self.base

    def _subject_ids(self, filter_: str) -> frozenset[int]:
        if is_literal(filter_):
            sid = self.subj_ids.get(filter_)
            return frozenset() if sid is None else frozenset((sid,))
        self.matching(filter_)  # fills the cache
        return self._match_cache.get(filter_, frozenset())

    def next_match(self, filter_: str, start: int) -> int:
        if not filter_ or filter_ == FWC:
            return self.next_live(start)
        start = max(start, self.first)
        if start > self.last:
            return 0
        subjects = self.matching(filter_)
        if len(subjects) > 64 and (self.last - start) < 8 * len(subjects):
            return self._scan_next(filter_, start)
        best = 0
        for ss in subjects:
            s = ss.next_at(start)
            if s and (not best or s < best):
                best = s
        return best

    def _scan_next(self, filter_: str, start: int) -> int:
        ids = {i for name, i in self.subj_ids.items() if subject_matches(name, filter_)}
        size, sid, base = self.size, self.sid, self.base
        for i in range(start - base, len(size)):
            if size[i] and sid[i] in ids:
                return base + i
        return 0

    def prev_match(self, filter_: str, start: int) -> int:
        if not filter_ or filter_ == FWC:
            return self.prev_live(start)
        best = 0
        for ss in self.matching(filter_):
            s = ss.prev_at(start)
            if s > best:
                best = s
        return best

    def last_match(self, filter_: str) -> int:
        if not filter_ or filter_ == FWC:
            return self.prev_live(self.last) if self.msgs else 0
        best = 0
        for ss in self.matching(filter_):
            if ss.seqs[-1] > best:
                best = ss.seqs[-1]
        return best

    def totals(self, filter_: str) -> dict[str, int]:
        out = {}
        for sid, ss in enumerate(self.subj_seqs):
            if ss is not None:
                name = self.subj_names[sid]
                if not filter_ or filter_ == FWC or subject_matches(name, filter_):
                    out[name] = ss.count()
        return out

    def pending(self, start: int, filter_: str, last_per_subject: bool) -> int:
        start = max(start, self.first)
        if start > self.last or not self.msgs:
            return 0
        if not last_per_subject and (not filter_ or filter_ == FWC):
            if start <= self.first:
                return self.msgs
            if self.msgs == self.last - self.first + 1:  # no gaps: nothing to count
                return self.last - start + 1
            # counted in C without a copy: a consumer asks this on every pull
            live = np.frombuffer(self.size, np.uint32)[start - self.base:self.last - self.base + 1]
            return int(np.count_nonzero(live))
        total = 0
        for ss in self.matching(filter_):
            if last_per_subject:
                total += ss.seqs[-1] >= start
            else:
                total += ss.count_from(start)
        return total

    def deleted(self) -> list[int]:
        if not self.msgs:
            return []
        lo, hi = self.first - self.base, self.last - self.base
        base = self.base
        return [base + i for i in range(lo, hi + 1) if not self.size[i]]

    def deleted_runs(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The seqs in ``lo..hi`` that are not live, as (first, last) runs (no Python
        work per message: a stream of millions answers in milliseconds)."""
        lo, hi = max(lo, self.first), min(hi, self.last)
        if lo > hi:
            return []
        if not self.msgs:
            return [(lo, hi)]
        start, stop = lo - self.base, hi - self.base + 1
        sizes = np.frombuffer(self.size, dtype=np.uint32)
        dead = np.zeros(stop - start + 2, dtype=np.int8)
        within = sizes[max(start, 0):stop]
        dead[1 + max(0, -start):1 + max(0, -start) + len(within)] = within == 0
        dead[1 + max(0, -start) + len(within):-1] = 1  # past the arrays: never written
        if start < 0:
            dead[1:1 - start] = 1
        edges = np.flatnonzero(np.diff(dead))
        return [(lo + int(a), lo + int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]



def _member(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Which ``values`` are among ``ids``: comparisons for a few ids (one filter subject is
    the common case), a sort-based ``isin`` for many."""
    if len(ids) <= 4:
        out = values == ids[0]
        for i in ids[1:]:
            out |= values == i
        return out
    return np.isin(values, ids)

__all__ = ["Index", "SubjectSeqs"]
