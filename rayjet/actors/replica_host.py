"""Replica hosts: one actor process running many replicas.

A hosted replica is the same object a dedicated actor runs (its own store, raft log and
state); only the process is shared. Routers and raft peers find it by its name through
:mod:`rayjet.actors.host`, which the replicas import too: the host, which imports the
replica classes, lives here, above them.

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
from pathlib import Path
from typing import Any

from rayjet.actors import data_plane
from rayjet.actors.host import NotHostedError, hosted_on, record_hosted
from rayjet.actors.on_demand import never_started, resting_answer
from rayjet.actors.self_start import start_when_restarted
from rayjet.errors import BadRequestError

log = logging.getLogger(__name__)

REMOVED_KEPT = 10_000  # removed replica names a host remembers
ARRIVAL_GRACE = 5.0  # seconds a call waits for a replica placed here whose place has not run


def registry_dir(data_dir: Any, host_name: str) -> Path:
    """Where host ``host_name`` records the replicas it runs (on its node)."""
    return Path(data_dir) / "hosts" / host_name


def _no_raft_messages(messages: list) -> None:
    raise ValueError("a replica host takes no raft messages of its own")


def _warm_resting_info(spec: tuple[str, tuple, dict]) -> None:
    """Make a resting stream replica's info answer (see on_demand.resting_answer), kept
    for the requests that come: the first listing of hundreds of new streams waited for
    all of them."""
    try:
        resting_answer(spec, "info", (), {})
    except Exception:  # noqa: BLE001 - made when asked, then
        log.debug("a resting replica's info could not be made ahead", exc_info=True)


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
        # imported when a replica starts: a host whose replicas all rest never loads the
        # engine (see on_demand)
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
                if kind == "stream":  # its info made now, between requests, not in a listing's
                    asyncio.get_running_loop().call_soon(_warm_resting_info, spec)
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
        """Raft messages for many hosted replicas in one call (see
        :class:`~rayjet.actors.host.HostPost`); answers the names this host runs no replica
        of."""
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
        :func:`~rayjet.actors.host.stream_infos_by_host`): None for one that is not here,
        does not lead, or fails to answer; a resting replica answers from its record."""
        self.restore()

        async def one(replica: Any) -> dict[str, Any] | None:
            try:
                return await replica.info()
            except Exception:  # noqa: BLE001 - not the leader, or busy: asked on its own
                return None

        out: dict[str, dict[str, Any] | None] = {}
        running: dict[str, Any] = {}
        for name in names:
            spec = self.resting.get(name)
            if spec is not None:  # answered from its record: no task for it
                out[name] = resting_answer(spec, "info", (), {})[1]
            elif name in self.replicas:
                running[name] = self.replicas[name]
            else:
                out[name] = None
        if running:
            answers = await asyncio.gather(*(one(r) for r in running.values()))
            out.update(zip(running, answers, strict=True))
        return {name: out[name] for name in names}

    async def ping(self) -> str:
        self.restore()
        return self.name
