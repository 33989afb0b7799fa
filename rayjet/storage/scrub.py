"""Verifying a FileStore's block files when it reopens, and records as they are read.

Reopening from a checkpoint (``recovery.load_checkpoint``) trusts block index files for
what each sealed block holds; this module makes sure the blocks still hold it:

* a block whose index file carries the CRC-32 of the bytes it covers is checked with one
  pass in C over the file (several blocks at once: ``zlib.crc32`` runs without the GIL);
* a block that fails that check, is shorter than the checkpoint says, is missing, or has
  no index file with a checksum is checked record by record (the scan/Damage machinery of
  ``block.py``): every message the index file lists is found intact at its offset, was
  overwritten by an erase, or is lost; the frames no index file covers are decoded.

Damage (bytes that hold no valid frame, a file cut short or gone) makes the messages that
were there lost. A *valid* frame where the index file expects another one is not damage:
the checkpoint and index files describe blocks that were cut and written again since, so
the caller replays every block instead (as it does when a checkpoint does not match).
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from rayjet.storage import record as rec
from rayjet.storage.block import Block, Damage, Frame, crc_of, scan
from rayjet.storage.blockindex import Table, frames_table, read_table
from rayjet.storage.checkpoint import Checkpoint
from rayjet.storage.recovering import RecoveringStore

_WORKERS = max(1, min(4, os.cpu_count() or 1))


class Stale(Exception):
    """The checkpoint or an index file describes blocks that were rewritten since."""


@dataclass(slots=True)
class BlockCheck:
    """What a checkpointed block holds: the messages ``lo < seq <= hi`` of the stream."""

    no: int
    lo: int
    hi: int
    tables: list[Table] = field(default_factory=list)
    damaged: bool = False  # messages it should hold may be missing
    lost: dict[int, int] = field(default_factory=dict)  # seq -> size: indexed, not intact
    erased: dict[int, int] = field(default_factory=dict)  # seq -> size: indexed, erased


class Verification:
    """The checks of every block prefix a checkpoint covers. Blocks whose index file has
    a checksum are loaded at once while their checksums run in threads (the index is
    filled meanwhile); :meth:`finish` waits for them and takes from the loaded index the
    messages of a block that failed whose records are not intact."""

    def __init__(self, store: RecoveringStore, ck: Checkpoint) -> None:
        self.store = store
        self.checks: list[BlockCheck] = []
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[BlockCheck, Table, bytes, Future]] = []
        try:
            self._check(ck)
        except BaseException:
            self.close()
            raise

    def _check(self, ck: Checkpoint) -> None:
        store = self.store
        last_no = ck.blocks[-1][0]
        listed = {b[0] for b in ck.blocks}
        if any(no < last_no and no not in listed for no in store.block_numbers()):
            raise Stale("a block the checkpoint does not know")
        lo = 0
        for no, size, max_seq, digest in ck.blocks:
            chk = BlockCheck(no, lo, max_seq)
            lo = max(lo, max_seq)
            blk = store.block(no)
            if blk is not None:
                blk.max_seq = max_seq
            if max_seq < ck.first:
                continue  # nothing in it is live
            self.checks.append(chk)
            if blk is None:
                chk.damaged = True
                continue
            if blk.size > size and no != last_no:
                raise Stale("a sealed block grew")
            if no == last_no and _tail_rewritten(blk, size, ck.tail):
                raise Stale("the checkpointed end of the last block was rewritten")
            table, file_hash = _index_table(store, blk, size, digest)
            if table is None or table.crc is None or blk.size < table.covered:
                _check_slowly(store, blk, size, table, chk)
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_WORKERS)
            job = self._pool.submit(crc_of, blk.fd, table.covered)
            self._pending.append((chk, table, file_hash, job))
            chk.tables.append(table)
            if table.covered < size:
                _decode_rest(store, blk, table.covered, size, chk)
            else:
                store.recovery["blocks_loaded"] += 1

    def finish(self) -> None:
        """Wait for the checksums; raises :class:`Stale` as the checks before did."""
        store = self.store
        try:
            for chk, table, file_hash, job in self._pending:
                blk = store.block(chk.no)
                if job.result() == table.crc:
                    store.trust_index(chk.no, file_hash)
                    if table.covered == blk.size:
                        blk.crc = table.crc  # sealing it again (an erase) needs no read
                    continue
                store.recovery["blocks_scanned"] += 1
                buf = blk.pread(table.covered, 0)
                good = intact_rows(buf, table.cols["seq"], table.cols["off"],
                                   table.cols["flen"])
                if len(buf) < table.covered:
                    chk.damaged = True
                if not good.all():
                    _classify(store, chk.no, buf, table, good, chk)
                    store.forget_erased(chk.erased)
                    store.mark_lost(chk.lost)
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _index_table(store: RecoveringStore, blk: Block, size: int,
                 digest: str) -> tuple[Table | None, bytes]:
    """The block's index file when it is the one the checkpoint trusted."""
    got = read_table(blk.index_path, store.codec) if digest else None
    if got is None:
        return None, b""
    table, _tail, file_hash = got
    if file_hash.hex() != digest or table.no != blk.no or table.covered > size:
        return None, b""
    return table, file_hash


