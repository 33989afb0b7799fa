"""The on-disk frame: one message record (seed 001 layout) or a small control record.

A message record, little endian::

    u32 length | flags   length of the whole record, this field and the hash included
    u64 seq | kind       kind in the top 4 bits (0 for a message)
    u64 ts               nanoseconds since the epoch
    u16 subject length, subject
    u32 header length, header     (only when the HDR flag is set)
    payload
    u64 hash

so a record costs ``22 + len(subject) + len(payload) + 8`` bytes, plus ``4 + len(hdr)`` with
headers: 36 bytes for ``hello`` on subject ``o``, 39 on a 4-byte subject, as nats-server
reports. ``StoreState.bytes`` counts :func:`record_size` for both stores.

The hash is CRC-32 (low half) and Adler-32 (high half) of everything before it: two
independent C-speed checksums, enough to catch torn writes and flipped bits (this is an
integrity check, not a defence against an attacker; encryption adds an AEAD tag for that).

Control records reuse the frame with an empty or tiny body: DEL (seq .. seq+count-1 are
deleted), FLOOR (every seq below it is gone), LAST (last_seq/last_ts after a truncate) and
ERASED (a message record overwritten in place with random bytes).
"""

from __future__ import annotations

import struct
import zlib

from rayjet.errors import StoreCorruptionError

HEAD = struct.Struct("<IQQ")  # length|flags, seq|kind, ts
HEAD_LEN = HEAD.size  # 20
HASH_LEN = 8
MIN_FRAME = HEAD_LEN + HASH_LEN  # 28
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HASH = struct.Struct("<II")
_MSG_HEAD = struct.Struct("<IQQH")

F_HDR = 1 << 31
F_COMPRESSED = 1 << 30
F_ENCRYPTED = 1 << 29
LEN_MASK = (1 << 29) - 1
MAX_FRAME = LEN_MASK

SEQ_MASK = (1 << 60) - 1
K_MSG = 0
K_DEL = 1 << 63
K_FLOOR = 1 << 62
K_ERASED = 1 << 61
K_LAST = 1 << 60
KIND_MASK = ~SEQ_MASK & ((1 << 64) - 1)
_KINDS = (K_MSG, K_DEL, K_FLOOR, K_ERASED, K_LAST)


def record_size(subject_len: int, hdr_len: int, data_len: int) -> int:
    """Bytes a message costs on disk and in ``StoreState.bytes`` (seed 001)."""
    if hdr_len:
        return 34 + subject_len + hdr_len + data_len
    return 30 + subject_len + data_len


def frame_hash(buf) -> bytes:
    return _HASH.pack(zlib.crc32(buf), zlib.adler32(buf))


def read_checked_file(path: str, magic: bytes, min_len: int) -> bytes | None:
    """The bytes of a file that starts with ``magic`` and ends with :func:`frame_hash` of
    the rest; None when it is missing, short or damaged."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError:
        return None
    if len(buf) < min_len or buf[:len(magic)] != magic or \
            frame_hash(memoryview(buf)[:-HASH_LEN]) != buf[-HASH_LEN:]:
        return None
    return buf


def plain_body(subj: bytes, hdr: bytes, data: bytes) -> bytes:
    if hdr:
        return b"".join((_U16.pack(len(subj)), subj, _U32.pack(len(hdr)), hdr, data))
    return b"".join((_U16.pack(len(subj)), subj, data))


def encode_msg(seq: int, ts: int, subj: bytes, hdr: bytes, data: bytes) -> bytes:
    """A plain message record (the fast path: no compression, no encryption)."""
    if hdr:
        n = 34 + len(subj) + len(hdr) + len(data)
        rec = b"".join((_MSG_HEAD.pack(n | F_HDR, seq, ts, len(subj)), subj,
                        _U32.pack(len(hdr)), hdr, data))
    else:
        rec = _MSG_HEAD.pack(30 + len(subj) + len(data), seq, ts, len(subj)) + subj + data
    return rec + _HASH.pack(zlib.crc32(rec), zlib.adler32(rec))


def encode_plain_msgs(seqs, tss, sbs, hdrs, datas, lens) -> bytes:
    """The plain records of messages whose frame lengths are ``lens``, back to back."""
    pack, hpack, u32 = _MSG_HEAD.pack, _HASH.pack, _U32.pack
    crc32, adler32, f_hdr = zlib.crc32, zlib.adler32, F_HDR
    parts: list[bytes] = []
    out = parts.append
    if any(hdrs):
        for seq, ts, sb, hdr, data, n in zip(seqs, tss, sbs, hdrs, datas, lens):
            if hdr:
                r = b"".join((pack(n | f_hdr, seq, ts, len(sb)), sb, u32(len(hdr)), hdr, data))
            else:
                r = b"".join((pack(n, seq, ts, len(sb)), sb, data))
            out(r)
            out(hpack(crc32(r), adler32(r)))
    else:
        for seq, ts, sb, data, n in zip(seqs, tss, sbs, datas, lens):
            r = b"".join((pack(n, seq, ts, len(sb)), sb, data))
            out(r)
            out(hpack(crc32(r), adler32(r)))
    return b"".join(parts)


def parse_plain_msgs(buf, above: int) -> list[tuple]:
    """(seq, ts, subject, hdr, length, offset) of each plain message record in ``buf``
    whose seq is above ``above``, every record's checksum verified first."""
    view = memoryview(buf)
    unpack, u32 = _MSG_HEAD.unpack_from, _U32.unpack_from
    hpack, crc32, adler32 = _HASH.pack, zlib.crc32, zlib.adler32
    len_mask, transformed, f_hdr = LEN_MASK, F_COMPRESSED | F_ENCRYPTED, F_HDR
    out: list[tuple] = []
    off, end = 0, len(buf)
    while off < end:
        if end - off < MIN_FRAME:
            raise StoreCorruptionError(err=f"copied record at byte {off} is cut short")
        lf, seq, ts, slen = unpack(buf, off)
        n = lf & len_mask
        tail = off + n - 8
        if n < MIN_FRAME or off + n > end or \
                hpack(crc32(view[off:tail]), adler32(view[off:tail])) != view[tail:off + n]:
            raise StoreCorruptionError(err=f"copied record at byte {off} failed its checksum")
        if lf & transformed or seq > SEQ_MASK:
            raise StoreCorruptionError(err=f"copied record at byte {off} is not a plain message")
        if seq > above:
            at = off + 22 + slen
            hdr = b""
            if lf & f_hdr:
                hdr = bytes(view[at + 4:at + 4 + u32(buf, at)[0]])
            out.append((seq, ts, str(view[off + 22:at], "utf-8"), hdr, n, off))
            above = seq
        off += n
    return out


