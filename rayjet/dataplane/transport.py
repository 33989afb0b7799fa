"""Raft messages over direct, authenticated TCP connections between processes.

:class:`DataPlaneServer` accepts connections, authenticates them (:mod:`.auth`) and hands
each RAFT frame's messages to a ``deliver(group, messages)`` callable. Whatever a peer
sends, the worst it can do is get its own connection closed.

:class:`DataPlaneSender` keeps one connection per remote address and sends fire and forget,
as raft expects of a network: a batch that cannot go out soon is dropped, not waited for
(raft sends again), so a slow, paused or dead peer costs at most its byte budget of memory
and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from rayjet.dataplane.auth import (
    HANDSHAKE_MAX_FRAME,
    HANDSHAKE_TIMEOUT,
    check_secret,
    default_process_id,
    error_frame,
    error_text,
    open_authenticated,
    server_handshake,
)
from rayjet.dataplane.codec import (
    DataPlaneError,
    FrameError,
    check_name,
    decode_batch,
    encode_message,
)
from rayjet.dataplane.frames import (
    MAX_FRAME,
    Frame,
    Kind,
    check_max_frame,
    message_room,
    pack_frame,
    raft_frames,
    read_frame,
)
from rayjet.dataplane.requests import (
    MAX_IN_FLIGHT,
    PLAIN,
    ConnectionRequests,
    Handler,
    ValueCodec,
    default_error_to_wire,
)
from rayjet.raft.messages import Message

log = logging.getLogger(__name__)

Address = tuple[str, int]
Deliver = Callable[[str, list[Message]], None]

PEER_BUDGET = 64 * 1024 * 1024  # bytes queued per remote address before sends are dropped
BACKOFF_MIN = 0.05  # seconds before reconnecting after a failure; doubles per failure
BACKOFF_MAX = 2.0
CONNECT_TIMEOUT = 5.0
STALL_TIMEOUT = 30.0  # a connection that takes no bytes for this long is dropped
MAX_PING = 1024  # bytes a PONG echoes
READ_LIMIT = 1024 * 1024  # StreamReader buffer before it pauses the socket


def _key(address: Address) -> Address:
    return (address[0], int(address[1]))


class DataPlaneServer:
    """Accepts data-plane connections; build with :meth:`start`.

    ``stats``: ``accepted`` TCP connections, ``connections`` that authenticated,
    ``auth_failures`` (handshakes that failed for any reason: wrong secret, silence,
    garbage), ``refused`` (over ``max_handshakes`` at once), ``frames`` and ``messages``
    delivered, ``bad_frames`` (malformed, oversized or unexpected, before or after
    authentication), ``deliver_errors``."""

    def __init__(self, deliver: Deliver, *, secret: bytes, process_id: str, max_frame: int,
                 handshake_timeout: float, max_handshakes: int,
                 serve_request: Handler | None = None,
                 error_to_wire: Callable[[BaseException], dict] = default_error_to_wire,
                 codec: ValueCodec = PLAIN) -> None:
        self.deliver = deliver
        self.serve_request = serve_request
        self.codec = codec
        self.error_to_wire = error_to_wire
        self.max_in_flight = MAX_IN_FLIGHT  # requests of one connection served at once
        self._secret = check_secret(secret)
        self.process_id = check_name(process_id, "process id")
        self.max_frame = check_max_frame(max_frame)
        self.handshake_timeout = handshake_timeout
        self.max_handshakes = max_handshakes
        self._server: asyncio.Server | None = None
        self._address: Address = ("", 0)
        self._tasks: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._handshaking = 0
        self.stats = {"accepted": 0, "connections": 0, "auth_failures": 0, "refused": 0,
                      "frames": 0, "messages": 0, "bad_frames": 0, "deliver_errors": 0}

    @classmethod
    async def start(cls, deliver: Deliver, *, secret: bytes, host: str = "127.0.0.1",
                    port: int = 0, ssl_context: ssl.SSLContext | None = None,
                    max_frame: int = MAX_FRAME, handshake_timeout: float = HANDSHAKE_TIMEOUT,
                    process_id: str | None = None, max_handshakes: int = 64,
                    serve_request: Handler | None = None,
                    error_to_wire: Callable[[BaseException], dict] = default_error_to_wire,
                    codec: ValueCodec = PLAIN) -> DataPlaneServer:
        """Listen on ``host:port`` (port 0: any free port; see :attr:`address`).

        ``deliver(group, messages)`` is called on the event loop for each RAFT frame, in
        the order frames arrive on a connection; it must not block. Bind to an address
        peers can reach (the node's IP, or "0.0.0.0" and advertise the node's IP with
        :attr:`port`). With ``ssl_context`` (a server-side context holding the certificate)
        connections are TLS; set its ``verify_mode`` to CERT_REQUIRED for mutual TLS.

        ``serve_request(target, method, args, kwargs)`` (a coroutine function) answers
        REQUEST frames (see :mod:`rayjet.dataplane.requests`); without it they are
        unexpected frames. ``error_to_wire(exc)`` makes its exceptions error documents;
        ``codec`` carries the values msgpack has no type for."""
        self = cls(deliver, secret=secret, process_id=process_id or default_process_id(),
                   max_frame=max_frame, handshake_timeout=handshake_timeout,
                   max_handshakes=max_handshakes, serve_request=serve_request,
                   error_to_wire=error_to_wire, codec=codec)
        tls = {} if ssl_context is None else {"ssl": ssl_context,
                                              "ssl_handshake_timeout": handshake_timeout}
        self._server = await asyncio.start_server(self._accept, host, port, limit=READ_LIMIT,
                                                  **tls)
        self._address = tuple(self._server.sockets[0].getsockname()[:2])
        return self

    @property
    def address(self) -> Address:
        return self._address

    @property
    def port(self) -> int:
        return self._address[1]

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def drop_connections(self) -> int:
        """Close every connection served now (peers reconnect); how many there were."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return len(tasks)

    async def close_connections(self, timeout: float = 5.0) -> int:
        """:meth:`drop_connections`, returning once their sockets are closed (a peer
        sending after this finds the connection closed, not one about to close)."""
        served = dict(self._tasks)
        self.drop_connections()
        await asyncio.gather(*served, return_exceptions=True)
        for writer in served.values():
            try:
                await asyncio.wait_for(writer.wait_closed(), timeout)
            except (TimeoutError, OSError):
                pass  # its peer stopped reading: the transport is aborted below
            writer.transport.abort()
        return len(served)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks[task] = writer
        self.stats["accepted"] += 1
        peer = writer.get_extra_info("peername")
        try:
            if self._handshaking >= self.max_handshakes:  # a flood of strangers: shed it
                self.stats["refused"] += 1
                log.warning("data plane: refusing %s: %d handshakes under way", peer,
                            self._handshaking)
                return
            client = await self._authenticate(reader, writer, peer)
            if client is not None:
                await self._serve(reader, writer, f"{client} ({peer})")
        except asyncio.CancelledError:
            # only close() cancels these; a handler task that ends cancelled makes asyncio
            # 3.11's stream callback log a spurious error, so end normally
            pass
        except Exception:  # a bug here must cost one connection, not the process
            log.exception("data plane: connection from %s failed", peer)
        finally:
            self._tasks.pop(task, None)
            writer.close()  # flushes a last ERROR frame, if any, then closes

    async def _authenticate(self, reader, writer, peer) -> str | None:
        self._handshaking += 1
        try:
            return await server_handshake(reader, writer, secret=self._secret,
                                          process_id=self.process_id,
                                          timeout=self.handshake_timeout)
        except (DataPlaneError, OSError) as exc:
            self.stats["auth_failures"] += 1
            self.stats["bad_frames"] += isinstance(exc, FrameError)
            log.warning("data plane: handshake with %s failed: %s", peer, exc)
            return None
        finally:
            self._handshaking -= 1

    async def _serve(self, reader, writer, client: str) -> None:
        self.stats["connections"] += 1
        log.info("data plane: %s connected", client)
        requests = (None if self.serve_request is None else ConnectionRequests(
            self.serve_request, writer, error_to_wire=self.error_to_wire,
            max_in_flight=self.max_in_flight, stats=self.stats, codec=self.codec))
        try:
            await self._serve_frames(reader, writer, client, requests)
        finally:
            if requests is not None:
                requests.cancel()

    async def _serve_frames(self, reader, writer, client: str,
                            requests: ConnectionRequests | None) -> None:
        while True:
            try:
                frame = await read_frame(reader, self.max_frame)
                if frame is None:
                    log.info("data plane: %s disconnected", client)
                    return
                if frame.kind == Kind.REQUEST and requests is not None:
                    requests.take(frame.payload)
                    await requests.room()  # no more frames read while at the limit
                    await writer.drain()  # answers a client does not read stall only it
                    continue
                refusal = self._handle(frame, writer)
                if refusal is None and frame.kind == Kind.PING:
                    await writer.drain()  # a pinger that never reads stalls only itself
            except FrameError as exc:
                refusal = str(exc)
            except OSError as exc:
                log.info("data plane: connection from %s lost: %s", client, exc)
                return
            if refusal is not None:
                self.stats["bad_frames"] += 1
                log.warning("data plane: dropping connection from %s: %s", client, refusal)
                writer.write(error_frame(refusal))
                return
            if frame.kind == Kind.ERROR:
                log.warning("data plane: %s closed: %s", client, error_text(frame.payload))
                return

    def _handle(self, frame: Frame, writer: asyncio.StreamWriter) -> str | None:
        """Act on one frame from an authenticated peer; the reason to drop it, if any."""
        if frame.kind == Kind.RAFT:
            group, messages = decode_batch(frame.payload)
            self.stats["frames"] += 1
            self.stats["messages"] += len(messages)
            try:
                self.deliver(group, messages)
            except Exception:  # the application's bug, not the peer's: keep the connection
                self.stats["deliver_errors"] += 1
                log.exception("data plane: delivering %d messages of %s failed",
                              len(messages), group)
        elif frame.kind == Kind.PING and len(frame.payload) <= MAX_PING:
            writer.write(pack_frame(Kind.PONG, frame.payload))
        elif frame.kind not in (Kind.PONG, Kind.ERROR):
            return f"unexpected {frame.kind.name} frame"
        return None


