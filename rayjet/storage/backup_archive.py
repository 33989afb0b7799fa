"""The stream backup archive: one self-checking file holding a stream and its consumers.

Layout: the magic ``RJBACKUP``, then records, each ``kind`` (1 byte), payload length
(4 bytes, big-endian), CRC-32 of the payload (4 bytes) and the payload:

- HEADER (first, once): msgpack of the stream's config, state and creation time as the
  backup began, and the sequences the restore must reproduce (``first_seq``, ``last_seq``);
- MSGS: zstd-compressed msgpack columns ``seq``, ``ts``, ``subject``, ``hdr``, ``data`` of
  stored messages, sequences rising across all MSGS records;
- SOURCES (at most once): the stream's positions in its sources;
- CONSUMER: one consumer's config and delivery state;
- END (last): how many records, messages and data bytes came before it, and the SHA-256 of
  every byte before the END record.

A reader checks every record's CRC, the structure, and at the end the counts and the
digest, so a flipped bit, a lost or repeated chunk, or a cut-off file is refused whole
(:class:`BackupDamagedError`) before a restore creates anything. The payloads are plain
msgpack: no pickle, nothing executed on load.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, BinaryIO

import cramjam
import msgpack

MAGIC = b"RJBACKUP"
FORMAT = "rayjet-stream-backup"
VERSION = 1
K_HEADER, K_MSGS, K_SOURCES, K_CONSUMER, K_END = 1, 2, 3, 4, 15
MAX_RECORD = 64 << 20  # a longer payload is damage, not data
_HEAD = struct.Struct(">BII")
COLUMNS = ("seq", "ts", "subject", "hdr", "data")


class BackupDamagedError(ValueError):
    """The archive is not a whole, unaltered rayjet stream backup."""


def _plain(value: Any) -> Any:
    """Documents hold times as RFC 3339 text (as the API's JSON does)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot keep a {type(value).__name__} in a backup")


def _pack(doc: Any) -> bytes:
    return msgpack.packb(doc, use_bin_type=True, default=_plain)


def _unpack(payload: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is damage
        raise BackupDamagedError(f"{what} record does not decode: {exc}") from None


class ArchiveWriter:
    """Builds an archive record by record; each method returns the bytes to append."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self.records = 0
        self.message_count = 0
        self.data_bytes = 0
        self._started = False

    def _record(self, kind: int, payload: bytes) -> bytes:
        if len(payload) > MAX_RECORD:
            raise ValueError(f"backup record of {len(payload)} bytes exceeds {MAX_RECORD}")
        out = _HEAD.pack(kind, len(payload), zlib.crc32(payload)) + payload
        if not self._started:
            out = MAGIC + out
            self._started = True
        self._digest.update(out)
        self.records += 1
        return out

    def header(self, config: dict[str, Any], state: dict[str, Any], *, created_ns: int,
               first_seq: int, last_seq: int) -> bytes:
        return self._record(K_HEADER, _pack({
            "format": FORMAT, "version": VERSION, "config": config, "state": state,
            "created_ns": created_ns, "first_seq": first_seq, "last_seq": last_seq}))

    def messages(self, seq: list[int], ts: list[int], subject: list[str],
                 hdr: list[bytes | None], data: list[bytes]) -> bytes:
        self.message_count += len(seq)
        self.data_bytes += sum(map(len, data))
        body = _pack({"seq": seq, "ts": ts, "subject": subject,
                      "hdr": [h or b"" for h in hdr], "data": data})
        return self._record(K_MSGS, bytes(cramjam.zstd.compress(body, level=1)))

    def sources(self, positions: list[list[Any]]) -> bytes:
        return self._record(K_SOURCES, _pack({"positions": positions}))

    def consumer(self, name: str, config: dict[str, Any], state: dict[str, Any]) -> bytes:
        return self._record(K_CONSUMER, _pack({"name": name, "config": config, "state": state}))

    def end(self) -> bytes:
        payload = _pack({"records": self.records, "messages": self.message_count,
                         "bytes": self.data_bytes, "sha256": self._digest.digest()})
        # the END record is outside its own digest
        return _HEAD.pack(K_END, len(payload), zlib.crc32(payload)) + payload


@dataclass
class ConsumerBackup:
    name: str
    config: dict[str, Any]
    state: dict[str, Any]


@dataclass
class ArchiveSummary:
    """What a verified archive holds (everything but the messages)."""

    config: dict[str, Any]
    state: dict[str, Any]
    created_ns: int
    first_seq: int
    last_seq: int
    messages: int = 0
    data_bytes: int = 0
    sources: list[list[Any]] | None = None
    consumers: list[ConsumerBackup] = field(default_factory=list)


class ArchiveReader:
    """Reads an archive from a binary file, checking as it goes (see the module doc)."""

    def __init__(self, source: BinaryIO) -> None:
        self._src = source
        self._digest = hashlib.sha256()
        self._records = 0
        self._messages = 0
        self._bytes = 0
        self._last_seq = 0

    def _read(self, n: int, what: str) -> bytes:
        buf = self._src.read(n)
        if buf is None or len(buf) != n:
            raise BackupDamagedError(f"the archive ends inside {what} (cut short?)")
        return buf

    def records(self) -> Iterator[tuple[int, Any]]:
        """``(kind, document)`` per record; MSGS documents are the column dict. Raises
        :class:`BackupDamagedError` at the first sign of damage; the END record is checked,
        not yielded."""
        magic = self._read(len(MAGIC), "the magic bytes")
        if magic != MAGIC:
            raise BackupDamagedError("not a rayjet stream backup (wrong magic bytes)")
        self._digest.update(magic)
        while True:
            head = self._read(_HEAD.size, "a record header")
            kind, length, crc = _HEAD.unpack(head)
            if length > MAX_RECORD:
                raise BackupDamagedError(f"record of {length} bytes: damaged length")
            payload = self._read(length, "a record")
            if zlib.crc32(payload) != crc:
                raise BackupDamagedError(f"record {self._records + 1} fails its checksum")
            if kind == K_END:
                self._check_end(payload)
                return
            self._digest.update(head)
            self._digest.update(payload)
            self._records += 1
            yield kind, self._decode(kind, payload)

    def _decode(self, kind: int, payload: bytes) -> Any:
        if self._records == 1 and kind != K_HEADER:
            raise BackupDamagedError("the archive does not start with its header")
        if kind == K_HEADER:
            if self._records != 1:
                raise BackupDamagedError("a second header record")
            doc = _unpack(payload, "header")
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise BackupDamagedError("header is not a rayjet stream backup's")
            if doc.get("version") != VERSION:
                raise BackupDamagedError(f"backup format version {doc.get('version')!r} "
                                         f"is not {VERSION}")
            return doc
        if kind == K_MSGS:
            try:
                body = bytes(cramjam.zstd.decompress(payload))
            except Exception as exc:  # noqa: BLE001
                raise BackupDamagedError(f"messages do not decompress: {exc}") from None
            cols = _unpack(body, "messages")
            self._check_columns(cols)
            return cols
        if kind in (K_SOURCES, K_CONSUMER):
            doc = _unpack(payload, "consumer" if kind == K_CONSUMER else "sources")
            if not isinstance(doc, dict):
                raise BackupDamagedError("a record that is not a document")
            return doc
        raise BackupDamagedError(f"unknown record kind {kind}")

    def _check_columns(self, cols: Any) -> None:
        if not isinstance(cols, dict) or any(not isinstance(cols.get(c), list)
                                             for c in COLUMNS):
            raise BackupDamagedError("a messages record without its columns")
        n = len(cols["seq"])
        if any(len(cols[c]) != n for c in COLUMNS):
            raise BackupDamagedError("a messages record with columns of different lengths")
        last = self._last_seq
        for s in cols["seq"]:
            if not isinstance(s, int) or s <= last:
                raise BackupDamagedError("message sequences out of order")
            last = s
        self._last_seq = last
        self._messages += n
        self._bytes += sum(map(len, cols["data"]))

    def _check_end(self, payload: bytes) -> None:
        doc = _unpack(payload, "end")
        want = {"records": self._records, "messages": self._messages, "bytes": self._bytes}
        if not isinstance(doc, dict) or any(doc.get(k) != v for k, v in want.items()):
            raise BackupDamagedError(f"the archive's end counts {doc} do not match its "
                                     f"content {want}")
        if doc.get("sha256") != self._digest.digest():
            raise BackupDamagedError("the archive's digest does not match its content")
        if self._src.read(1):
            raise BackupDamagedError("bytes after the archive's end")


def verify_archive(source: BinaryIO) -> ArchiveSummary:
    """Read a whole archive, checking everything; what it holds but the messages."""
    summary: ArchiveSummary | None = None
    last_msg = 0
    for kind, doc in ArchiveReader(source).records():
        if kind == K_HEADER:
            try:
                summary = ArchiveSummary(dict(doc["config"]), dict(doc["state"]),
                                         int(doc["created_ns"]), int(doc["first_seq"]),
                                         int(doc["last_seq"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise BackupDamagedError(f"header lacks {exc}") from None
            continue
        assert summary is not None  # the reader checked the header comes first
        if kind == K_MSGS:
            summary.messages += len(doc["seq"])
            summary.data_bytes += sum(map(len, doc["data"]))
            if doc["seq"]:
                last_msg = doc["seq"][-1]
        elif kind == K_SOURCES:
            if summary.sources is not None or not isinstance(doc.get("positions"), list):
                raise BackupDamagedError("a second or malformed sources record")
            summary.sources = doc["positions"]
        elif kind == K_CONSUMER:
            try:
                summary.consumers.append(ConsumerBackup(str(doc["name"]), dict(doc["config"]),
                                                        dict(doc["state"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise BackupDamagedError(f"consumer record lacks {exc}") from None
    if summary is None:
        raise BackupDamagedError("the archive has no header")
    if last_msg > summary.last_seq:
        raise BackupDamagedError(f"a message at {last_msg} past the stream's last sequence "
                                 f"{summary.last_seq}")
    return summary


def message_records(source: BinaryIO) -> Iterator[dict[str, list]]:
    """The MSGS columns of an archive (verified before with :func:`verify_archive`)."""
    for kind, doc in ArchiveReader(source).records():
        if kind == K_MSGS:
            yield doc
