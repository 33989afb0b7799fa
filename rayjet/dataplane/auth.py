"""Mutual authentication of a data-plane connection by a shared cluster secret.

Both ends prove they know the secret without sending it, each over a nonce the other
chose, so a recorded handshake is worthless on a later connection::

    client -> HELLO      [version, client process id, client nonce (32 bytes)]
    server -> CHALLENGE  server nonce (32) | HMAC-SHA256(secret, "server" | cn | sn)
    client -> PROOF      HMAC-SHA256(secret, "client" | sn | cn)
    server -> WELCOME    [version, server process id]

The labels keep one side's proof from being replayed as the other's. The client checks
the server first, so a client never proves itself to a server without the secret. A side
that refuses sends ERROR and closes. The whole exchange runs under a deadline, so a
stranger that connects and says nothing holds a socket for seconds, not forever.

This authenticates the start of a connection; against an attacker on the network path
who can take over a TCP connection, use TLS as well (see the transport's ``ssl_context``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import msgpack

from rayjet.dataplane.codec import MAX_NAME, DataPlaneError, FrameError
from rayjet.dataplane.frames import Frame, Kind, pack_frame, read_frame

PROTOCOL_VERSION = 1
NONCE_SIZE = 32
MAC_SIZE = 32
HANDSHAKE_TIMEOUT = 5.0  # seconds from connect to WELCOME
HANDSHAKE_MAX_FRAME = 8192  # before authentication nobody may make us buffer more
MAX_ERROR_TEXT = 1024

SECRET_ENV = "RAYJET_DATA_PLANE_SECRET"
RAY_TOKEN_ENV = "RAY_AUTH_TOKEN"
RAY_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
RAY_TOKEN_DEFAULT_PATH = Path("~/.ray/auth_token")


class AuthError(DataPlaneError):
    """The handshake failed: wrong secret, protocol violation, or no answer in time."""


def cluster_secret() -> bytes | None:
    """The shared secret of this cluster's data plane, or None when there is none here.

    In order: ``$RAYJET_DATA_PLANE_SECRET``; Ray's token authentication secret, found as
    Ray finds it (``$RAY_AUTH_TOKEN``, else the file named by ``$RAY_AUTH_TOKEN_PATH``, else
    ``~/.ray/auth_token``). Surrounding whitespace is stripped; an empty value counts as
    none. With None the caller must provide one: the meta group generates a random secret
    and hands it to the processes that host replicas.
    """
    value = os.environ.get(SECRET_ENV, "").strip()
    if value:
        return value.encode()
    value = os.environ.get(RAY_TOKEN_ENV, "").strip()
    if value:
        return value.encode()
    path = os.environ.get(RAY_TOKEN_PATH_ENV)
    token_file = Path(path) if path else RAY_TOKEN_DEFAULT_PATH.expanduser()
    try:
        data = token_file.read_bytes().strip()
    except OSError:
        return None
    return data or None


def check_secret(secret: Any) -> bytes:
    if not isinstance(secret, bytes) or not secret:
        raise ValueError("the data-plane secret must be non-empty bytes")
    return secret


def server_proof(secret: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, b"server" + client_nonce + server_nonce, hashlib.sha256).digest()


def client_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, b"client" + server_nonce + client_nonce, hashlib.sha256).digest()


def _unpack_greeting(payload: bytes, what: str, with_nonce: bool) -> tuple[int, str, bytes]:
    """``[version, process id(, nonce)]`` from a HELLO or WELCOME payload."""
    try:
        obj = msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=True,
                              max_str_len=4 * MAX_NAME, max_bin_len=NONCE_SIZE,
                              max_array_len=3, max_map_len=0, max_ext_len=0)
    except Exception as exc:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise FrameError(f"malformed {what}: {type(exc).__name__}") from None
    size = 3 if with_nonce else 2
    if type(obj) is not tuple or len(obj) != size:
        raise FrameError(f"malformed {what}")
    version, process_id = obj[0], obj[1]
    nonce = obj[2] if with_nonce else b""
    if (type(version) is not int or type(process_id) is not str
            or len(process_id) > MAX_NAME or type(nonce) is not bytes
            or (with_nonce and len(nonce) != NONCE_SIZE)):
        raise FrameError(f"malformed {what}")
    return version, process_id, nonce


def default_process_id() -> str:
    """How a process names itself in HELLO and WELCOME (logged by the other side)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:MAX_NAME]


def error_frame(reason: str) -> bytes:
    return pack_frame(Kind.ERROR, reason.encode()[:MAX_ERROR_TEXT])


def error_text(payload: bytes) -> str:
    """The reason an ERROR frame gives, for a log line."""
    return payload[:MAX_ERROR_TEXT].decode("utf-8", errors="replace")


