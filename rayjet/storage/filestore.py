"""FileStore: the stream as append-only block files with a checksum per record.

Every write call appends its records (and the control records that say what it removed)
to the active block with one ``pwrite``, so a killed process loses nothing that was
acknowledged; ``sync_interval`` decides when that reaches the disk with ``fsync``
("always": before the call returns; otherwise the first write after the interval has
passed on the injected clock, or :meth:`sync`).

When the store rolls to a new block it writes the sealed block's index file (with the
CRC-32 of the whole block) and a checkpoint of the index state (so does :meth:`close`, for
the active block too). Reopening, after a clean close or a crash, loads those, verifies
every block they cover (:mod:`rayjet.storage.scrub`) and replays only the frames written
after the checkpoint; without a usable checkpoint it replays every block. Messages whose
records are damaged or missing are lost: ``StoreState.lost`` and :meth:`first_damaged_seq`
report them, and reads that reach one raise ``StoreCorruptionError`` (so does a read that
finds a record failing its checksum later, which makes its seq lost too).
"""

from __future__ import annotations

import heapq
import os
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from operator import add as _plus

import numpy as np
import pyarrow as pa

from rayjet.api.enums import StorageType, StoreCompression
from rayjet.clock import NANOS_PER_SECOND, Clock
from rayjet.errors import InvalidConfigError, StoreCorruptionError
from rayjet.storage import checkpoint as ckp
from rayjet.storage import columns
from rayjet.storage import record as rec
from rayjet.storage.base import BaseStore
from rayjet.storage.block import INDEX_SUFFIX, Block, list_blocks
from rayjet.storage.blockindex import Table, empty_cols, frames_table, read_table, write_table
from rayjet.storage.config import StoreConfig
from rayjet.storage.crypto import BodyCodec, RecordCipher
from rayjet.storage.fsutil import fsync_dir, make_dirs
from rayjet.storage.index import Index
from rayjet.storage.lost import LostSeqs
from rayjet.storage.protocol import StoredMsg
from rayjet.storage.recovery import cut_offset, load_checkpoint, replay
from rayjet.storage.scrub import first_bad
from rayjet.storage.storemeta import open_meta

LEGACY_INDEX = "index.dat"  # the clean-close index of earlier versions: not read any more
_OFF_BITS = 40
_OFF_MASK = (1 << _OFF_BITS) - 1
_add30 = (30).__add__


