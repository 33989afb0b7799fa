"""A delivery decision's messages as columns: what a consumer leader hands a client.

One pull answers up to thousands of messages. Sent as one dict per message they cost a
dict, its pickling and unpickling and a client object each; as columns they cross as a
few numpy arrays and two byte strings (subjects once each), and the client makes a
``Msg`` only for the messages it looks at (:mod:`rayjet.client.messages`), or hands the
whole batch on as an Arrow record batch (:meth:`DeliveryBatch.to_arrow`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from rayjet.engine.consumer.types import ACK_PREFIX, Delivery, DeliveryRun
from rayjet.errors import BadRequestError
from rayjet.storage import arrow_arrays as arrays

# the columns of DeliveryBatch.to_arrow; ``headers`` is the NATS header block (null: none),
# the form publish_batch takes back
ARROW_SCHEMA = pa.schema([
    ("subject", pa.string()),
    ("data", pa.binary()),
    ("headers", pa.binary()),
    ("stream_seq", pa.int64()),
    ("consumer_seq", pa.int64()),
    ("num_delivered", pa.int64()),
    ("num_pending", pa.int64()),
    ("timestamp", pa.timestamp("ns", tz="UTC")),
])

_NUMBERS = ("stream_seq", "consumer_seq", "num_delivered", "num_pending", "timestamp")


def _one_columns(d: Delivery) -> tuple:
    return ((d.subject,), (d.hdr,), (d.data,), (d.stream_seq,), (d.consumer_seq,),
            (d.num_delivered,), (d.num_pending,), (d.timestamp,))


def _run_columns(run: DeliveryRun) -> tuple:
    """A run's columns in :data:`_NUMBERS` order after subject, header, payload."""
    msgs, n = run.msgs, len(run.msgs)
    pending = np.maximum(run.pending - np.arange(n, dtype=np.int64), 0)
    return ([m.subject for m in msgs], [m.hdr for m in msgs], [m.data for m in msgs],
            [m.seq for m in msgs], np.arange(run.first_cseq, run.first_cseq + n, dtype=np.int64),
            np.ones(n, np.int64), pending, [m.ts for m in msgs])


def _ends(parts: list[bytes]) -> np.ndarray:
    return np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), dtype=np.int64)


