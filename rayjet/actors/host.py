"""Replica hosts: one actor process running many replicas.

A Ray actor costs a process (~60 MB, and CPU even idle), so small assets share hosts: a
small pool of ``ReplicaHost`` actors per node, each running any number of stream or
consumer replicas. A hosted replica is the same object a dedicated actor runs (its own
store, raft log and state); only the process is shared. It keeps the name its dedicated
actor would have: the control store's key-value table maps that name to its host
(:func:`hosted_on`), and :func:`find_replica` turns a name into a handle either way, so
routers and raft peers address replicas without knowing how they are hosted.

A host records what it runs under ``data_dir/hosts/<host>/`` on its node (a small file per
replica: what creating its actor would be given), and a restarted host (Ray re-runs
``__init__``) starts each of them again from its own disk.
Hosts are pinned to their node: when the node is gone, so are its hosted replicas, until
the node comes back (dedicated replicas are restarted by Ray on another fitting node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.experimental import internal_kv

from rayjet.actors import data_plane, direct
from rayjet.actors.names import NAMESPACE
from rayjet.actors.on_demand import never_started, resting_answer
from rayjet.actors.self_start import start_when_restarted
from rayjet.errors import APIError, BadRequestError

log = logging.getLogger(__name__)

KV_NAMESPACE = "rayjet.hosted"  # replica name -> host actor name
REMOVED_KEPT = 10_000  # removed replica names a host remembers
STREAM_INFOS_TIMEOUT = 10.0  # seconds a listing waits for one host's answer
ARRIVAL_GRACE = 5.0  # seconds a call waits for a replica placed here whose place has not run


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
    sent in one call (:meth:`ReplicaHost.deliver`): the heartbeats and appends of every
    group between two processes cost one actor call per turn, not one per group."""

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


def registry_dir(data_dir: Any, host_name: str) -> Path:
    """Where host ``host_name`` records the replicas it runs (on its node)."""
    return Path(data_dir) / "hosts" / host_name


def _no_raft_messages(messages: list) -> None:
    raise ValueError("a replica host takes no raft messages of its own")


