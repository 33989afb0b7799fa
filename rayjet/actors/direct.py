"""Clients' requests to replicas over the data plane: a publish, a fetch, an ack or an
info goes to the leader's process as one REQUEST frame on a pipelined, authenticated
connection (:mod:`rayjet.dataplane.requests`) instead of a Ray actor call.

Where a replica is served comes from the same control-store record the raft senders read
(:func:`rayjet.actors.data_plane.address_of`), cached here. Connections are per event
loop: a coroutine caller (an actor, the gateway) uses its own loop's; blocking callers
(the Python API, Ray tasks) with TLS share one background loop thread, holding one
connection per replica process whatever its threads; over plain TCP (no TLS) a blocking
caller uses a connection of its own thread instead, which saves the two thread hand-offs
(:mod:`rayjet.dataplane.blocking`). Anything that keeps a request from
being sent or served (no address, a refused connection, a process that does not run that
replica, a method not served this way, arguments msgpack cannot carry) raises
:class:`NotDirect`: nothing ran, and the caller makes the actor call instead. A
connection lost with the request in flight raises :class:`RequestLost`: the outcome is
unknown, as when a replica actor dies during a call.

``RAYJET_DIRECT_CALLS=0`` (or ``RAYJET_DATA_PLANE=0``) keeps a process on actor calls.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from rayjet.actors import data_plane
from rayjet.actors.wire_values import CODEC
from rayjet.dataplane import ConnectFailed, DataPlaneClient, DataPlaneError, tls_from_env
from rayjet.dataplane.blocking import BlockingClient
from rayjet.errors import APIError
from rayjet.errors import TimeoutError as RequestTimeoutError
from rayjet.errors.documents import from_document

ENV = "RAYJET_DIRECT_CALLS"
ADDRESS_TTL = 10.0  # seconds a replica's address is trusted before it is read again
# seconds before a replica with no address yet (one just made publishes it a moment after
# it starts) is looked up again, and before an address that failed is tried again
MISSING_TTL = 0.25
FAILED_TTL = 1.0

Address = tuple[str, int]


class NotDirect(Exception):  # noqa: N818 - a signal to take the other path, not a failure
    """The request was not made over the data plane (nothing ran): use an actor call."""


class RequestLost(ConnectionError):
    """The connection was lost while the request was in flight: its outcome is unknown."""


class _NotServed(Exception):  # noqa: N818 - rebuilt from the server's NotServed answer
    pass


def enabled() -> bool:
    return (os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")
            and data_plane.enabled())


def _error_from_wire(doc: dict[str, Any]) -> BaseException:
    if doc.get("type") == data_plane.NOT_SERVED:
        return _NotServed(str(doc.get("description", "")))
    return from_document(doc)


class _Shared:
    """What every loop's requests share in this process: replicas' addresses, addresses
    that failed lately, the secret and TLS settings (read once)."""

    def __init__(self) -> None:
        self.addresses: dict[str, tuple[Address | None, float]] = {}
        self.failed: dict[Address, float] = {}
        self._settings: tuple[bytes, Any] | None = None
        self.unusable: str | None = None  # why this process cannot use the data plane
        self.lock = threading.Lock()
        self.stats = {"direct": 0, "not_direct": 0, "lost": 0, "lookups": 0}

    def cached(self, name: str) -> tuple[bool, Address | None]:
        found = self.addresses.get(name)
        if found is None or time.monotonic() >= found[1]:
            return False, None
        addr = found[0]
        if addr is not None and time.monotonic() < self.failed.get(addr, 0.0):
            return True, None
        return True, addr

    def look_up(self, name: str) -> Address | None:
        """Blocking: read where replica ``name`` is served."""
        self.stats["lookups"] += 1
        try:
            addr = data_plane.address_of(name)
        except Exception:  # noqa: BLE001 - the control store is busy
            # the address known before stays in use (a wrong one fails over by itself);
            # with none, actor calls meanwhile
            known = self.addresses.get(name)
            addr = None if known is None else known[0]
        self.addresses[name] = (addr, time.monotonic() + (ADDRESS_TTL if addr else MISSING_TTL))
        return addr

    def address(self, name: str) -> Address | None:
        hit, addr = self.cached(name)
        return addr if hit else self.look_up(name)

    def forget(self, name: str, addr: Address | None = None) -> None:
        self.addresses.pop(name, None)
        if addr is not None:
            self.failed[addr] = time.monotonic() + FAILED_TTL

    def settings(self) -> tuple[bytes, Any] | None:
        """Blocking the first time: the cluster secret and TLS settings, or None when this
        process cannot use the data plane (the reason in :attr:`unusable`)."""
        if self._settings is None and self.unusable is None:
            with self.lock:
                if self._settings is None and self.unusable is None:
                    try:
                        self._settings = (data_plane.cluster_data_plane_secret(),
                                          tls_from_env(os.environ))
                    except Exception as exc:  # noqa: BLE001 - actor calls then, said why
                        self.unusable = f"{type(exc).__name__}: {exc}"
        return self._settings


_shared = _Shared()


@contextlib.contextmanager
def _failures_mapped(name: str, addr: Address, timeout: float) -> Iterator[None]:
    """A request's failures as the router knows them (see the module's doc)."""
    try:
        yield
    except _NotServed:
        _shared.forget(name)  # moved, resting or stopped: read its address again later
        raise NotDirect(name) from None
    except ConnectFailed:
        _shared.forget(name, addr)
        raise NotDirect(name) from None
    except APIError:
        raise
    except builtins.TimeoutError:
        raise RequestTimeoutError(f"no answer within {timeout:.1f}s") from None
    except DataPlaneError:  # arguments the wire cannot carry: nothing was sent
        raise NotDirect(name) from None
    except ConnectionError as exc:
        _shared.stats["lost"] += 1
        raise RequestLost(f"connection to {name}'s process lost: {exc}") from None


class LoopRequests:
    """The data-plane connections of one event loop, one per replica process."""

    def __init__(self) -> None:
        self.clients: dict[Address, DataPlaneClient] = {}

    def _client(self, addr: Address, settings: tuple[bytes, Any]) -> DataPlaneClient:
        client = self.clients.get(addr)
        if client is None:
            secret, tls = settings
            client = self.clients[addr] = DataPlaneClient(
                addr, secret=secret, process_id=f"client-{os.getpid()}",
                ssl_context=None if tls is None else tls.client,
                server_hostname=None if tls is None else tls.server_hostname,
                error_from_wire=_error_from_wire, codec=CODEC, connect_timeout=2.0)
        return client

    async def request(self, addr: Address, settings: tuple[bytes, Any], name: str,
                      method: str, args: tuple, kwargs: dict[str, Any], timeout: float) -> Any:
        client = self._client(addr, settings)
        with _failures_mapped(name, addr, timeout):
            answer = await client.request(name, method, args, kwargs, timeout=timeout)
        _shared.stats["direct"] += 1
        return answer

    async def close(self) -> None:
        clients, self.clients = self.clients, {}
        for client in clients.values():
            await client.close()


_by_loop: dict[asyncio.AbstractEventLoop, LoopRequests] = {}
_background: tuple[asyncio.AbstractEventLoop, LoopRequests] | None = None
_background_lock = threading.Lock()


def _background_loop() -> tuple[asyncio.AbstractEventLoop, LoopRequests]:
    """The loop thread blocking callers' requests run on (started on first use)."""
    global _background
    if _background is None:
        with _background_lock:
            if _background is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="rayjet-direct",
                                 daemon=True).start()
                _background = (loop, LoopRequests())
    return _background


