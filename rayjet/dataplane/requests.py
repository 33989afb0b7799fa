"""Requests and their answers over data-plane connections: what clients will send leaders.

A REQUEST frame's payload is the msgpack array ``[id, target, method, args, kwargs]``: a
request id (unsigned, chosen by the client, unique among its requests in flight on the
connection), the name of the replica asked, the method, a list and a map with string keys.
The answer is a RESPONSE frame ``[id, ok, value]``: ``value`` is the method's result when
``ok``, else an error document (a map; see ``error_to_wire``). Answers may come in any
order: many requests are in flight on one connection.

Only msgpack crosses (never pickle); both decoders check every field and raise FrameError,
which closes the connection. A server serves at most ``max_in_flight`` requests of one
connection at a time and reads no further frames of it meanwhile (back-pressure through
TCP). Which targets and methods a server serves is its handler's business: it answers
what it does not serve with an error document, like any other failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from rayjet.dataplane.auth import HANDSHAKE_TIMEOUT, check_secret, open_authenticated
from rayjet.dataplane.codec import MAX_NAME, MAX_UINT, DataPlaneError, FrameError, check_name
from rayjet.dataplane.frames import MAX_FRAME, Kind, check_max_frame, pack_frame, read_frame

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024  # requests of one connection a server serves at once
MAX_METHOD = 128  # characters in a method name

# what a server calls for each request: handler(target, method, args, kwargs) -> result
Handler = Callable[[str, str, list, dict], Awaitable[Any]]


@dataclass(frozen=True)
class ValueCodec:
    """How values beyond msgpack's own travel in requests and answers: ``default(obj)``
    turns what msgpack cannot carry into an ``msgpack.ExtType`` (or raises TypeError),
    ``ext_hook(code, data)`` turns one back (raising on anything it does not know: the
    frame is then malformed). ``strict_answers``: answers are packed with msgpack's
    ``strict_types`` (tuples reach ``default`` instead of becoming lists)."""

    default: Callable[[Any], Any] | None = None
    ext_hook: Callable[[int, bytes], Any] | None = None
    strict_answers: bool = False
    # map keys other than strings (an answer's row numbers); still only hashable scalars,
    # since arrays decode as lists
    any_map_keys: bool = False


PLAIN = ValueCodec()


class ConnectFailed(ConnectionError):
    """No connection could be made for a request: nothing was sent."""


class RemoteError(DataPlaneError):
    """A request failed at the server; ``doc`` is the error document it answered."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__(str(doc.get("description") or doc.get("type") or "remote error"))
        self.doc = doc


def default_error_to_wire(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "description": str(exc)}


def default_error_from_wire(doc: dict[str, Any]) -> BaseException:
    return RemoteError(doc)


# --- payloads -------------------------------------------------------------------------------


def _unpack(data: bytes, codec: ValueCodec = PLAIN) -> Any:
    try:
        if codec.ext_hook is not None:
            return msgpack.unpackb(data, raw=False, strict_map_key=not codec.any_map_keys,
                                   use_list=True, ext_hook=codec.ext_hook)
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # noqa: BLE001 - anything malformed is one kind of error here
        raise FrameError(f"undecodable payload: {type(exc).__name__}: {exc}") from None


def _request_id(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_UINT:
        raise FrameError(f"request id must be an unsigned integer, not {value!r:.40}")
    return value


def encode_request(rid: int, target: str, method: str, args: list | tuple,
                   kwargs: dict[str, Any], codec: ValueCodec = PLAIN) -> bytes:
    _request_id(rid)
    check_name(target, "target")
    if not isinstance(method, str) or not method or len(method) > MAX_METHOD:
        raise FrameError(f"bad method name {method!r:.40}")
    try:
        return msgpack.packb([rid, target, method, list(args), dict(kwargs)], use_bin_type=True,
                             default=codec.default)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"arguments msgpack cannot carry: {exc}") from None


