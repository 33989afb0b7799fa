"""How much of ``wal.log`` was fsynced: a small side file that tells disk damage apart from a
write torn by a crash.

A raft log may lose, at a crash or a power loss, only what it had not fsynced: a record cut
short at the end is a torn write and is dropped. But a disk that loses or cuts synced
records would make the same file look like a shorter, valid log, and a replica that
acknowledged or voted on the lost records would take part as if it never had. So after
each fsync the log writes, into ``wal.synced``, the inode of ``wal.log`` and the length that
fsync made durable (one ``pwrite``, no fsync of its own). At open a ``wal.log`` shorter
than that, or a record cut short before it, is damage.

The side file never claims more than is durable: it is written after the fsync returned.
If it is lost, stale or torn (its own checksum fails) nothing is claimed; a ``wal.log``
replaced by a rewrite has another inode, so an old claim does not apply to it.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

_RECORD = struct.Struct("<8sQQI")  # magic, inode, synced length, crc32 of the first three
_MAGIC = b"RJWSYNC1"
NAME = "wal.synced"


class SyncedMark:
    def __init__(self, directory: Path) -> None:
        self.path = directory / NAME
        self._fd: int | None = None

    def claimed(self, wal: Path) -> int:
        """The length of ``wal`` known fsynced (0: nothing known)."""
        try:
            raw = self.path.read_bytes()
            inode = os.stat(wal).st_ino
        except FileNotFoundError:
            return 0
        if len(raw) < _RECORD.size:
            return 0
        magic, ino, length, crc = _RECORD.unpack_from(raw)
        if magic != _MAGIC or crc != zlib.crc32(raw[:_RECORD.size - 4]) or ino != inode:
            return 0
        return length

    def record(self, fileno: int, length: int, *, durable: bool = False,
               inode: int | None = None) -> None:
        """After an fsync of the log open as ``fileno`` made ``length`` bytes durable;
        ``durable`` fsyncs the claim too (at open: a claim that outlives a power loss).
        ``inode``: the log's, when the caller knows it (spares a stat per fsync)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if inode is None:
            inode = os.fstat(fileno).st_ino
        head = _MAGIC + struct.pack("<QQ", inode, length)
        os.pwrite(self._fd, head + struct.pack("<I", zlib.crc32(head)), 0)
        if durable:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["NAME", "SyncedMark"]