class DeliveryBatch:
    """Messages of one consumer in delivery order: distinct ``subjects`` and each message's
    index into them (``which``), header blocks and payloads back to back with each one's
    end offset, and the numbers of every message's ack reply subject."""

    __slots__ = ("stream", "consumer", "subjects", "which", "hdr_ends", "hdrs", "data_ends",
                 "data", "stream_seq", "consumer_seq", "num_delivered", "num_pending",
                 "timestamp", "_lists")

    def __init__(self, stream: str, consumer: str, subjects: Sequence[str], which: np.ndarray,
                 hdr_ends: np.ndarray, hdrs: bytes, data_ends: np.ndarray, data: bytes,
                 stream_seq: np.ndarray, consumer_seq: np.ndarray, num_delivered: np.ndarray,
                 num_pending: np.ndarray, timestamp: np.ndarray) -> None:
        self.stream = stream
        self.consumer = consumer
        self.subjects = tuple(subjects)
        self.which = which
        self.hdr_ends = hdr_ends
        self.hdrs = hdrs
        self.data_ends = data_ends
        self.data = data
        self.stream_seq = stream_seq
        self.consumer_seq = consumer_seq
        self.num_delivered = num_delivered
        self.num_pending = num_pending
        self.timestamp = timestamp
        self._lists: tuple | None = None

    @classmethod
    def of(cls, deliveries: Sequence[Delivery | DeliveryRun], stream: str = "",
           consumer: str = "") -> DeliveryBatch:
        """The batch of ``deliveries`` (all of one consumer), runs spelled out."""
        if deliveries:
            stream, consumer = deliveries[0].stream, deliveries[0].consumer
        parts = [_run_columns(d) if isinstance(d, DeliveryRun) else _one_columns(d)
                 for d in deliveries]
        subjects = [x for p in parts for x in p[0]]
        hdrs = [x for p in parts for x in p[1]]
        datas = [x for p in parts for x in p[2]]
        index: dict[str, int] = {}
        which = np.fromiter((index.setdefault(s, len(index)) for s in subjects), np.uint32,
                            len(subjects))

        def numbers(k: int) -> np.ndarray:
            if not parts:
                return np.zeros(0, np.int64)
            return np.concatenate([np.asarray(p[3 + k], np.int64) for p in parts])

        return cls(stream, consumer, list(index), which, _ends(hdrs), b"".join(hdrs),
                   _ends(datas), b"".join(datas), *(numbers(k) for k in range(len(_NUMBERS))))

    @classmethod
    def concat(cls, batches: Sequence[DeliveryBatch]) -> DeliveryBatch:
        """The messages of ``batches`` (of one consumer) one after the other."""
        if len(batches) == 1:
            return batches[0]
        index: dict[str, int] = {}
        whiches = []
        for b in batches:
            remap = np.fromiter((index.setdefault(s, len(index)) for s in b.subjects),
                                np.uint32, len(b.subjects))
            whiches.append(remap[b.which] if len(b) else b.which.astype(np.uint32))

        def ends(name: str, blob: str) -> np.ndarray:
            shifts = np.cumsum([0] + [len(getattr(b, blob)) for b in batches[:-1]])
            return np.concatenate([getattr(b, name) + int(shift)
                                   for b, shift in zip(batches, shifts, strict=True)])

        first = batches[0]
        return cls(first.stream, first.consumer, list(index), np.concatenate(whiches),
                   ends("hdr_ends", "hdrs"), b"".join(b.hdrs for b in batches),
                   ends("data_ends", "data"), b"".join(b.data for b in batches),
                   *(np.concatenate([getattr(b, n) for b in batches]) for n in _NUMBERS))

    def slice(self, start: int, stop: int | None = None) -> DeliveryBatch:
        """Messages ``start`` up to ``stop`` (exclusive; None: the end)."""
        n = len(self)
        stop = n if stop is None else min(stop, n)
        start = min(max(start, 0), stop)
        if start == 0 and stop == n:
            return self
        hdr0 = int(self.hdr_ends[start - 1]) if start else 0
        data0 = int(self.data_ends[start - 1]) if start else 0
        hdr1 = int(self.hdr_ends[stop - 1]) if stop else 0
        data1 = int(self.data_ends[stop - 1]) if stop else 0
        return DeliveryBatch(self.stream, self.consumer, self.subjects,
                             self.which[start:stop], self.hdr_ends[start:stop] - hdr0,
                             self.hdrs[hdr0:hdr1], self.data_ends[start:stop] - data0,
                             self.data[data0:data1],
                             *(getattr(self, name)[start:stop] for name in _NUMBERS))

    def __reduce__(self):
        return (DeliveryBatch, (self.stream, self.consumer, self.subjects, self.which,
                                self.hdr_ends, self.hdrs, self.data_ends, self.data,
                                self.stream_seq, self.consumer_seq, self.num_delivered,
                                self.num_pending, self.timestamp))

    def __len__(self) -> int:
        return len(self.which)

    def lists(self) -> tuple:
        """The columns as Python lists (made once): reading one message's fields from
        lists is several times cheaper than from numpy scalars."""
        if self._lists is None:
            self._lists = (self.which.tolist(), [0, *self.hdr_ends.tolist()],
                           [0, *self.data_ends.tolist()], self.stream_seq.tolist(),
                           self.consumer_seq.tolist(), self.num_delivered.tolist(),
                           self.num_pending.tolist(), self.timestamp.tolist())
        return self._lists

    def message(self, i: int) -> tuple[str, bytes, bytes]:
        """(subject, header block, payload) of message ``i``."""
        which, hends, dends, *_ = self._lists or self.lists()
        return (self.subjects[which[i]], self.hdrs[hends[i]:hends[i + 1]],
                self.data[dends[i]:dends[i + 1]])

    def reply(self, i: int) -> str:
        """Message ``i``'s ack reply subject, as :attr:`Delivery.reply`."""
        cols = self.lists()
        return (f"{ACK_PREFIX}.{self.stream}.{self.consumer}.{cols[5][i]}.{cols[3][i]}."
                f"{cols[4][i]}.{cols[7][i]}.{cols[6][i]}")

    def to_arrow(self) -> pa.RecordBatch:
        """Every message as a row of :data:`ARROW_SCHEMA`; the stream and consumer names
        are in the schema's metadata."""
        n = len(self)
        subjects = arrays.binaries(self.subjects, pa.string()).take(arrays.numbers(self.which))
        hdr_offsets = np.zeros(n + 1, np.int64)
        hdr_offsets[1:] = self.hdr_ends
        no_hdr = np.diff(hdr_offsets) == 0
        columns = [
            subjects,
            _binary(self.data, self.data_ends),
            _binary(self.hdrs, self.hdr_ends, None if not no_hdr.any() else no_hdr),
            *(arrays.numbers(getattr(self, name)) for name in _NUMBERS[:-1]),
            arrays.numbers(self.timestamp, pa.timestamp("ns", tz="UTC")),
        ]
        schema = ARROW_SCHEMA.with_metadata({"stream": self.stream, "consumer": self.consumer})
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(blob: bytes, ends: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """Values back to back in ``blob`` ending at ``ends`` as a binary array (nothing copied
    but the offsets); ``null`` marks the rows without a value."""
    offsets = np.zeros(len(ends) + 1, np.int64)
    offsets[1:] = ends
    validity = None if null is None else arrays.validity(null)
    if len(blob) < (1 << 31) - 1:
        return pa.Array.from_buffers(pa.binary(), len(ends), [
            validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(blob)],
            null_count=0 if null is None else int(null.sum()))
    big = pa.Array.from_buffers(pa.large_binary(), len(ends),
                                [validity, pa.py_buffer(offsets), pa.py_buffer(blob)])
    return big.cast(pa.binary())


MAX_RANGE_ACKS = 1_000_000  # stream seqs one ack call may name through ranges


def seq_ranges(seqs) -> np.ndarray:
    """Stream seqs as inclusive ranges ``[lo0, hi0, lo1, hi1, ...]`` (sorted, duplicates
    dropped): how a batch of plain acks crosses to the consumer leader."""
    s = np.unique(np.asarray(seqs, np.int64))
    if not len(s):
        return np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(s) != 1)
    out = np.empty(2 * (len(breaks) + 1), np.int64)
    out[0::2] = s[np.concatenate(([0], breaks + 1))]
    out[1::2] = s[np.concatenate((breaks, [len(s) - 1]))]
    return out