class ReplicaHost:
    """Plain class; :mod:`rayjet.actors.host_pools` wraps it with ``ray.remote``."""

    # what clients may ask of the host itself over the data plane (listings)
    DATA_PLANE_REQUESTS = frozenset({"stream_infos"})

    def __init__(self, host_name: str, data_dir: str, *, serves_name: bool = True) -> None:
        self.name = host_name
        # False for the guests of a dedicated stream replica: the replica itself serves
        # this name over the data plane (raft messages, client requests)
        self._serves_name = serves_name
        self.registry = registry_dir(data_dir, host_name)
        self.replicas: dict[str, Any] = {}
        # placed here but not started: specs of replicas that start on first real use
        # (see on_demand.starts_on_demand); they answer a few calls from the spec meanwhile
        self.resting: dict[str, tuple[str, tuple, dict]] = {}
        self._restored = False
        self._starting: set[asyncio.Task] = set()
        self._arrivals: dict[str, asyncio.Event] = {}  # calls waiting for a place to run
        # names removed for good (replica names are never used again): a place that runs
        # after its remove (calls to an async actor may run out of order) starts nothing
        self._removed: OrderedDict[str, None] = OrderedDict()
        start_when_restarted(host_name)  # restores every replica it ran

    # -- what runs here -----------------------------------------------------------------------
    def _load(self) -> dict[str, tuple[str, tuple, dict]]:
        out = {}
        with contextlib.suppress(FileNotFoundError):
            for path in self.registry.glob("*.spec"):
                try:
                    out[path.stem] = pickle.loads(path.read_bytes())
                except Exception:  # noqa: BLE001 - damaged: reconciliation places it again
                    log.exception("host %s: unreadable %s", self.name, path)
        return out

    def _load_one(self, name: str) -> tuple[str, tuple, dict] | None:
        try:
            return pickle.loads(self._spec_path(name).read_bytes())
        except FileNotFoundError:
            return None

    def _spec_path(self, name: str) -> Path:
        return self.registry / f"{name}.spec"

    def _save(self, name: str, spec: tuple[str, tuple, dict]) -> None:
        self.registry.mkdir(parents=True, exist_ok=True)
        path = self._spec_path(name)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(pickle.dumps(spec))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _forget(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._spec_path(name).unlink()

    def restore(self) -> None:
        """After a restart: every replica this host ran starts again from its disk, and
        runs (a quiet group is not called by anyone until it runs)."""
        if self._restored:
            return
        self._restored = True
        loop = asyncio.get_running_loop()
        if self._serves_name:
            data_plane.serve_replica(self.name, _no_raft_messages, self)
        for name, spec in self._load().items():
            if never_started(spec):
                self.resting[name] = spec
                continue
            try:
                replica = self._start_replica(name, *spec)
            except Exception:  # noqa: BLE001 - the others still start
                log.exception("host %s: replica %s did not start again", self.name, name)
                continue
            task = loop.create_task(replica.ping())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    def _start_replica(self, name: str, kind: str, args: tuple, kwargs: dict) -> Any:
        from rayjet.actors.consumer import ConsumerReplica
        from rayjet.actors.stream import StreamReplica

        cls = {"stream": StreamReplica, "consumer": ConsumerReplica}[kind]
        replica = cls(*args, **kwargs)
        self._arrived(name, replica)
        return replica

    def _arrived(self, name: str, replica: Any = None) -> None:
        if replica is not None:
            self.replicas[name] = replica
        arrived = self._arrivals.pop(name, None)
        if arrived is not None:
            arrived.set()

    def _running(self, name: str) -> Any:
        """Replica ``name`` if it runs here, started now if it rests here."""
        replica = self.replicas.get(name)
        if replica is None and name in self.resting:
            replica = self._start_replica(name, *self.resting[name])
            del self.resting[name]
        return replica

    def _placed(self, name: str) -> bool:
        return name in self.replicas or name in self.resting

    async def _await_place(self, name: str) -> None:
        """An async actor's calls may run out of submission order, so a call can come
        before the ``place`` that preceded it: when the hosted-name table says replica
        ``name`` is ours, wait a little for it."""
        if self._placed(name) or await asyncio.to_thread(hosted_on, name) != self.name:
            return
        if not self._placed(name):  # the place may have run while we looked
            arrived = self._arrivals.setdefault(name, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), ARRIVAL_GRACE)

    async def place(self, name: str, kind: str, args: tuple, kwargs: dict,
                    on_demand: bool = False, recorded: bool = False) -> str:
        """Run replica ``name`` here (a no-op when it runs or rests here already), as a
        dedicated actor of ``kind`` would be created with ``args``/``kwargs``.
        ``on_demand``: the replica may rest until first used when it never ran here (no
        files: see on_demand.never_started). ``recorded``: the caller recorded where it
        runs."""
        self.restore()
        if name in self._removed:
            raise NotHostedError(f"replica {name!r} was removed from host {self.name}")
        if not self._placed(name):
            spec = (kind, tuple(args), dict(kwargs))
            if on_demand and never_started(spec):
                self.resting[name] = spec
                self._arrived(name)
            else:
                self._start_replica(name, *spec)
            self._save(name, spec)
            if not recorded:
                await asyncio.to_thread(record_hosted, name, self.name)
        if not self._placed(name):  # removed while it was being recorded: leave no record
            await asyncio.to_thread(record_hosted, name, None)
            raise NotHostedError(f"replica {name!r} was removed from host {self.name}")
        replica = self.replicas.get(name)
        if replica is not None:
            await replica.ping()
        return self.name

    async def call(self, name: str, method: str, args: tuple, kwargs: dict) -> Any:
        self.restore()
        await self._await_place(name)
        spec = self.resting.get(name)
        if spec is not None:
            known, answer = resting_answer(spec, method, args, kwargs)
            if known:
                return answer
        replica = self._running(name)  # started here if it rested
        if replica is None:
            self._arrivals.pop(name, None)
            raise NotHostedError(f"host {self.name} runs no replica {name!r}")
        call = None if method.startswith("_") else getattr(replica, method, None)
        if call is None:
            raise BadRequestError(f"a hosted replica has no method {method!r}")
        return await call(*args, **kwargs)

    async def deliver(self, batch: list[tuple[str, list]]) -> list[str]:
        """Raft messages for many hosted replicas in one call (see :class:`HostPost`);
        answers the names this host runs no replica of."""
        self.restore()
        missing = []
        for name, messages in batch:
            replica = self._running(name)
            if replica is None:
                missing.append(name)
                continue
            try:
                await replica.receive(messages)
            except Exception:  # noqa: BLE001 - one replica's trouble is not the others'
                log.exception("host %s: replica %s refused raft messages", self.name, name)
        return missing

    async def remove(self, name: str) -> bool:
        """Stop replica ``name``, delete its data, forget it (what killing a dedicated
        replica actor for good is)."""
        self.restore()
        replica = self.replicas.pop(name, None)
        rested = self.resting.pop(name, None) is not None
        self._removed[name] = None
        while len(self._removed) > REMOVED_KEPT:
            self._removed.popitem(last=False)
        self._forget(name)
        await asyncio.to_thread(record_hosted, name, None)
        if replica is None:
            return rested  # a resting replica has no data yet
        with contextlib.suppress(Exception):
            await replica.destroy()
        return True

    async def stop_replica(self, name: str) -> bool:
        """Stop replica ``name`` and keep its data and its place here, as a dedicated
        replica actor killed for good is until it is created again: the meta's
        reconciliation (or a host restart) starts it again from its disk."""
        self.restore()
        replica = self.replicas.pop(name, None)
        if replica is None:
            return False
        with contextlib.suppress(Exception):
            await replica.shutdown()
        return True

    async def release(self, name: str) -> tuple[str, tuple, dict] | None:
        """Stop replica ``name`` and forget it here, keeping its data, so that another
        process on this node runs it on from its disk: answers what placing it needs
        ``(kind, args, kwargs)``, or None when it does not run here."""
        self.restore()
        spec = self._load_one(name)
        replica = self.replicas.pop(name, None)
        rested = self.resting.pop(name, None) is not None
        self._forget(name)
        if replica is not None:
            with contextlib.suppress(Exception):
                await replica.shutdown()
        return spec if replica is not None or rested else None

    async def stop_all(self) -> None:
        """Stop every replica here and keep their data and places (a process shutting
        down: a restart starts them again)."""
        replicas, self.replicas = self.replicas, {}
        for replica in replicas.values():
            with contextlib.suppress(Exception):
                await replica.shutdown()

    async def names(self) -> list[str]:
        self.restore()
        return sorted({*self.replicas, *self.resting})

    async def stream_infos(self, names: list[str]) -> dict[str, dict[str, Any] | None]:
        """The infos of stream replicas ``names`` run here, side by side (see
        :func:`stream_infos_by_host`): None for one that is not here, does not lead, or
        fails to answer; a resting replica answers from its record."""
        self.restore()

        async def one(name: str) -> dict[str, Any] | None:
            spec = self.resting.get(name)
            if spec is not None:
                return resting_answer(spec, "info", (), {})[1]
            replica = self.replicas.get(name)
            if replica is None:
                return None
            try:
                return await replica.info()
            except Exception:  # noqa: BLE001 - not the leader, or busy: asked on its own
                return None

        return dict(zip(names, await asyncio.gather(*(one(n) for n in names)), strict=True))

    async def ping(self) -> str:
        self.restore()
        return self.name