def _for_loop(loop: asyncio.AbstractEventLoop) -> LoopRequests:
    found = _by_loop.get(loop)
    if found is None:
        for old in [k for k in _by_loop if k.is_closed()]:
            del _by_loop[old]
        found = _by_loop[loop] = LoopRequests()
    return found


_threads = threading.local()  # each blocking caller's connections: address -> client
_blocking_clients: weakref.WeakSet = weakref.WeakSet()  # every thread's, to cut them


def _blocking(addr: Address, settings: tuple[bytes, Any]) -> BlockingClient:
    clients = getattr(_threads, "clients", None)
    if clients is None:
        clients = _threads.clients = {}
    client = clients.get(addr)
    if client is None:
        client = clients[addr] = BlockingClient(
            addr, secret=settings[0], process_id=f"client-{os.getpid()}",
            error_from_wire=_error_from_wire, codec=CODEC)
        _blocking_clients.add(client)
    return client


def _blocking_request(addr: Address, settings: tuple[bytes, Any], name: str, method: str,
                      args: tuple, kwargs: dict[str, Any], timeout: float) -> Any:
    """:meth:`LoopRequests.request` on this thread's own plain-TCP connection."""
    with _failures_mapped(name, addr, timeout):
        answer = _blocking(addr, settings).request(name, method, args, kwargs,
                                                   timeout=timeout)
    _shared.stats["direct"] += 1
    return answer


