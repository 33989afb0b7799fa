"""Rebuilding a FileStore's index: from the latest checkpoint plus the frames after it,
or by replaying every block.

Replay applies frames in write order, exactly as the live store applied them, so a
reopened store reports the same state. Damaged regions are skipped; the seqs they must
have held (a jump in sequence right after damage) are reported as lost. A torn tail of
the last block is cut off so new records follow the last complete one.
"""

from __future__ import annotations

import heapq
import os
from typing import TYPE_CHECKING

import numpy as np

from rayjet.errors import APIError, EncryptionKeyError
from rayjet.storage import checkpoint as ckp
from rayjet.storage import record as rec
from rayjet.storage.block import Block, Damage, scan
from rayjet.storage.blockindex import Table, frames_table, read_table

if TYPE_CHECKING:
    from rayjet.storage.filestore import FileStore

_OFF_BITS = 40


def frame_top(buf, f) -> int:
    """The highest seq a frame names."""
    if f.kind == rec.K_DEL:
        return f.seq + rec.control_count(rec.body_of(buf, f.offset, f.length)) - 1
    if f.kind == rec.K_FLOOR:
        return f.seq - 1
    return f.seq


def replay(store: FileStore, start: tuple[int, int] = (0, 0)) -> None:
    """Apply the frames from block ``start[0]`` offset ``start[1]`` on (all by default)."""
    idx, codec = store._idx, store._codec
    numbers = sorted(n for n in store._blocks if n >= start[0])
    stats = store.recovery
    damaged = False
    for no in numbers:
        blk = store._blocks[no]
        buf = blk.read_all()
        skip = start[1] if no == start[0] else 0
        if skip >= len(buf):
            continue
        stats["blocks_replayed"] += 1
        if not skip:
            store._ttl_log[no] = []
        for f in scan(buf, skip):
            stats["frames_replayed"] += 1
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
    _settle_ttls(store)


def _settle_ttls(store: FileStore) -> None:
    """Drop TTL bookkeeping of seqs later frames removed."""
    idx = store._idx
    store._ttl_exp = {s: e for s, e in store._ttl_exp.items() if idx.live(s)}
    store._ttl_heap = [(e, s) for s, e in store._ttl_exp.items()]
    heapq.heapify(store._ttl_heap)
    store._never = {s for s in store._never if idx.live(s)}


def _apply_msg(store: FileStore, buf, f, no: int, codec) -> None:
    idx = store._idx
    if f.seq <= idx.last:
        return
    try:
        body = codec.frame_body(buf, f.offset, f.length, f.flags)
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
        ttl = store._ttl_of(hdr, 0)
        store._track_ttl(f.seq, f.ts, ttl)
        if ttl:
            store._ttl_log.setdefault(no, []).append([f.seq, f.ts, ttl])


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




# -- reopening from a checkpoint -------------------------------------------------------------
def load_checkpoint(store: FileStore) -> bool:
    """Load what the latest checkpoint describes, then replay only the frames after it.

    False (and the store left empty) when the checkpoint is missing, damaged or does not
    match the blocks on disk: the caller replays everything then.
    """
    ck = ckp.read(os.path.join(store.directory, ckp.NAME))
    if ck is None or not ck.blocks:
        return False
    tables = _tables(store, ck)
    if tables is None or not _apply(store, ck, tables):
        _forget(store)
        return False
    replay(store, (ck.blocks[-1][0], ck.blocks[-1][1]))
    return True


def _tables(store: FileStore, ck: ckp.Checkpoint) -> list[Table] | None:
    """The message tables of every block prefix the checkpoint covers, or None."""
    blocks = store._blocks
    last_no, last_size = ck.blocks[-1][0], ck.blocks[-1][1]
    listed = {b[0] for b in ck.blocks}
    if any(no < last_no and no not in listed for no in blocks):
        return None
    tables: list[Table] = []
    for no, size, max_seq, digest in ck.blocks:
        blk = blocks.get(no)
        if blk is None:
            if max_seq < ck.first:
                continue  # compacted away: it held nothing live
            return None
        if blk.size < size or (no != last_no and blk.size != size):
            return None
        blk.max_seq = max_seq
        if max_seq < ck.first:
            continue
        got = _block_tables(store, blk, size, digest)
        if got is None:
            return None
        tables += got
    last = blocks.get(last_no)
    if last is not None and last.tail(last_size).hex() != ck.tail:
        return None  # the checkpoint is from before the block was cut or rewritten
    return tables


def _block_tables(store: FileStore, blk: Block, size: int, digest: str) -> list[Table] | None:
    """The table of ``blk[:size]``: its index file where the checkpoint trusted it and it
    still matches the block, the remaining frames decoded."""
    stats = store.recovery
    parts: list[Table] = []
    covered = 0
    got = read_table(blk.index_path, store._codec) if digest else None
    if got is not None:
        table, tail, file_hash = got
        if file_hash.hex() == digest and table.no == blk.no and table.covered <= size \
                and blk.tail(table.covered) == tail:
            parts.append(table)
            covered = table.covered
            store._idx_hash[blk.no] = file_hash
    if covered < size:
        buf = os.pread(blk.fd, size - covered, covered)
        decoded = frames_table(buf, covered, blk.no, store._codec, store._ttl_of)
        if decoded is None:
            return None
        parts.append(decoded[0])
        stats["blocks_replayed"] += 1
        stats["frames_replayed"] += decoded[1]
    else:
        stats["blocks_loaded"] += 1
    return parts


def _apply(store: FileStore, ck: ckp.Checkpoint, tables: list[Table]) -> bool:
    """Fill the index from the tables and the checkpoint; False when they disagree."""
    ids: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("seq", "ts", "size", "sid",
                                                          "aux0", "aux1")}
    for t in tables:
        c = t.cols
        lut = np.array([ids.setdefault(n, len(ids)) for n in t.names], np.uint32)
        parts["seq"].append(c["seq"])
        parts["ts"].append(c["ts"])
        parts["size"].append(c["size"])
        parts["sid"].append(lut[c["lsid"]] if len(lut) else c["lsid"])
        parts["aux0"].append(np.uint64(t.no << _OFF_BITS) | c["off"].astype(np.uint64))
        parts["aux1"].append(c["flen"])
    cols = {k: np.concatenate(v) if v else np.zeros(0, np.uint64) for k, v in parts.items()}
    seqs = cols["seq"]
    if len(seqs) > 1 and not bool(np.all(seqs[1:] > seqs[:-1])):
        return False
    idx = store._idx
    idx.load(ck.first, ck.last, ck.last_ts, cols, list(ids), (ck.dead_starts, ck.dead_lens))
    if idx.msgs != ck.msgs or idx.bytes != ck.bytes or (idx.msgs and not idx.live(ck.first)):
        return False
    store._lost = list(ck.lost)
    for t in tables:
        for seq, ts, ttl in t.ttls:
            store._track_ttl(seq, ts, ttl)
        store._ttl_log.setdefault(t.no, []).extend(t.ttls)
    return True


def _forget(store: FileStore) -> None:
    """Undo a partial load before a full replay."""
    store._idx.reset(1, 0, 0)
    store._ttl_exp.clear()
    store._ttl_heap.clear()
    store._never.clear()
    store._lost = []
    store._ttl_log.clear()
    store._idx_hash.clear()
    for key in store.recovery:
        store.recovery[key] = 0


__all__ = ["cut_offset", "load_checkpoint", "replay"]
