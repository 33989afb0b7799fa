"""A blocking data-plane client: one request at a time on a plain socket, for callers that
block anyway (the Python API's synchronous calls).

Handing a request to an event-loop thread and its answer back costs two thread wake-ups
each way; on the development machine a round trip through :class:`DataPlaneClient` from
another thread takes ~330 us where the same request on a blocking socket takes ~85 us.
So a blocking caller keeps a connection of its own (one per thread and server, see
``rayjet.actors.direct``): authenticated as any client is (the handshake runs on a
short-lived event loop, then the socket is taken over), the request written, frames read
until its RESPONSE. Plain TCP only: a TLS connection stays with the event-loop client.

One request at a time: a timeout leaves the connection's state unknown (its answer may
still come), so the connection is dropped. Before a request, a connection the server
closed meanwhile (its process restarted or cut it) is noticed and made again, so nothing
is sent into a dead socket; a connection lost after the request was written raises
ConnectionError (the outcome is unknown), one that could not be made ConnectFailed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from rayjet.dataplane.auth import HANDSHAKE_TIMEOUT, check_secret, open_authenticated
from rayjet.dataplane.codec import DataPlaneError, FrameError, check_name
from rayjet.dataplane.frames import HEADER_SIZE, MAX_FRAME, Kind, pack_frame, parse_header
from rayjet.dataplane.requests import (
    PLAIN,
    ConnectFailed,
    ValueCodec,
    decode_response,
    default_error_from_wire,
    encode_request,
)

READ_CHUNK = 256 * 1024


class BlockingClient:
    """One authenticated plain-TCP connection to a data-plane server, used by one thread."""

    def __init__(self, address: tuple[str, int], *, secret: bytes, process_id: str,
                 max_frame: int = MAX_FRAME, connect_timeout: float = 2.0,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 error_from_wire: Callable[[dict], BaseException] = default_error_from_wire,
                 codec: ValueCodec = PLAIN) -> None:
        self.address = (address[0], int(address[1]))
        self._secret = check_secret(secret)
        self.process_id = check_name(process_id, "process id")
        self.max_frame = max_frame
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.error_from_wire = error_from_wire
        self.codec = codec
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._ids = itertools.count(1)
        self.stats = {"requests": 0, "connects": 0, "lost": 0}

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def drop(self) -> bool:
        """Cut the connection as a network would (from any thread): the request waiting on
        it fails with ConnectionError, the next one connects again."""
        sock = self._sock
        if sock is None:
            return False
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return True

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._buf.clear()
        if sock is not None:
            sock.close()

    def request(self, target: str, method: str, args: list | tuple = (),
                kwargs: dict[str, Any] | None = None, *, timeout: float = 10.0) -> Any:
        """Send one request and wait for its answer (see :class:`DataPlaneClient`)."""
        deadline = time.monotonic() + timeout
        rid = next(self._ids)
        payload = encode_request(rid, target, method, args, kwargs or {}, self.codec)
        if len(payload) > self.max_frame:
            raise FrameError(f"a request of {len(payload)} bytes is over the frame limit")
        sock = self._connection(deadline)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(pack_frame(Kind.REQUEST, payload))
            self.stats["requests"] += 1
            ok, value = self._answer(sock, rid, deadline)
        except TimeoutError:
            self.close()  # its answer may still come: the connection's state is unknown
            raise
        except (OSError, DataPlaneError) as exc:
            self.close()
            self.stats["lost"] += 1
            raise ConnectionError(f"connection lost: {exc}") from None
        if ok:
            return value
        raise self.error_from_wire(value)

    # -- the connection -----------------------------------------------------------------------
    def _connection(self, deadline: float) -> socket.socket:
        sock = self._sock
        if sock is not None and self._closed_by_server(sock):
            self.close()
            sock = None
        if sock is None:
            try:
                sock = self._connect(min(self.connect_timeout, deadline - time.monotonic()))
            except (OSError, DataPlaneError, RuntimeError) as exc:
                # RuntimeError: called on a thread whose event loop runs (no handshake here)
                raise ConnectFailed(f"no connection to {self.address}: {exc}") from exc
            self._sock = sock
            self.stats["connects"] += 1
        return sock

    def _closed_by_server(self, sock: socket.socket) -> bool:
        """Has the server closed (or reset) this idle connection? Nothing of ours is in
        flight, so anything readable now is an end of stream, an error frame or a ping."""
        try:
            # a read that does not wait (select() cannot watch descriptors past 1023, and a
            # process running Ray holds many); the request sets its own timeout after
            sock.settimeout(0.0)
            data = sock.recv(READ_CHUNK)
        except BlockingIOError:
            return False  # nothing came: still open
        except OSError:
            return True
        if not data:
            return True
        self._buf += data
        try:
            while len(self._buf) >= HEADER_SIZE:
                kind, length = parse_header(bytes(self._buf[:HEADER_SIZE]), self.max_frame)
                if len(self._buf) < HEADER_SIZE + length:
                    return False
                frame = bytes(self._buf[HEADER_SIZE:HEADER_SIZE + length])
                del self._buf[:HEADER_SIZE + length]
                if kind == Kind.PING:
                    sock.sendall(pack_frame(Kind.PONG, frame[:1024]))
                elif kind != Kind.PONG:
                    return True  # an error frame, or anything unexpected: start again
        except (OSError, DataPlaneError):
            return True
        return False

    def _connect(self, timeout: float) -> socket.socket:
        async def handshake() -> int:
            _reader, writer, _server = await open_authenticated(
                self.address, secret=self._secret, process_id=self.process_id,
                connect_timeout=max(timeout, 0.001),
                handshake_timeout=self.handshake_timeout)
            fd = os.dup(writer.get_extra_info("socket").fileno())
            writer.transport.abort()  # the duplicate keeps the connection open
            return fd

        try:
            asyncio.get_running_loop()
        except RuntimeError:  # none: the handshake runs on a loop of its own
            fd = asyncio.run(handshake())
        else:  # said before the coroutine is made (one never awaited warns)
            raise RuntimeError("a blocking connection cannot be made on an event loop's thread")
        sock = socket.socket(fileno=fd)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf.clear()
        return sock

    def _answer(self, sock: socket.socket, rid: int, deadline: float) -> tuple[bool, Any]:
        while True:
            kind, payload = self._frame(sock, deadline)
            if kind == Kind.RESPONSE:
                got, ok, value = decode_response(payload, self.codec)
                if got == rid:
                    return ok, value
            elif kind == Kind.PING:
                sock.sendall(pack_frame(Kind.PONG, payload[:1024]))
            elif kind == Kind.ERROR:
                raise OSError(f"server closed: {payload[:500].decode(errors='replace')}")
            elif kind != Kind.PONG:
                raise FrameError(f"unexpected {kind.name} frame")

    def _frame(self, sock: socket.socket, deadline: float) -> tuple[Kind, bytes]:
        buf = self._buf
        while True:
            if len(buf) >= HEADER_SIZE:
                kind, length = parse_header(bytes(buf[:HEADER_SIZE]), self.max_frame)
                end = HEADER_SIZE + length
                if len(buf) >= end:
                    payload = bytes(buf[HEADER_SIZE:end])
                    del buf[:end]
                    return kind, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            sock.settimeout(left)
            data = sock.recv(READ_CHUNK)
            if not data:
                raise OSError("connection closed by the server")
            buf += data