class _Peer:
    """One remote address: its queue of encoded messages and its connection task."""

    __slots__ = ("address", "pending", "pending_bytes", "pending_batches", "wake", "task",
                 "writer", "broken", "retry_at", "backoff", "failures")

    def __init__(self, address: Address, backoff: float) -> None:
        self.address = address
        self.pending: dict[str, list[bytes]] = {}  # group -> encoded messages, in order
        self.pending_bytes = 0
        self.pending_batches = 0
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None  # connecting or connected
        self.writer: asyncio.StreamWriter | None = None  # set once authenticated
        self.broken = False
        self.retry_at = 0.0
        self.backoff = backoff
        self.failures = 0  # connection attempts failed in a row

    def queued(self) -> int:
        """Bytes waiting for this peer: not yet written, plus written but not yet sent."""
        w = self.writer
        return self.pending_bytes + (w.transport.get_write_buffer_size() if w else 0)

    def clear(self) -> int:
        """Forget what is queued; how many batches that was."""
        batches = self.pending_batches
        self.pending.clear()
        self.pending_bytes = self.pending_batches = 0
        return batches


class DataPlaneSender:
    """Sends raft message batches to data-plane servers; one per process and event loop.

    :meth:`send` queues and returns at once. Batches queued for one address before its
    connection task runs again leave together: one write, one frame per group (split only
    at ``max_frame``). On a connection error the queued batches are dropped and the next
    send after a backoff (``backoff_min`` doubling to ``backoff_max``) reconnects; sends
    during the backoff are dropped. A connection that accepts no bytes for
    ``stall_timeout`` seconds is dropped too.

    TLS: pass a client-side ``ssl_context`` (holding the CA that signed the servers'
    certificates). The certificate is checked against the address's host (an IP address
    needs an IP SAN), or against ``server_hostname`` when given, for clusters whose
    servers share one certificate name; a context with ``check_hostname = False`` checks
    the chain only.

    A connection the other end closed or broke is made again at once, queued messages or
    not; when that (or any) connection attempt is refused, ``on_refused(address)`` is
    called: nothing listens there any more, which on a reachable host means the process
    that served it died (or moved to another port). Peers learn of a dead leader this way
    in milliseconds instead of waiting for Ray's notice of the death.

    ``stats``: ``sent_batches``, ``sent_bytes``, ``frames`` written; ``dropped`` batches
    (over budget, during backoff, unencodable, or queued when a connection failed);
    ``connects``, ``connect_failures`` and ``refused`` (of those failures)."""

    def __init__(self, *, secret: bytes, process_id: str | None = None,
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 max_frame: int = MAX_FRAME, peer_budget: int = PEER_BUDGET,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 backoff_min: float = BACKOFF_MIN, backoff_max: float = BACKOFF_MAX,
                 stall_timeout: float = STALL_TIMEOUT,
                 on_refused: Callable[[Address], None] | None = None) -> None:
        self._secret = check_secret(secret)
        self.on_refused = on_refused
        self.process_id = check_name(process_id or default_process_id(), "process id")
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.max_frame = check_max_frame(max_frame)
        self.peer_budget = peer_budget
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.stall_timeout = stall_timeout
        self._peers: dict[Address, _Peer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.stats = {"sent_batches": 0, "sent_bytes": 0, "frames": 0, "dropped": 0,
                      "connects": 0, "connect_failures": 0, "refused": 0}

    def send(self, address: Address, group: str, messages: list[Message]) -> bool:
        """Queue ``messages`` of ``group`` for the server at ``address``; never blocks.

        False when the batch was dropped (over the peer's budget, reconnect backoff,
        sender closed, or unencodable). Call from inside the running event loop."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("a DataPlaneSender serves one event loop")
        if self._closed:
            return self._drop(1)
        if not messages:
            return True
        address = _key(address)
        peer = self._peers.get(address)
        if peer is None:
            peer = self._peers[address] = _Peer(address, self.backoff_min)
        if peer.task is None:
            if loop.time() < peer.retry_at:
                return self._drop(1)
            peer.task = loop.create_task(self._run(peer))
        if peer.queued() >= self.peer_budget:
            return self._drop(1)
        try:
            room = message_room(group, self.max_frame)
            encoded = [encode_message(m) for m in messages]
            if max(map(len, encoded)) > room:
                raise FrameError(f"a message is over the {self.max_frame}-byte frame limit")
        except FrameError as exc:
            log.error("data plane: cannot send a batch of %r: %s", group, exc)
            return self._drop(1)
        size = sum(map(len, encoded))
        if peer.queued() + size > self.peer_budget:
            return self._drop(1)
        peer.pending.setdefault(group, []).extend(encoded)
        peer.pending_bytes += size
        peer.pending_batches += 1
        peer.wake.set()
        return True

    def connected(self, address: Address) -> bool:
        """Whether an authenticated connection to ``address`` is up."""
        peer = self._peers.get(_key(address))
        return peer is not None and peer.writer is not None and not peer.broken

    def queued_bytes(self, address: Address) -> int:
        peer = self._peers.get(_key(address))
        return 0 if peer is None else peer.queued()

    def drop_connections(self) -> int:
        """Close every connection and drop what is queued (the next sends reconnect)."""
        addresses = list(self._peers)
        for address in addresses:
            self.forget(address)
        return len(addresses)

    def forget(self, address: Address) -> None:
        """Close the connection to ``address`` and drop what is queued for it."""
        peer = self._peers.pop(_key(address), None)
        if peer is not None and peer.task is not None:
            peer.task.cancel()

    async def close(self) -> None:
        """Drop every connection and queue; later sends return False."""
        self._closed = True
        tasks = [p.task for p in self._peers.values() if p.task is not None]
        self._peers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _drop(self, batches: int) -> bool:
        self.stats["dropped"] += batches
        return False

    async def _connect(self, peer: _Peer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer, server = await open_authenticated(
            peer.address, secret=self._secret, process_id=self.process_id,
            ssl_context=self.ssl_context, server_hostname=self.server_hostname,
            connect_timeout=self.connect_timeout, handshake_timeout=self.handshake_timeout)
        log.info("data plane: connected to %s at %s:%d", server, *peer.address)
        return reader, writer

    async def _run(self, peer: _Peer) -> None:
        """Connect, authenticate, then write whatever is queued until the connection fails."""
        writer = watcher = None
        lost = False  # an established connection the other end closed or broke
        try:
            try:
                reader, writer = await self._connect(peer)
            except (OSError, DataPlaneError) as exc:  # TimeoutError is an OSError
                self.stats["connect_failures"] += 1
                # the first failure in a row is news; the next ones (every backoff) are not
                (log.debug if peer.failures else log.warning)(
                    "data plane: cannot connect to %s:%d: %s", *peer.address, exc)
                peer.failures += 1
                if isinstance(exc, ConnectionRefusedError):
                    self._refused(peer.address)
                return
            self.stats["connects"] += 1
            peer.failures, peer.backoff, peer.broken = 0, self.backoff_min, False
            peer.writer = writer
            watcher = asyncio.get_running_loop().create_task(self._watch(peer, reader, writer))
            while True:
                await peer.wake.wait()
                peer.wake.clear()
                if peer.broken:
                    raise ConnectionResetError("closed by the server")
                pieces: list[bytes] = []
                for group, encoded in peer.pending.items():
                    frames = raft_frames(group, encoded, self.max_frame)
                    self.stats["frames"] += (len(frames) - len(encoded)) // 2  # 2 heads each
                    pieces += frames
                self.stats["sent_batches"] += peer.clear()
                if pieces:
                    writer.writelines(pieces)  # one write for everything queued
                    self.stats["sent_bytes"] += sum(map(len, pieces))
                try:
                    async with asyncio.timeout(self.stall_timeout):
                        await writer.drain()
                except TimeoutError:
                    raise TimeoutError(f"no bytes taken for {self.stall_timeout:.1f}s") from None
        except (OSError, DataPlaneError) as exc:
            lost = peer.writer is not None
            log.warning("data plane: connection to %s:%d lost: %s", *peer.address,
                        str(exc) or type(exc).__name__)
        except Exception:  # a bug here must cost one connection, not the sender
            log.exception("data plane: connection to %s:%d failed", *peer.address)
        finally:
            if watcher is not None:
                watcher.cancel()
            if writer is not None:
                writer.transport.abort()  # drop buffered bytes now: nobody will read them
            self._drop(peer.clear())
            peer.writer = peer.task = None
            loop = asyncio.get_running_loop()
            peer.retry_at = loop.time() + peer.backoff
            peer.backoff = min(peer.backoff * 2, self.backoff_max)
            if lost and not self._closed and self._peers.get(peer.address) is peer:
                # at once: a refusal now says the process there is gone
                peer.task = loop.create_task(self._run(peer))

    def _refused(self, address: Address) -> None:
        self.stats["refused"] += 1
        if self.on_refused is not None:
            try:
                self.on_refused(address)
            except Exception:  # noqa: BLE001 - the listener's trouble is not the sender's
                log.exception("data plane: on_refused for %s:%d failed", *address)

    async def _watch(self, peer: _Peer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        """Read what the server sends back (PING, ERROR, end of stream): the writer alone
        would notice a closed connection only at its next write."""
        try:
            while (frame := await read_frame(reader, HANDSHAKE_MAX_FRAME)) is not None:
                if frame.kind == Kind.PING and len(frame.payload) <= MAX_PING:
                    writer.write(pack_frame(Kind.PONG, frame.payload))
                elif frame.kind != Kind.PONG:
                    reason = (error_text(frame.payload) if frame.kind == Kind.ERROR
                              else f"unexpected {frame.kind.name} frame")
                    break
            else:
                reason = "end of stream"
        except (OSError, DataPlaneError) as exc:
            reason = str(exc) or type(exc).__name__
        log.info("data plane: %s:%d closed the connection: %s", *peer.address, reason)
        peer.broken = True
        peer.wake.set()
