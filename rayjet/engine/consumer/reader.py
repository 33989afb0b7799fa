"""How a consumer leader reads its stream: the StreamReader protocol and a store adapter.

Consumers run apart from the stream replicas, so the consumer engine never touches a store
directly. It asks a reader, which the consumer actor implements over calls to the stream
(fetching in batches); tests and single-process setups wrap a ``StreamStore`` in
:class:`StoreReader`. ``filters`` is a tuple of subject filters (empty: every subject);
the engine passes filters that do not overlap, as consumer validation requires.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Protocol, runtime_checkable

import pyarrow as pa

from rayjet.errors import NotFoundError
from rayjet.storage.protocol import StoredMsg


@runtime_checkable
class StreamReader(Protocol):
    def bounds(self) -> tuple[int, int]:
        """(first seq, last seq) of the stream; (0, 0) for a stream never written to."""

    def load_msg(self, seq: int) -> StoredMsg | None:
        """The message at ``seq``, or None when it is gone (deleted, purged, expired)."""

    def load_next_batch(self, filters: tuple[str, ...], start_seq: int,
                        limit: int) -> tuple[list[StoredMsg], int]:
        """Up to ``limit`` messages matching ``filters`` with seq >= ``start_seq``, in stream
        order, and the stream's last seq at the time of the read (when fewer than ``limit``
        came back, nothing else matched up to that seq)."""

    def num_pending(self, filters: tuple[str, ...], start_seq: int,
                    last_per_subject: bool = False) -> int:
        """How many messages match ``filters`` at or after ``start_seq`` (only the last of
        each subject with ``last_per_subject``)."""

    def last_seq_for(self, filters: tuple[str, ...]) -> int:
        """The highest seq matching ``filters`` (0: none)."""

    def last_per_subject(self, filters: tuple[str, ...], max_seq: int) -> list[int]:
        """The seq of the last message of every subject matching ``filters``, when that
        seq is <= ``max_seq``; ascending."""

    def seq_for_time(self, ts_ns: int) -> int:
        """The first seq whose timestamp is >= ``ts_ns`` (last seq + 1 when none)."""


WINDOW_BYTES = 32 << 20  # record bytes one read-ahead window carries at most

READS = frozenset({"bounds", "load_msg", "load_next_batch", "num_pending", "last_seq_for",
                   "last_per_subject", "seq_for_time", "read_window"})


def read_key(method: str, *args) -> tuple:
    """How a read is known in a :class:`ReadAhead` memo (filters as tuples)."""
    return (method, *(tuple(a) if isinstance(a, list) else a for a in args))


def _filters(filters: tuple[str, ...]) -> tuple[str, ...]:
    return filters or (">",)


class StoreReader:
    """A :class:`StreamReader` over a local ``StreamStore`` (MemStore, FileStore)."""

    def __init__(self, store) -> None:
        self.store = store

    def bounds(self) -> tuple[int, int]:
        st = self.store.fast_state()
        return st.first_seq, st.last_seq

    def load_msg(self, seq: int) -> StoredMsg | None:
        try:
            return self.store.load_msg(seq)
        except NotFoundError:
            return None

    def _next(self, filters: tuple[str, ...], start: int) -> StoredMsg | None:
        best = None
        for f in filters:
            try:
                msg, _seq = self.store.load_next_msg(f, True, start)
            except NotFoundError:
                continue
            if best is None or msg.seq < best.seq:
                best = msg
        return best

    def load_next_batch(self, filters: tuple[str, ...], start_seq: int,
                        limit: int) -> tuple[list[StoredMsg], int]:
        filters = _filters(filters)
        last = self.store.fast_state().last_seq
        out: list[StoredMsg] = []
        seq = max(start_seq, 1)
        while len(out) < limit:
            msg = self._next(filters, seq)
            if msg is None:
                break
            out.append(msg)
            seq = msg.seq + 1
        return out, last

    def read_many(self, reads: list) -> list:
        """Answer several reads at once: each is (method name, *args) of this reader
        (``last_per_subject`` without a max_seq gives every subject's last seq)."""
        out = []
        for method, *args in reads:
            if method not in READS:
                raise ValueError(f"not a stream read: {method!r}")
            # filters that crossed the data plane come as lists
            args = [tuple(a) if isinstance(a, list) else a for a in args]
            if method == "last_per_subject" and len(args) == 1:
                args = [args[0], self.bounds()[1]]
            out.append(getattr(self, method)(*args))
        return out

    def read_window(self, filters: tuple[str, ...], start_seq: int, limit: int) -> Window:
        """``load_next_batch`` and ``num_pending`` from ``start_seq`` in one answer. One
        filter (or none) reads the records in bulk as columns, which cross to the consumer
        as Arrow buffers."""
        filters = tuple(filters)
        if len(filters) > 1:
            msgs, last = self.load_next_batch(filters, start_seq, limit)
            return Window(filters, start_seq, limit, msgs, last,
                          self.num_pending(filters, start_seq))
        last = self.store.fast_state().last_seq
        cols, _ = self.store.read_columns(max(start_seq, 1), last, _filters(filters)[0],
                                          max_msgs=max(limit, 1), max_bytes=WINDOW_BYTES)
        pending = self.num_pending(filters, start_seq)
        if cols.num_rows < min(limit, pending):
            limit = cols.num_rows  # cut by size: the window does not reach the end
        return Window(filters, start_seq, limit, cols, last, pending)

    def num_pending(self, filters: tuple[str, ...], start_seq: int,
                    last_per_subject: bool = False) -> int:
        start = max(start_seq, 1)
        return sum(self.store.num_pending(start, f, last_per_subject)[0]
                   for f in _filters(filters))

    def last_seq_for(self, filters: tuple[str, ...]) -> int:
        best = 0
        for f in _filters(filters):
            try:
                best = max(best, self.store.load_last_msg(f).seq)
            except NotFoundError:
                continue
        return best

    def last_per_subject(self, filters: tuple[str, ...], max_seq: int) -> list[int]:
        seqs: set[int] = set()
        for f in _filters(filters):
            for subject in self.store.subjects_totals(f):
                try:
                    seq = self.store.load_last_msg(subject).seq
                except NotFoundError:
                    continue
                if seq <= max_seq:
                    seqs.add(seq)
        return sorted(seqs)

    def seq_for_time(self, ts_ns: int) -> int:
        first, last = self.bounds()
        if last == 0 or first > last:
            return last + 1
        lo, hi = first, last + 1  # answer in [lo, hi]; timestamps grow with seqs
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                msg, seq = self.store.load_next_msg(">", True, mid)
            except NotFoundError:
                hi = mid
                continue
            if msg.ts >= ts_ns:
                hi = mid
            else:
                lo = seq + 1
        return lo


class Window:
    """Messages read ahead for one delivery decision: what ``load_next_batch(filters, start,
    limit)`` and ``num_pending(filters, start)`` answered at the same moment. ``msgs`` is
    given as StoredMsg objects or as Arrow columns (:data:`rayjet.storage.columns.SCHEMA`),
    which cross between actors as buffers; the objects are made once, where they are read."""

    __slots__ = ("filters", "start", "limit", "last", "pending", "_given", "_msgs", "_seqs")

    def __init__(self, filters: tuple[str, ...], start: int, limit: int,
                 msgs: list[StoredMsg] | pa.RecordBatch, last: int, pending: int) -> None:
        self.filters = filters
        self.start = start
        self.limit = limit
        self.last = last
        self.pending = pending
        self._given = msgs
        self._msgs: list[StoredMsg] | None = msgs if isinstance(msgs, list) else None
        self._seqs: list[int] | None = None

    @property
    def msgs(self) -> list[StoredMsg]:
        if self._msgs is None:
            self._msgs = _objects(self._given)
        return self._msgs

    @property
    def count(self) -> int:
        return len(self._msgs) if self._msgs is not None else self._given.num_rows

    def messages(self, start: int, stop: int) -> list[StoredMsg]:
        """Messages ``start..stop`` of the window, made into objects for these rows only
        (a window is read with room to spare, which a decision may not take)."""
        if self._msgs is not None:
            return self._msgs[start:stop]
        start, stop, _ = slice(start, stop).indices(self._given.num_rows)
        return _objects(self._given.slice(start, max(stop - start, 0)))

    @property
    def seqs(self) -> list[int]:
        if self._seqs is None:
            given = self._given
            self._seqs = (given.column("seq").to_pylist() if self._msgs is None
                          else [m.seq for m in self._msgs])
        return self._seqs

    def __reduce__(self):
        return (Window, (self.filters, self.start, self.limit, self._given, self.last,
                         self.pending))


def _objects(cols: pa.RecordBatch) -> list[StoredMsg]:
    return list(map(StoredMsg, *(cols.column(name).to_pylist() for name in
                                 ("subject", "hdr", "data", "seq", "ts"))))


class ReadAhead:
    """A :class:`StreamReader` that answers from a :class:`Window` read ahead of time (an
    actor fetches it without blocking its event loop) and asks ``inner`` otherwise.

    A window is only good for the decision it was read for: :meth:`drop` it afterwards, so
    a message deleted meanwhile is not handed out from a stale copy."""

    def __init__(self, inner: StreamReader) -> None:
        self.inner = inner
        self.window: Window | None = None
        self.memo: dict[tuple, object] = {}  # reads answered ahead of time

    def offer(self, window: Window | None) -> None:
        self.window = window

    def offer_reads(self, reads: list, results: list) -> None:
        """Answers to reads (method, *args) fetched ahead, good until :meth:`drop`."""
        for read, result in zip(reads, results, strict=True):
            if read[0] == "read_window":
                self.window = result
            else:
                self.memo[read_key(*read)] = result

    def drop(self) -> None:
        self.window = None
        self.memo.clear()

    def _memo(self, *key):
        return self.memo.get(read_key(*key), _MISS)

    def window_serves(self, filters: tuple[str, ...], start_seq: int, limit: int) -> bool:
        """Does the window alone answer ``load_next_batch(filters, start_seq, limit)``?
        (It may start before ``start_seq``: another decision moved past its start.)"""
        w = self.window
        if w is None or w.filters != tuple(filters) or w.start > start_seq:
            return False
        count = w.count
        # fewer than asked for: the window saw every match up to its last seq
        return count - bisect_left(w.seqs, start_seq) >= limit or count < w.limit

    def load_next_batch(self, filters: tuple[str, ...], start_seq: int,
                        limit: int) -> tuple[list[StoredMsg], int]:
        if self.window_serves(filters, start_seq, limit):
            w = self.window
            at = bisect_left(w.seqs, start_seq)
            return w.messages(at, at + limit), w.last
        return self.inner.load_next_batch(filters, start_seq, limit)

    def num_pending(self, filters: tuple[str, ...], start_seq: int,
                    last_per_subject: bool = False) -> int:
        w = self.window
        if (w is not None and not last_per_subject and w.start <= start_seq
                and w.filters == tuple(filters)):
            before = bisect_left(w.seqs, start_seq)  # the window's matches below start_seq
            # exact when the window reaches start_seq (or saw every match to its end)
            count = w.count
            if before < count or count < w.limit or w.start == start_seq:
                return max(w.pending - before, 0)
        got = self._memo("num_pending", filters, start_seq, last_per_subject)
        if got is _MISS and not last_per_subject:
            got = self._memo("num_pending", filters, start_seq)
        return self.inner.num_pending(filters, start_seq, last_per_subject) if got is _MISS \
            else got

    def bounds(self) -> tuple[int, int]:
        got = self._memo("bounds")
        return self.inner.bounds() if got is _MISS else tuple(got)

    def load_msg(self, seq: int) -> StoredMsg | None:
        got = self._memo("load_msg", seq)
        return self.inner.load_msg(seq) if got is _MISS else got

    def last_seq_for(self, filters: tuple[str, ...]) -> int:
        got = self._memo("last_seq_for", filters)
        return self.inner.last_seq_for(filters) if got is _MISS else got

    def last_per_subject(self, filters: tuple[str, ...], max_seq: int) -> list[int]:
        got = self._memo("last_per_subject", filters)  # every subject's last: cut at max_seq
        if got is _MISS:
            return self.inner.last_per_subject(filters, max_seq)
        return [s for s in got if s <= max_seq]

    def seq_for_time(self, ts_ns: int) -> int:
        got = self._memo("seq_for_time", ts_ns)
        return self.inner.seq_for_time(ts_ns) if got is _MISS else got


_MISS = object()

__all__ = ["READS", "ReadAhead", "StoreReader", "StreamReader", "Window", "read_key"]