def decode_request(data: bytes, codec: ValueCodec = PLAIN
                   ) -> tuple[int, str, str, list, dict[str, Any]]:
    o = _unpack(data, codec)
    if not isinstance(o, list) or len(o) != 5:
        raise FrameError("a request is [id, target, method, args, kwargs]")
    rid, target, method, args, kwargs = o
    rid = _request_id(rid)
    if not isinstance(target, str) or not target or len(target) > MAX_NAME:
        raise FrameError("bad request target")
    if not isinstance(method, str) or not method or len(method) > MAX_METHOD:
        raise FrameError("bad request method")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise FrameError("request args must be an array and kwargs a map")
    if not all(isinstance(k, str) for k in kwargs):
        raise FrameError("request kwargs keys must be strings")
    return rid, target, method, args, kwargs


def encode_response(rid: int, ok: bool, value: Any, codec: ValueCodec = PLAIN) -> bytes:
    return msgpack.packb([_request_id(rid), bool(ok), value], use_bin_type=True,
                         default=codec.default, strict_types=codec.strict_answers)


def decode_response(data: bytes, codec: ValueCodec = PLAIN) -> tuple[int, bool, Any]:
    o = _unpack(data, codec)
    if not isinstance(o, list) or len(o) != 3 or not isinstance(o[1], bool):
        raise FrameError("a response is [id, ok, value]")
    rid, ok, value = o
    if not ok and not isinstance(value, dict):
        raise FrameError("a failed response carries an error map")
    return _request_id(rid), ok, value


# --- the server side: one connection's requests ---------------------------------------------


