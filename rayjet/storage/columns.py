"""Message records decoded in bulk into Arrow columns.

A range read hands a run of records read from the blocks (back to back, one ``pread`` per
run of adjacent records) to :func:`decode_plain`, which finds every field with numpy over
the buffer and cuts the subject, header and payload columns out of it with one Arrow
``take`` each: the checksum calls are the only Python work per message. Anything it does not expect (a
compressed or encrypted record, a record that is not where the index says, a checksum that
fails) makes it answer None, and the caller reads those messages one at a time, which
reports the damage the way single reads do.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from rayjet.storage import arrow_arrays as arrays
from rayjet.storage import record as rec

SCHEMA = pa.schema([
    ("seq", pa.uint64()),
    ("ts", pa.int64()),
    ("subject", pa.string()),
    ("hdr", pa.binary()),
    ("data", pa.binary()),
])


_WIDE = {2: "<u2", 4: "<u4", 8: "<u8"}
_SMALL_GATHER = 1024  # up to this many values one 2-D gather costs less than one per byte


def _le(raw: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The little-endian unsigned ints of ``width`` bytes at each offset ``at``: a gather
    per byte for many offsets, one two-dimensional gather for a few (a pull's short read
    then pays a few numpy calls, not two per byte)."""
    if len(at) <= _SMALL_GATHER:
        rows = raw[at[:, None] + np.arange(width)]
        return rows.view(_WIDE[width]).reshape(-1).astype(np.uint64)
    out = np.zeros(len(at), np.uint64)
    for k in range(width):
        out |= raw[at + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def _cut(whole: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The regions ``[starts[i], ends[i])`` of ``whole`` (in order, not overlapping) as a
    binary array: ``whole`` is first seen as an array alternating the gaps between regions
    and the regions (offsets only, nothing copied), and Arrow's ``take`` of every second
    element copies the regions out in C."""
    n = len(starts)
    offsets = np.empty(2 * n + 2, np.int64)
    offsets[0] = 0
    offsets[1:-1:2] = starts
    offsets[2:-1:2] = ends
    offsets[-1] = whole.size
    if whole.size < (1 << 31) - 1:
        kind, offsets = pa.binary(), offsets.astype(np.int32)
    else:
        kind = pa.large_binary()
    spans = pa.Array.from_buffers(kind, 2 * n + 1, [None, pa.py_buffer(offsets), whole])
    out = spans.take(arrays.numbers(np.arange(1, 2 * n, 2)))
    return out.cast(pa.binary()) if kind != pa.binary() else out


def empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([arrays.empty(f.type) for f in SCHEMA], schema=SCHEMA)


def from_rows(seqs: list[int], tss: list[int], subjects: list[str], hdrs: list[bytes],
              datas: list[bytes]) -> pa.RecordBatch:
    """The same columns built from Python values (stores without block buffers)."""
    return pa.RecordBatch.from_arrays([
        arrays.numbers(seqs, pa.uint64()), arrays.numbers(tss, pa.int64()),
        arrays.binaries(subjects, pa.string()), arrays.binaries(hdrs),
        arrays.binaries(datas)], schema=SCHEMA)


def decode_plain(buf: bytes, seqs: np.ndarray, lens: np.ndarray) -> pa.RecordBatch | None:
    """The messages ``seqs`` whose plain records (``lens`` bytes each) lie back to back in
    ``buf``, as columns; None when any record is not such a record or fails its checksum."""
    n = len(seqs)
    if n == 0:
        return empty()
    lens = lens.astype(np.int64)
    ends = np.cumsum(lens)
    if int(ends[-1]) != len(buf) or int(lens.min()) < rec.MIN_FRAME:
        return None
    offs = ends - lens
    raw = np.frombuffer(buf, np.uint8)
    lf = _le(raw, offs, 4)
    seq_kind = _le(raw, offs + 4, 8)
    if (np.any((lf & np.uint64(rec.LEN_MASK)) != lens.astype(np.uint64))
            or np.any(lf & np.uint64(rec.F_COMPRESSED | rec.F_ENCRYPTED))
            or np.any(seq_kind != seqs.astype(np.uint64))):  # kind 0 and the seq expected
        return None
    tails = ends - rec.HASH_LEN
    if not _hashes_match(buf, raw, offs, tails):
        return None
    ts = _le(raw, offs + 12, 8).view(np.int64)
    subj_start = offs + 22
    subj_end = subj_start + _le(raw, offs + 20, 2).astype(np.int64)
    has_hdr = (lf & np.uint64(rec.F_HDR)) != 0
    hdr_start = subj_end + np.where(has_hdr, 4, 0)
    hdr_len = np.zeros(n, np.int64)
    if has_hdr.any():
        at = subj_end[has_hdr]
        if int(at.max()) + 4 > len(buf):
            return None
        hdr_len[has_hdr] = _le(raw, at, 4).astype(np.int64)
    hdr_end = hdr_start + hdr_len
    if np.any(hdr_end > tails):
        return None
    whole = pa.py_buffer(buf)
    return pa.RecordBatch.from_arrays([
        arrays.numbers(seqs, pa.uint64()), arrays.numbers(ts, pa.int64()),
        _cut(whole, subj_start, subj_end).view(pa.string()),  # checked when stored
        _cut(whole, hdr_start, hdr_end), _cut(whole, hdr_end, tails)], schema=SCHEMA)


def _hashes_match(buf: bytes, raw: np.ndarray, offs: np.ndarray, tails: np.ndarray) -> bool:
    """Each record's CRC-32 and Adler-32 against the hash stored after it (``map`` keeps
    the per-record calls in C: no bytecode runs per message)."""
    view = memoryview(buf)
    spans = list(map(view.__getitem__, map(slice, offs.tolist(), tails.tolist())))
    crc = np.fromiter(map(zlib.crc32, spans), np.uint64, len(spans))
    adler = np.fromiter(map(zlib.adler32, spans), np.uint64, len(spans))
    return bool(np.array_equal(_le(raw, tails, 4), crc)
                and np.array_equal(_le(raw, tails + 4, 4), adler))


__all__ = ["SCHEMA", "decode_plain", "empty", "from_rows"]