def _tail_rewritten(blk: Block, size: int, tail: str) -> bool:
    """Whether the last checkpointed block ends its checkpointed prefix with another frame
    than the checkpoint saw (it was cut and written again), as opposed to damage there."""
    if blk.size < size or blk.tail(size).hex() == tail:
        return False
    for f in scan(blk.read_all()):
        if isinstance(f, Frame):
            end = f.offset + f.length
            if end == size or f.offset < size < end:
                return True
            if f.offset >= size:
                break
    return False


def _decode_rest(store: RecoveringStore, blk: Block, start: int, size: int,
                 chk: BlockCheck) -> None:
    """Decode the frames in ``[start, size)`` that no index file covers."""
    end = min(size, blk.size)
    if end < size:
        chk.damaged = True
    if end <= start:
        return
    damage: list[Damage] = []
    decoded = frames_table(blk.pread(end - start, start), start, blk.no, store.codec,
                           store.ttl_of, damage)
    store.note_decoded(decoded[1])
    if len(decoded[0]):
        chk.tables.append(decoded[0])
    if damage:
        chk.damaged = True
        store.note_damage(blk.no, [(start + d.offset, start + d.end) for d in damage])


def _check_slowly(store: RecoveringStore, blk: Block, size: int, table: Table | None,
                  chk: BlockCheck) -> None:
    """Record by record: the rows of ``table`` against the frames on disk, then the frames
    after what it covers."""
    if table is None:
        _decode_rest(store, blk, 0, size, chk)
        return
    store.recovery["blocks_scanned"] += 1
    covered = table.covered
    if covered >= size:
        store.recovery["blocks_loaded"] += 1
    buf = blk.pread(covered, 0) if covered else b""
    good = intact_rows(buf, table.cols["seq"], table.cols["off"], table.cols["flen"])
    if not good.all():
        _classify(store, blk.no, buf, table, good, chk)
        table = _subset(table, good)
    if len(table):
        chk.tables.append(table)
    if len(buf) < covered:
        chk.damaged = True
    _decode_rest(store, blk, covered, size, chk)


