"""This process's data plane: raft messages to and from the replicas it runs travel over
direct, authenticated connections (:mod:`rayjet.dataplane`) instead of Ray actor calls.

Every process that runs replicas (a dedicated replica actor or a replica host) serves one
port on its node's address, started with its first replica (``RAYJET_DATA_PLANE_PORT``
fixes it; an ephemeral port otherwise). Each replica registers under its actor name and
publishes that address in Ray's control store (name -> ``host:port``); a
:class:`~rayjet.actors.router.PeerSender` reads it when it looks the peer up and again
after the connection to it failed, so a replica restarted at another port is found again.
Ray stays the control plane (placement, restarts, death notices) and the fallback path:
messages go by actor call while no address is known or its connection is down.

TLS: the ``RAYJET_DATA_PLANE_TLS_*`` settings (:mod:`rayjet.dataplane.tls`); settings that
cannot be used leave the process on actor calls, with the reason in its status.

The secret a connection proves: ``RAYJET_DATA_PLANE_SECRET``, else the cluster's Ray auth
token, else a random one the first replica process creates in the control store (only
processes with access to the cluster's control store can read it).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import os
import secrets
import weakref
from collections.abc import Callable
from typing import Any

import ray
from ray.experimental import internal_kv

from rayjet.actors.wire_values import CODEC
from rayjet.dataplane import DataPlaneSender, DataPlaneServer, cluster_secret, tls_from_env
from rayjet.errors import APIError
from rayjet.errors import TimeoutError as RequestTimeoutError
from rayjet.errors.documents import to_document
from rayjet.raft import Message

log = logging.getLogger(__name__)

ENV = "RAYJET_DATA_PLANE"  # "0" sends raft messages by actor call only
PORT_ENV = "RAYJET_DATA_PLANE_PORT"
KV_NAMESPACE = "rayjet.dataplane"
_SECRET_KEY = b"\x00secret"  # not a replica name: names never start with NUL

Receive = Callable[[list[Message]], None]
NOT_SERVED = "NotServed"  # the error document's type when a request has no taker here


class NotServedError(LookupError):
    """This process runs no such replica, or the replica takes no such request over the
    data plane: nothing ran (the caller uses an actor call instead)."""


def error_to_wire(exc: BaseException) -> dict[str, Any]:
    """A request's failure as the document the client rebuilds (typed errors keep their
    class; a replica's plain timeout is rayjet's TimeoutError)."""
    if isinstance(exc, NotServedError):
        return {"type": NOT_SERVED, "description": str(exc)}
    if isinstance(exc, builtins.TimeoutError) and not isinstance(exc, APIError):
        exc = RequestTimeoutError(str(exc) or "timed out")
    return to_document(exc)


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def _kv_ready() -> bool:
    return internal_kv._internal_kv_initialized()


def cluster_data_plane_secret() -> bytes:
    """Blocking: the secret every replica process of this cluster shares."""
    found = cluster_secret()
    if found:
        return found
    fresh = secrets.token_hex(32).encode()
    # the first process to ask creates it; everyone reads what is stored
    internal_kv._internal_kv_put(_SECRET_KEY, fresh, overwrite=False, namespace=KV_NAMESPACE)
    stored = internal_kv._internal_kv_get(_SECRET_KEY, namespace=KV_NAMESPACE)
    return stored or fresh


def address_of(name: str) -> tuple[str, int] | None:
    """Blocking: where replica ``name`` last said it is served, or None."""
    if not _kv_ready():
        return None
    raw = internal_kv._internal_kv_get(name.encode(), namespace=KV_NAMESPACE)
    if not raw:
        return None
    host, _, port = raw.decode().rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


class ProcessDataPlane:
    """The server, the sender and the replicas registered in this process (one per event
    loop: a replica actor's or a host's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.receivers: dict[str, Receive] = {}
        self.targets: dict[str, Any] = {}  # replica name -> the object requests call
        self.server: DataPlaneServer | None = None
        self.sender: DataPlaneSender | None = None
        self.address: tuple[str, int] | None = None
        self._starting: asyncio.Task | None = None
        self.failed: str | None = None  # why it could not start (actor calls only then)
        self.tls = False
        self.stats = {"delivered": 0, "unknown": 0, "refused": 0}
        # senders of raft messages told when an address refuses connections (its process
        # died): objects with ``address_refused(address)``, held weakly
        self.refusal_listeners: weakref.WeakSet = weakref.WeakSet()

    # -- replicas ---------------------------------------------------------------------------
    def serve(self, name: str, receive: Receive, target: Any = None) -> None:
        """Take raft messages for replica ``name`` (starts the server with the first), and
        with ``target`` clients' requests for it (its ``DATA_PLANE_REQUESTS``)."""
        self.receivers[name] = receive
        if target is not None:
            self.targets[name] = target
        else:
            self.targets.pop(name, None)
        if self.address is not None:
            self._publish([name])
        elif self._starting is None and self.failed is None:
            self._starting = self.loop.create_task(self._start())

    def withdraw(self, name: str, receive: Receive) -> None:
        if self.receivers.get(name) is receive:
            del self.receivers[name]
            self.targets.pop(name, None)

    async def _serve_request(self, name: str, method: str, args: list,
                             kwargs: dict[str, Any]) -> Any:
        target = self.targets.get(name)
        if target is None:
            raise NotServedError(f"no replica {name!r} is served here")
        if method not in getattr(target, "DATA_PLANE_REQUESTS", ()):
            raise NotServedError(f"{method!r} is not served over the data plane")
        return await getattr(target, method)(*args, **kwargs)

    def _deliver(self, name: str, messages: list[Message]) -> None:
        receive = self.receivers.get(name)
        if receive is None:
            self.stats["unknown"] += 1  # moved or stopped: the sender looks it up again
            return
        self.stats["delivered"] += 1
        try:
            receive(messages)
        except Exception:  # noqa: BLE001 - one replica's trouble is not the connection's
            self.stats["refused"] += 1
            log.exception("replica %s refused raft messages", name)

    # -- start ------------------------------------------------------------------------------
    async def _start(self) -> None:
        try:
            tls = tls_from_env(os.environ)
            secret = await asyncio.to_thread(cluster_data_plane_secret)
            host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
            port = int(os.environ.get(PORT_ENV, "0") or 0)
            self.server = await DataPlaneServer.start(
                self._deliver, secret=secret, host=host, port=port,
                ssl_context=None if tls is None else tls.server,
                serve_request=self._serve_request, error_to_wire=error_to_wire, codec=CODEC)
            self.sender = DataPlaneSender(
                secret=secret, ssl_context=None if tls is None else tls.client,
                server_hostname=None if tls is None else tls.server_hostname,
                on_refused=self._refused)
            self.tls = tls is not None
            self.address = self.server.address
        except Exception as exc:  # noqa: BLE001 - actor calls carry the messages instead
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("data plane not started (raft messages go by actor call): %s",
                        self.failed)
            return
        log.info("data plane serves on %s:%d", *self.address)
        self._publish(list(self.receivers))

    def _refused(self, address: tuple[str, int]) -> None:
        for listener in list(self.refusal_listeners):
            listener.address_refused(address)

    def _publish(self, names: list[str]) -> None:
        if not names or self.address is None or not _kv_ready():
            return
        value = f"{self.address[0]}:{self.address[1]}".encode()

        def put() -> None:
            for name in names:
                internal_kv._internal_kv_put(name.encode(), value, overwrite=True,
                                             namespace=KV_NAMESPACE)

        self.loop.run_in_executor(None, put)

    def drop_connections(self) -> int:
        """Close this process's connections, both ways (peers reconnect): what a network
        cut does; tests and operators use it."""
        n = 0
        if self.sender is not None:
            n += self.sender.drop_connections()
        if self.server is not None:
            n += self.server.drop_connections()
        return n

    async def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._starting
        if self.sender is not None:
            await self.sender.close()
        if self.server is not None:
            await self.server.close()


_planes: dict[asyncio.AbstractEventLoop, ProcessDataPlane] = {}


def plane() -> ProcessDataPlane | None:
    """This event loop's data plane (created on first use), or None when it is off or
    there is no running loop."""
    if not enabled():
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    found = _planes.get(loop)
    if found is None:
        for old in [k for k in _planes if k.is_closed()]:
            del _planes[old]
        found = _planes[loop] = ProcessDataPlane(loop)
    return found


def running_plane() -> ProcessDataPlane | None:
    """This loop's data plane when it already runs (no creation): for senders."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    found = _planes.get(loop)
    return found if found is not None and found.sender is not None else None


def serve_replica(name: str, receive: Receive, target: Any = None) -> None:
    found = plane()
    if found is not None:
        found.serve(name, receive, target)


def withdraw_replica(name: str, receive: Receive) -> None:
    with contextlib.suppress(RuntimeError):
        found = _planes.get(asyncio.get_running_loop())
        if found is not None:
            found.withdraw(name, receive)


def drop_connections() -> None:
    """From any thread of this process: cut every data-plane connection it has."""
    for loop, found in list(_planes.items()):
        if not loop.is_closed():
            loop.call_soon_threadsafe(found.drop_connections)


def stats() -> dict[str, Any]:
    with contextlib.suppress(RuntimeError):
        idle = _planes.get(asyncio.get_running_loop())
        if idle is not None and idle.failed is not None:
            return {"failed": idle.failed}
    found = running_plane()
    if found is None:
        return {}
    out: dict[str, Any] = dict(found.stats)
    if found.server is not None:
        out["server"] = dict(found.server.stats)
    if found.sender is not None:
        out["sender"] = dict(found.sender.stats)
    out["address"] = found.address
    out["tls"] = found.tls
    return out


__all__ = ["ENV", "KV_NAMESPACE", "PORT_ENV", "ProcessDataPlane", "address_of",
           "drop_connections", "enabled", "plane", "running_plane", "serve_replica", "stats", "withdraw_replica"]