def encode_frame(flags: int, seq_kind: int, ts: int, body: bytes) -> bytes:
    n = HEAD_LEN + len(body) + HASH_LEN
    if n > MAX_FRAME:
        raise ValueError("record too large")
    rec = HEAD.pack(n | flags, seq_kind, ts) + body
    return rec + frame_hash(rec)


def encode_control(kind: int, seq: int, ts: int, count: int = 0) -> bytes:
    return encode_frame(0, seq | kind, ts, _U64.pack(count) if count else b"")


def head_for(flags: int, seq_kind: int, ts: int, body_len: int) -> bytes:
    """The 20 header bytes of a frame whose body is ``body_len`` long (the AEAD's AAD)."""
    return HEAD.pack((HEAD_LEN + body_len + HASH_LEN) | flags, seq_kind, ts)


def seal(head: bytes, body: bytes) -> bytes:
    rec = head + body
    return rec + frame_hash(rec)


def parse_head(buf, off: int = 0) -> tuple[int, int, int, int, int]:
    """(length, flags, kind, seq, ts) of the frame at ``off``; no checks."""
    lf, sk, ts = HEAD.unpack_from(buf, off)
    return lf & LEN_MASK, lf & ~LEN_MASK, sk & KIND_MASK, sk & SEQ_MASK, ts


def check(buf, off: int, length: int) -> bool:
    """Does the frame at ``off`` carry a valid hash and a known kind?"""
    if length < MIN_FRAME or off + length > len(buf):
        return False
    end = off + length - HASH_LEN
    view = memoryview(buf)[off:end]
    if _HASH.pack(zlib.crc32(view), zlib.adler32(view)) != bytes(buf[end:end + HASH_LEN]):
        return False
    return (_U64.unpack_from(buf, off + 4)[0] & KIND_MASK) in _KINDS


def body_of(buf, off: int, length: int) -> bytes:
    return bytes(buf[off + HEAD_LEN:off + length - HASH_LEN])


def split_body(body: bytes, has_hdr: bool) -> tuple[str, bytes, bytes]:
    """(subject, hdr, data) of a plain message body."""
    (slen,) = _U16.unpack_from(body, 0)
    pos = 2 + slen
    subj = body[2:pos].decode()
    if has_hdr:
        (hlen,) = _U32.unpack_from(body, pos)
        pos += 4
        hdr = body[pos:pos + hlen]
        return subj, hdr, body[pos + hlen:]
    return subj, b"", body[pos:]


def control_count(body: bytes) -> int:
    return _U64.unpack(body)[0] if len(body) == 8 else 1


__all__ = [
    "F_COMPRESSED", "F_ENCRYPTED", "F_HDR", "HASH_LEN", "HEAD_LEN", "K_DEL", "K_ERASED",
    "K_FLOOR", "K_LAST", "K_MSG", "MIN_FRAME", "SEQ_MASK", "body_of", "check", "encode_control",
    "encode_frame", "encode_msg", "encode_plain_msgs", "frame_hash", "parse_head", "parse_plain_msgs",
    "plain_body", "read_checked_file", "record_size", "split_body",
]
