"""A durable raft log: the raft core's :class:`LogStorage` backed by a write-ahead file.

Every write (entries, hard state, snapshot, compaction) is first appended to the WAL as a
checksummed record, then applied to an in-memory :class:`MemoryLogStorage` that answers the
core's reads. Opening the directory replays the WAL. ``sync()`` makes everything written so
far durable; the replication driver calls it before sending messages that depend on it.
``flush()`` hands the writes to the OS and, given a ``sync_interval``, also fsyncs once it
has passed since the last fsync (``"always"`` or 0: every flush), as the stream store does,
so a power loss costs at most the writes of the last interval; ``maybe_sync()`` does the
same from a timer when no write comes. Without one only ``sync()`` fsyncs (the driver's
rules: a new term or vote, snapshots, and every entry when it syncs always).

Record: ``u32 length | u32 crc32(payload) | payload`` with payload = msgpack ``[kind, ...]``.
A record cut short at the end of the file (a crash mid-write) is dropped; a complete record
whose checksum fails is corruption and raises :class:`StoreCorruptionError`, because silently
forgetting synced raft state could let this replica vote or acknowledge twice.

With a :class:`RecordCipher` (the stream store's key) the payload is sealed (nonce, AEAD
bound to the record's offset) and the length's top bit says so; the crc covers the sealed
bytes, so torn writes are still told apart from a wrong key (``EncryptionKeyError``).
``snapshot.bin`` is sealed the same way. A plain log opened with a key is rewritten sealed.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import msgpack

from rayjet.clock import NANOS_PER_SECOND, SYSTEM_CLOCK, Clock
from rayjet.errors import EncryptionKeyError, StoreCorruptionError
from rayjet.raft.messages import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMeta
from rayjet.raft.storage import MemoryLogStorage
from rayjet.replication.wal_synced import SyncedMark
from rayjet.storage.config import ALWAYS
from rayjet.storage.crypto import RecordCipher
from rayjet.storage.fsutil import fsync_dir, make_dirs

_HEADER = struct.Struct("<II")
_OFFSET = struct.Struct("<Q")
_SEALED = 1 << 31  # length bit: the payload is sealed
_CLAIM_DURABLE_EVERY_NS = 1_000_000_000  # how often wal.synced is fsynced as well
_APPEND, _HARD_STATE, _SNAPSHOT, _COMPACT = 1, 2, 3, 4  # record kinds: only add new numbers
_SNAP_MAGIC = b"RJSNAP1\n"
_SNAP_SEALED = b"RJSNAPE\n"


def _other_seal_after(raw: bytes, pos: int, end: int, sealed: bool) -> bool:
    """Whether a record after the one at ``pos`` is sealed where it is not, or plain where
    it is sealed (a walk of the headers only)."""
    pos += _HEADER.size + (_HEADER.unpack_from(raw, pos)[0] & ~_SEALED)
    while end - pos >= _HEADER.size:
        length = _HEADER.unpack_from(raw, pos)[0]
        if bool(length & _SEALED) != sealed:
            return True
        pos += _HEADER.size + (length & ~_SEALED)
    return False


def _plain_record(payload: bytes) -> bool:
    """Whether ``payload`` decodes as a plain log record (sealed bytes practically never do)."""
    try:
        record = msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.UnpackException):
        return False
    return isinstance(record, list) and bool(record) and \
        record[0] in (_APPEND, _HARD_STATE, _COMPACT, _SNAPSHOT)


def _encode_snapshot(snap: Snapshot, cipher: RecordCipher | None) -> bytes:
    meta = snap.meta
    body = msgpack.packb([meta.index, meta.term, list(meta.conf_state.voters),
                          list(meta.conf_state.learners), snap.data], use_bin_type=True)
    magic = _SNAP_MAGIC
    if cipher is not None:
        magic, body = _SNAP_SEALED, cipher.seal(body, _SNAP_SEALED)
    return magic + _HEADER.pack(len(body), zlib.crc32(body)) + body


def _decode_snapshot(raw: bytes, path: Path, cipher: RecordCipher | None) -> Snapshot:
    magic = raw[:len(_SNAP_MAGIC)]
    if magic not in (_SNAP_MAGIC, _SNAP_SEALED) or len(raw) < len(magic) + _HEADER.size:
        raise StoreCorruptionError(err=f"snapshot file {path} is not a rayjet snapshot")
    length, crc = _HEADER.unpack_from(raw, len(magic))
    body = raw[len(magic) + _HEADER.size:]
    if len(body) != length or zlib.crc32(body) != crc:
        raise StoreCorruptionError(err=f"snapshot file {path} failed its checksum")
    if magic == _SNAP_SEALED:
        if cipher is None:
            raise EncryptionKeyError(err=f"snapshot file {path} is encrypted: give its key")
        body = cipher.open(body, _SNAP_SEALED)
    index, term, voters, learners, data = msgpack.unpackb(body, raw=False)
    return Snapshot(SnapshotMeta(index, term, ConfState(tuple(voters), tuple(learners))), data)


def _interval_ns(sync_interval: float | str | None) -> int | None:
    if sync_interval is None:
        return None
    return 0 if sync_interval == ALWAYS else round(float(sync_interval) * NANOS_PER_SECOND)


REJOINING = "REJOINING"  # marker: this log replaced one lost to damage (rayjet.replication.rejoin)


class FileLogStorage:
    """Raft log storage in ``directory`` (``wal.log`` plus ``snapshot.bin``)."""

    def __init__(self, directory: str | os.PathLike[str], *, rewrite_bytes: int = 64 << 20,
                 sync_interval: float | str | None = None, clock: Clock | None = None,
                 cipher: RecordCipher | None = None):
        self.dir = Path(directory)
        make_dirs(self.dir)
        self._wal_path = self.dir / "wal.log"
        self._snap_path = self.dir / "snapshot.bin"
        self._rewrite_bytes = rewrite_bytes
        self._interval_ns = _interval_ns(sync_interval)
        self._clock = clock or SYSTEM_CLOCK
        self._cipher = cipher
        self._plain_seen = False  # a plain record or snapshot read while a cipher is set
        self._mem = MemoryLogStorage()
        self._synced = SyncedMark(self.dir)
        self._replay()
        created = not self._wal_path.exists()
        self._file = open(self._wal_path, "ab")  # noqa: SIM115 - kept open for appends
        self._inode = os.fstat(self._file.fileno()).st_ino
        self._size = self._file.tell()
        if created:
            fsync_dir(self.dir)  # the log's name must outlive a power loss as its records do
        elif self._size:
            # a process that died left what it wrote in the page cache, unsynced: read back
            # here it would count as durable, so make it so (and the claim with it)
            os.fsync(self._file.fileno())
            self._synced.record(self._file.fileno(), self._size, durable=True)
        self._dirty = False
        self._last_sync = self._clock.monotonic_ns()
        self._claim_durable_ns = self._last_sync
        self.sync_count = 0  # fsyncs of the WAL (tests read it)
        if self._plain_seen:
            self._seal_existing()

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

    @property
    def rejoining(self) -> bool:
        """Whether this log replaced one lost to damage and has not caught up since."""
        return (self.dir / REJOINING).exists()

    def rejoined(self) -> None:
        """Caught up with a leader: this replica's vote counts again (durably)."""
        marker = self.dir / REJOINING
        if marker.exists():
            self.sync()
            marker.unlink()
            fsync_dir(self.dir)

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
        """Hand the writes to the OS; fsync them too when ``sync_interval`` has passed."""
        self._file.flush()
        self.maybe_sync()

    def maybe_sync(self) -> None:
        """Fsync if there are unsynced writes and the interval has passed (for a timer)."""
        if self._dirty and self._interval_ns is not None and \
                self._clock.monotonic_ns() - self._last_sync >= self._interval_ns:
            self.sync()

    def seconds_to_sync(self) -> float | None:
        """Seconds until :meth:`maybe_sync` has work (0: now), None when nothing waits."""
        if not self._dirty or self._interval_ns is None:
            return None
        left = self._last_sync + self._interval_ns - self._clock.monotonic_ns()
        return max(0.0, left / 1e9)

    def sync(self) -> None:
        """Make every write so far durable (fsync)."""
        if self._dirty:
            self._file.flush()
            os.fsync(self._file.fileno())
            now = self._clock.monotonic_ns()
            # the claim is fsynced too now and then, so a power loss leaves one at most
            # a second old (a cut of what was fsynced after it reads as a torn tail)
            durable = now - self._claim_durable_ns >= _CLAIM_DURABLE_EVERY_NS
            self._synced.record(self._file.fileno(), self._size, durable=durable,
                                inode=self._inode)
            if durable:
                self._claim_durable_ns = now
            self.sync_count += 1
            self._dirty = False
        self._last_sync = self._clock.monotonic_ns()

    def rewrite(self) -> None:
        """Rewrite the WAL with only its live state, so nothing compacted away stays readable
        (after an erase or purge: the entries carrying the payloads are gone)."""
        self._rewrite()

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()
        self._synced.close()

    # -- internals --------------------------------------------------------------------------
    def _frame(self, record: list, offset: int) -> bytes:
        payload = msgpack.packb(record, use_bin_type=True)
        length = len(payload)
        if self._cipher is not None:
            payload = self._cipher.seal(payload, _OFFSET.pack(offset))
            length = len(payload) | _SEALED
        return _HEADER.pack(length, zlib.crc32(payload)) + payload

    def _write(self, record: list) -> None:
        frame = self._frame(record, self._size)
        self._file.write(frame)
        self._size += len(frame)
        self._dirty = True

    def _save_snapshot_file(self, snap: Snapshot) -> None:
        tmp = self._snap_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(_encode_snapshot(snap, self._cipher))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._snap_path)
        fsync_dir(self.dir)

    def _seal_existing(self) -> None:
        """A log written before its stream had a key: seal what is on disk now."""
        snap = self._mem.snapshot()
        if snap.meta.index > 0:
            self._save_snapshot_file(snap)
        self._rewrite()

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
            offset = 0
            for record in records:
                frame = self._frame(record, offset)
                f.write(frame)
                offset += len(frame)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._wal_path)
        fsync_dir(self.dir)
        self._file = open(self._wal_path, "ab")  # noqa: SIM115
        self._inode = os.fstat(self._file.fileno()).st_ino
        self._size = self._file.tell()
        self._dirty = False
        self._synced.record(self._file.fileno(), self._size)

    def _replay(self) -> None:
        if self._snap_path.exists():
            raw = self._snap_path.read_bytes()
            self._plain_seen = self._cipher is not None and raw.startswith(_SNAP_MAGIC)
            self._mem.apply_snapshot(_decode_snapshot(raw, self._snap_path, self._cipher))
        wal_size = self._wal_path.stat().st_size if self._wal_path.exists() else 0
        if wal_size == 0 and self._snap_path.exists():
            # a log is written (and fsynced) before any snapshot of it is taken
            raise StoreCorruptionError(
                err=f"raft log {self._wal_path} is missing or empty beside its snapshot")
        synced = self._synced.claimed(self._wal_path) if self._wal_path.exists() else 0
        if wal_size < synced:
            raise StoreCorruptionError(
                err=f"raft log {self._wal_path} is {wal_size} bytes but {synced} were fsynced")
        if not wal_size:
            return
        raw = self._wal_path.read_bytes()
        pos, end = 0, len(raw)
        if end < synced:
            raise StoreCorruptionError(
                err=f"raft log {self._wal_path} is {end} bytes but {synced} were fsynced")
        first_sealed = False
        while pos < end:
            if end - pos < _HEADER.size or \
                    pos + _HEADER.size + (_HEADER.unpack_from(raw, pos)[0] & ~_SEALED) > end:
                if pos < synced:
                    raise StoreCorruptionError(
                        err=f"raft log {self._wal_path} record at byte {pos} is cut short "
                            f"before the {synced} bytes that were fsynced")
                break  # torn at the tail: written after the last fsync
            length, crc = _HEADER.unpack_from(raw, pos)
            body_end = pos + _HEADER.size + (length & ~_SEALED)
            payload = raw[pos + _HEADER.size:body_end]
            if zlib.crc32(payload) != crc:
                raise StoreCorruptionError(
                    err=f"raft log {self._wal_path} record at byte {pos} failed its checksum")
            sealed = bool(length & _SEALED)
            if pos and sealed != first_sealed:
                # a log is sealed whole or not at all (a key given later reseals it whole):
                # the sealed bit lies outside the checksum, so a flip of it is damage
                raise StoreCorruptionError(
                    err=f"raft log {self._wal_path} record at byte {pos} is "
                        f"{'sealed' if sealed else 'plain'} among "
                        f"{'sealed' if first_sealed else 'plain'} records")
            if not pos:
                first_sealed = sealed
                if _other_seal_after(raw, pos, end, sealed):
                    raise StoreCorruptionError(
                        err=f"raft log {self._wal_path} first record is "
                            f"{'sealed' if sealed else 'plain'} among "
                            f"{'plain' if sealed else 'sealed'} records")
            payload = self._open_payload(payload, sealed, pos)
            try:
                record = msgpack.unpackb(payload, raw=False)
            except (ValueError, msgpack.UnpackException) as exc:
                raise StoreCorruptionError(
                    err=f"raft log {self._wal_path} record at byte {pos} does not decode: "
                        f"{exc}") from None
            self._replay_record(record)
            pos = body_end
        if pos < end:
            with open(self._wal_path, "r+b") as f:
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())

    def _open_payload(self, payload: bytes, sealed: bool, pos: int) -> bytes:
        if sealed:
            if self._cipher is None:
                if _plain_record(payload):  # a plain record whose sealed bit flipped
                    raise StoreCorruptionError(
                        err=f"raft log {self._wal_path} record at byte {pos} is marked "
                            "sealed but holds a plain record")
                raise EncryptionKeyError(err=f"raft log {self._wal_path} is encrypted: give its key")
            return self._cipher.open(payload, _OFFSET.pack(pos))
        if self._cipher is not None:
            self._plain_seen = True
        return payload

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

    rejoining = False

    def rejoined(self) -> None:
        pass

    def save(self, hard_state: HardState | None, entries: Sequence[Entry],
             snapshot: Snapshot | None = None) -> None:
        if snapshot is not None and snapshot.meta.index > self.snapshot().meta.index:
            self.apply_snapshot(snapshot)
        self.append(entries)
        if hard_state is not None:
            self.set_hard_state(hard_state)

    def flush(self) -> None:
        pass

    def maybe_sync(self) -> None:
        pass

    def seconds_to_sync(self) -> float | None:
        return None

    def sync(self) -> None:
        pass

    def rewrite(self) -> None:
        pass

    def close(self) -> None:
        pass