def call(name: str, method: str, args: tuple, kwargs: dict[str, Any], timeout: float) -> Any:
    """Blocking: ``method(*args, **kwargs)`` on replica ``name`` over the data plane (this
    thread's own connection; the background loop's when the data plane is TLS)."""
    settings = _shared.settings()
    addr = None if settings is None else _shared.address(name)
    if addr is None:
        _shared.stats["not_direct"] += 1
        raise NotDirect(name)
    if settings[1] is None:
        try:
            return _blocking_request(addr, settings, name, method, args, kwargs, timeout)
        except NotDirect:
            _shared.stats["not_direct"] += 1
            raise
    loop, requests = _background_loop()
    fut = asyncio.run_coroutine_threadsafe(
        requests.request(addr, settings, name, method, args, kwargs, timeout), loop)
    try:
        return fut.result(timeout + 5.0)  # the request times out by itself first
    except NotDirect:
        _shared.stats["not_direct"] += 1
        raise


async def acall(name: str, method: str, args: tuple, kwargs: dict[str, Any],
                timeout: float) -> Any:
    """:func:`call` from a coroutine: on the running loop's own connections."""
    settings = _shared._settings
    if settings is None:
        settings = await asyncio.to_thread(_shared.settings)
    hit, addr = _shared.cached(name)
    if not hit and settings is not None:
        addr = await asyncio.to_thread(_shared.look_up, name)
    if settings is None or addr is None:
        _shared.stats["not_direct"] += 1
        raise NotDirect(name)
    requests = _for_loop(asyncio.get_running_loop())
    try:
        return await requests.request(addr, settings, name, method, args, kwargs, timeout)
    except NotDirect:
        _shared.stats["not_direct"] += 1
        raise


async def close_loop_requests() -> None:
    """Close the running loop's connections (an owner of a loop, such as the gateway, calls
    this before it ends the loop; later requests from it connect again)."""
    requests = _by_loop.pop(asyncio.get_running_loop(), None)
    if requests is not None:
        await requests.close()


def stats() -> dict[str, Any]:
    out: dict[str, Any] = dict(_shared.stats)
    if _shared.unusable:
        out["unusable"] = _shared.unusable
    return out


def drop_connections() -> int:
    """Close this process's client connections (what a network cut does; tests use it):
    requests in flight on them fail with RequestLost; later ones connect again."""
    n = sum(client.drop() for client in list(_blocking_clients))
    pools = list(_by_loop.items())
    if _background is not None:
        pools.append(_background)
    for loop, requests in pools:
        for client in list(requests.clients.values()):
            if client.connected and not loop.is_closed():
                n += 1
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(client.drop)
    return n
