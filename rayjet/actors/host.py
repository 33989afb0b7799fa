"""Finding replicas wherever they run: in an actor of their own or in a replica host.

A Ray actor costs a process (~60 MB, and CPU even idle), so small assets share hosts: a
small pool of replica host actors per node (:mod:`rayjet.actors.replica_host`), each running
any number of stream or consumer replicas. A hosted replica keeps the name its dedicated
actor would have: the control store's key-value table maps that name to its host
(:func:`hosted_on`), and :func:`find_replica` turns a name into a handle either way, so
routers and raft peers address replicas without knowing how they are hosted. The hosts
themselves import the replicas they run; this module imports none of them, so routers
and replicas can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import ray
from ray.experimental import internal_kv

from rayjet.actors import direct
from rayjet.actors.names import NAMESPACE
from rayjet.errors import APIError

log = logging.getLogger(__name__)

KV_NAMESPACE = "rayjet.hosted"  # replica name -> host actor name
STREAM_INFOS_TIMEOUT = 10.0  # seconds a listing waits for one host's answer


class NotHostedError(ValueError):
    """The host runs no replica of that name (a ValueError, as Ray's lookup of a missing
    named actor raises, so callers treat both alike)."""


def _key(name: str) -> bytes:
    return name.encode()


def hosted_on(name: str) -> str | None:
    """The host actor that runs replica ``name``, or None (blocking: a control-store call;
    None too outside a Ray worker or driver, where nothing can be hosted)."""
    if not internal_kv._internal_kv_initialized():
        return None
    raw = internal_kv._internal_kv_get(_key(name), namespace=KV_NAMESPACE)
    return raw.decode() if raw else None


def record_hosted(name: str, host: str | None) -> None:
    if host is None:
        internal_kv._internal_kv_del(_key(name), namespace=KV_NAMESPACE)
    else:
        internal_kv._internal_kv_put(_key(name), host.encode(), overwrite=True,
                                     namespace=KV_NAMESPACE)


def hosts_of(names: list[str]) -> dict[str, str]:
    """The hosts of many replicas, in one control-store call where Ray offers it: name ->
    host, for the names that are hosted (blocking)."""
    if not names or not internal_kv._internal_kv_initialized():
        return {}
    multi_get = getattr(internal_kv.internal_kv_get_gcs_client(), "internal_kv_multi_get",
                        None)
    if multi_get is None:  # an older Ray: one call per name
        return {n: h for n in names if (h := hosted_on(n)) is not None}
    got = multi_get([_key(n) for n in names], KV_NAMESPACE.encode())
    return {key.decode(): host.decode() for key, host in got.items() if host}


def stream_infos_by_host(replicas: list[str], known: dict[str, str] | None = None
                         ) -> dict[str, dict[str, Any]]:
    """The stream infos of many hosted stream replicas with one call per host (a listing of
    hundreds of streams), ``known`` hosts by replica name spared a lookup. Answers the
    replicas that answered: a replica that is not hosted, not its group's leader or not
    reachable now is left out, for the caller to ask on its own (blocking)."""
    hosts = dict(known or {})
    hosts.update(hosts_of([r for r in replicas if r not in hosts]))
    by_host: dict[str, list[str]] = {}
    for replica in replicas:
        if replica in hosts:
            by_host.setdefault(hosts[replica], []).append(replica)
    out: dict[str, dict[str, Any]] = {}
    calls = []
    for host, names in by_host.items():
        answers = _infos_over_data_plane(host, names)
        if answers is not None:
            out.update((name, info) for name, info in answers.items() if info is not None)
            continue
        try:
            handle = ray.get_actor(host, namespace=NAMESPACE)
        except ValueError:  # the host is gone: its replicas are asked on their own
            continue
        calls.append(handle.stream_infos.remote(names))
    for ref in calls:
        try:
            answers = ray.get(ref, timeout=STREAM_INFOS_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError):  # (a host died): asked on their own
            continue
        out.update((name, info) for name, info in answers.items() if info is not None)
    return out


def _infos_over_data_plane(host: str, names: list[str]) -> dict[str, Any] | None:
    """``stream_infos`` of ``host`` as a data-plane request (a process's first Ray call to
    an actor costs ~0.5 s; a listing is often a process's first word with each host).
    None when it could not be asked that way: the actor call then."""
    if not direct.enabled():
        return None
    try:
        return direct.call(host, "stream_infos", (names,), {}, STREAM_INFOS_TIMEOUT)
    except direct.NotDirect:
        return None
    except (APIError, ConnectionError):  # slow or gone: its replicas are asked on their own
        return {}


def hosted_names() -> dict[str, str]:
    """Every hosted replica name and its host (blocking)."""
    keys = internal_kv._internal_kv_list(b"", namespace=KV_NAMESPACE) or []
    out = {}
    for key in keys:
        host = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
        if host:
            out[key.decode()] = host.decode()
    return out


class _HostedMethod:
    __slots__ = ("_host", "_name", "_method")

    def __init__(self, host: Any, name: str, method: str) -> None:
        self._host, self._name, self._method = host, name, method

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._host.call.remote(self._name, self._method, args, kwargs)


class HostedHandle:
    """A handle to a hosted replica with the calling convention of an actor handle:
    ``handle.method.remote(*args)`` is a call on the host that runs the replica."""

    def __init__(self, host: Any, host_name: str, name: str) -> None:
        self.host = host
        self.host_name = host_name
        self.name = name

    def __getattr__(self, method: str) -> _HostedMethod:
        if method.startswith("__"):
            raise AttributeError(method)
        return _HostedMethod(self.host, self.name, method)


class HostPost:
    """Raft messages for the replicas of one host, gathered over an event-loop turn and
    sent in one call (:meth:`~rayjet.actors.replica_host.ReplicaHost.deliver`): the
    heartbeats and appends of every group between two processes cost one actor call per
    turn, not one per group."""

    def __init__(self, host: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.host = host
        self.loop = loop
        self.pending: list[tuple[str, list, Callable[[], None], Callable[[], None]]] = []

    def add(self, name: str, messages: list, on_gone: Callable[[], None],
            on_answered: Callable[[], None]) -> None:
        """Queue ``messages`` for hosted replica ``name``; ``on_gone()`` runs (on the event
        loop) when the host died or no longer runs it, ``on_answered()`` (on Ray's thread)
        when the call carrying them ended, however."""
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append((name, messages, on_gone, on_answered))

    def flush(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        ref = self.host.deliver.remote([(name, msgs) for name, msgs, _, _ in batch])
        loop = self.loop

        def gone(names: set[str] | None) -> None:  # None: all of them
            for name, _msgs, on_gone, _ in batch:
                if names is None or name in names:
                    on_gone()

        def done(fut: Any) -> None:  # on Ray's thread: hand over to the event loop
            for _name, _msgs, _, on_answered in batch:
                on_answered()
            if fut.cancelled():
                return
            exc = fut.exception()
            if exc is None:
                missing = fut.result()
                if not missing:
                    return
                names: set[str] | None = set(missing)
            elif isinstance(exc, (ray.exceptions.RayActorError,
                                  ray.exceptions.ActorUnschedulableError)):
                names = None  # the host died, or its node is gone
            else:
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed: we are stopping
                loop.call_soon_threadsafe(gone, names)

        ref.future().add_done_callback(done)


_posts: dict[str, HostPost] = {}  # by host name, in this process


def post_to_host(handle: HostedHandle, messages: list, on_gone: Callable[[], None],
                 on_answered: Callable[[], None] = lambda: None) -> bool:
    """Send raft ``messages`` to a hosted replica with the others bound for its host in
    this loop turn (see :meth:`HostPost.add`); False (nothing sent) outside an event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    post = _posts.get(handle.host_name)
    if post is None or post.loop is not loop:
        post = _posts[handle.host_name] = HostPost(handle.host, loop)
    post.host = handle.host  # the newest lookup: a host re-created under its name
    post.add(handle.name, messages, on_gone, on_answered)
    return True


def find_replica(name: str, hosted: bool = False) -> Any:
    """The handle of replica ``name``: its dedicated actor, else a HostedHandle on the host
    that runs it. Raises ValueError when neither exists. Blocking. ``hosted``: the replica
    is expected in a host (its stream's hosting is shared), so its record is read first."""
    host = hosted_on(name) if hosted else None
    if host is None:
        try:
            return ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            host = hosted_on(name)
            if host is None:
                raise
    return HostedHandle(ray.get_actor(host, namespace=NAMESPACE), host, name)
