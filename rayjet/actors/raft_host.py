"""Run a :class:`ReplicaGroup` inside an asyncio Ray actor.

One event loop is the mailbox: every input (peer messages, ticks, proposals) changes the
group synchronously and is followed by ``pump``, which does the I/O the group asks for.
Nothing awaits in the middle of a state transition. Proposers await a future that the
apply of their entry resolves.

A quiescent group (idle, see ``rayjet.raft.Config.quiesce_after``) does not tick: the loop
waits until an input wakes the group. A quiet follower keeps one call open on its leader's
actor (``watch``, e.g. a ``hold`` method that returns only when that actor stops); the call
fails when Ray reports the actor dead, and the follower then campaigns at once. That call
is the only cost of an idle group: no ticks, no heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from rayjet.actors import data_plane
from rayjet.actors.metrics import EVERY as METRICS_EVERY
from rayjet.actors.metrics import RaftMetrics
from rayjet.errors import NotLeaderError, ServiceUnavailableError
from rayjet.raft import (
    ConfChange,
    ConfChangeType,
    Message,
    MessageType,
    ProposalDroppedError,
    Role,
)
from rayjet.replication import GroupOptions, Output, ReplicaGroup
from rayjet.replication.group import ReplicaFailedError

log = logging.getLogger(__name__)

Send = Callable[[str, list[Message]], None]
Watch = Callable[[str], Awaitable[object]]  # returns (or raises) once the peer is gone

# Ticks are 50 ms: elections after 20-40 ticks (1-2 s); heartbeats every 3 ticks keep an idle
# group's actor calls low while the leader still reaches followers several times per timeout.
# A busy two-core machine (actor processes starting, the leader's event loop applying a large
# batch) stalls a replica for half a second now and then: shorter timeouts made such a stall
# an election, and every proposal in flight an unknown outcome. A dead replica's peers notice
# the death itself and campaign sooner (report_peer_down).
ACTOR_ELECTION_TICKS = 20
ACTOR_HEARTBEAT_TICKS = 3
# Every raft message is an actor call (~1 ms of CPU at each end): followers learn a new commit
# index from the next append or heartbeat instead of an extra empty append and its answer.
ACTOR_NOTIFY_COMMIT = False
# The raft log keeps the entries since its last compaction in memory: compact after this many
# entries or bytes of them, whichever comes first (the environment of the Ray nodes sets them).
COMPACT_ENTRIES_ENV = "RAYJET_RAFT_COMPACT_ENTRIES"
COMPACT_BYTES_ENV = "RAYJET_RAFT_COMPACT_BYTES"
# An idle group goes quiet after this many ticks without a new entry (1 s); 0 turns
# quiescence off (the Ray nodes' environment can set it).
QUIESCE_TICKS = 20
QUIESCE_ENV = "RAYJET_RAFT_QUIESCE_TICKS"


def quiesce_ticks() -> int:
    """Idle ticks before an actor's raft group goes quiet (0: never)."""
    raw = os.environ.get(QUIESCE_ENV, "").strip()
    if raw in ("0", "off"):
        return 0
    return positive_env(QUIESCE_ENV, QUIESCE_TICKS)


def positive_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        log.warning("%s=%r is not a positive whole number: using %d", name, raw, default)
        return default
    return value


def actor_group_options(*, sync_always: bool) -> GroupOptions:
    """The raft options of a replica actor (stream or consumer)."""
    defaults = GroupOptions()
    return GroupOptions(sync_always=sync_always, election_tick=ACTOR_ELECTION_TICKS,
                        heartbeat_tick=ACTOR_HEARTBEAT_TICKS, notify_commit=ACTOR_NOTIFY_COMMIT,
                        quiesce_after=quiesce_ticks(),
                        snapshot_every=positive_env(COMPACT_ENTRIES_ENV,
                                                     defaults.snapshot_every),
                        snapshot_bytes=positive_env(COMPACT_BYTES_ENV,
                                                     defaults.snapshot_bytes))


