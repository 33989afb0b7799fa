"""A durable raft log: the raft core's :class:`LogStorage` backed by a write-ahead file.

Every write (entries, hard state, snapshot, compaction) is first appended to the WAL as a
checksummed record, then applied to an in-memory :class:`MemoryLogStorage` that answers the
core's reads. Opening the directory replays the WAL. ``sync()`` makes everything written so
far durable; the replication driver calls it before sending messages that depend on it.

Record: ``u32 length | u32 crc32(payload) | payload`` with payload = msgpack ``[kind, ...]``.
A record cut short at the end of the file (a crash mid-write) is dropped; a complete record
whose checksum fails is corruption and raises :class:`StoreCorruptionError`, because silently
forgetting synced raft state could let this replica vote or acknowledge twice.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import msgpack

from rayjet.errors import StoreCorruptionError
from rayjet.raft.messages import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMeta
from rayjet.raft.storage import MemoryLogStorage

_HEADER = struct.Struct("<II")
_APPEND, _HARD_STATE, _SNAPSHOT, _COMPACT = 1, 2, 3, 4  # record kinds: only add new numbers
_SNAP_MAGIC = b"RJSNAP1\n"


def _encode_snapshot(snap: Snapshot) -> bytes:
    meta = snap.meta
    body = msgpack.packb([meta.index, meta.term, list(meta.conf_state.voters),
                          list(meta.conf_state.learners), snap.data], use_bin_type=True)
    return _SNAP_MAGIC + _HEADER.pack(len(body), zlib.crc32(body)) + body


def _decode_snapshot(raw: bytes, path: Path) -> Snapshot:
    if not raw.startswith(_SNAP_MAGIC) or len(raw) < len(_SNAP_MAGIC) + _HEADER.size:
        raise StoreCorruptionError(err=f"snapshot file {path} is not a rayjet snapshot")
    length, crc = _HEADER.unpack_from(raw, len(_SNAP_MAGIC))
    body = raw[len(_SNAP_MAGIC) + _HEADER.size:]
    if len(body) != length or zlib.crc32(body) != crc:
        raise StoreCorruptionError(err=f"snapshot file {path} failed its checksum")
    index, term, voters, learners, data = msgpack.unpackb(body, raw=False)
    return Snapshot(SnapshotMeta(index, term, ConfState(tuple(voters), tuple(learners))), data)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileLogStorage:
    """Raft log storage in ``directory`` (``wal.log`` plus ``snapshot.bin``)."""

    def __init__(self, directory: str | os.PathLike[str], *, rewrite_bytes: int = 64 << 20):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._wal_path = self.dir / "wal.log"
        self._snap_path = self.dir / "snapshot.bin"
        self._rewrite_bytes = rewrite_bytes
        self._mem = MemoryLogStorage()
        self._replay()
        self._file = open(self._wal_path, "ab")  # noqa: SIM115 - kept open for appends
        self._size = self._file.tell()
        self._dirty = False

    # -- LogStorage (reads) -----------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._mem.initial_state()

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        return self._mem.entries(lo, hi, max_bytes)

    def term(self, index: int) -> int:
        return self._mem.term(index)

    def first_index(self) -> int:
        return self._mem.first_index()

    def last_index(self) -> int:
        return self._mem.last_index()

    def snapshot(self) -> Snapshot:
        return self._mem.snapshot()

    @property
    def hard_state(self) -> HardState:
        return self._mem.hard_state

    # -- writes -----------------------------------------------------------------------------
    def append(self, ents: Sequence[Entry]) -> None:
        if not ents:
            return
        self._write([_APPEND, [[e.term, e.index, int(e.type), e.data] for e in ents]])
        self._mem.append(ents)

    def set_hard_state(self, hs: HardState) -> None:
        if hs == self._mem.hard_state:
            return
        self._write([_HARD_STATE, hs.term, hs.vote, hs.commit])
        self._mem.set_hard_state(hs)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install a snapshot received from the leader (replaces the whole log)."""
        self._mem.apply_snapshot(snap)  # validates before anything touches the disk
        self._save_snapshot_file(snap)
        self._rewrite()

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        snap = self._mem.create_snapshot(index, conf_state, data)
        self._save_snapshot_file(snap)
        return snap

    def compact(self, index: int) -> None:
        """Drop entries up to ``index`` (a snapshot must cover them); rewrite the WAL when
        most of it is garbage."""
        if index < self._mem.first_index():
            return
        self._mem.compact(index)
        self._write([_COMPACT, index])
        if self._size > self._rewrite_bytes:
            self._rewrite()

    def save(self, hard_state: HardState | None, entries: Sequence[Entry],
             snapshot: Snapshot | None = None) -> None:
        """What a Ready asks to persist, in the order that keeps the log consistent."""
        if snapshot is not None and snapshot.meta.index > self._mem.snapshot().meta.index:
            self.apply_snapshot(snapshot)
        self.append(entries)
        if hard_state is not None:
            self.set_hard_state(hard_state)

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        """Make every write so far durable (fsync)."""
        if self._dirty:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._dirty = False

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()

    # -- internals --------------------------------------------------------------------------
    def _write(self, record: list) -> None:
        payload = msgpack.packb(record, use_bin_type=True)
        self._file.write(_HEADER.pack(len(payload), zlib.crc32(payload)))
        self._file.write(payload)
        self._size += _HEADER.size + len(payload)
        self._dirty = True

    def _save_snapshot_file(self, snap: Snapshot) -> None:
        tmp = self._snap_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(_encode_snapshot(snap))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._snap_path)
        _fsync_dir(self.dir)

    def _rewrite(self) -> None:
        """Write a fresh WAL holding only live state, then swap it in atomically."""
        if hasattr(self, "_file") and not self._file.closed:
            self._file.close()
        tmp = self._wal_path.with_suffix(".tmp")
        hs = self._mem.hard_state
        records = [[_HARD_STATE, hs.term, hs.vote, hs.commit]]
        live = self._mem.all_entries()
        if live:
            records.append([_APPEND, [[e.term, e.index, int(e.type), e.data] for e in live]])
        with open(tmp, "wb") as f:
            for record in records:
                payload = msgpack.packb(record, use_bin_type=True)
                f.write(_HEADER.pack(len(payload), zlib.crc32(payload)) + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._wal_path)
        _fsync_dir(self.dir)
        self._file = open(self._wal_path, "ab")  # noqa: SIM115
        self._size = self._file.tell()
        self._dirty = False

    def _replay(self) -> None:
        if self._snap_path.exists():
            snap = _decode_snapshot(self._snap_path.read_bytes(), self._snap_path)
            self._mem.apply_snapshot(snap)
        if not self._wal_path.exists():
            return
        raw = self._wal_path.read_bytes()
        pos, end = 0, len(raw)
        while pos < end:
            if end - pos < _HEADER.size:
                break  # torn header at the tail
            length, crc = _HEADER.unpack_from(raw, pos)
            body_end = pos + _HEADER.size + length
            if body_end > end:
                break  # torn record at the tail
            payload = raw[pos + _HEADER.size:body_end]
            if zlib.crc32(payload) != crc:
                raise StoreCorruptionError(
                    err=f"raft log {self._wal_path} record at byte {pos} failed its checksum")
            self._replay_record(msgpack.unpackb(payload, raw=False))
            pos = body_end
        if pos < end:
            with open(self._wal_path, "r+b") as f:
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())

    def _replay_record(self, record: list) -> None:
        kind = record[0]
        if kind == _APPEND:
            ents = [Entry(term=t, index=i, data=d, type=EntryType(k)) for t, i, k, d in record[1]]
            first = self._mem.first_index()
            ents = [e for e in ents if e.index >= first]  # covered by the snapshot already
            if ents:
                self._mem.append(ents)
        elif kind == _HARD_STATE:
            self._mem.set_hard_state(HardState(record[1], record[2], record[3]))
        elif kind == _COMPACT:
            index = min(record[1], self._mem.snapshot().meta.index)
            if index >= self._mem.first_index():
                self._mem.compact(index)
        elif kind == _SNAPSHOT:
            pass  # snapshots live in snapshot.bin; the kind is reserved
        else:
            raise StoreCorruptionError(err=f"raft log {self._wal_path} has unknown record {kind}")


class MemoryLog(MemoryLogStorage):
    """The in-memory log for memory-storage streams: same write API, nothing to sync."""

    def save(self, hard_state: HardState | None, entries: Sequence[Entry],
             snapshot: Snapshot | None = None) -> None:
        if snapshot is not None and snapshot.meta.index > self.snapshot().meta.index:
            self.apply_snapshot(snapshot)
        self.append(entries)
        if hard_state is not None:
            self.set_hard_state(hard_state)

    def flush(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass
