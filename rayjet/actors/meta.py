"""The meta group member: a raft replica of the catalogue, and (when leader) its reconciler.

The leader answers the API (add/update/delete streams and consumers, lookups), proposes
catalogue ops, and after they commit makes the world match: replica actors exist where the
catalogue says. A new leader runs the same reconciliation, so a leader that dies between a
commit and the actor creation leaves nothing half done.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray

from rayjet.actors import (
    consumer_replicas,
    events,
    host_pools,
    replica_actors,
    stream_replicas,
)
from rayjet.actors.change_watch import ChangeWatch
from rayjet.actors.meta_reconcile import CatalogueReconciler
from rayjet.actors.metrics import RaftMetrics
from rayjet.actors.names import meta_actor_name, stream_actor_name
from rayjet.actors.on_demand import starts_on_demand
from rayjet.actors.raft_host import RaftHost, meta_group_options
from rayjet.actors.replica_shell import ReplicaShell, awaited
from rayjet.actors.router import PeerSender, stream_router
from rayjet.actors.self_start import start_when_restarted
from rayjet.actors.stream_info import new_stream_info
from rayjet.actors.wire_values import META_REQUESTS
from rayjet.api.account import AccountLimits
from rayjet.api.account_names import GLOBAL as GLOBAL_ACCOUNT
from rayjet.api.account_names import account_of
from rayjet.api.consumer import ConsumerConfig
from rayjet.api.stream import StreamConfig
from rayjet.errors import (
    APIError,
    BadRequestError,
    ConsumerNameExistsError,
    NotLeaderError,
    error_for,
)
from rayjet.meta import Catalogue, ConsumerAssignment, Peers, StreamAssignment
from rayjet.meta.assignment_dicts import assignment_dict, consumer_dict
from rayjet.meta.catalogue import encode_meta_op, resolve_hosting
from rayjet.placement.consumers import ephemeral_name
from rayjet.raft import Role
from rayjet.replication import FileLogStorage, Output, ReplicaGroup
from rayjet.replication.meta_machine import MetaMachine
from rayjet.replication.rejoin import open_or_rejoin

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
MEMBER_STATE_TIMEOUT = 2.0  # seconds cluster_info waits on another member's status
REOPEN_EVERY = 5.0  # seconds between attempts of a member that could not open its files
WATCH_LONGEST = 30.0  # seconds a catalogue watch waits at most for a change


def _answers_unstarted(config: StreamConfig) -> bool:
    """Whether a new stream's creation can answer before its replicas run: replicas in
    shared hosts start in a running process within milliseconds (a dedicated actor takes a
    process start, worth waiting for), and a mirror's or source's info needs its leader."""
    return config.shared_hosting and config.mirror is None and not config.sources


class MetaMember(CatalogueReconciler, ReplicaShell):
    """Plain class; :func:`ensure_meta` wraps it with ``ray.remote`` as a detached actor."""

    DATA_PLANE_REQUESTS = META_REQUESTS  # what clients may call over the data plane

    def __init__(self, member_id: str, members: list[str], data_dir: str, *,
                 tick_seconds: float = 0.05) -> None:
        self.id = member_id
        self.members = list(members)
        self.data_dir = Path(data_dir)
        self.tick_seconds = tick_seconds
        self.catalogue = Catalogue()
        self._catalogue_watch = ChangeWatch(lambda: self.catalogue.applied_index)
        self.host: RaftHost | None = None
        self.damage: str | None = None  # what made this member rejoin empty at its start
        self.failure: str | None = None  # why it cannot open its files (it tries again)
        self._reopening: asyncio.Task | None = None
        self._digest: tuple[int, str] = (-1, "")  # (applied index, catalogue digest)
        self._reconciler: asyncio.Task | None = None
        self._pool_started = False
        self._starting: set[asyncio.Task] = set()  # new streams' replicas, until they run
        # new streams whose replicas are being placed (their control-store calls run in a
        # thread beside the creation's answer): changes of the stream wait for it
        self._placing: dict[str, asyncio.Future] = {}
        self._routers: dict[str, tuple[Any, Any]] = {}  # stream -> ((group, peers), router)
        self._updating: dict[str, int] = {}  # streams whose membership this leader changes
        self._update_locks: dict[str, asyncio.Lock] = {}
        self.collected: dict[str, int] = {"runs": 0, "actors": 0, "dirs": 0, "skipped": 0}
        # a constructor that raises leaves a dead actor Ray never restarts, and the group
        # one member short for good: a member that cannot open its files stays up, says
        # why, and tries again
        self._open()
        start_when_restarted(meta_actor_name(member_id))

    def _open(self) -> bool:
        """Open the raft log (rejoining empty when it is damaged); False when it failed."""
        root = self.data_dir / "meta" / self.id

        def opener() -> ReplicaGroup:
            self.catalogue = Catalogue()
            storage = FileLogStorage(root)
            try:  # a log that contradicts itself fails here, not in FileLogStorage
                return ReplicaGroup(self.id, storage, MetaMachine(self.catalogue),
                                    voters=self.members, options=meta_group_options())
            except BaseException:
                storage.close()
                raise

        try:
            group, damage = open_or_rejoin(root, root, opener, f"meta member {self.id}")
        except Exception as exc:  # noqa: BLE001 - reported by status/ping, retried
            self.failure = f"{type(exc).__name__}: {exc}"
            log.exception("meta member %s cannot open its files in %s", self.id, root)
            return False
        self.damage = damage or self.damage
        self.failure = None
        send = PeerSender(meta_actor_name)
        self.host = RaftHost(group, send, tick_seconds=self.tick_seconds, watch=send.watch,
                             name=f"meta/{self.id}", metrics=RaftMetrics("meta", "meta"),
                             actor_name=meta_actor_name(self.id))
        self.host.request_target = self
        self.host.on_output.append(self._on_output)
        return True

    async def _reopen_loop(self) -> None:
        while not self._open():
            await asyncio.sleep(REOPEN_EVERY)
        log.info("meta member %s opened its files after all", self.id)
        self._ensure_started()

    def _unavailable(self) -> NotLeaderError:
        """What a member that could not open its files answers (and tries again). A
        NotLeaderError without a leader: clients and connect() go on to the others."""
        if self._reopening is None or self._reopening.done():
            self._reopening = asyncio.get_running_loop().create_task(self._reopen_loop())
        return NotLeaderError(f"meta member {self.id} cannot open its files "
                              f"({self.failure}); it tries again every {REOPEN_EVERY:.0f}s",
                              group="meta", leader=None)

    # -- plumbing (receive, ping and hold: see ReplicaShell) --------------------------------
    def _not_open(self) -> NotLeaderError | None:
        return self._unavailable() if self.host is None else None

    @property
    def _preferred(self) -> bool:  # the first member leads a new group
        return self.members[0] == self.id

    def _start_tasks(self) -> None:
        self._reconciler = asyncio.get_running_loop().create_task(self._reconcile_loop())

    def _on_output(self, out: Output) -> None:
        if out.applied or out.role is not None:
            self._catalogue_watch.changed()
        if out.role == Role.LEADER and not self._pool_started:
            # the leader's node gets its replica hosts at once (the first streams and buckets
            # of a new server land there)
            self._pool_started = True
            task = asyncio.get_running_loop().create_task(self._start_host_pool())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _start_host_pool(self) -> None:
        try:
            await asyncio.to_thread(host_pools.start_host_pool, str(self.data_dir))
        except Exception as err:  # noqa: BLE001 - the hosts then start when first used
            log.info("meta %s: starting the replica hosts failed: %r", self.id, err)

    async def status(self) -> dict[str, Any]:
        """The raft group's status, with ``rejoining`` (its log was lost to damage and it
        catches up), ``damage`` (what was found at its start), ``failure`` (why it cannot
        open its files: it has no group status then) and its catalogue's ``digest``."""
        if self.host is None:
            self._unavailable()
            return {"id": self.id, "role": None, "rejoining": False, "damage": self.damage,
                    "failure": self.failure}
        self._ensure_started()
        st = self.host.group.status()
        applied = self.catalogue.applied_index
        if self._digest[0] != applied:  # computed once per catalogue state
            self._digest = (applied, self.catalogue.digest())
        st.update(damage=self.damage, failure=None, collected=dict(self.collected),
                  catalogue={"applied": applied, "streams": len(self.catalogue.streams),
                             "digest": self._digest[1]})
        return st

    async def cluster_info(self) -> dict[str, Any]:
        """The meta group as its leader sees it (nats-server's ``meta_cluster``)."""
        self._require_leader()
        group = self.host.group
        replicas = self.host.replicas() or []
        states = await asyncio.gather(*(self._member_state(r["name"]) for r in replicas))
        for replica, state in zip(replicas, states, strict=True):
            replica.update(state)
        return {"name": "meta", "leader": self.id, "term": group.term,
                "cluster_size": len(group.conf_state.voters), "replicas": replicas,
                "data_dir": str(self.data_dir)}  # the cluster's, whatever a client's is

    async def _member_state(self, member: str) -> dict[str, Any]:
        """What another member says of itself: ``rejoining`` (and the ``damage`` that made
        it), or ``failure`` when it cannot open its files or does not answer."""
        try:
            handle = await self.host.send.handle(member)
            st = await asyncio.wait_for(awaited(handle.status.remote()), MEMBER_STATE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - dead, restarting or slow: say so
            return {"rejoining": None, "damage": None,
                    "failure": f"no status: {type(exc).__name__}: {exc}"}
        return {"rejoining": st.get("rejoining"), "damage": st.get("damage"),
                "failure": st.get("failure")}

    def _require_leader(self) -> None:
        self._ensure_started()
        if not self.host.group.is_leader:
            self.host.leader_wanted()
            raise NotLeaderError(f"meta member {self.id} is not the leader",
                                 group="meta", leader=self.host.group.leader)

    async def step_down(self) -> str | None:
        """$JS.API.META.LEADER.STEPDOWN: another member leads (see RaftHost.step_down)."""
        self._require_leader()
        return await self.host.step_down(REQUEST_TIMEOUT)

    async def _commit(self, op) -> Any:
        return await self.host.propose(encode_meta_op(op), REQUEST_TIMEOUT)

    async def _read(self) -> None:
        self._require_leader()
        await self.host.linearizable(REQUEST_TIMEOUT)

    # -- streams ----------------------------------------------------------------------------
    async def add_stream(self, config: dict[str, Any],
                         default_hosting: str | None = None) -> dict[str, Any]:
        """Create a stream (``hosting`` unset: ``default_hosting``, the client's default).
        Answers ``{"assignment", "leader", "info"}``: the leader's stream info, asked here
        where its handle is at hand (None when the leader could not say at once)."""
        self._require_leader()
        cfg = StreamConfig.from_dict(config)
        existing = self.catalogue.streams.get(cfg.name)
        peers = existing.peers if existing else stream_replicas.place_stream(cfg, self.catalogue)
        op = self.catalogue.prepare_add_stream(cfg, peers=peers, now_ns=time.time_ns(),
                                               default_hosting=default_hosting)
        if isinstance(op, StreamAssignment):  # the same stream exists: ask its leader
            sa = op
        else:
            sa = await self._commit(op)
            events.post([events.stream_action(sa.name, "update" if existing else "create")])
            if _answers_unstarted(sa.config):
                return await self._start_new_stream(sa)
        rid, leader, info = await stream_replicas.ensure_stream_replicas(sa, self.data_dir)
        if info is None:
            try:
                info = await asyncio.wait_for(awaited(leader.info.remote()), REQUEST_TIMEOUT)
            except Exception:  # noqa: BLE001 - a leader change: the client asks the new one
                info = None
        return {"assignment": assignment_dict(sa), "leader": rid, "info": info}

    async def _start_new_stream(self, sa: StreamAssignment) -> dict[str, Any]:
        """Answer a new stream's creation without waiting for its replicas: its info is
        known (see new_stream_info) and the first call to its leader waits for it (a
        client's router retries a replica not found yet). Placing the replicas (the host's
        record in Ray's control store, the host lookup, the place call) runs in a thread
        beside the answer; a change or deletion of the stream waits for it
        (:meth:`_until_placed`). A replica that fails to start is logged here and started
        again by reconciliation. One that rests until used (on_demand.starts_on_demand) is
        only recorded: it has nothing to start. Its replicas' hosts are recorded before
        the answer, so their names find them at once, as before any placement ran."""
        await asyncio.to_thread(stream_replicas.record_new_replicas, sa)
        placing = asyncio.ensure_future(asyncio.to_thread(
            stream_replicas.start_stream_replicas, sa, self.data_dir, new=True))
        self._placing[sa.name] = placing
        placing.add_done_callback(lambda done: self._placed_stream(sa, done))
        preferred = stream_replicas.preferred_replica(sa)
        info = new_stream_info(sa.config, sa.created_ns, sa.group,
                               preferred if len(sa.peers) == 1 else None)
        return {"assignment": assignment_dict(sa), "leader": preferred, "info": info}

    def _placed_stream(self, sa: StreamAssignment, placing: asyncio.Future) -> None:
        if self._placing.get(sa.name) is placing:
            del self._placing[sa.name]
        if placing.cancelled():
            return
        if placing.exception() is not None:
            log.warning("meta %s: the replicas of new stream %s were not placed: %r",
                        self.id, sa.name, placing.exception())
            return
        if not starts_on_demand(sa.config):
            task = asyncio.get_running_loop().create_task(
                stream_replicas.replicas_ready(sa, placing.result()))
            self._starting.add(task)
            task.add_done_callback(lambda t: self._started_stream(sa, t))

    async def _until_placed(self, name: str) -> None:
        """Wait for the placement of new stream ``name``'s replicas, when it still runs
        (its outcome is logged where it ends)."""
        placing = self._placing.get(name)
        if placing is not None:
            await asyncio.wait([placing])

    def _started_stream(self, sa: StreamAssignment, task: asyncio.Task) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("meta %s: the replicas of new stream %s did not start: %r",
                        self.id, sa.name, task.exception())

    async def update_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        """Change a stream's config, replicas or placement. Changes of one stream run one at
        a time, and each starts from the group as it runs: a change cut short (a client
        retrying after an error, a meta leader gone mid-way) leaves replicas that the next
        change keeps or removes, never ones that stay beside the catalogue's."""
        self._require_leader()
        cfg = StreamConfig.from_dict(config)
        self.catalogue.stream(cfg.name)
        out = assignment_dict(await self._changing(cfg.name, lambda: self._update_stream(cfg)))
        events.post([events.stream_action(cfg.name, "update")])
        return out

    async def remove_stream_peer(self, name: str, peer: str) -> dict[str, Any]:
        """$JS.API.STREAM.PEER.REMOVE: replica ``peer`` leaves the stream's group and a new
        replica, placed as a new one would be, takes its place (it joins first and catches
        up, as when the stream grows), so the stream keeps its replica count and every
        message; the removed replica's data is deleted."""
        self._require_leader()
        self._peer_of(self.catalogue.stream(name), peer)
        return assignment_dict(await self._changing(
            name, lambda: self._update_stream(self.catalogue.stream(name).config,
                                              replace=peer)))

    @staticmethod
    def _peer_of(sa: StreamAssignment, peer: str) -> None:
        if not isinstance(peer, str) or peer not in {rid for rid, _ in sa.peers}:
            raise error_for("CLUSTER_PEER_NOT_MEMBER")

    async def _changing(self, name: str, change: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``change`` of stream ``name``, one change of a stream at a time."""
        self._updating[name] = self._updating.get(name, 0) + 1
        lock = self._update_locks.setdefault(name, asyncio.Lock())
        try:
            async with lock:
                await self._until_placed(name)
                self._require_leader()
                return await change()
        finally:
            self._updating[name] -= 1
            if not self._updating[name]:
                del self._updating[name]
                self._update_locks.pop(name, None)

    async def _update_stream(self, cfg: StreamConfig, *, replace: str | None = None
                             ) -> StreamAssignment:
        """Change a stream to ``cfg``; ``replace``: a replica to swap for a new one."""
        old = self.catalogue.stream(cfg.name)
        cfg = resolve_hosting(cfg, old.config.hosting)  # unset: the stream keeps its own
        peers = old.peers
        drift = await stream_replicas.group_drift(old)
        gone: list[str] = []
        if drift:
            log.warning("meta %s: stream %s differs from the catalogue (a change cut short): "
                        "voters %s, learners %s not named; %s named but not members",
                        self.id, cfg.name, [rid for rid, _ in drift.voters],
                        list(drift.learners), list(drift.missing))
        if drift.missing:
            # a removal ran but its commit did not: those replicas are out of the group, so
            # placement starts without them and any it wants back grow again under new ids
            old = dataclasses.replace(
                old, peers=tuple(p for p in old.peers if p[0] not in drift.missing))
            gone = [stream_actor_name(old.group, rid) for rid in drift.missing]
        if replace is not None:
            self._peer_of(old, replace)  # a change that ran meanwhile may have removed it
        if (drift.voters or drift.missing or cfg.num_replicas != old.config.num_replicas
                or cfg.placement != old.config.placement or replace is not None):
            # start from where the replicas run now, so one Ray moved off a dead node is
            # kept where it is instead of being replaced
            old = dataclasses.replace(old, peers=await stream_replicas.actual_peers(old)
                                      + drift.voters)
            keep = tuple(p for p in old.peers if p[0] != replace)
            peers = stream_replicas.place_stream(
                cfg, self.catalogue, existing=keep, fresh=old.fresh_ids(cfg.num_replicas),
                avoid=tuple(node for rid, node in old.peers if rid == replace))
        op = self.catalogue.prepare_update_stream(cfg, peers=peers)
        peers = await self._reserve_new_ids(old, peers)
        op = dataclasses.replace(op, peers=peers)
        # the stream's own group must accept the change (membership, limits) before the
        # catalogue records it, so a refused change leaves the catalogue as it was
        removed = await stream_replicas.apply_stream_update(
            old, cfg, peers, self.data_dir, drop_learners=drift.learners,
            still_leading=self._require_leader)
        sa = await self._commit(op)
        # only now: until the commit, reconciliation would re-create them from the
        # catalogue (see apply_stream_update)
        await replica_actors.destroy_replicas(removed + gone)
        return sa

    async def _reserve_new_ids(self, old: StreamAssignment, peers: Peers) -> Peers:
        """``peers`` with each replica not in ``old`` named by an id the catalogue handed out
        (committed before the replica exists, so no later change can reuse it)."""
        have = {rid for rid, _ in old.peers}
        new = [rid for rid, _ in peers if rid not in have]
        if not new:
            return peers
        ids = await self._commit(self.catalogue.prepare_reserve_replicas(old.name, len(new)))
        rename = dict(zip(new, ids, strict=True))
        return tuple((rename.get(rid, rid), node) for rid, node in peers)

    async def delete_stream(self, name: str) -> bool:
        self._require_leader()
        await self._until_placed(name)
        sa = self.catalogue.stream(name)
        await self._commit(self.catalogue.prepare_delete_stream(name))
        events.post([events.stream_action(name, "delete")])
        for ca in sa.consumers.values():
            await consumer_replicas.destroy_consumer_replicas(ca)
        await stream_replicas.destroy_stream_replicas(sa)
        return True

    async def stream_assignment(self, name: str) -> dict[str, Any]:
        await self._read()
        return assignment_dict(self.catalogue.stream(name))

    async def list_streams(self, subject: str | None = None,
                           linearizable: bool = True) -> list[dict[str, Any]]:
        """Every stream's assignment (capturing ``subject``, when given). ``linearizable=
        False``: this leader's catalogue as it is, without confirming the leadership first,
        which would wake a quiet meta group (for pollers that can be a moment behind)."""
        if linearizable:
            await self._read()
        else:
            self._require_leader()
        out = []
        for sa in sorted(self.catalogue.streams.values(), key=lambda s: s.name):
            if subject is not None and not stream_replicas.captures(sa.config, subject):
                continue
            out.append(assignment_dict(sa))
        return out

    async def streams_since(self, since: int) -> dict[str, Any]:
        """What a copy of the stream assignments at applied index ``since`` lacks, after
        confirming the leadership (as :meth:`list_streams`): ``{"applied", "changed":
        [assignment], "removed": [name]}``, or every stream (``{"applied", "streams"}``)
        where this leader cannot tell (``since`` -1, older than it tracks, or ahead of it:
        then ``reset`` too). A listing then costs what changed since the last one."""
        if isinstance(since, bool) or not isinstance(since, int):
            raise BadRequestError(f"since must be an applied index, not {since!r}")
        await self._read()
        applied = self.catalogue.applied_index
        delta = self.catalogue.changes_since(since) if 0 <= since <= applied else None
        if delta is None:
            streams = [assignment_dict(sa) for sa in self.catalogue.streams.values()]
            return {"applied": applied, "streams": streams, "reset": since > applied}
        changed, removed = delta
        return {"applied": applied, "changed": [assignment_dict(sa) for sa in changed],
                "removed": removed}

    async def watch_streams(self, since: int, timeout: float, linearizable: bool = False,
                            changes: bool = False) -> dict[str, Any]:
        """Every stream's assignment once the catalogue has moved past applied index
        ``since``: a long poll, ``{"applied": since, "streams": None}`` after ``timeout``
        seconds without a change. The gateway's stream catalogue follows it.
        ``changes``: answer only what changed after ``since`` where this member can tell,
        ``{"applied", "changed": [assignment], "removed": [name]}`` (a follower of a
        catalogue of thousands of streams then pays for one stream per change)."""
        if linearizable:
            await self._read()
        else:
            self._require_leader()
        applied = await self._catalogue_watch.wait_past(
            since, min(timeout, WATCH_LONGEST), self._require_leader)
        if applied == since:
            return {"applied": since, "streams": None}
        known = changes and 0 <= since <= applied  # a watcher ahead of a new leader: all
        delta = self.catalogue.changes_since(since) if known else None
        if delta is None:
            return {"applied": applied, "streams": await self.list_streams(linearizable=False)}
        changed, removed = delta
        return {"applied": self.catalogue.applied_index,
                "changed": [assignment_dict(sa) for sa in changed], "removed": removed}

    # -- the account ------------------------------------------------------------------------
    async def set_limits(self, limits: dict[str, Any]) -> dict[str, Any]:
        """Make ``limits`` (AccountLimits JSON) the account's JetStream limits."""
        self._require_leader()
        applied = await self._commit(self.catalogue.prepare_set_limits(
            AccountLimits.from_dict(limits)))
        return applied.to_dict()

    async def limits(self) -> dict[str, Any]:
        await self._read()
        return self.catalogue.limits.to_dict()

    async def account_usage(self) -> dict[str, Any]:
        """The limits and the catalogue's consumer count as this leader has them (no quorum
        round: a stream leader asks this for the consumers it runs itself)."""
        self._require_leader()
        return {"limits": self.catalogue.limits.to_dict(),
                "consumers": sum(len(sa.consumers) for sa in self.catalogue.streams.values())}

    async def lookup_subject(self, subject: str, account: str = GLOBAL_ACCOUNT
                             ) -> dict[str, Any] | None:
        """The stream of ``account`` that captures ``subject`` (streams of different
        accounts may capture the same subjects)."""
        await self._read()
        for sa in self.catalogue.streams.values():
            if account_of(sa.config.name) == account and stream_replicas.captures(sa.config,
                                                                                   subject):
                return assignment_dict(sa)
        return None

    # -- consumers --------------------------------------------------------------------------
    async def add_consumer(self, stream: str, config: dict[str, Any]) -> dict[str, Any]:
        self._require_leader()
        await self._until_placed(stream)
        cfg = ConsumerConfig.from_dict(config)
        if not (cfg.durable_name or cfg.name):
            cfg = dataclasses.replace(cfg, name=ephemeral_name())
        sa = self.catalogue.stream(stream)
        existing = sa.consumers.get(cfg.durable_name or cfg.name)
        peers = existing.peers if existing else consumer_replicas.place_consumer(
            sa, cfg.num_replicas)
        in_leader = 0
        if existing is None:
            # the ephemeral consumers the stream leader runs share the names and the limit
            names = await self._leader_consumer_names(sa)
            if (cfg.durable_name or cfg.name) in names:
                raise ConsumerNameExistsError(
                    f"consumer name {cfg.durable_name or cfg.name!r} is already in use")
            in_leader = len(names)
            self._require_leader()
        op = self.catalogue.prepare_add_consumer(stream, cfg, now_ns=time.time_ns(), peers=peers,
                                                 elsewhere=in_leader)
        removed: list[str] = []
        if isinstance(op, ConsumerAssignment):
            ca = op
        else:
            if existing is None:
                await self._register_interest(sa, cfg, remove=False)
            else:
                want = ConsumerConfig.from_dict(op.config).num_replicas or sa.config.num_replicas
                if want != len(existing.peers):
                    # the group changes first: a refused change leaves the catalogue as it was
                    scaled = consumer_replicas.consumer_peers_for(existing, sa, want)
                    removed = await consumer_replicas.scale_consumer(
                        existing, sa, scaled, self.data_dir, assignment_dict(sa),
                        still_leading=self._require_leader)
                    op = dataclasses.replace(op, peers=scaled)
            ca = await self._commit(op)
            if existing is not None:
                await replica_actors.destroy_replicas(removed)
                await consumer_replicas.update_consumer_config(ca)
            else:
                events.post([events.consumer_action(stream, ca.name, "create")])
        await consumer_replicas.ensure_consumer_replicas(ca, sa, self.data_dir, assignment_dict(sa))
        return consumer_dict(ca)

    async def _leader_consumer_names(self, sa: StreamAssignment) -> list[str]:
        """The ephemeral consumers the stream's leader runs: one data-plane request to the
        leader (it was a status call to each replica, then an actor call)."""
        return await self._stream_router(sa).acall(
            "leader_consumer_names", timeout=replica_actors.GROUP_READY_TIMEOUT)

    def _stream_router(self, sa: StreamAssignment) -> Any:
        """A router to ``sa``'s leader, kept while its replicas stay the same."""
        key = (sa.group, sa.peers)
        router = self._routers.get(sa.name)
        if router is None or router[0] != key:
            if len(self._routers) >= 10_000:
                self._routers.clear()
            router = self._routers[sa.name] = (key, stream_router(assignment_dict(sa)))
        return router[1]

    async def _register_interest(self, sa: StreamAssignment, cfg: ConsumerConfig, *,
                                 remove: bool) -> None:
        """Interest and work-queue streams keep messages for their consumers: tell the
        stream (and let it refuse, e.g. past max_consumers) before the catalogue commits."""
        from rayjet.api import RetentionPolicy

        if sa.config.retention is RetentionPolicy.LIMITS:
            return
        _, leader = await stream_replicas.find_leader(sa)
        await leader.register_consumer.remote(cfg.durable_name or cfg.name,
                                              consumer_replicas.consumer_filters(cfg), 0, remove)

    async def delete_consumer(self, stream: str, name: str) -> bool:
        self._require_leader()
        ca = self.catalogue.consumer(stream, name)
        await self._commit(self.catalogue.prepare_delete_consumer(stream, name))
        events.post([events.consumer_action(stream, name, "delete")])
        await consumer_replicas.destroy_consumer_replicas(ca)
        sa = self.catalogue.streams.get(stream)
        if sa is not None:
            with contextlib.suppress(APIError, ray.exceptions.RayError):
                await self._register_interest(sa, ca.config, remove=True)
        return True

    async def consumer_assignment(self, stream: str, name: str) -> dict[str, Any]:
        await self._read()
        return consumer_dict(self.catalogue.consumer(stream, name))

    async def list_consumers(self, stream: str) -> list[dict[str, Any]]:
        await self._read()
        sa = self.catalogue.stream(stream)
        return [consumer_dict(c) for _, c in sorted(sa.consumers.items())]

    async def shutdown(self) -> None:
        for task in (self._reconciler, self._reopening):
            if task is not None:
                task.cancel()
        if self.host is not None:
            await self.host.stop()
            self.host.group.storage.close()


RESPAWN_AFTER = 2.0  # seconds between re-creations of a meta member found dead
STATUS_PAUSE = 0.05  # seconds between status calls to one member while no leader answers


def ensure_meta(data_dir: str, timeout: float = 60.0) -> list[Any]:
    """Start (or find) the meta group's members and wait until one answers as leader.

    Members are asked one by one as their answers come: one that died (its constructor
    raised, its node is gone), cannot open its files or does not answer is logged and
    asked again, but never waited on, so any majority that elects a leader is enough. A
    member found dead is created again (a dead actor's name is free)."""
    from rayjet.actors.names import META_MEMBERS, meta_member_id
    from rayjet.actors.replica_actors import actor_options, remote_class

    members = [meta_member_id(i) for i in range(META_MEMBERS)]
    cls = remote_class(MetaMember)

    def spawn(m: str) -> Any:
        return cls.options(**actor_options(meta_actor_name(m))).remote(m, members, data_dir)

    handles = {m: spawn(m) for m in members}
    asking: dict[Any, str] = {}  # status call in flight -> member
    ask_at = dict.fromkeys(members, 0.0)
    spawned_at = dict.fromkeys(members, time.monotonic())
    failures: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        for m in members:
            if now >= ask_at[m] and m not in asking.values():
                asking[handles[m].status.remote()] = m
        idle = [ask_at[m] for m in members if m not in asking.values()]
        wait = max(min([deadline, *idle]) - now, 0.001)
        if asking:
            ready, _ = ray.wait(list(asking), num_returns=1, timeout=wait)
        else:
            ready = []
            time.sleep(wait)
        for ref in ready:
            m = asking.pop(ref)
            ask_at[m] = time.monotonic() + STATUS_PAUSE
            try:
                st = ray.get(ref)
            except ray.exceptions.RayError as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                failed = f"{type(exc).__name__}: {first}"
                if isinstance(exc, ray.exceptions.RayActorError) and \
                        time.monotonic() - spawned_at[m] >= RESPAWN_AFTER:
                    handles[m], spawned_at[m] = spawn(m), time.monotonic()
            else:
                if st.get("role") == "Leader":
                    for member, why in sorted(failures.items()):
                        log.warning("meta member %s is not available (%s); the others lead",
                                    member, why)
                    return list(handles.values())
                failed = st.get("failure") and f"cannot open its files: {st['failure']}"
                if not failed:
                    failures.pop(m, None)
                    continue
            if failures.get(m) != failed:
                log.info("meta member %s: %s", m, failed)
            failures[m] = failed
        if time.monotonic() >= deadline:
            detail = "; ".join(f"{m}: {f}" for m, f in sorted(failures.items()))
            raise NotLeaderError("the meta group elected no leader within "
                                 f"{timeout:.0f}s" + (f" ({detail})" if detail else ""),
                                 group="meta")