def intact_rows(buf, seqs: np.ndarray, offs: np.ndarray, flens: np.ndarray) -> np.ndarray:
    """Which records (a message ``seqs[i]`` of ``flens[i]`` bytes at ``offs[i]`` of
    ``buf``) are there with a valid hash: vectorised header checks, and the checksum calls
    mapped in C (no bytecode runs per record)."""
    offs = np.asarray(offs, np.int64)
    flens = np.asarray(flens, np.int64)
    ends = offs + flens
    ok = (ends <= len(buf)) & (flens >= rec.MIN_FRAME) & (offs >= 0)
    at = np.flatnonzero(ok)
    if not len(at):
        return ok
    raw = np.frombuffer(buf, np.uint8)
    o, e = offs[at], ends[at]
    lf = _u32(raw, o)
    sk = _u32(raw, o + 4).astype(np.uint64) | (_u32(raw, o + 8).astype(np.uint64) << 32)
    same = ((lf & np.uint32(rec.LEN_MASK)) == flens[at].astype(np.uint32)) \
        & (sk == np.asarray(seqs, np.uint64)[at])
    view = memoryview(buf)
    spans = list(map(view.__getitem__, map(slice, o.tolist(), (e - rec.HASH_LEN).tolist())))
    crc = np.fromiter(map(zlib.crc32, spans), np.uint32, len(spans))
    adler = np.fromiter(map(zlib.adler32, spans), np.uint32, len(spans))
    same &= (crc == _u32(raw, e - 8)) & (adler == _u32(raw, e - 4))
    ok[at[~same]] = False
    return ok


def _u32(raw: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian u32 at each offset ``at`` of ``raw``."""
    return (raw[at].astype(np.uint32) | (raw[at + 1].astype(np.uint32) << 8)
            | (raw[at + 2].astype(np.uint32) << 16) | (raw[at + 3].astype(np.uint32) << 24))


def gone_rows(no: int, buf, table: Table) -> list[int] | None:
    """The seqs ``table`` (block ``no``'s index file) lists whose records ``buf`` (the
    block) holds neither intact nor erased; None when the block holds other frames than
    the index file describes (it is stale)."""
    good = intact_rows(buf, table.cols["seq"], table.cols["off"], table.cols["flen"])
    if good.all():
        return []
    chk = BlockCheck(no, 0, 0)
    try:
        _classify(None, no, buf, table, good, chk)
    except Stale:
        return None
    return sorted(chk.lost)


def _classify(store: RecoveringStore | None, no: int, buf, table: Table, good: np.ndarray,
              chk: BlockCheck) -> None:
    """Sort the rows that failed :func:`intact_rows` into erased and lost; a valid frame of
    another record at a row's offset means the index file is stale."""
    frames: dict[int, Frame] = {}
    damage: list[tuple[int, int]] = []
    for f in scan(buf):
        if isinstance(f, Damage):
            damage.append((f.offset, f.end))
        else:
            frames[f.offset] = f
    starts = np.array([d[0] for d in damage], np.int64)
    cols = table.cols
    for i in np.flatnonzero(~good).tolist():
        seq, off, size = int(cols["seq"][i]), int(cols["off"][i]), int(cols["size"][i])
        f = frames.get(off)
        if f is not None:
            if f.kind == rec.K_ERASED and f.seq == seq:
                chk.erased[seq] = size
                continue
            raise Stale(f"block {no} holds another record where its index file says")
        j = int(np.searchsorted(starts, off, side="right")) - 1
        if off >= len(buf) or (j >= 0 and off < damage[j][1]):
            chk.lost[seq] = size
            chk.damaged = True
            continue
        raise Stale(f"block {no} is framed otherwise than its index file says")
    if damage and store is not None:
        store.note_damage(no, damage)


def _subset(table: Table, keep: np.ndarray) -> Table:
    cols = {k: v[keep] for k, v in table.cols.items()}
    seqs = set(cols["seq"].tolist())
    ttls = [e for e in table.ttls if e[0] in seqs]
    return Table(table.no, table.covered, cols, table.names, ttls, table.start)


# -- reads ---------------------------------------------------------------------------------
def first_bad(buf, seqs, lens) -> int:
    """The position of the first record that is not intact in ``buf``, which should hold
    the message records of ``seqs`` (``lens`` bytes each) back to back; -1 when all are."""
    lens = np.asarray(lens, np.int64)
    offs = np.cumsum(lens) - lens
    wrong = np.flatnonzero(~intact_rows(buf, np.asarray(seqs, np.uint64), offs, lens))
    return int(wrong[0]) if len(wrong) else -1


__all__ = ["BlockCheck", "Stale", "Verification", "first_bad", "gone_rows", "intact_rows"]