class ConnectionRequests:
    """Serves the requests of one authenticated connection: each in a task of its own,
    answered as it completes; at most ``max_in_flight`` at once (:meth:`room` waits)."""

    def __init__(self, handler: Handler, writer: asyncio.StreamWriter, *,
                 error_to_wire: Callable[[BaseException], dict] = default_error_to_wire,
                 max_in_flight: int = MAX_IN_FLIGHT, stats: dict[str, int] | None = None,
                 codec: ValueCodec = PLAIN) -> None:
        self.handler = handler
        self.codec = codec
        self.writer = writer
        self.error_to_wire = error_to_wire
        self.max_in_flight = max_in_flight
        self.tasks: set[asyncio.Task] = set()
        self._room = asyncio.Event()
        self._room.set()
        self.stats = stats if stats is not None else {}

    def take(self, payload: bytes) -> None:
        """Start serving one REQUEST frame (FrameError when it is malformed)."""
        rid, target, method, args, kwargs = decode_request(payload, self.codec)
        self._count("requests")
        task = asyncio.get_running_loop().create_task(
            self._serve(rid, target, method, args, kwargs))
        self.tasks.add(task)
        task.add_done_callback(self._done)
        if len(self.tasks) >= self.max_in_flight:
            self._room.clear()

    async def room(self) -> None:
        """Return once fewer than ``max_in_flight`` requests are being served."""
        await self._room.wait()

    def cancel(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if len(self.tasks) < self.max_in_flight:
            self._room.set()

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    async def _serve(self, rid: int, target: str, method: str, args: list,
                     kwargs: dict) -> None:
        try:
            value = await self.handler(target, method, args, kwargs)
            answer = encode_response(rid, True, value, self.codec)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is the requester's answer
            self._count("request_errors")
            try:
                answer = encode_response(rid, False, self.error_to_wire(exc))
            except Exception:  # noqa: BLE001 - an error document msgpack cannot carry
                answer = encode_response(rid, False, default_error_to_wire(exc))
        if not self.writer.is_closing():
            self.writer.write(pack_frame(Kind.RESPONSE, answer))


# --- the client side ------------------------------------------------------------------------


class DataPlaneClient:
    """One authenticated connection to a data-plane server, for requests: many in flight,
    each answered by id. Made on first use and again after it was lost; a lost connection
    fails the requests in flight on it with ConnectionError (their outcome is unknown)."""

    def __init__(self, address: tuple[str, int], *, secret: bytes, process_id: str,
                 ssl_context: Any = None, server_hostname: str | None = None,
                 max_frame: int = MAX_FRAME, connect_timeout: float = 5.0,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 error_from_wire: Callable[[dict], BaseException] = default_error_from_wire,
                 codec: ValueCodec = PLAIN) -> None:
        self.address = (address[0], int(address[1]))
        self.codec = codec
        self._secret = check_secret(secret)
        self.process_id = check_name(process_id, "process id")
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.max_frame = check_max_frame(max_frame)
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.error_from_wire = error_from_wire
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._connecting: asyncio.Task | None = None
        self._closed = False
        self.stats = {"requests": 0, "connects": 0, "lost": 0}

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def request(self, target: str, method: str, args: list | tuple = (),
                      kwargs: dict[str, Any] | None = None, *, timeout: float = 10.0) -> Any:
        """Send one request and wait for its answer: the value, or the server's error as
        ``error_from_wire`` makes it. TimeoutError after ``timeout`` seconds (the request
        may still run); ConnectionError when the connection is lost meanwhile, its subclass
        ConnectFailed when none could be made (nothing was sent)."""
        if self._closed:
            raise ConnectFailed("data-plane client closed")
        async with asyncio.timeout(timeout):
            try:
                writer = await self._connection()
            except (OSError, DataPlaneError) as exc:
                raise ConnectFailed(f"no connection to {self.address}: {exc}") from exc
            rid = next(self._ids)
            payload = encode_request(rid, target, method, args, kwargs or {}, self.codec)
            if len(payload) > self.max_frame:
                raise FrameError(f"a request of {len(payload)} bytes is over the frame limit")
            fut = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            try:
                writer.write(pack_frame(Kind.REQUEST, payload))
                self.stats["requests"] += 1
                ok, value = await fut
            finally:
                self._pending.pop(rid, None)
        if ok:
            return value
        raise self.error_from_wire(value)

    def drop(self) -> bool:
        """Abort the connection as a network cut would (tests and operators use it): the
        requests in flight on it fail with ConnectionError, the next one connects again.
        Call on the client's event loop. False when there was no connection."""
        if self._writer is None:
            return False
        self._writer.transport.abort()
        return True

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
        self._lose(ConnectionError("data-plane client closed"))

    async def _connection(self) -> asyncio.StreamWriter:
        if self._writer is not None:
            return self._writer
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
        # shielded: one caller's timeout must not cancel the connection the others wait on
        return await asyncio.shield(self._connecting)

    async def _connect(self) -> asyncio.StreamWriter:
        reader, writer, _server = await open_authenticated(
            self.address, secret=self._secret, process_id=self.process_id,
            ssl_context=self.ssl_context, server_hostname=self.server_hostname,
            connect_timeout=self.connect_timeout, handshake_timeout=self.handshake_timeout)
        self.stats["connects"] += 1
        self._writer = writer
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, writer))
        return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason: BaseException = ConnectionError("connection closed by the server")
        try:
            while (frame := await read_frame(reader, self.max_frame)) is not None:
                if frame.kind == Kind.RESPONSE:
                    rid, ok, value = decode_response(frame.payload, self.codec)
                    fut = self._pending.get(rid)
                    if fut is not None and not fut.done():
                        fut.set_result((ok, value))
                elif frame.kind == Kind.PING:
                    writer.write(pack_frame(Kind.PONG, frame.payload[:1024]))
                elif frame.kind == Kind.ERROR:
                    reason = ConnectionError(
                        f"server closed: {frame.payload[:500].decode(errors='replace')}")
                    break
                elif frame.kind != Kind.PONG:
                    reason = ConnectionError(f"unexpected {frame.kind.name} frame")
                    break
        except (OSError, DataPlaneError) as exc:
            reason = ConnectionError(f"connection lost: {exc}")
        finally:
            if self._writer is writer:
                self._writer = None
                self.stats["lost"] += 1
            # RuntimeError: the loop was closed under this connection (its owner ended
            # without closing it); nothing is left to tell then
            with contextlib.suppress(RuntimeError):
                writer.transport.abort()
                self._lose(reason)

    def _lose(self, reason: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(reason)