# the meta group snapshots its catalogue after this many applied entries (the environment of
# the Ray nodes can set it)
META_COMPACT_ENV = "RAYJET_META_COMPACT_ENTRIES"
META_COMPACT_ENTRIES = 1024


def meta_group_options() -> GroupOptions:
    """The raft options of a meta group member: every entry synced before it counts."""
    return GroupOptions(sync_always=True,
                        snapshot_every=positive_env(META_COMPACT_ENV, META_COMPACT_ENTRIES),
                        election_tick=ACTOR_ELECTION_TICKS, heartbeat_tick=ACTOR_HEARTBEAT_TICKS,
                        notify_commit=ACTOR_NOTIFY_COMMIT, quiesce_after=quiesce_ticks())


class RaftHost:
    def __init__(self, group: ReplicaGroup, send: Send, *, tick_seconds: float = 0.05,
                 name: str = "", metrics: RaftMetrics | None = None,
                 watch: Watch | None = None, actor_name: str | None = None) -> None:
        self.group = group
        # the name peers address this replica by: it takes their messages over this
        # process's data plane too once started (rayjet.actors.data_plane)
        self.actor_name = actor_name
        # the replica object whose DATA_PLANE_REQUESTS clients may call over the data plane
        self.request_target: Any = None
        self.send = send
        self.watch = watch
        self._woken = asyncio.Event()  # set by every pump that leaves the group awake
        self._stopped = asyncio.Event()
        self._watching: tuple[str, asyncio.Task] | None = None
        self.tick_seconds = tick_seconds
        self.name = name or group.id
        self.metrics = metrics
        # index -> (term, future, when proposed): the apply of the entry resolves it
        self._waiters: dict[int, tuple[int, asyncio.Future, float]] = {}
        self._reads: dict[bytes, asyncio.Future] = {}
        self._pending_reads: list[tuple[int, asyncio.Future]] = []
        self._task: asyncio.Task | None = None
        self._read_seq = 0
        self.on_output: list[Callable[[Output], None]] = []
        # group commit: messages that acknowledge entries wait for one fsync per loop turn
        opts = getattr(group, "opts", None)
        group.defer_sync = bool(opts is not None and opts.sync_always)
        self._held: dict[str, list[Message]] = defaultdict(list)
        self._sync_scheduled = False
        self.sync_batches = 0  # fsyncs that let held messages go (status reports it)
        if hasattr(send, "on_gone"):  # a PeerSender: it sees peers' processes die
            send.on_gone = self._peer_gone

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, *, lead_at_once: bool = False) -> None:
        """Start ticking. ``lead_at_once``: a new group's preferred leader stands for
        election now instead of after an election timeout (pre-vote makes this harmless
        when another replica already leads, e.g. for one rebuilt on an empty disk)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._tick_loop())
            if self.actor_name is not None:
                data_plane.serve_replica(self.actor_name, self.receive, self.request_target)
            if lead_at_once and self.group.fresh:
                self.group.campaign()
                self.pump()

    async def stop(self) -> None:
        self._stopped.set()
        if self.actor_name is not None:
            data_plane.withdraw_replica(self.actor_name, self.receive)
        if self._watching is not None:
            self._watching[1].cancel()
            self._watching = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._fail_waiters(ServiceUnavailableError(f"replica {self.name} stopped"))

    async def _tick_loop(self) -> None:
        flush_every = max(1, round(METRICS_EVERY / self.tick_seconds))
        ticks = 0
        failed = False
        while True:
            if self.group.quiet:
                if self.metrics is not None:
                    self.metrics.flush()  # what the last entries brought, before the quiet
                self._watch_leader()
                self._woken.clear()
                await self._woken.wait()
                continue
            await asyncio.sleep(self.tick_seconds)
            ticks += 1
            if self.metrics is not None and ticks % flush_every == 0:
                self.metrics.flush()
                self.metrics.health(self.group.id, self.health())
            if self.group.failure is not None:
                if not failed:
                    failed = True
                    log.error("%s takes no part in its group any more: %s", self.name,
                              self.group.failure)
                continue
            try:
                self.group.tick()
                self.pump()
            except Exception:  # keep ticking: a bad message must not stop the replica
                log.exception("raft tick failed on %s", self.name)

    def transfer_leadership(self, to: str) -> None:
        """Start handing leadership to voter ``to``. A quiet group ticks again first: the
        transfer runs on ticks (it waits for ``to`` to catch up, and gives up after an
        election timeout), so without them it would never end."""
        self.group.wake()
        self._woken.set()
        self.group.transfer_leader(to)
        self.pump()

    async def step_down(self, timeout: float) -> str | None:
        """Hand leadership to the most caught-up other voter (nats-server's leader step-down)
        and wait until that voter leads; its id, or None for a group of one voter, which
        keeps its leader. NotLeaderError on a non-leader; ServiceUnavailableError when no
        other voter took over within ``timeout`` (this replica may lead again)."""
        group = self.group
        if not group.is_leader:
            raise NotLeaderError(f"{self.name} is not the leader", group=self.name,
                                 leader=group.leader)
        raft = group.node.raft
        others = [nid for nid in group.conf_state.voters if nid != group.id]
        if not others:
            return None
        to = max(others, key=lambda nid: raft.prs[nid].match if nid in raft.prs else -1)
        moved = asyncio.Event()

        def watch(out: Output) -> None:
            if out.role is not None:
                moved.set()

        self.on_output.append(watch)
        try:
            self.transfer_leadership(to)
            deadline = time.monotonic() + timeout
            while group.is_leader or group.leader in (None, group.id):
                moved.clear()
                try:
                    await asyncio.wait_for(moved.wait(), deadline - time.monotonic())
                except TimeoutError:
                    raise ServiceUnavailableError(
                        f"{self.name}: no other replica took the leadership within "
                        f"{timeout:.1f}s") from None
        finally:
            self.on_output.remove(watch)
        return group.leader

    def leader_wanted(self) -> None:
        """A client asked this non-leader for the leader's work. A quiet follower ticks
        again: if its leader cannot answer (paused, cut off, but not dead, so no death
        report comes), it stands for election within a timeout instead of waiting."""
        if self.group.quiet and not self.group.is_leader:
            self.group.wake()
            self._woken.set()

    async def until_stopped(self) -> None:
        """Return once this host stops (what a peer's ``watch`` call waits on)."""
        await self._stopped.wait()

    def _watch_leader(self) -> None:
        leader = self.group.leader
        if self.watch is None or leader is None or leader == self.group.id:
            return
        if self._watching is not None:
            peer, task = self._watching
            if peer == leader and not task.done():
                return
            task.cancel()
        self._watching = (leader, asyncio.get_running_loop().create_task(self._watch(leader)))

    async def _watch(self, peer: str) -> None:
        try:
            await self.watch(peer)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the call failing is the news
            pass
        self._peer_gone(peer)

    def _peer_gone(self, peer: str) -> None:
        """``peer``'s process died (Ray's notice, or its data-plane port refusing): when
        it led, elect another now rather than after an election timeout."""
        if self._stopped.is_set() or self._task is None:
            return
        if self.group.leader == peer:
            log.info("%s: leader %s is gone; electing another", self.name, peer)
            self.group.report_peer_down(peer)
            self.pump()

    def _wait_for(self, index: int, term: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiters[index] = (term, fut, time.perf_counter())
        if self.metrics is not None:
            self.metrics.proposed()
        return fut

    # -- inputs -----------------------------------------------------------------------------
    def receive(self, messages: list[Message]) -> None:
        self.group.step(messages)
        self.pump()

    def propose_nowait(self, data: bytes) -> asyncio.Future:
        """Propose and return the future its apply resolves (raises NotLeaderError)."""
        try:
            index, term = self.group.propose(data)
        except ProposalDroppedError as exc:
            raise NotLeaderError(f"{self.name} is not the leader ({exc.description})",
                                 group=self.name) from None
        fut = self._wait_for(index, term)
        self.pump()
        return fut

    def finish_copy(self, index: int) -> None:
        """The state machine was copied from a peer as of ``index``: resume applying."""
        self.group.finish_copy(index)
        self.pump()

    async def propose_conf_change(self, cc: ConfChange, timeout: float) -> Any:
        """One membership step; resolves when it is committed and applied."""
        try:
            index, term = self.group.propose_conf_change(cc)
        except ProposalDroppedError as exc:
            raise NotLeaderError(f"{self.name}: {exc.description}", group=self.name,
                                 leader=self.group.leader) from None
        fut = self._wait_for(index, term)
        self.pump()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            raise ServiceUnavailableError(
                f"{self.name}: the membership change was not committed within {timeout:.1f}s"
            ) from None

    async def propose(self, data: bytes, timeout: float) -> Any:
        fut = self.propose_nowait(data)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            raise ServiceUnavailableError(
                f"{self.name}: no quorum answered within {timeout:.1f}s; the group may have "
                "lost its majority") from None

    async def linearizable(self, timeout: float) -> None:
        """Wait until this leader's state reflects every write acknowledged before the call."""
        self._read_seq += 1
        ctx = f"{self.name}:{self._read_seq}".encode()
        fut = asyncio.get_running_loop().create_future()
        self._reads[ctx] = fut
        try:
            self.group.read_index(ctx)
        except ProposalDroppedError as exc:
            self._reads.pop(ctx, None)
            raise NotLeaderError(f"{self.name} is not the leader ({exc.description})",
                                 group=self.name) from None
        self.pump()
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self._reads.pop(ctx, None)
            raise ServiceUnavailableError(
                f"{self.name}: leadership not confirmed within {timeout:.1f}s") from None

    # -- what the leader sees ---------------------------------------------------------------
    def replicas(self) -> list[dict[str, Any]] | None:
        """The other members as this leader sees them (nats-server's PeerInfo fields:
        ``current``, ``active``, ``lag`` in raft entries behind the leader's log), or None
        on a follower, which does not know."""
        group = self.group
        if not group.is_leader:
            return None
        raft = group.node.raft
        last, commit = raft.log.last_index(), raft.log.committed
        return [{"name": nid, "current": pr.match >= commit,
                 "active": 0.0 if pr.recent_active else 1.0,
                 "lag": max(0, last - pr.match)}
                for nid, pr in raft.prs.items() if nid != group.id]

    def health(self) -> int:
        """0 serving, 1 repairing (rejoining or copying its store), 2 stopped (failure)."""
        group = self.group
        if group.failure is not None:
            return 2
        return 1 if group.copying or group.rejoining else 0

    def lag(self) -> dict[str, int]:
        """Leader: raft entries each member (itself included, at 0) is behind its log."""
        group = self.group
        raft = group.node.raft
        last = raft.log.last_index()
        return {nid: 0 if nid == group.id else max(0, last - pr.match)
                for nid, pr in raft.prs.items()}

    def transport_stats(self) -> dict[str, int]:
        """What the sender counted (see ``PeerSender.stats``); empty for a plain callable."""
        return dict(getattr(self.send, "stats", {}))

    # -- the pump ---------------------------------------------------------------------------
    def pump(self) -> Output:
        try:
            out = self.group.process()
        except ReplicaFailedError as exc:
            if self.group.failure is not None:  # it stopped: nothing in flight will commit here
                self._fail_waiters(exc)
            raise
        if out.messages:
            hold = out.sync_first or self._sync_scheduled
            by_peer: dict[str, list[Message]] = defaultdict(list)
            for m in out.messages:
                if hold and m.type == MessageType.APP_RESP:
                    # it acknowledges entries: it leaves after the fsync that covers them
                    self._held[m.to].append(m)
                else:
                    by_peer[m.to].append(m)
            self._send_all(by_peer)
        if out.sync_first:
            # after the sends: the leader's appends are on their way to the followers (the
            # senders' wake-ups are queued first) while its own fsync runs, as etcd's
            # leader writes to its disk in parallel with replicating; it counts itself
            # only once the fsync is done
            self._schedule_sync()
        for peer in out.snapshots_sent:
            self.group.report_snapshot(peer, True)
        for cc, _conf in out.conf_changes:
            if cc.type == ConfChangeType.REMOVE and cc.node_id != self.group.id:
                forget = getattr(self.send, "forget", None)
                if forget is not None:
                    forget(cc.node_id)  # a removed peer's handle must not outlive it
        if out.applied:
            self._answer(out.applied)  # committed: durable on a majority already
        for index, ctx in out.read_states:
            fut = self._reads.pop(ctx, None)
            if fut is not None:
                self._pending_reads.append((index, fut))
        if self._pending_reads:
            ready = [(i, f) for i, f in self._pending_reads if i <= self.group.applied]
            self._pending_reads = [(i, f) for i, f in self._pending_reads
                                   if i > self.group.applied]
            for _, fut in ready:
                if not fut.done():
                    fut.set_result(None)
        if out.role is not None and out.role != Role.LEADER:
            # the outcome of what we proposed is unknown now: the new leader may commit it
            self._fail_waiters(NotLeaderError(
                f"{self.name} lost leadership; the outcome is unknown, retry with Nats-Msg-Id",
                group=self.name, outcome_unknown=True))
        for hook in self.on_output:
            hook(out)
        if not self.group.quiet:
            self._woken.set()
        return out

    def _answer(self, applied: list) -> None:
        for a in applied:
            waiter = self._waiters.pop(a.index, None)
            if waiter is None:
                continue
            term, fut, proposed_at = waiter
            if term == a.term and self.metrics is not None:
                self.metrics.committed(time.perf_counter() - proposed_at)
            if fut.done():
                continue
            if term != a.term:
                fut.set_exception(NotLeaderError(
                    f"{self.name}: the proposal was replaced by a new leader; retry",
                    group=self.name))
            elif isinstance(a.result, BaseException):
                fut.set_exception(a.result)
            else:
                fut.set_result(a.result)

    def _send_all(self, by_peer: dict[str, list[Message]]) -> None:
        for peer, msgs in by_peer.items():
            try:
                self.send(peer, msgs)
            except Exception:  # an unreachable peer: raft retries on its own
                self.group.report_unreachable(peer)

    def _schedule_sync(self) -> None:
        if not self._sync_scheduled:
            self._sync_scheduled = True
            asyncio.get_running_loop().call_soon(self._sync_and_send)

    def _sync_and_send(self) -> None:
        """One fsync for every entry written since the last, then the messages held."""
        self._sync_scheduled = False
        held, self._held = self._held, defaultdict(list)
        try:
            if self.group.sync_pending:
                self.group.sync()
                self.sync_batches += 1
        except Exception as exc:
            # what the held messages acknowledge may not be on disk: they never leave, and
            # the replica stops (a restart reopens it from what its files hold)
            self.group.failure = f"fsync of the raft log failed: {type(exc).__name__}: {exc}"
            log.error("%s stopped: %s", self.name, self.group.failure)
            self._fail_waiters(ReplicaFailedError(
                spec="STREAM_STORE_FAILED",
                description=f"replica {self.name} stopped: {self.group.failure}"))
            return
        self._send_all(held)
        self.pump()  # the leader's own copy counts now: it may commit

    def _fail_waiters(self, err: Exception) -> None:
        waiters, self._waiters = self._waiters, {}
        for _, fut, _ in waiters.values():
            if not fut.done():
                fut.set_exception(err)
        reads, self._reads = self._reads, {}
        for fut in reads.values():
            if not fut.done():
                fut.set_exception(err)
        pending, self._pending_reads = self._pending_reads, []
        for _, fut in pending:
            if not fut.done():
                fut.set_exception(err)
