"""Block index files: the message table of a block prefix, so reopening skips decoding it.

``NNNNNNNN.idx`` describes the first ``covered`` bytes of block ``NNNNNNNN.blk``: per message
frame its seq, ts, record size, offset, frame length and subject, plus the Nats-TTL values
its headers carried. It says nothing about deletes: the checkpoint (``checkpoint.py``) and
the frames after it do. Layout::

    magic | u32 n | head JSON (n bytes) | payload | hash (CRC-32 + Adler-32 of all before)

The payload holds the subjects, so an encrypted store seals it with the store key. The
head keeps ``tail``, the 8 hash bytes that end the covered prefix: an index whose block
was cut and rewritten (or never reached the disk) fails that check and is not used. It
also keeps ``crc``, the CRC-32 of the whole covered prefix, so reopening verifies every
byte of a sealed block with one pass in C (index files written before it have none: their
blocks are verified record by record, then indexed again).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from rayjet.errors import APIError, EncryptionKeyError
from rayjet.storage import record as rec
from rayjet.storage.block import Damage, scan

_MAGIC = b"RJBIX001"
_U32 = struct.Struct("<I")
# column name and dtype, in file order
COLUMNS = (("seq", np.uint64), ("ts", np.int64), ("size", np.uint32), ("off", np.uint32),
           ("flen", np.uint32), ("lsid", np.uint32))


@dataclass(slots=True)
class Table:
    """The message frames of ``[start, covered)`` of one block, in file order."""

    no: int
    covered: int
    cols: dict[str, np.ndarray]
    names: list[str]  # subject of local id i
    ttls: list[list[int]] = field(default_factory=list)  # [seq, ts, ttl] of TTL headers
    start: int = 0
    crc: int | None = None  # CRC-32 of the block's bytes [0, covered), when known
    first: int | None = None  # the store's lowest seq when the file was written

    def __len__(self) -> int:
        return len(self.cols["seq"])


def empty_cols() -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype) for name, dtype in COLUMNS}


# -- writing -------------------------------------------------------------------------------
def write_table(path: str, table: Table, tail: bytes, codec, crc: int | None,
                first: int | None = None) -> bytes:
    """Write ``table`` atomically (tmp + rename); returns the file's hash, its identity.
    ``crc`` is the CRC-32 of the block's first ``table.covered`` bytes; ``first`` the
    lowest seq the store still held then (a full replay that finds no block holding it
    knows the messages from there were lost, not compacted)."""
    meta = json.dumps({"names": table.names, "ttls": table.ttls}).encode()
    payload = b"".join([_U32.pack(len(meta)), meta] +
                       [np.ascontiguousarray(table.cols[n], d).tobytes() for n, d in COLUMNS])
    head = json.dumps({"no": table.no, "covered": table.covered, "count": len(table),
                       "tail": tail.hex(), "sealed": codec.encrypted, "crc": crc,
                       "first": first}).encode()
    front = _MAGIC + _U32.pack(len(head)) + head
    if codec.encrypted:
        payload = codec.seal_blob(payload, front)
    body = front + payload
    digest = rec.frame_hash(body)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body + digest)
    os.replace(tmp, path)
    return digest


# -- reading -------------------------------------------------------------------------------
def read_table(path: str, codec) -> tuple[Table, bytes, bytes] | None:
    """(table, tail, file hash) of an index file; None when missing or damaged."""
    buf = rec.read_checked_file(path, _MAGIC, 20)
    if buf is None:
        return None
    try:
        (n,) = _U32.unpack_from(buf, 8)
        head = json.loads(buf[12:12 + n])
        payload = buf[12 + n:-8]
        if head["sealed"] != codec.encrypted:
            return None
        if codec.encrypted:
            payload = codec.open_blob(payload, buf[:12 + n])
        return _parse(head, payload), bytes.fromhex(head["tail"]), buf[-8:]
    except (ValueError, KeyError, TypeError, struct.error, EncryptionKeyError):
        return None


def _parse(head: dict, payload: bytes) -> Table:
    (m,) = _U32.unpack_from(payload, 0)
    meta = json.loads(payload[4:4 + m])
    count, pos, cols = head["count"], 4 + m, {}
    for name, dtype in COLUMNS:
        k = count * np.dtype(dtype).itemsize
        cols[name] = np.frombuffer(payload, dtype, count, pos)
        pos += k
    if pos != len(payload):
        raise ValueError("index payload has the wrong length")
    crc, first = head.get("crc"), head.get("first")
    if not isinstance(crc, int | None) or not isinstance(first, int | None):
        raise ValueError("index crc or first is not a number")
    return Table(head["no"], head["covered"], cols, meta["names"], meta["ttls"], crc=crc,
                 first=first)


# -- from the frames themselves ------------------------------------------------------------
def frames_table(buf, base: int, no: int, codec, ttl_of,
                 damage: list[Damage] | None = None) -> tuple[Table, int] | None:
    """The table of ``buf`` (a block's bytes from offset ``base``) by decoding its frames,
    and how many frames it read. A damaged frame makes it answer None, or, when ``damage``
    is a list, is added there (offsets relative to ``buf``) and left out of the table."""
    seqs, tss, sizes, offs, flens, lsids = [], [], [], [], [], []
    names: dict[str, int] = {}
    ttls: list[list[int]] = []
    frames = 0
    for f in scan(buf):
        frames += 1
        if isinstance(f, Damage):
            if damage is None:
                return None
            damage.append(f)
            continue
        if f.kind != rec.K_MSG:
            continue
        try:
            body = codec.frame_body(buf, f.offset, f.length, f.flags)
        except EncryptionKeyError:
            raise
        except APIError:
            if damage is None:
                return None
            damage.append(Damage(f.offset, f.offset + f.length, True, f.seq))
            continue
        subject, hdr, data = rec.split_body(body, bool(f.flags & rec.F_HDR))
        seqs.append(f.seq)
        tss.append(f.ts)
        sizes.append(rec.record_size(len(subject.encode()), len(hdr), len(data)))
        offs.append(base + f.offset)
        flens.append(f.length)
        lsids.append(names.setdefault(subject, len(names)))
        if hdr and b"Nats-TTL" in hdr:
            ttl = ttl_of(hdr, 0)
            if ttl:
                ttls.append([f.seq, f.ts, ttl])
    cols = {}
    for (name, dtype), values in zip(COLUMNS, (seqs, tss, sizes, offs, flens, lsids)):
        cols[name] = np.array(values, dtype)
    return Table(no, base + len(buf), cols, list(names), ttls, base), frames


__all__ = ["COLUMNS", "Table", "empty_cols", "frames_table", "read_table", "write_table"]
