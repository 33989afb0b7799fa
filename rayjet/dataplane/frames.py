"""The wire: a stream of length-prefixed frames.

Each frame is a 5-byte header then the payload::

    u32 length (big-endian: network order; the payload's length, the header not counted)
    u8  kind   (a :class:`Kind`)
    payload    (``length`` bytes)

A receiver checks the header before it reads (or buffers) the body: a length above its
``max_frame`` or an unknown kind is a :class:`FrameError`, so a peer cannot make it
allocate more than ``max_frame`` bytes per connection.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from typing import NamedTuple

from rayjet.dataplane.codec import FrameError, batch_prefix

MAX_FRAME = 64 * 1024 * 1024  # default bound on one frame's payload
HEADER = struct.Struct(">IB")
HEADER_SIZE = HEADER.size
_LIMIT = 2**32 - 1  # what the u32 length can say


class Kind(enum.IntEnum):
    HELLO = 1  # client -> server: [version, process id, client nonce] (msgpack)
    CHALLENGE = 2  # server -> client: server nonce (32 bytes) | server proof (32 bytes)
    PROOF = 3  # client -> server: client proof (32 bytes)
    WELCOME = 4  # server -> client: [version, process id] (msgpack)
    RAFT = 5  # client -> server: one encoded batch (see rayjet.dataplane.codec)
    PING = 6  # either way: answered by PONG with the same payload
    PONG = 7
    ERROR = 8  # either way, just before closing: a reason in UTF-8
    REQUEST = 9  # client -> server: [id, target, method, args, kwargs] (rayjet.dataplane.requests)
    RESPONSE = 10  # server -> client: [id, ok, value]


_KINDS = frozenset(int(k) for k in Kind)
_BY_VALUE = {int(k): k for k in Kind}


class Frame(NamedTuple):
    kind: Kind
    payload: bytes


def check_max_frame(max_frame: int) -> int:
    if type(max_frame) is not int or not 0 < max_frame <= _LIMIT:
        raise ValueError(f"max_frame must be an integer in 1..{_LIMIT}, not {max_frame!r}")
    return max_frame


def frame_header(kind: Kind, length: int) -> bytes:
    """The 5 header bytes of a frame whose payload is ``length`` bytes long."""
    if int(kind) not in _KINDS:
        raise FrameError(f"unknown frame kind {kind!r}")
    if not 0 <= length <= _LIMIT:
        raise FrameError(f"a frame payload of {length} bytes does not fit a u32 length")
    return HEADER.pack(length, int(kind))


def pack_frame(kind: Kind, payload: bytes = b"") -> bytes:
    return frame_header(kind, len(payload)) + payload


def message_room(group: str, max_frame: int) -> int:
    """The largest encoded message a RAFT frame of ``max_frame`` bytes carries for ``group``."""
    return max_frame - len(batch_prefix(group, 0x10000))  # the longest array header


def raft_frames(group: str, encoded: list[bytes], max_frame: int) -> list[bytes]:
    """RAFT frames carrying the messages ``encoded`` (by :func:`.codec.encode_message`) of
    ``group`` in order, in as few frames as ``max_frame`` allows; as pieces to write one
    after the other (no copy of the messages here). Each message must fit
    :func:`message_room`."""
    room = message_room(group, max_frame)
    pieces: list[bytes] = []
    chunk: list[bytes] = []
    size = 0

    def close_frame() -> None:
        prefix = batch_prefix(group, len(chunk))
        pieces.extend((frame_header(Kind.RAFT, len(prefix) + size), prefix, *chunk))

    for m in encoded:
        if chunk and size + len(m) > room:
            close_frame()
            chunk, size = [], 0
        chunk.append(m)
        size += len(m)
    if chunk:
        close_frame()
    return pieces


def parse_header(header: bytes | bytearray | memoryview, max_frame: int = MAX_FRAME,
                 offset: int = 0) -> tuple[Kind, int]:
    """The kind and payload length a header announces; FrameError when the kind is unknown
    or the length above ``max_frame``."""
    length, kind = HEADER.unpack_from(header, offset)
    if kind not in _KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    if length > max_frame:
        raise FrameError(f"frame of {length} bytes is over the {max_frame}-byte limit")
    return _BY_VALUE[kind], length


class FrameReader:
    """Turns bytes, fed as they arrive in pieces of any size, into complete frames.

    After a :class:`FrameError` the stream is out of step and cannot be resynchronised:
    every later :meth:`feed` raises again (the caller closes the connection)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = check_max_frame(max_frame)
        self._buf = bytearray()
        self._failed: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that do not make a complete frame yet."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """The frames completed by ``data`` (possibly none), in order."""
        if self._failed is not None:
            raise FrameError(self._failed)
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        try:
            while len(buf) - pos >= HEADER_SIZE:
                kind, length = parse_header(buf, self.max_frame, pos)
                end = pos + HEADER_SIZE + length
                if len(buf) < end:
                    break
                frames.append(Frame(kind, bytes(buf[pos + HEADER_SIZE:end])))
                pos = end
        except FrameError as exc:
            self._failed = str(exc)
            buf.clear()
            raise
        del buf[:pos]  # one move per feed, not one per frame
        return frames


async def read_frame(reader: asyncio.StreamReader, max_frame: int = MAX_FRAME) -> Frame | None:
    """The next frame from ``reader``; None at a clean end of stream (between frames).

    FrameError for an oversized or unknown frame (checked before the body is read) and for
    a stream that ends inside a frame; connection errors (OSError) pass through."""
    try:
        header = await reader.readexactly(HEADER_SIZE)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("stream ended inside a frame header") from None
    kind, length = parse_header(header, max_frame)
    if not length:
        return Frame(kind, b"")
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError(f"stream ended inside a {kind.name} frame") from None
    return Frame(kind, payload)