def expand_ranges(ranges) -> list[int]:
    """The stream seqs of :func:`seq_ranges`' form, checked (a bad form is refused whole:
    nothing of it is acked)."""
    try:
        r = np.asarray(ranges).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        raise BadRequestError("ack ranges are stream sequence numbers") from None
    if not len(r):
        return []
    if r.dtype.kind not in "iu" or r.dtype.kind == "u" and r.max() > 2**63 - 1:
        raise BadRequestError("ack ranges are stream sequence numbers")
    r = r.astype(np.int64)
    if len(r) % 2:
        raise BadRequestError("ack ranges come in pairs (first, last)")
    lo, hi = r[0::2], r[1::2]
    if (lo < 1).any() or (hi < lo).any():
        raise BadRequestError("an ack range needs 1 <= first <= last")
    if int((hi - lo + 1).sum()) > MAX_RANGE_ACKS:
        raise BadRequestError(f"one ack call names at most {MAX_RANGE_ACKS} messages")
    if len(lo) == 1:
        return list(range(int(lo[0]), int(hi[0]) + 1))
    return np.concatenate([np.arange(a, b + 1) for a, b in zip(lo.tolist(), hi.tolist(),
                                                              strict=True)]).tolist()


__all__ = ["ARROW_SCHEMA", "MAX_RANGE_ACKS", "DeliveryBatch", "expand_ranges", "seq_ranges"]
