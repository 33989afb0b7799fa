"""Rebuilding a FileStore's index: replaying the blocks, or loading the index file.

Replay applies frames in write order, exactly as the live store applied them, so a
reopened store reports the same state. Damaged regions are skipped; the seqs they must
have held (a jump in sequence right after damage) are reported as lost. A torn tail of
the last block is cut off so new records follow the last complete one.
"""

from __future__ import annotations

import heapq
import json
import os
import struct
from array import array
from typing import TYPE_CHECKING

from rayjet.errors import APIError, EncryptionKeyError
from rayjet.storage import record as rec
from rayjet.storage.block import Damage, scan
from rayjet.storage.index import SubjectSeqs

if TYPE_CHECKING:
    from rayjet.storage.filestore import FileStore

_OFF_BITS = 40
_MAGIC = b"RJIDX001"
_LEN = struct.Struct("<Q")


def frame_top(buf, f) -> int:
    """The highest seq a frame names."""
    if f.kind == rec.K_DEL:
        return f.seq + rec.control_count(rec.body_of(buf, f.offset, f.length)) - 1
    if f.kind == rec.K_FLOOR:
        return f.seq - 1
    return f.seq


def replay(store: FileStore) -> None:
    idx, codec = store._idx, store._codec
    numbers = sorted(store._blocks)
    damaged = False
    for no in numbers:
        blk = store._blocks[no]
        buf = blk.read_all()
        for f in scan(buf):
            if isinstance(f, Damage):
                damaged = True
                store.damage.append((no, f.offset, f.end))
                if f.end >= len(buf):
                    if f.claimed_seq == idx.last + 1:
                        store._lost_seq(f.claimed_seq)
                    if no == numbers[-1]:
                        blk.truncate(f.offset)  # torn tail: new records follow the last good one
                continue
            top = frame_top(buf, f)
            if damaged and f.kind in (rec.K_MSG, rec.K_DEL, rec.K_ERASED) \
                    and f.seq > idx.last + 1 and idx.last:
                for s in range(idx.last + 1, f.seq):
                    store._lost_seq(s)
            damaged = False
            if f.kind == rec.K_MSG:
                _apply_msg(store, buf, f, no, codec)
            else:
                _apply_control(store, buf, f, top)
        blk.max_seq = idx.last
    # drop TTL bookkeeping of seqs later frames removed
    store._ttl_exp = {s: e for s, e in store._ttl_exp.items() if idx.live(s)}
    store._ttl_heap = [(e, s) for s, e in store._ttl_exp.items()]
    heapq.heapify(store._ttl_heap)
    store._never = {s for s in store._never if idx.live(s)}


def _apply_msg(store: FileStore, buf, f, no: int, codec) -> None:
    idx = store._idx
    if f.seq <= idx.last:
        return
    body = rec.body_of(buf, f.offset, f.length)
    if f.flags & (rec.F_COMPRESSED | rec.F_ENCRYPTED):
        try:
            body = codec.decode(f.flags, bytes(buf[f.offset:f.offset + rec.HEAD_LEN]), body)
        except EncryptionKeyError:
            raise
        except APIError:
            store._lost_seq(f.seq)
            idx.skip(idx.last + 1, f.seq - idx.last)
            return
    subject, hdr, data = rec.split_body(body, bool(f.flags & rec.F_HDR))
    size = rec.record_size(len(subject.encode()), len(hdr), len(data))
    idx.add(f.seq, f.ts, subject, size, ((no << _OFF_BITS) | f.offset, f.length))
    if hdr and b"Nats-TTL" in hdr:
        store._track_ttl(f.seq, f.ts, store._ttl_of(hdr, 0))


def _apply_control(store: FileStore, buf, f, top: int) -> None:
    idx = store._idx
    kind = f.kind
    if kind == rec.K_FLOOR:
        idx.remove_below(f.seq)
    elif kind in (rec.K_DEL, rec.K_ERASED):
        for s in range(max(f.seq, idx.first), min(top, idx.last) + 1):
            idx.remove(s)
    if top > idx.last:
        idx.skip(idx.last + 1, top - idx.last)
    if top >= idx.last:
        idx.last_ts = f.ts


def cut_offset(buf, seq: int) -> int:
    """Where to cut a block so no frame in it names a seq above ``seq``."""
    for f in scan(buf):
        if isinstance(f, Damage):
            return f.offset
        if frame_top(buf, f) > seq:
            return f.offset
    return len(buf)


# -- the index file --------------------------------------------------------------------------
def _arrays(store: FileStore) -> list[array]:
    idx = store._idx
    return [idx.ts, idx.size, idx.sid, idx.aux[0], idx.aux[1]]


def save_index(store: FileStore, path: str) -> None:
    idx = store._idx
    head = {
        "blocks": [[b.no, b.size, b.max_seq] for b in sorted(store._blocks.values(),
                                                             key=lambda b: b.no)],
        "base": idx.base, "first": idx.first, "last": idx.last, "last_ts": idx.last_ts,
        "msgs": idx.msgs, "bytes": idx.bytes, "subjects": idx.subj_names,
        "ttl": [[s, e] for s, e in store._ttl_exp.items()], "never": sorted(store._never),
        "lost": store._lost,
    }
    raw = json.dumps(head).encode()
    parts = [_MAGIC, _LEN.pack(len(raw)), raw]
    for arr in _arrays(store):
        data = arr.tobytes()
        parts += [_LEN.pack(len(data)), data]
    body = b"".join(parts)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body + rec.frame_hash(body))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_index(store: FileStore, path: str) -> bool:
    """Load the index a clean close left; False when missing, damaged or stale."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError:
        return False
    if len(buf) < 24 or buf[:8] != _MAGIC or rec.frame_hash(memoryview(buf)[:-8]) != buf[-8:]:
        return False
    try:
        (n,) = _LEN.unpack_from(buf, 8)
        head = json.loads(buf[16:16 + n])
        on_disk = sorted((b.no, b.size) for b in store._blocks.values())
        if on_disk != [(no, size) for no, size, _m in head["blocks"]]:
            return False
        pos = 16 + n
        idx = store._idx
        idx.reset(head["first"], head["last"], head["last_ts"])
        arrays = _arrays(store)
        for arr in arrays:
            (k,) = _LEN.unpack_from(buf, pos)
            arr.frombytes(buf[pos + 8:pos + 8 + k])
            pos += 8 + k
    except (ValueError, KeyError, struct.error):
        store._idx.reset(1, 0, 0)
        return False
    idx.base, idx.msgs, idx.bytes = head["base"], head["msgs"], head["bytes"]
    for no, _size, max_seq in head["blocks"]:
        store._blocks[no].max_seq = max_seq
    names = head["subjects"]
    idx.subj_names.extend(names)
    for sid, name in enumerate(names):
        if name is None:
            idx.subj_seqs.append(None)
            idx._free.append(sid)
        else:
            idx.subj_seqs.append(SubjectSeqs())
            idx.subj_ids[name] = sid
    seqs, base = idx.subj_seqs, idx.base
    for i, (size, sid) in enumerate(zip(idx.size, idx.sid)):
        if size:
            seqs[sid].seqs.append(base + i)
    store._ttl_exp = {s: e for s, e in head["ttl"]}
    store._ttl_heap = [(e, s) for s, e in head["ttl"]]
    heapq.heapify(store._ttl_heap)
    store._never = set(head["never"])
    store._lost = list(head["lost"])
    return True


__all__ = ["cut_offset", "load_index", "replay", "save_index"]
