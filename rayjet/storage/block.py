"""Block files: append-only, named by number, read with pread; frame scanning for recovery."""

from __future__ import annotations

import mmap
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from rayjet.storage import record as rec

SUFFIX = ".blk"
INDEX_SUFFIX = ".idx"
_CHUNK = 1 << 20


def block_name(no: int) -> str:
    return f"{no:08d}{SUFFIX}"


def crc_of(fd: int, size: int) -> int | None:
    """CRC-32 of the first ``size`` bytes of a file, None when it is shorter: over a
    read-only mapping (no copy, and ``zlib.crc32`` runs without the GIL)."""
    if size <= 0:
        return 0 if size == 0 else None
    if os.fstat(fd).st_size < size:
        return None
    try:
        view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return _crc_read(fd, size)
    try:
        return zlib.crc32(view)
    finally:
        view.close()


def _crc_read(fd: int, size: int) -> int | None:
    buf = bytearray(min(size, _CHUNK))
    mv = memoryview(buf)
    crc, off = 0, 0
    while off < size:
        n = os.preadv(fd, [mv[:min(len(buf), size - off)]], off)
        if not n:
            return None
        crc = zlib.crc32(mv[:n], crc)
        off += n
    return crc


class Block:
    """One block file. ``max_seq`` is the highest seq any frame in it (or before it) names;
    ``crc`` is the CRC-32 of the whole file while it is known (kept up as it grows, so
    sealing the block costs no read), None after an in-place change."""

    __slots__ = ("crc", "fd", "index_path", "max_seq", "no", "path", "size")

    def __init__(self, directory: str, no: int, create: bool = False) -> None:
        self.no = no
        self.path = os.path.join(directory, block_name(no))
        self.index_path = self.path[:-len(SUFFIX)] + INDEX_SUFFIX
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(self.path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.max_seq = 0
        self.crc: int | None = 0 if self.size == 0 else None

    def append(self, data) -> None:
        crc, self.crc = self.crc, None  # unknown until the whole write is in
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, self.size)
            self.size += n
            view = view[n:]
        if crc is not None:
            self.crc = zlib.crc32(data, crc)

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def read_all(self) -> bytes:
        return os.pread(self.fd, self.size, 0) if self.size else b""

    def tail(self, end: int) -> bytes:
        """The 8 bytes before ``end``: the hash of the frame ending there."""
        return os.pread(self.fd, 8, end - 8) if end >= 8 else b""

    def overwrite(self, data, offset: int) -> None:
        """Write over bytes already in the block (an erase)."""
        os.pwrite(self.fd, data, offset)
        self.crc = None

    def checksum(self) -> int:
        """CRC-32 of the whole file."""
        if self.crc is None:
            crc = crc_of(self.fd, self.size)
            if crc is None:
                raise OSError(f"block file {self.path} is shorter than it was written")
            self.crc = crc
        return self.crc

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size
        self.crc = 0 if size == 0 else None

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def unlink(self) -> None:
        self.close()
        self.unlink_index()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def unlink_index(self) -> None:
        """Drop the block's index file (its content no longer describes the block)."""
        try:
            os.unlink(self.index_path)
        except FileNotFoundError:
            pass


def list_blocks(directory: str) -> list[int]:
    out = []
    for name in os.listdir(directory):
        if name.endswith(SUFFIX) and name[:-len(SUFFIX)].isdigit():
            out.append(int(name[:-len(SUFFIX)]))
    return sorted(out)


@dataclass(slots=True)
class Frame:
    offset: int
    length: int
    flags: int
    kind: int
    seq: int
    ts: int


@dataclass(slots=True)
class Damage:
    """A region of a block that held no valid frame (torn write or flipped bits)."""

    offset: int
    end: int  # where the next valid frame starts, or the end of the file
    complete: bool  # a full-length frame failed its hash (corruption, not a torn tail)
    claimed_seq: int  # the seq its header named, a hint only
    claimed_kind: int = 0  # the kind its header named, a hint only


def _valid_at(buf, off: int) -> int:
    """Length of a valid frame at ``off``, or 0."""
    if len(buf) - off < rec.MIN_FRAME:
        return 0
    length = rec.parse_head(buf, off)[0]
    return length if rec.check(buf, off, length) else 0


def scan(buf, start: int = 0) -> Iterator[Frame | Damage]:
    """The frames of a block from ``start`` in order; damaged regions come out as
    :class:`Damage` and the scan resynchronises on the next offset holding a frame with a
    valid hash."""
    off, end = start, len(buf)
    while off < end:
        length = _valid_at(buf, off)
        if length:
            n, flags, kind, seq, ts = rec.parse_head(buf, off)
            yield Frame(off, n, flags, kind, seq, ts)
            off += length
            continue
        claimed, seq, kind = False, 0, 0
        if end - off >= rec.MIN_FRAME:
            n, _f, kind, seq, _ts = rec.parse_head(buf, off)
            claimed = rec.MIN_FRAME <= n <= end - off
        nxt = off + 1
        while nxt < end and not _valid_at(buf, nxt):
            nxt += 1
        if nxt == end and not claimed:
            claimed = whole_but_length(buf, off)
        yield Damage(off, nxt, claimed, seq, kind)
        off = nxt


def whole_but_length(buf, off: int) -> bool:
    """Whether ``buf[off:]`` is one whole frame but for its length field (a flip there
    makes a complete last record look like a torn write)."""
    n = len(buf) - off
    if not rec.MIN_FRAME <= n <= rec.LEN_MASK:
        return False
    frame = bytearray(buf[off:])
    lf = int.from_bytes(frame[:4], "little")
    frame[:4] = ((lf & ~rec.LEN_MASK & 0xFFFFFFFF) | n).to_bytes(4, "little")
    return rec.check(frame, 0, n)


__all__ = ["INDEX_SUFFIX", "Block", "Damage", "Frame", "block_name", "crc_of", "list_blocks",
           "scan"]
