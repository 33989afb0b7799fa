"""Rebuilding a FileStore's index: from the latest checkpoint plus the frames after it,
or by replaying every block.

Replay applies frames in write order, exactly as the live store applied them, so a
reopened store reports the same state. Damaged regions are skipped; the seqs they must
have held (a jump in sequence right after damage) are reported as lost. A torn tail of
the last block is cut off so new records follow the last complete one.
"""

from __future__ import annotations

import os

import numpy as np

from rayjet.errors import APIError, EncryptionKeyError
from rayjet.storage import checkpoint as ckp
from rayjet.storage import record as rec
from rayjet.storage import scrub
from rayjet.storage.block import Damage, scan
from rayjet.storage.blockindex import read_table
from rayjet.storage.recovering import RecoveringStore

_OFF_BITS = 40


def frame_top(buf, f) -> int:
    """The highest seq a frame names."""
    if f.kind == rec.K_DEL:
        return f.seq + rec.control_count(rec.body_of(buf, f.offset, f.length)) - 1
    if f.kind == rec.K_FLOOR:
        return f.seq - 1
    return f.seq


def replay(store: RecoveringStore, start: tuple[int, int] = (0, 0)) -> None:
    """Apply the frames from block ``start[0]`` offset ``start[1]`` on (all by default).

    A seq the frames jump over right after damage (or a missing block) is lost; so is,
    in a full replay, a message a block's index file lists that the block no longer holds
    intact. A later frame that deletes a lost seq makes it a deleted one.
    """
    idx, codec = store.index, store.codec
    numbers = [n for n in store.block_numbers() if n >= start[0]]
    stats = store.recovery
    # the checkpointed block gone or cut short: what followed the checkpoint in it is too
    damaged = start != (0, 0) and (not numbers or numbers[0] != start[0]
                                   or store.block(start[0]).size < start[1])
    prev = None
    # a full replay starts where the first block's index file says the store did (the
    # blocks before it were compacted away, or lost: then no floor record covers them)
    floor = _indexed_first(store, numbers) if numbers and start == (0, 0) else 0
    for no in numbers:
        blk = store.block(no)
        if prev is not None and no != prev + 1:
            damaged = True  # a block in between is gone
        prev = no
        buf = blk.read_all()
        skip = start[1] if no == start[0] else 0
        if skip >= len(buf):
            continue
        stats["blocks_replayed"] += 1
        if not skip:
            store.clear_ttl_log(no)
        hurt = False
        for f in scan(buf, skip):
            stats["frames_replayed"] += 1
            if isinstance(f, Damage):
                damaged = hurt = True
                store.note_damage(no, [(f.offset, f.end)])
                if f.end >= len(buf):
                    if f.complete and (f.claimed_seq == idx.last + 1
                                       or f.claimed_kind == rec.K_MSG):
                        # a whole message record failed its hash (a torn write is not a
                        # loss: it never completed, and its seq is taken again)
                        store.lost.add(idx.last + 1)
                        idx.skip(idx.last + 1, 1)
                    if no == numbers[-1]:
                        blk.truncate(f.offset)  # torn tail: new records follow the last good one
                continue
            top = frame_top(buf, f)
            if damaged and f.kind in (rec.K_MSG, rec.K_DEL, rec.K_ERASED) \
                    and f.seq > idx.last + 1 and idx.last:
                store.lost.update(range(idx.last + 1, f.seq))
            if floor and f.kind == rec.K_MSG and not idx.last:
                if f.seq > floor:
                    store.lost.update(range(floor, f.seq))
                floor = 0
            damaged = False
            if f.kind == rec.K_MSG:
                _apply_msg(store, buf, f, no, codec)
            else:
                _apply_control(store, buf, f, top)
        if not skip and start == (0, 0):
            _indexed_but_gone(store, no, buf, hurt)
        blk.max_seq = idx.last
    store.forget_ttls_of_removed()  # later frames removed them


def _indexed_first(store: RecoveringStore, numbers: list[int]) -> int:
    """Where the store began: the first seq the earliest readable index file records (an
    index file records the store's first seq when it was written, which only grows), or
    1 when none can be read but the store's very first block is there. A message missing
    between that and the first intact frame is then reported lost, never silently gone."""
    for no in numbers:
        got = read_table(store.block(no).index_path, store.codec)
        if got is not None and got[0].no == no:
            return got[0].first or 0
    return 1 if numbers and numbers[0] == 1 else 0


def _indexed_but_gone(store: RecoveringStore, no: int, buf, hurt: bool) -> None:
    """In a full replay: the messages a damaged (or cut short) block's index file lists
    that its frames no longer hold are lost."""
    got = read_table(store.block(no).index_path, store.codec)
    if got is None or got[0].no != no or not (hurt or len(buf) < got[0].covered):
        return
    gone = scrub.gone_rows(no, buf, got[0])
    idx = store.index
    gone = [s for s in gone or () if not idx.live(s)]
    if not gone:
        return
    store.lost.update(gone)
    if gone[-1] > idx.last:
        idx.skip(idx.last + 1, gone[-1] - idx.last)