def _send_error(writer: asyncio.StreamWriter, reason: str) -> None:
    try:
        writer.write(error_frame(reason))
    except Exception:  # noqa: BLE001, S110 - the connection is being dropped anyway
        pass


async def _expect(reader: asyncio.StreamReader, kind: Kind, size: int | None = None) -> Frame:
    frame = await read_frame(reader, HANDSHAKE_MAX_FRAME)
    if frame is None:
        raise AuthError(f"connection closed while waiting for {kind.name}")
    if frame.kind == Kind.ERROR:
        raise AuthError(f"peer refused: {error_text(frame.payload)}")
    if frame.kind != kind:
        raise FrameError(f"expected {kind.name}, got {frame.kind.name}")
    if size is not None and len(frame.payload) != size:
        raise FrameError(f"{kind.name} must be {size} bytes, got {len(frame.payload)}")
    return frame


async def client_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                           secret: bytes, process_id: str,
                           timeout: float = HANDSHAKE_TIMEOUT) -> str:
    """Authenticate a fresh connection as its client; the server's process id.

    AuthError when the server does not prove the secret (or refuses ours, or is silent past
    ``timeout``), FrameError when it speaks something else; OSError passes through."""
    client_nonce = secrets.token_bytes(NONCE_SIZE)
    try:
        async with asyncio.timeout(timeout):
            hello = msgpack.packb([PROTOCOL_VERSION, process_id, client_nonce])
            writer.write(pack_frame(Kind.HELLO, hello))
            frame = await _expect(reader, Kind.CHALLENGE, NONCE_SIZE + MAC_SIZE)
            server_nonce, proof = frame.payload[:NONCE_SIZE], frame.payload[NONCE_SIZE:]
            if not hmac.compare_digest(proof, server_proof(secret, client_nonce, server_nonce)):
                _send_error(writer, "authentication failed: bad server proof")
                raise AuthError("the server does not know the cluster secret")
            writer.write(pack_frame(Kind.PROOF, client_proof(secret, server_nonce, client_nonce)))
            frame = await _expect(reader, Kind.WELCOME)
            version, server_id, _ = _unpack_greeting(frame.payload, "WELCOME", False)
            if version != PROTOCOL_VERSION:
                raise AuthError(f"server speaks data-plane version {version}")
            return server_id
    except TimeoutError:
        raise AuthError(f"no handshake within {timeout:.1f}s") from None


async def server_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                           secret: bytes, process_id: str,
                           timeout: float = HANDSHAKE_TIMEOUT) -> str:
    """Authenticate a fresh connection as its server; the client's process id.

    AuthError when the client does not prove the secret (or refuses our proof, or is
    silent past ``timeout``), FrameError when it speaks something else; the caller closes
    the connection on either."""
    try:
        async with asyncio.timeout(timeout):
            frame = await _expect(reader, Kind.HELLO)
            version, client_id, client_nonce = _unpack_greeting(frame.payload, "HELLO", True)
            if version != PROTOCOL_VERSION:
                _send_error(writer, f"unsupported data-plane version {version}")
                raise AuthError(f"client speaks data-plane version {version}")
            server_nonce = secrets.token_bytes(NONCE_SIZE)
            proof = server_proof(secret, client_nonce, server_nonce)
            writer.write(pack_frame(Kind.CHALLENGE, server_nonce + proof))
            frame = await _expect(reader, Kind.PROOF, MAC_SIZE)
            expected = client_proof(secret, server_nonce, client_nonce)
            if not hmac.compare_digest(frame.payload, expected):
                _send_error(writer, "authentication failed")
                raise AuthError(f"client {client_id!r} does not know the cluster secret")
            writer.write(pack_frame(Kind.WELCOME, msgpack.packb([PROTOCOL_VERSION, process_id])))
            return client_id
    except TimeoutError:
        _send_error(writer, "handshake timeout")
        raise AuthError(f"no handshake within {timeout:.1f}s") from None


async def open_authenticated(address: tuple[str, int], *, secret: bytes, process_id: str,
                             ssl_context: Any = None, server_hostname: str | None = None,
                             connect_timeout: float = 5.0,
                             handshake_timeout: float = HANDSHAKE_TIMEOUT
                             ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    """Connect to a data-plane server (over TLS with ``ssl_context``) and authenticate as
    its client: ``(reader, writer, the server's process id)``. OSError or TimeoutError when
    it cannot connect, AuthError when either side's proof fails."""
    host, port = address
    tls = {} if ssl_context is None else {"ssl": ssl_context,
                                          "server_hostname": server_hostname}
    async with asyncio.timeout(connect_timeout):
        reader, writer = await asyncio.open_connection(host, port, **tls)
    try:
        server = await client_handshake(reader, writer, secret=secret, process_id=process_id,
                                        timeout=handshake_timeout)
    except BaseException:
        writer.transport.abort()
        raise
    return reader, writer, server