class FileStore(BaseStore):
    # aux arrays: location (block number << 40 | offset) and on-disk frame length
    _aux_kinds = ("Q", "I")

    def __init__(self, directory: str, config: StoreConfig | None = None,
                 clock: Clock | None = None) -> None:
        config = (config or StoreConfig()).with_env_key()
        if config.storage is not StorageType.FILE:
            raise InvalidConfigError("FileStore needs storage='file'")
        super().__init__(config, clock)
        self.directory = directory
        make_dirs(directory)
        self._codec = open_meta(directory, config)
        self._blocks: dict[int, Block] = {}
        self._active: Block | None = None
        self._wbuf = bytearray()
        self._floor = 0
        self._dirty: set[Block] = set()
        self._dir_dirty = False
        self._unlink: list[Block] = []
        # (block, start, end) of regions recovery found damaged (torn tail or failed checksum)
        self.damage: list[tuple[int, int, int]] = []
        self.sync_count = 0  # fsync calls made (tests and benchmarks read it)
        # called before the store fsyncs: a write-ahead log the store is rebuilt from must
        # be durable first, or a delete could survive power loss when its log entry did not
        self.before_sync: Callable[[], None] | None = None
        self._last_sync = self.clock.monotonic_ns()
        self._seal: list[Block] = []  # sealed blocks whose index file is still to write
        self._ckpt_due = False
        self._idx_hash: dict[int, bytes] = {}  # block no -> hash of its valid index file
        self._ttl_log: dict[int, list] = {}  # block no -> [seq, ts, ttl] of Nats-TTL headers
        # what reopening did: blocks whose index file was used, blocks (or tails) decoded,
        # indexed blocks verified record by record (their checksum did not match)
        self.recovery = {"checkpoint": 0, "blocks_loaded": 0, "blocks_replayed": 0,
                         "frames_replayed": 0, "blocks_scanned": 0}
        self._recover()

    # -- meta and codec ----------------------------------------------------------------------
    def record_cipher(self) -> RecordCipher | None:
        """A cipher keyed like this store for the files kept beside it (a raft log), or None
        when the store is not encrypted."""
        return self._codec.record_cipher()

    def update_config(self, cfg: StoreConfig) -> None:
        cfg = cfg.with_env_key()
        if (cfg.encryption_key or None) != (self.config.encryption_key or None):
            raise InvalidConfigError("the encryption key of a store cannot change")
        self._codec.compress = cfg.compression is StoreCompression.S2
        super().update_config(cfg)

    # -- recovery ----------------------------------------------------------------------------
    def _recover(self) -> None:
        numbers = list_blocks(self.directory)
        for no in numbers:
            self._blocks[no] = Block(self.directory, no)
        self._drop_stray_files(set(numbers))
        # a checkpoint whose blocks are all gone still says what was lost
        if load_checkpoint(self):
            self.recovery["checkpoint"] = 1
        elif numbers:
            replay(self)
        if self._blocks:
            self._active = self._blocks[max(self._blocks)]
        else:
            self._roll()
        self._after_recovery()
        self._floor = self._floor_seq()
        # the config may be tighter than the one the blocks were written under
        self._enforce_per_subject_all()
        self._enforce_limits()
        self._commit()
        # a process that died left its writes in the page cache, unsynced: read back here
        # they count as durable (a snapshot may compact the raft log over them), so make
        # them so before anything relies on them
        for blk in self._blocks.values():
            if blk.fd >= 0 and blk not in self._dirty:
                blk.fsync()
        fsync_dir(self.directory)

    def _drop_stray_files(self, numbers: set[int]) -> None:
        for name in os.listdir(self.directory):
            stem = name[:-len(INDEX_SUFFIX)]
            if name == LEGACY_INDEX or (
                    name.endswith(INDEX_SUFFIX) and stem.isdigit() and int(stem) not in numbers):
                os.unlink(os.path.join(self.directory, name))

    def _after_recovery(self) -> None:
        """Index the blocks recovery had to decode, so the next reopen need not."""
        active = self._active
        self._seal = [b for no, b in sorted(self._blocks.items())
                      if b is not active and no not in self._idx_hash]
        self._ttl_log = {no: log for no, log in self._ttl_log.items()
                         if no == active.no or no not in self._idx_hash}
        if self._seal or self.recovery["frames_replayed"] or self._lost:
            self._ckpt_due = True

    # -- what recovery (recovery.py, scrub.py) reads and sets --------------------------------
    # the only way they reach the store's state, so its fields can change behind them
    # (named for them in recovering.RecoveringStore)
    @property
    def index(self) -> Index:
        """The in-RAM index recovery fills (from index files, or frame by frame)."""
        return self._idx

    @property
    def codec(self) -> BodyCodec:
        """Decodes the bodies of this store's records (compressed, encrypted)."""
        return self._codec

    @property
    def lost(self) -> LostSeqs:
        """The seqs lost to damage (recovery fills it; nothing else should)."""
        return self._lost

    def block(self, no: int) -> Block | None:
        """Block file ``no``, or None when it is not there."""
        return self._blocks.get(no)

    def block_numbers(self) -> list[int]:
        """The numbers of the block files there are, in order."""
        return sorted(self._blocks)

    def ttl_of(self, hdr: bytes, ttl: int = 0) -> int:
        """``ttl``, or when it is 0 the TTL the Nats-TTL header in ``hdr`` asks for."""
        return self._ttl_of(hdr, ttl)

    def track_ttls(self, no: int, ttls: list[list[int]]) -> None:
        """Track the Nats-TTL values ``[seq, ts, ttl]`` block ``no``'s index file keeps."""
        for seq, ts, ttl in ttls:
            self._track_ttl(seq, ts, ttl)
        self._ttl_log.setdefault(no, []).extend(ttls)

    def clear_ttl_log(self, no: int) -> None:
        """Block ``no`` is decoded again: its Nats-TTL log is rebuilt from its frames."""
        self._ttl_log[no] = []

    def forget_ttls_of_removed(self) -> None:
        """Drop the TTL bookkeeping of seqs that are no longer live (after a replay)."""
        idx = self._idx
        self._ttl_exp = {s: e for s, e in self._ttl_exp.items() if idx.live(s)}
        self._ttl_heap = [(e, s) for s, e in self._ttl_exp.items()]
        heapq.heapify(self._ttl_heap)
        self._never = {s for s in self._never if idx.live(s)}

    def trust_index(self, no: int, file_hash: bytes) -> None:
        """Block ``no``'s index file (with hash ``file_hash``) matches it: keep using it."""
        self._idx_hash[no] = file_hash

    def mark_lost(self, seqs) -> None:
        """The live ones of ``seqs`` are lost (their records failed verification)."""
        idx = self._idx
        self._mark_lost([s for s in seqs if idx.live(s)])

    def forget_erased(self, seqs) -> None:
        """``seqs`` were erased (their records overwritten): not live."""
        for seq in seqs:
            self._idx.remove(seq)

    def note_damage(self, no: int, regions) -> None:
        """Block ``no`` holds no valid frame in ``regions`` (start, end)."""
        self.damage.extend((no, start, end) for start, end in regions)

    def note_decoded(self, frames: int) -> None:
        """A block (or its tail) was decoded frame by frame: ``frames`` of them."""
        self.recovery["blocks_replayed"] += 1
        self.recovery["frames_replayed"] += frames

    def reset_recovered(self) -> None:
        """Forget what a partial load put in, before a full replay."""
        self._idx.reset(1, 0, 0)
        self._ttl_exp.clear()
        self._ttl_heap.clear()
        self._never.clear()
        self._lost.clear()
        self._ttl_log.clear()
        self._idx_hash.clear()
        self.damage.clear()
        for key in self.recovery:
            self.recovery[key] = 0

    # -- writing -----------------------------------------------------------------------------
    def _roll(self) -> None:
        if self._wbuf:
            self._write_out()
        if self._active is not None:
            self._seal.append(self._active)
        self._ckpt_due = True
        no = (self._active.no + 1) if self._active else (max(self._blocks, default=0) + 1)
        prev_max = self._active.max_seq if self._active else 0
        blk = Block(self.directory, no, create=True)
        blk.max_seq = prev_max
        self._blocks[no] = blk
        self._active = blk
        self._dir_dirty = True

    def _write_out(self) -> None:
        blk = self._active
        blk.append(self._wbuf)
        self._wbuf.clear()
        self._dirty.add(blk)

    def _persist_cols(self, seqs, tss, subjects, hdrs, datas) -> list:
        cols = self._write_cols(seqs, tss, subjects, hdrs, datas)
        if any(hdrs):
            self._log_ttls(seqs, tss, hdrs, cols[0])
        return cols

    def _log_ttls(self, seqs, tss, hdrs, locs) -> None:
        """Remember Nats-TTL header values per block: its index file keeps them."""
        for seq, ts, hdr, loc in zip(seqs, tss, hdrs, locs):
            if hdr and b"Nats-TTL" in hdr:
                ttl = self._ttl_of(hdr, 0)
                if ttl:
                    self._ttl_log.setdefault(loc >> _OFF_BITS, []).append([seq, ts, ttl])

    def _write_cols(self, seqs, tss, subjects, hdrs, datas) -> list:
        blk, wbuf = self._active, self._wbuf
        pos = blk.size + len(wbuf)
        if not self._codec.transforms:
            sbs = list(map(str.encode, subjects))
            if any(hdrs):
                lens = [34 + len(sb) + len(h) + len(d) if h else 30 + len(sb) + len(d)
                        for sb, h, d in zip(sbs, hdrs, datas)]
            else:
                lens = list(map(_add30, map(_plus, map(len, sbs), map(len, datas))))
            if pos + sum(lens) <= self.config.block_size:
                # the whole batch fits in the active block: no roll to look for per record
                wbuf += rec.encode_plain_msgs(seqs, tss, sbs, hdrs, datas, lens)
                locs = list(accumulate(lens, initial=(blk.no << _OFF_BITS) | pos))
                locs.pop()
                blk.max_seq = max(blk.max_seq, seqs[-1])
                return [locs, lens]
            return self._write_across_blocks(seqs, tss, sbs, hdrs, datas, lens)
        return self._persist_each(seqs, tss, subjects, hdrs, datas)

    def _write_across_blocks(self, seqs, tss, sbs, hdrs, datas, lens) -> list:
        """Plain frames of a batch larger than the active block's room: the records that
        fit, a roll, and so on (where :meth:`_persist_each` would roll, record by record)."""
        limit = self.config.block_size
        ends = list(accumulate(lens))
        locs: list[int] = []
        start, done, n = 0, 0, len(lens)
        while start < n:
            blk = self._active
            pos = blk.size + len(self._wbuf)
            stop = bisect_right(ends, done + limit - pos, lo=start)
            if stop == start:
                if pos:
                    blk.max_seq = max(blk.max_seq, seqs[start] - 1)
                    self._roll()
                    continue
                stop = start + 1  # a record larger than a block has one to itself
            part = lens[start:stop]
            self._wbuf += rec.encode_plain_msgs(seqs[start:stop], tss[start:stop], sbs[start:stop],
                                        hdrs[start:stop], datas[start:stop], part)
            locs += accumulate(part, initial=(blk.no << _OFF_BITS) | pos)
            locs.pop()
            blk.max_seq = max(blk.max_seq, seqs[stop - 1])
            done = ends[stop - 1]
            start = stop
        return [locs, list(lens)]

    def _persist_each(self, seqs, tss, subjects, hdrs, datas) -> list:
        """Frame by frame, rolling to a new block where one would overflow."""
        locs: list[int] = []
        lens: list[int] = []
        blk, wbuf = self._active, self._wbuf
        limit = self.config.block_size
        pos = blk.size + len(wbuf)
        codec = self._codec if self._codec.transforms else None
        base = blk.no << _OFF_BITS
        f_hdr = rec.F_HDR
        for seq, ts, subject, hdr, data in zip(seqs, tss, subjects, hdrs, datas):
            sb = subject.encode()
            if codec is not None:
                frame = codec.encode(f_hdr if hdr else 0, seq, ts, rec.plain_body(sb, hdr, data))
            else:
                frame = rec.encode_msg(seq, ts, sb, hdr, data)
            n = len(frame)
            if pos + n > limit and pos:
                blk.max_seq = max(blk.max_seq, seq - 1)
                self._roll()
                blk, wbuf, pos = self._active, self._wbuf, 0
                base = blk.no << _OFF_BITS
            wbuf += frame
            locs.append(base | pos)
            lens.append(n)
            pos += n
        if seqs:
            blk.max_seq = max(blk.max_seq, seqs[-1])
        return [locs, lens]

    def _append_ctl(self, kind: int, seq: int, count: int = 0) -> None:
        frame = rec.encode_control(kind, seq, self._idx.last_ts, count)
        if self._active.size + len(self._wbuf) + len(frame) > self.config.block_size \
                and self._active.size + len(self._wbuf):
            self._roll()
        self._wbuf += frame
        top = seq + max(count, 1) - 1 if kind == rec.K_DEL else (seq - 1 if kind == rec.K_FLOOR else seq)
        self._active.max_seq = max(self._active.max_seq, top)

    def _persist_skip(self, seq: int, num: int) -> None:
        self._append_ctl(rec.K_DEL, seq, num if num > 1 else 0)

    def _persist_last(self, seq: int, ts: int) -> None:
        self._append_ctl(rec.K_LAST, seq)

    def _floor_seq(self) -> int:
        """The floor to record: never above a lost seq (a floor would delete it)."""
        first = self._idx.first
        return min(first, self._lost[0]) if self._lost else first

    def _commit(self) -> None:
        floor = self._floor_seq()
        if floor > self._floor:
            self._append_ctl(rec.K_FLOOR, floor)
            self._floor = floor
        if self._removed:
            runs = sorted(s for s in self._removed if s >= floor)
            i = 0
            while i < len(runs):
                j = i
                while j + 1 < len(runs) and runs[j + 1] == runs[j] + 1:
                    j += 1
                self._append_ctl(rec.K_DEL, runs[i], j - i + 1 if j > i else 0)
                i = j + 1
            self._removed.clear()
        if self._wbuf:
            self._write_out()
        if self._unlink:
            self._fsync_all()
            for blk in self._unlink:
                self._blocks.pop(blk.no, None)
                self._dirty.discard(blk)
                self._forget_index(blk.no)
                blk.unlink()
            self._unlink.clear()
            self._dir_dirty = True
            self._ckpt_due = True
        if self._dirty or self._dir_dirty:
            if self.config.sync_always:
                self._fsync_all()
            else:
                interval = self.config.sync_interval
                if interval == 0 or self.clock.monotonic_ns() - self._last_sync >= \
                        interval * NANOS_PER_SECOND:
                    self._fsync_all()
        if self._ckpt_due:
            self._checkpoint()

    # -- index files and checkpoint ----------------------------------------------------------
    def _checkpoint(self, active_too: bool = False) -> None:
        """Index the sealed blocks, then record the index state as of the blocks' end."""
        seal = [b for b in self._seal if self._blocks.get(b.no) is b and b is not self._active]
        if active_too:
            seal.append(self._active)
        try:
            for blk in seal:
                self._write_index(blk)
            ckp.write(os.path.join(self.directory, ckp.NAME), self._state_checkpoint())
        except OSError:
            return  # an optimisation only: the blocks hold everything, reopening replays
        self._seal.clear()
        self._ckpt_due = False

    def _write_index(self, blk: Block) -> None:
        table = self._ram_table(blk)
        self._idx_hash[blk.no] = write_table(blk.index_path, table, blk.tail(blk.size),
                                             self._codec, blk.checksum(), self._floor_seq())
        if blk is not self._active:
            self._ttl_log.pop(blk.no, None)

    def _ram_table(self, blk: Block) -> Table:
        """The live messages of ``blk`` from the in-RAM index (deleted ones are left out:
        any checkpoint that trusts this file says they are deleted)."""
        idx = self._idx
        prev = self._blocks.get(blk.no - 1)
        lo = max(idx.base, prev.max_seq + 1 if prev is not None else 0)
        i0, i1 = lo - idx.base, min(len(idx.size), min(blk.max_seq, idx.last) - idx.base + 1)
        if i1 <= i0:
            return Table(blk.no, blk.size, empty_cols(), [])
        size = np.frombuffer(idx.size, np.uint32)[i0:i1]
        loc = np.frombuffer(idx.aux[0], np.uint64)[i0:i1]
        pos = np.flatnonzero((size != 0) & ((loc >> np.uint64(_OFF_BITS)) == blk.no))
        names, lsid = np.unique(np.frombuffer(idx.sid, np.uint32)[i0:i1][pos],
                                return_inverse=True)
        cols = {"seq": (pos + lo).astype(np.uint64),
                "ts": np.frombuffer(idx.ts, np.int64)[i0:i1][pos],
                "size": size[pos],
                "off": (loc[pos] & np.uint64(_OFF_MASK)).astype(np.uint32),
                "flen": np.frombuffer(idx.aux[1], np.uint32)[i0:i1][pos],
                "lsid": lsid.astype(np.uint32)}
        ttls = [e for e in self._ttl_log.get(blk.no, ()) if idx.live(e[0])]
        return Table(blk.no, blk.size, cols, [idx.subj_names[s] for s in names.tolist()], ttls)

    def _state_checkpoint(self) -> ckp.Checkpoint:
        idx = self._idx
        if idx.msgs:
            size = np.frombuffer(idx.size, np.uint32)[idx.first - idx.base:idx.last - idx.base + 1]
            starts, lens = ckp.dead_runs(size, idx.first)
            del size
        else:
            starts, lens = ckp.dead_runs(np.zeros(0, np.uint32), idx.first)
        blocks = [[b.no, b.size, b.max_seq, self._idx_hash[b.no].hex() if b.no in self._idx_hash
                   else ""] for _no, b in sorted(self._blocks.items())]
        active = self._active
        return ckp.Checkpoint(blocks, active.tail(active.size).hex(), idx.first, idx.last,
                              idx.last_ts, idx.msgs, idx.bytes, list(self._lost), starts, lens)

    def _forget_index(self, no: int) -> None:
        self._idx_hash.pop(no, None)
        self._ttl_log.pop(no, None)

    def _fsync_all(self) -> None:
        if self.before_sync is not None and (self._dirty or self._dir_dirty):
            self.before_sync()
        for blk in self._dirty:
            if blk.fd >= 0:
                blk.fsync()
                self.sync_count += 1
        self._dirty.clear()
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self._last_sync = self.clock.monotonic_ns()

    # -- reading -----------------------------------------------------------------------------
    def _frame(self, seq: int) -> tuple[Block, int, bytes]:
        idx = self._idx
        i = seq - idx.base
        loc, length = idx.aux[0][i], idx.aux[1][i]
        blk = self._blocks.get(loc >> _OFF_BITS)
        if blk is None:
            raise self._damaged(seq, "is in a block file that is missing")
        off = loc & _OFF_MASK
        return blk, off, blk.pread(length, off)

    def _damaged(self, seq: int, what: str) -> StoreCorruptionError:
        """The error for a record found damaged as it was read; its seq is lost from now."""
        self._mark_lost((seq,))
        return StoreCorruptionError(err=f"record of sequence {seq} {what}", seq=seq)

    def _read(self, seq: int) -> StoredMsg:
        _blk, _off, buf = self._frame(seq)
        return self._decode(seq, buf)

    def _decode(self, seq: int, buf: bytes) -> StoredMsg:
        if not rec.check(buf, 0, len(buf)):
            raise self._damaged(seq, "failed its checksum")
        length, flags, kind, fseq, ts = rec.parse_head(buf, 0)
        if kind != rec.K_MSG or fseq != seq or length != len(buf):
            raise self._damaged(seq, "is not where the index says")
        body = rec.body_of(buf, 0, length)
        if flags & (rec.F_COMPRESSED | rec.F_ENCRYPTED):
            body = self._codec.decode(flags, buf[:rec.HEAD_LEN], body)
        subject, hdr, data = rec.split_body(body, bool(flags & rec.F_HDR))
        return StoredMsg(subject, hdr, data, seq, ts)

    def _read_columns(self, seqs) -> pa.RecordBatch:
        """One ``pread`` per run of adjacent records, decoded in bulk; any record the bulk
        decoder does not take (compressed, encrypted, damaged) sends the whole page through
        single reads, which report damage as they do."""
        if self._codec.transforms:
            return super()._read_columns(seqs)
        idx = self._idx
        at = seqs - idx.base
        locs = np.frombuffer(idx.aux[0], np.uint64)[at]
        lens = np.frombuffer(idx.aux[1], np.uint32)[at].astype(np.int64)
        blocks = (locs >> np.uint64(_OFF_BITS)).astype(np.int64)
        offs = (locs & np.uint64(_OFF_MASK)).astype(np.int64)
        breaks = np.flatnonzero((blocks[1:] != blocks[:-1]) | (offs[1:] != offs[:-1] + lens[:-1]))
        starts = np.concatenate(([0], breaks + 1))
        stops = np.concatenate((breaks + 1, [len(seqs)]))
        ends = offs + lens
        buf = b"".join(self._run(int(blocks[a]), int(offs[a]), int(ends[b - 1]))
                       for a, b in zip(starts.tolist(), stops.tolist(), strict=True))
        batch = columns.decode_plain(buf, seqs, lens)
        return batch if batch is not None else super()._read_columns(seqs)

    # -- copying to another replica ----------------------------------------------------------
    def export_range(self, start_seq: int, max_bytes: int) -> tuple[bytes, int]:
        """The records as they are on disk (so an encrypted store's copy stays encrypted),
        read with one ``pread`` per run of adjacent records, each checksum verified: a
        damaged record is lost from then on (the chunk ends before it, as before any lost
        seq, and a call starting at it raises ``StoreCorruptionError``)."""
        self._check_open()
        idx = self._idx
        locs, lens = idx.aux
        stop = self._lost_stop(start_seq)
        parts: list[bytes] = []
        seqs: list[int] = []
        sizes: list[int] = []
        total, run_no, run_start, run_end = 0, -1, 0, 0
        seq = idx.next_live(start_seq) if idx.msgs else 0
        while seq and total < max_bytes and not (stop and seq > stop):
            i = seq - idx.base
            loc, n = locs[i], lens[i]
            no, off = loc >> _OFF_BITS, loc & _OFF_MASK
            if no != run_no or off != run_end:
                if run_end > run_start:
                    parts.append(self._export_run(run_no, run_start, run_end, seqs))
                run_no, run_start, run_end = no, off, off
            run_end += n
            total += n
            seqs.append(seq)
            sizes.append(n)
            seq = idx.next_live(seq + 1)
        if run_end > run_start:
            parts.append(self._export_run(run_no, run_start, run_end, seqs))
        out = b"".join(parts)
        bad = first_bad(out, seqs, sizes)
        if bad >= 0:  # the chunk ends before it; a call starting at it raises
            err = self._damaged(seqs[bad], "failed its checksum")
            if not bad:
                raise err
            return out[:sum(sizes[:bad])], seqs[bad]
        return out, self._export_next(seq, stop, bool(seqs))

    def _export_run(self, no: int, start: int, end: int, seqs: list[int]) -> bytes:
        blk = self._blocks.get(no)
        if blk is None:  # only a bug drops a block the index still points into
            raise self._damaged(seqs[-1], "is in a block file that is missing")
        return blk.pread(end - start, start)

    def import_records(self, buf) -> int:
        """Plain records are written as they came (each checksum verified, no re-encoding)
        and indexed from their headers; a store with a codec decodes and re-encodes."""
        if self._codec.transforms:
            return super().import_records(buf)
        self._check_open()
        recs = rec.parse_plain_msgs(buf, self._idx.last)
        if recs:
            self._write_copied(buf, recs)
        self._commit()
        return len(recs)

    def _write_copied(self, buf, recs: list[tuple]) -> None:
        view = memoryview(buf)
        limit = self.config.block_size
        blk, wbuf = self._active, self._wbuf
        pos = blk.size + len(wbuf)
        seg = recs[0][5]
        locs: list[int] = []
        for seq, _ts, _subject, _hdr, n, off in recs:
            if pos + n > limit and pos:
                wbuf += view[seg:off]
                blk.max_seq = max(blk.max_seq, seq - 1)
                self._roll()
                blk, wbuf, pos, seg = self._active, self._wbuf, 0, off
            locs.append((blk.no << _OFF_BITS) | pos)
            pos += n
        last = recs[-1]
        wbuf += view[seg:last[5] + last[4]]
        blk.max_seq = max(blk.max_seq, last[0])
        idx = self._idx
        i = 0
        while i < len(recs):  # the index takes runs of consecutive seqs at once
            j = i + 1
            while j < len(recs) and recs[j][0] == recs[j - 1][0] + 1:
                j += 1
            run = recs[i:j]
            lens = [r[4] for r in run]
            idx.add_many([r[0] for r in run], [r[1] for r in run], [r[2] for r in run],
                         lens, [locs[i:j], lens])
            i = j
        ttls = [(r, loc) for r, loc in zip(recs, locs) if r[3] and b"Nats-TTL" in r[3]]
        for (seq, ts, _subject, hdr, _n, _off), _loc in ttls:
            self._track_ttl(seq, ts, self._ttl_of(hdr, 0))
        if ttls:  # the blocks' index files keep them
            self._log_ttls([r[0] for r, _ in ttls], [r[1] for r, _ in ttls],
                           [r[3] for r, _ in ttls], [loc for _, loc in ttls])

    def _run(self, no: int, start: int, end: int) -> bytes:
        blk = self._blocks.get(no)
        if blk is None:
            raise StoreCorruptionError(err=f"block {no} is missing")
        return blk.pread(end - start, start)

    def _plain_body(self, buf, off: int, length: int, flags: int) -> bytes:
        return self._codec.frame_body(buf, off, length, flags)

    # -- deletes -----------------------------------------------------------------------------
    def _erase(self, seq: int) -> None:
        blk, off, buf = self._frame(seq)
        length, _flags, _kind, _seq, ts = rec.parse_head(buf, 0)
        filler = rec.encode_frame(0, seq | rec.K_ERASED, ts, os.urandom(length - rec.MIN_FRAME))
        blk.overwrite(filler, off)
        self._dirty.add(blk)
        if blk is not self._active and blk not in self._seal:
            # its index file's checksum is the old bytes': index it again at the next
            # checkpoint, with the TTLs its index file keeps
            if blk.no not in self._ttl_log:
                self._ttl_log[blk.no] = self._block_ttls(blk)
            self._seal.append(blk)

    def _block_ttls(self, blk: Block) -> list:
        """The Nats-TTL log of a sealed block: from its index file, else its frames."""
        got = read_table(blk.index_path, self._codec)
        if got is not None and got[0].no == blk.no:
            return [list(e) for e in got[0].ttls]
        return frames_table(blk.read_all(), 0, blk.no, self._codec, self._ttl_of, [])[0].ttls


    def _on_compact(self, seq: int) -> None:
        active = self._active
        if active.max_seq < seq and active.size + len(self._wbuf):
            self._roll()
        for blk in list(self._blocks.values()):
            if blk is not self._active and blk.max_seq < seq and blk not in self._unlink:
                self._unlink.append(blk)
        if self._unlink:
            self._floor = 0  # the floor record may be in a dropped block: restate it

    def _wipe(self) -> None:
        self._wbuf.clear()
        self._drop_checkpoint()
        for blk in list(self._blocks.values()):
            blk.unlink()
        self._blocks.clear()
        self._idx_hash.clear()
        self._ttl_log.clear()
        self._seal.clear()
        self._dirty.clear()
        self._active = None
        self._roll()
        self._floor = 0

    def _on_truncate(self, seq: int) -> None:
        if seq == 0:
            self._wipe()
            return
        if self._wbuf:
            self._write_out()
        ordered = sorted(self._blocks.values(), key=lambda b: b.no)
        cut = next((b for b in ordered if b.max_seq > seq), None)
        if cut is None:
            return
        # index files and the checkpoint describe what is about to be cut: drop them first
        self._drop_checkpoint()
        self._ckpt_due = True
        self._seal = [b for b in self._seal if b.no < cut.no]
        cut.unlink_index()
        cut_log = self._ttl_log.get(cut.no)
        for blk in ordered:
            if blk.no >= cut.no:
                self._forget_index(blk.no)
            if blk.no > cut.no:
                self._blocks.pop(blk.no)
                self._dirty.discard(blk)
                blk.unlink()
        buf = cut.read_all()
        end = cut_offset(buf, seq)
        self._ttl_log[cut.no] = self._ttls_up_to(cut, buf, end, seq, cut_log)
        cut.truncate(end)
        cut.max_seq = seq
        self._active = cut
        self._dirty.add(cut)
        self._dir_dirty = True
        # control records past the cut are gone: restate the floor, the deletes and the end
        idx = self._idx
        self._floor = 0
        lost = self._lost
        self._removed = [s for s in idx.deleted() if s not in lost] if lost else idx.deleted()
        self._append_ctl(rec.K_LAST, seq)

    def _drop_checkpoint(self) -> None:
        """Remove the checkpoint for good before blocks are cut or dropped: one that
        outlived them would describe other blocks, which reads as damage."""
        path = os.path.join(self.directory, ckp.NAME)
        if os.path.exists(path):
            ckp.remove(path)
            fsync_dir(self.directory)

    def _ttls_up_to(self, blk: Block, buf, end: int, seq: int, log) -> list:
        """The TTL log of a cut block: from memory while it was the active one, else (its
        index file is gone) from its frames."""
        if log is not None:
            return [e for e in log if e[0] <= seq]
        return frames_table(buf[:end], 0, blk.no, self._codec, self._ttl_of, [])[0].ttls

    # -- lifecycle ---------------------------------------------------------------------------
    def flush(self) -> None:
        self._check_open()
        if self._wbuf:
            self._write_out()

    def sync(self) -> None:
        self.flush()
        self._fsync_all()

    def close(self) -> None:
        if self._closed:
            return
        if self._wbuf:
            self._write_out()
        self._fsync_all()
        self._checkpoint(active_too=True)
        for blk in self._blocks.values():
            blk.close()
        self._closed = True


__all__ = ["FileStore"]