def _apply_msg(store: RecoveringStore, buf, f, no: int, codec) -> None:
    idx = store.index
    if f.seq <= idx.last:
        return
    try:
        body = codec.frame_body(buf, f.offset, f.length, f.flags)
    except EncryptionKeyError:
        raise
    except APIError:
        store.lost.add(f.seq)
        idx.skip(idx.last + 1, f.seq - idx.last)
        return
    subject, hdr, data = rec.split_body(body, bool(f.flags & rec.F_HDR))
    size = rec.record_size(len(subject.encode()), len(hdr), len(data))
    idx.add(f.seq, f.ts, subject, size, ((no << _OFF_BITS) | f.offset, f.length))
    if hdr and b"Nats-TTL" in hdr:
        ttl = store.ttl_of(hdr)
        if ttl:
            store.track_ttls(no, [[f.seq, f.ts, ttl]])


def _apply_control(store: RecoveringStore, buf, f, top: int) -> None:
    idx = store.index
    kind = f.kind
    lost = store.lost
    if kind == rec.K_FLOOR:
        idx.remove_below(f.seq)
        if lost:
            lost.drop_range(0, f.seq - 1)
    elif kind in (rec.K_DEL, rec.K_ERASED):
        for s in range(max(f.seq, idx.first), min(top, idx.last) + 1):
            idx.remove(s)
        if lost:
            lost.drop_range(f.seq, top)
    elif kind == rec.K_LAST and lost:
        lost.drop_range(f.seq + 1, rec.SEQ_MASK)  # a truncate: what was above it is gone
    if top > idx.last:
        idx.skip(idx.last + 1, top - idx.last)
    if top >= idx.last:
        idx.last_ts = f.ts


def cut_offset(buf, seq: int) -> int:
    """Where to cut a block so no frame in it names a seq above ``seq``: after the last
    intact frame before the first one that does (damage in between goes too)."""
    keep = 0
    for f in scan(buf):
        if isinstance(f, Damage):
            continue
        if frame_top(buf, f) > seq:
            break
        keep = f.offset + f.length
    return keep


# -- reopening from a checkpoint -------------------------------------------------------------
def load_checkpoint(store: RecoveringStore) -> bool:
    """Load what the latest checkpoint describes, verifying every block it covers
    (:mod:`rayjet.storage.scrub`), then replay only the frames after it.

    Messages the checkpoint says are live whose records are damaged or missing are lost
    (``StoreState.lost``). False (and the store left empty) when the checkpoint is missing,
    damaged or describes other blocks than those on disk: the caller replays everything.
    """
    ck = ckp.read(os.path.join(store.directory, ckp.NAME))
    if ck is None or not ck.blocks:
        return False
    checks = None
    try:
        checks = scrub.Verification(store, ck)
        ok = _apply(store, ck, checks.checks)
        if ok:
            checks.finish()
    except scrub.Stale:
        ok = False
    finally:
        if checks is not None:
            checks.close()
    if not ok:
        _forget(store)
        return False
    replay(store, (ck.blocks[-1][0], ck.blocks[-1][1]))
    return True


def _apply(store: RecoveringStore, ck: ckp.Checkpoint, checks: list[scrub.BlockCheck]) -> bool:
    """Fill the index from the blocks' tables and the checkpoint; False when they disagree.
    Live seqs no table holds must lie in blocks found damaged: they are lost."""
    ids: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("seq", "ts", "size", "sid",
                                                          "aux0", "aux1")}
    tables = [t for c in checks for t in c.tables]
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
    idx = store.index
    missing = idx.load(ck.first, ck.last, ck.last_ts, cols, list(ids),
                       (ck.dead_starts, ck.dead_lens))
    if idx.msgs + len(missing) != ck.msgs:
        return False
    lost: list[int] = []
    if len(missing):
        if not _explained(missing, checks, idx.bytes, ck.bytes):
            return False
        erased = {s for c in checks for s in c.erased}
        lost = [s for s in missing.tolist() if s not in erased]
        idx.settle_first()
    elif idx.bytes != ck.bytes or (idx.msgs and not idx.live(ck.first)):
        return False
    store.lost.replace([*ck.lost, *lost])
    for t in tables:
        store.track_ttls(t.no, t.ttls)
    return True


def _explained(missing: np.ndarray, checks: list[scrub.BlockCheck], have: int,
               want: int) -> bool:
    """Whether every missing seq lies in a block found damaged (or erased there), and the
    bytes add up to the checkpoint's as far as the index files tell the sizes."""
    known: dict[int, int] = {}
    bounds = []
    for c in checks:
        known.update(c.lost)
        known.update(c.erased)
        if c.damaged or c.erased:
            bounds.append((c.lo, c.hi))
    his = np.array([b[1] for b in bounds], np.int64)
    at = np.searchsorted(his, missing.astype(np.int64), side="left")
    los = np.array([b[0] for b in bounds] + [np.iinfo(np.int64).max], np.int64)
    if len(missing) and (np.any(at >= len(bounds)) or np.any(missing <= los[at])):
        return False
    sizes = [known.get(s) for s in missing.tolist()]
    total = have + sum(v for v in sizes if v is not None)
    return total == want if None not in sizes else total < want


def _forget(store: RecoveringStore) -> None:
    """Undo a partial load before a full replay."""
    store.reset_recovered()


__all__ = ["cut_offset", "load_checkpoint", "replay"]
