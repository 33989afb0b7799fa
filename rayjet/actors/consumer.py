"""The consumer replica actor: a raft replica of one durable consumer's delivery state.

The leader decides deliveries with the consumer engine, replicates each decision (which
messages went to whom, acks, naks) through the consumer's own raft group, and only then
hands messages out, so a new leader never forgets what was sent. It reads messages from the
stream's leader in batches. Acks on interest and work-queue streams are forwarded to the
stream, which removes what no consumer still needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rayjet.actors import events
from rayjet.actors.cancelling import cancel_and_wait
from rayjet.actors.consumer_reads import (
    STREAM_CALL_TIMEOUT,
    TIMER_EVERY,
    RemoteStreamReader,
    StreamReads,
)
from rayjet.actors.membership import GroupMembershipCalls
from rayjet.actors.metrics import ConsumerMetrics, NullSink, RaftMetrics
from rayjet.actors.names import consumer_actor_name
from rayjet.actors.raft_host import RaftHost, actor_group_options
from rayjet.actors.replica_shell import ReplicaShell
from rayjet.actors.router import PeerSender, stream_router
from rayjet.actors.self_start import start_when_restarted
from rayjet.actors.wire_values import CONSUMER_REQUESTS
from rayjet.api import ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from rayjet.api.info import ClusterInfo
from rayjet.clock import SYSTEM_CLOCK
from rayjet.engine.ack_sync import AckOutbox
from rayjet.engine.consumer.delivery_batch import DeliveryBatch, expand_ranges
from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.reader import ReadAhead
from rayjet.engine.consumer.types import (
    Batch,
    Delivery,
    DeliveryRun,
    PullRequest,
    RequestStatus,
)
from rayjet.errors import (
    APIError,
    NotLeaderError,
    ServiceUnavailableError,
    error_for,
)
from rayjet.raft import Role
from rayjet.replication import FileLogStorage, MemoryLog, Output, ReplicaGroup
from rayjet.replication.consumer_machine import ConsumerMachine, encode_entry
from rayjet.replication.rejoin import open_or_rejoin
from rayjet.storage.config import DEFAULT_SYNC_INTERVAL

log = logging.getLogger(__name__)

# with no redelivery, expiry or waiting request due (TIMER_EVERY): an inactivity check,
# unless a call wakes the timer sooner
TIMER_IDLE = 1.0
READ_AHEAD_TIMER = 448  # messages read ahead for the waiting requests the timer serves
# seconds between metric updates: each asks the stream leader for num_pending (one call),
# and Ray exports every 10 s by default anyway
METRICS_EVERY = 5.0
INFO_READ_TIMEOUT = 1.0
SYNC_TIMEOUT = 60.0  # a reconciliation walks the stream's held messages in steps
ACK_BATCH = 4096  # acks per forward to the stream
ACK_RETRY_MIN, ACK_RETRY_MAX = 0.05, 1.0
ANSWER_KINDS = frozenset({"ack", "nak", "progress", "term"})


@dataclass(frozen=True)
class InLeader:
    """How a consumer runs inside its stream leader's actor (see
    :mod:`rayjet.actors.leader_consumers`): ``stream`` answers the stream calls in-process
    (``call``/``acall`` like a GroupRouter), ``on_inactive(name)`` deletes the consumer."""

    stream: Any
    on_inactive: Callable[[str], Awaitable[Any]]


def _no_peers(peer: str, messages: list) -> None:
    raise ServiceUnavailableError(f"a single-replica consumer has no peer {peer!r}")


@dataclass
class _Fetch:
    batch: int
    future: asyncio.Future
    messages: list[Delivery | DeliveryRun] = field(default_factory=list)
    count: int = 0  # messages in ``messages``
    status: tuple[int, str] | None = None
    eager: bool = False  # push: answer as soon as one decision's messages are out
    scheduled: int = 0  # messages held back until their due time
    inflight: int = 0  # messages decided for it whose decision is not applied yet
    leaving: bool = False  # the caller stops waiting once ``inflight`` arrived


class ConsumerReplica(ReplicaShell, StreamReads, GroupMembershipCalls):
    """Plain class; :mod:`rayjet.actors.consumer_replicas` runs it in a replica host or
    beside its stream replica."""

    DATA_PLANE_REQUESTS = CONSUMER_REQUESTS  # what clients may call over the data plane

    def __init__(self, stream_assignment: dict[str, Any], name: str, config: dict[str, Any],
                 group: str, replica_id: str, voters: list[str], data_dir: str, *,
                 created_ns: int = 0, tick_seconds: float = 0.05,
                 in_leader: InLeader | None = None) -> None:
        self.stream_name = stream_assignment["config"]["name"]
        self.name = name
        self.group_name = group
        self.id = replica_id
        self._preferred = bool(voters) and voters[0] == replica_id  # leads a new group
        self.dir = Path(data_dir) / "consumers" / group / replica_id
        stream_cfg = StreamConfig.from_dict(stream_assignment["config"])
        cfg = ConsumerConfig.from_dict(config)
        self.in_leader = in_leader
        if in_leader is None:
            self.stream = stream_router(stream_assignment)
            self.remote = RemoteStreamReader(stream_router(stream_assignment))
        else:
            self.stream = in_leader.stream
            self.remote = RemoteStreamReader(in_leader.stream)
        self.reader = ReadAhead(self.remote)
        self._taking_lead: asyncio.Task | None = None
        self._last_info_reads: tuple[list, list] | None = None
        memory = (cfg.mem_storage or stream_cfg.storage is StorageType.MEMORY
                  or in_leader is not None)
        # a replica fsyncs entries before acknowledging them (one fsync per loop turn, as
        # the stream's replicas do); the stream's sync_interval paces the rest of the log
        sync = (stream_cfg.sync_interval if stream_cfg.sync_interval is not None
                else DEFAULT_SYNC_INTERVAL)

        def open_replica() -> ReplicaGroup:
            self.engine = ConsumerEngine(cfg, stream_cfg, self.reader, SYSTEM_CLOCK,
                                         created_ns=created_ns or None, name=name)
            storage = MemoryLog() if memory else FileLogStorage(self.dir / "raft",
                                                                sync_interval=sync)
            return ReplicaGroup(replica_id, storage, ConsumerMachine(self.engine),
                                voters=voters, options=actor_group_options(
                                    sync_always=not memory))

        # a log that cannot be loaded: rejoin the group empty and catch up (see rejoin)
        rgroup, self.damage = open_or_rejoin(self.dir, self.dir / "raft", open_replica,
                                             f"consumer {self.stream_name}>{name} "
                                             f"replica {replica_id}")
        if in_leader is None:
            send = PeerSender(lambda peer: consumer_actor_name(group, peer))
            self.host = RaftHost(rgroup, send, tick_seconds=tick_seconds, watch=send.watch,
                                 name=f"{self.stream_name}>{name}/{replica_id}",
                                 actor_name=consumer_actor_name(group, replica_id),
                                 metrics=RaftMetrics("consumer", f"{self.stream_name}/{name}"))
            self.host.request_target = self
            self._metrics = ConsumerMetrics(self.stream_name, name)
        else:  # one voter, no peers; no metric series per short-lived consumer
            self.host = RaftHost(rgroup, _no_peers, tick_seconds=tick_seconds,
                                 name=f"{self.stream_name}>{name}")
            self._metrics = ConsumerMetrics(self.stream_name, name, NullSink())
        self.host.on_output.append(self._on_output)
        self._leader_watch = events.LeaderWatch()  # LEADER_ELECTED / QUORUM_LOST
        self._timer_wake = asyncio.Event()  # the timer has work: a request, a pending ack
        self._leading = asyncio.Event()  # set while this replica decides deliveries
        self._metrics_at = 0.0
        self._metrics_task: asyncio.Task | None = None
        self._fetches: dict[str, _Fetch] = {}
        self._push_polls = 0  # push polls under way: a subscriber's interest, never inactive
        self._ready_index: int | None = None
        self._timer: asyncio.Task | None = None
        self._advisories: list[tuple[str, dict]] = []
        # acks on their way to an interest / work-queue stream (leader only)
        self._forward = stream_cfg.retention is not RetentionPolicy.LIMITS
        self._outbox = AckOutbox()
        self._ack_wake = asyncio.Event()
        self._ack_task: asyncio.Task | None = None
        self._stream_term: tuple[str, int] | None = None  # the stream leader last answering
        self._held: list[tuple[int, int, Delivery]] = []  # push deliveries not yet due
        # while pull requests wait: the stream's last seq as its leader last answered a wait
        # (None: not known), so the timer reads the stream only once it grew
        self._known_last: int | None = None
        self._watch: asyncio.Task | None = None
        start_when_restarted(consumer_actor_name(group, replica_id))

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def group(self) -> ReplicaGroup:
        return self.host.group

    def _start_tasks(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.create_task(self._timer_loop())
        if self._forward:
            self._ack_task = loop.create_task(self._ack_loop())

    def _on_output(self, out: Output) -> None:
        group = self.group
        if self._forward and self.engine.is_leader:
            for applied in out.applied:
                if isinstance(applied.result, list):
                    for r in applied.result:
                        if r.acked:
                            self._outbox.add(r.acked)
        if out.role is not None:
            events.role_changed(self._leader_watch, self.host, self.stream_name, self.name)
            if out.role == Role.LEADER:
                self._ready_index = group.node.raft.log.last_index()
                self._metrics.became_leader()
            else:
                self._ready_index = None
                self._leading.clear()
                if self.engine.is_leader:
                    self._end_requests(self.engine.set_follower())
                self._outbox.clear()  # the next leader derives what is owed
        if self._can_lead() and self._taking_lead is None:
            self._taking_lead = asyncio.get_running_loop().create_task(self._take_lead())
        if self._outbox.has_work:
            self._ack_wake.set()
        if out.role is not None:
            self._timer_wake.set()

    def _can_lead(self) -> bool:
        group = self.group
        return (self._ready_index is not None and not self.engine.is_leader
                and group.is_leader and group.applied >= self._ready_index)

    async def _take_lead(self) -> None:
        """Start deciding once the stream reads that takes are fetched (without blocking
        the event loop: heartbeats go on while the stream is slow or away)."""
        try:
            pause = ACK_RETRY_MIN
            while self._can_lead():
                reads = self.engine.leader_reads()
                if await self._prefetch(reads) and self._can_lead():
                    try:
                        ops = self.engine.set_leader()
                    except APIError:
                        log.exception("consumer %s cannot start leading yet", self.host.name)
                        ops = None
                    finally:
                        self.reader.drop()
                    if ops is None:
                        continue
                    self._leading.set()
                    if self._forward:
                        # whatever earlier leaders acked but the stream may not have applied
                        self._outbox.reconcile()
                        self._ack_wake.set()
                    if ops:
                        self._commit(ops)
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, ACK_RETRY_MAX)
        finally:
            self._taking_lead = None

    async def _ack_loop(self) -> None:
        """Forward acks to the stream leader until it confirms them; a reconciliation
        (this consumer's ack summary) when leading starts or the stream's leader changed.
        Failed sends go back into the outbox and are retried after a pause."""
        pause = ACK_RETRY_MIN
        while True:
            await self._ack_wake.wait()
            self._ack_wake.clear()
            while self.engine.is_leader:
                send = self._outbox.next(ACK_BATCH)
                if send is None:
                    break
                try:
                    if send.sync:
                        summary = self.engine.state.ack_summary()  # committed acks only
                        ans = await self.stream.acall("consumer_sync", self.name,
                                                      summary.to_list(), timeout=SYNC_TIMEOUT,
                                                      attempt_timeout=STREAM_CALL_TIMEOUT)
                    else:
                        ans = await self.stream.acall("consumer_acked", self.name,
                                                      list(send.seqs),
                                                      timeout=STREAM_CALL_TIMEOUT,
                                                      attempt_timeout=STREAM_CALL_TIMEOUT)
                except Exception as err:  # noqa: BLE001 - any failure: keep them, retry
                    self._outbox.done(send, False)
                    log.debug("acks of %s not forwarded yet: %s", self.host.name, err)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, ACK_RETRY_MAX)
                    continue
                pause = ACK_RETRY_MIN
                self._outbox.done(send, True)
                term = (ans.get("leader"), ans.get("term"))
                if self._stream_term is not None and term != self._stream_term:
                    self._outbox.reconcile()  # a new stream leader: reconcile once more
                self._stream_term = term

    def _require_leader(self) -> None:
        self._ensure_started()
        if not (self.group.is_leader and self.engine.is_leader):
            self.host.leader_wanted()
            raise NotLeaderError(f"consumer replica {self.id} is not the current leader",
                                 group=self.group_name, leader=self.group.leader)

    # -- decisions -> raft -> clients -------------------------------------------------------
    def _commit(self, ops: list) -> asyncio.Future:
        """Replicate ``ops``; the future ends once they are applied. A consumer inside its
        stream's leader is one replica whose state lives in memory and dies with it: a log
        that nobody else reads or replays would only add a round to every decision, so it
        applies them at once."""
        if self.in_leader is None:
            return self.host.propose_nowait(encode_entry(ops))
        fut = asyncio.get_running_loop().create_future()
        try:
            fut.set_result([self.engine.apply(op) for op in ops])
        except Exception as err:  # noqa: BLE001 - the proposer sees it, as from raft
            fut.set_exception(err)
        return fut

    def _dispatch(self, batch: Batch) -> None:
        """Propose the batch's ops; hand its messages out once they are applied."""
        if batch.sends:
            self._timer_wake.set()  # unacked deliveries run on the clock now
        self._advise(batch.advisories)
        if not batch.ops:
            self._deliver(batch.sends)
            self._end_requests(batch.statuses)
            return
        fut = self._commit(batch.ops)
        self._count_inflight(batch.sends, 1)

        def done(f: asyncio.Future, batch=batch) -> None:
            self._count_inflight(batch.sends, -1)
            if f.cancelled() or f.exception() is not None:
                err = f.exception() if not f.cancelled() else None
                self._end_requests([RequestStatus(r, 409, f"Leadership Change ({err})")
                                    for r, _ in batch.sends])
                return
            self._deliver(batch.sends)
            self._end_requests(batch.statuses)

        fut.add_done_callback(done)

    def _count_inflight(self, deliveries, sign: int) -> None:
        for reply, _ in deliveries:
            fetch = self._fetches.get(reply)
            if fetch is not None:
                fetch.inflight += sign

    def _deliver(self, deliveries) -> None:
        """Hand messages to their fetches; those with a later ``due_ns`` (replay original,
        rate limit) wait for their time, and keep their fetch open until then."""
        now = time.time_ns()
        loop = asyncio.get_running_loop()
        for reply, d in deliveries:
            fetch = self._fetches.get(reply)
            if fetch is None or fetch.future.done():
                continue
            if isinstance(d, DeliveryRun):  # never paced
                fetch.messages.append(d)
                fetch.count += len(d)
            elif d.due_ns > now and fetch.eager and self.engine.config.is_push:
                # push: paced messages wait here and go out with the poll due at their time
                heapq.heappush(self._held, (d.due_ns, d.stream_seq, d))
            elif d.due_ns > now:
                fetch.scheduled += 1
                loop.call_later((d.due_ns - now) / 1e9, self._deliver_due, reply, d)
            else:
                fetch.messages.append(d)
                fetch.count += 1
        for reply in {r for r, _ in deliveries}:
            self._maybe_done(reply)

    def _deliver_due(self, reply: str, d: Delivery) -> None:
        fetch = self._fetches.get(reply)
        if fetch is None or fetch.future.done():
            return  # the fetch ended: the message is redelivered after ack_wait
        fetch.scheduled -= 1
        fetch.messages.append(d)
        fetch.count += 1
        self._maybe_done(reply)

    def _maybe_done(self, reply: str) -> None:
        fetch = self._fetches.get(reply)
        if fetch is None or fetch.future.done() or fetch.scheduled:
            return
        if (fetch.eager and (fetch.messages or self._held) or fetch.count >= fetch.batch
                or fetch.leaving and not fetch.inflight):
            fetch.future.set_result(None)

    def _end_requests(self, statuses) -> None:
        for st in statuses:
            if not st.done:
                continue  # idle heartbeat: the fetch call itself is the liveness signal
            fetch = self._fetches.get(st.reply)
            if fetch is not None and fetch.future.done():
                # the messages just handed out completed the fetch, and the status came with
                # them (409 Batch Completed): it still goes back with the answer
                if fetch.status is None:
                    fetch.status = (st.code, st.description, st.pending_msgs, st.pending_bytes)
            elif fetch is not None:
                # (code, description, pending messages, pending bytes)
                fetch.status = (st.code, st.description, st.pending_msgs, st.pending_bytes)
                fetch.leaving = True
                # e.g. a 408 from the timer: messages decided earlier go out first
                if not fetch.inflight:
                    fetch.future.set_result(None)

    def _serve_window(self, decide) -> None:
        """Run one delivery decision on the window just read, then let the window go: a
        message deleted later must not come from a stale copy."""
        try:
            self._dispatch(decide())
        finally:
            self.reader.drop()

    def _timer_busy(self) -> bool:
        """Whether anything runs on the clock: unacked deliveries (redelivery), waiting
        requests (expiry, heartbeats), a pin, held push messages."""
        engine = self.engine
        return bool(engine.is_leader and (engine.view.pending or engine.num_waiting
                                          or engine.pinned or self._held))

    async def _timer_pause(self) -> None:
        if self._timer_busy():
            await asyncio.sleep(TIMER_EVERY)
            return
        # idle (or a follower): wait for a call or a role change, at most TIMER_IDLE
        self._timer_wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._timer_wake.wait(), TIMER_IDLE)
        if self._timer_busy():
            await asyncio.sleep(TIMER_EVERY)  # keep the cadence of a busy timer

    async def _timer_loop(self) -> None:
        while True:
            await self._timer_pause()
            if not (self.group.is_leader and self.engine.is_leader):
                continue
            try:
                self._dispatch(self.engine.due_redeliveries())
                # a pin also runs out with nobody waiting (unpinned advisory)
                if self.engine.num_waiting or self.engine.pinned:
                    if not self.engine.num_waiting or await self._read_ahead(
                            READ_AHEAD_TIMER, watched=True):
                        self._serve_window(self.engine.serve)
                if self.engine.is_inactive() and not self._push_polls:
                    asyncio.get_running_loop().create_task(self._delete_self())
                if time.monotonic() - self._metrics_at >= METRICS_EVERY and (
                        self._metrics_task is None or self._metrics_task.done()):
                    self._metrics_at = time.monotonic()
                    # its own task: a slow stream leader must not hold up redeliveries
                    self._metrics_task = asyncio.get_running_loop().create_task(
                        self._update_metrics())
            except APIError as err:
                log.debug("consumer timer on %s: %s", self.host.name, err)
            except Exception:
                log.exception("consumer timer failed on %s", self.host.name)

    async def _update_metrics(self) -> None:
        """The leader's gauges: its own state, and num_pending from a window read without
        blocking the event loop (the engine's info takes the count from it)."""
        try:
            await self._read_ahead(1)
            try:
                if not (self.group.is_leader and self.engine.is_leader):
                    return
                info = self.engine.info()
            finally:
                self.reader.drop()
            self._metrics.update(info)
        except Exception as err:  # noqa: BLE001 - metrics wait for the next round
            log.debug("consumer metrics on %s: %s", self.host.name, err)

    async def _delete_self(self) -> None:
        from rayjet.actors.router import meta_router

        if self.in_leader is not None:
            with contextlib.suppress(Exception):
                await self.in_leader.on_inactive(self.name)
            return
        with contextlib.suppress(Exception):
            await asyncio.to_thread(meta_router().call, "delete_consumer", self.stream_name,
                                    self.name)

    # -- client API (leader) ----------------------------------------------------------------
    async def fetch(self, batch: int = 1, expires: float = 0.0, max_bytes: int = 0,
                    no_wait: bool = False, heartbeat: float = 0.0, group: str = "",
                    min_pending: int = 0, min_ack_pending: int = 0, pin_id: str = "",
                    priority: int = 0, acks: list | None = None,
                    ranges: Any = (), eager: bool = False) -> dict[str, Any]:
        """Pull up to ``batch`` messages, waiting up to ``expires`` seconds for the first.
        Returns ``batch`` (a DeliveryBatch of the messages) and the ``status`` that ended
        the request, if any. ``group`` and the rest are the pull's priority-group fields
        (see PullRequest). ``acks`` and ``ranges`` (as :meth:`ack` takes them) are the
        client's answers sent along: applied first (they may make room under
        max_ack_pending), in the same raft entry as the delivery decision. ``eager``: answer
        as soon as some messages are out (a protocol server streams them to the requester
        and asks again for the rest) rather than when the batch is full or the pull ends."""
        self._require_leader()
        self._timer_wake.set()
        reply = uuid.uuid4().hex
        fetch = _Fetch(max(int(batch), 1), asyncio.get_running_loop().create_future())
        self._fetches[reply] = fetch
        try:
            req = PullRequest(reply=reply, batch=fetch.batch, max_bytes=max_bytes,
                              expires=expires, no_wait=no_wait, heartbeat=heartbeat,
                              group=group, min_pending=min_pending,
                              min_ack_pending=min_ack_pending, pin_id=pin_id,
                              priority=priority)
            if self.engine.config.is_push:
                fetch.eager = True
                ops, _ = self._answer_ops(acks or [], ranges)
                if ops:
                    self._commit(ops)
                # a push poll comes while someone subscribes to the deliver subject: for
                # inactive_threshold that is activity, as interest is on nats-server
                self._push_polls += 1
                try:
                    await self._push(fetch, reply, max_bytes, expires)
                finally:
                    self._push_polls -= 1
                    self.engine.touch()
            else:
                fetch.eager = eager
                await self._read_ahead(fetch.batch)
                self._require_leader()
                self._serve_window(lambda: self._answer_then_request(req, acks or [], ranges))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fetch.future),
                                           expires + 1.0 if expires else 5.0)
                await self._leave(fetch, reply)
            return {"batch": DeliveryBatch.of(fetch.messages, self.stream_name, self.name),
                    "status": fetch.status}
        finally:
            self._fetches.pop(reply, None)
            if self.engine.is_leader:  # e.g. the call was cancelled: never serve it again
                self.engine.cancel_request(reply)

    def _answer_then_request(self, req: PullRequest, acks: list, ranges: Any) -> Batch:
        ops, _ = self._answer_ops(acks, ranges)
        batch = self.engine.request(req)
        batch.ops[:0] = ops  # proposed first, so committed first: one entry, one sync
        return batch

    async def _leave(self, fetch: _Fetch, reply: str) -> None:
        """The caller stops waiting: its request leaves the queue, so no message goes to it
        any more; messages already decided for it (their op in the raft log) still reach
        it, once applied, instead of waiting out ack_wait."""
        if fetch.future.done():
            return
        if self.engine.is_leader:
            self.engine.cancel_request(reply)
        fetch.leaving = True
        if fetch.inflight:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(fetch.future), STREAM_CALL_TIMEOUT)

    async def _push(self, fetch: _Fetch, reply: str, max_bytes: int, expires: float) -> None:
        """Push consumers: hand out what is there, else poll for new messages until
        ``expires`` (the subscriber's long poll stands in for a deliver subject). Paced
        messages (replay original, rate limit) are handed out once due."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + expires
        while True:
            self._release_held(fetch)
            if fetch.messages or fetch.future.done() and not self._held:
                return
            if self._held:
                wait = (self._held[0][0] - time.time_ns()) / 1e9
                await asyncio.sleep(max(0.0, min(wait, deadline - loop.time())))
                if loop.time() >= deadline:
                    self._release_held(fetch)
                    return
                continue
            if self.engine.is_leader and await self._read_ahead(fetch.batch):
                try:
                    batch = self.engine.next_batch(batch=fetch.batch, max_bytes=max_bytes,
                                                   reply=reply)
                finally:
                    self.reader.drop()
                self._dispatch(batch)
                if batch.sends:
                    # wait for the decision to commit (its messages arrive, or are held)
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(fetch.future), 10.0)
                    continue
            if loop.time() >= deadline:
                return
            await self._until_new_messages(fetch.future, deadline)

    def _release_held(self, fetch: _Fetch) -> None:
        now = time.time_ns()
        while self._held and self._held[0][0] <= now:
            fetch.messages.append(heapq.heappop(self._held)[2])
            fetch.count += 1

    async def ack(self, acks: list[tuple[str, int, Any]], sync: bool = False,
                  timeout: float = 5.0, ranges: Any = ()) -> list[bool]:
        """Apply acks: (kind, stream seq, arg) with kind ack|nak|progress|term, and plain
        acks of every stream seq in ``ranges`` (see
        :func:`rayjet.engine.consumer.delivery_batch.seq_ranges`)."""
        self._require_leader()
        self._timer_wake.set()
        ops, oks = self._answer_ops(acks, ranges)
        if ops:
            fut = self._commit(ops)
            if sync:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
        if self.engine.num_waiting:
            self._dispatch(self.engine.serve())  # acks may have made room under max_ack_pending
        return oks

    def _answer_ops(self, acks: list[tuple[str, int, Any]], ranges: Any) -> tuple[list, list]:
        """The ops that apply ``acks`` and ``ranges`` (proposed on the leader's view), and
        whether each of ``acks`` named something this consumer delivered."""
        engine, ops, oks = self.engine, [], []
        for a in acks:  # all checked before any is proposed
            if not (isinstance(a, tuple | list) and len(a) == 3 and isinstance(a[0], str)
                    and a[0] in ANSWER_KINDS and type(a[1]) is int and a[1] >= 1):
                raise error_for("BAD_REQUEST", err=f"not an answer (kind, stream seq, arg): "
                                                   f"{a!r}")
        plain = [seq for kind, seq, _ in acks if kind == "ack"]
        plain.extend(expand_ranges(ranges))
        if plain:
            out = engine.prepare_acks(plain)
            if out.op is not None:
                ops.append(out.op)
            self._advise(out.advisories)
        for kind, seq, arg in acks:
            if kind == "ack":
                oks.append(True)
                continue
            if kind == "nak":
                out = engine.prepare_nak(seq, arg)
            elif kind == "progress":
                out = engine.prepare_progress(seq)
            else:
                out = engine.prepare_term(seq, arg or "")
            oks.append(out.ok)
            if out.op is not None:
                ops.append(out.op)
            self._advise(out.advisories)
        return ops, oks

    async def advance(self, stream_seq: int, timeout: float = 5.0) -> dict[str, Any]:
        """Ack-all consumers: settle everything up to ``stream_seq`` in one durable op and
        return the consumer's info (see ConsumerEngine.prepare_advance)."""
        self._require_leader()
        await self._prefetch(self.engine.advance_reads(stream_seq))
        self._require_leader()
        try:
            out = self.engine.prepare_advance(stream_seq)
        finally:
            self.reader.drop()
        if out.op is not None:
            fut = self._commit([out.op])
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        if self.engine.num_waiting:
            self._dispatch(self.engine.serve())
        return await self.info()

    async def state_doc(self) -> dict[str, Any]:
        """The committed delivery state, for a backup (see ConsumerState.to_doc)."""
        self._require_leader()
        return self.engine.state.to_doc()

    async def restore_state(self, doc: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """Take a backup's delivery state whole (one replicated op); the consumer's info."""
        self._require_leader()
        out = self.engine.prepare_restore_state(doc)
        await asyncio.wait_for(asyncio.shield(self._commit([out.op])), timeout)
        if self._forward:  # what the stream may drop for this consumer changed
            self._outbox.reconcile()
            self._ack_wake.set()
        if self.engine.num_waiting:
            self._dispatch(self.engine.serve())
        return await self.info()

    async def reset(self, seq: int = 0, timeout: float = 5.0) -> dict[str, Any]:
        """``$JS.API.CONSUMER.RESET``: deliver again from stream seq ``seq`` (0: just past
        the ack floor), see ConsumerEngine.prepare_reset. Answered once replicated, with
        the info right after it and ``reset_seq``; waiting pulls go on from there."""
        self._require_leader()
        await self._prefetch(self.engine.reset_reads(seq))
        self._require_leader()
        try:
            op, seq = self.engine.prepare_reset(seq)
        finally:
            self.reader.drop()
        await asyncio.wait_for(asyncio.shield(self._commit([op])), timeout)
        if self._forward:  # what the stream may drop for this consumer moved
            self._outbox.reconcile()
            self._ack_wake.set()
        out = await self.info()
        self._timer_wake.set()  # the timer serves waiting pulls from the new position
        return {**out, "reset_seq": seq}

    async def step_down(self, timeout: float = 5.0) -> str | None:
        """$JS.API.CONSUMER.LEADER.STEPDOWN: another replica leads (see RaftHost.step_down)."""
        self._require_leader()
        return await self.host.step_down(timeout)

    async def unpin(self, group: str) -> bool:
        """``$JS.API.CONSUMER.UNPIN``: the group's pinned client loses its pin; a waiting
        standby pull gets it with the next message."""
        self._require_leader()
        self._dispatch(self.engine.unpin(group))
        return True

    async def info(self) -> dict[str, Any]:
        self._require_leader()
        reads = self.engine.info_reads()
        if await self._prefetch(reads, INFO_READ_TIMEOUT):
            self._last_info_reads = (reads, [self.reader.num_pending(*reads[0][1:])])
        elif self._last_info_reads is not None:
            # the stream is away: report the pending count it last gave
            last_reads, last = self._last_info_reads
            self.reader.offer_reads(reads, last)
        self._require_leader()
        try:
            info = self.engine.info()
        finally:
            self.reader.drop()
        out = info.to_dict()
        out["cluster"] = ClusterInfo(raft_group=self.group_name, leader=self.group.leader,
                                     replicas=self.host.replicas() or ()).to_dict()
        return out

    def _advise(self, advisories: list) -> None:
        """Keep the engine's advisories for ``advisories()`` and post them to the cluster's
        event hub (the gateways' subscribers, the streams capturing them)."""
        if not advisories:
            return
        pairs = [(a.subject, a.body) for a in advisories]
        self._advisories.extend(pairs)
        del self._advisories[:-1000]  # kept for a reader that may never come
        events.post(pairs)

    async def advisories(self) -> list[tuple[str, dict]]:
        out, self._advisories = self._advisories, []
        return out

    async def update_config(self, config: dict[str, Any]) -> None:
        self.engine.update_config(ConsumerConfig.from_dict(config))

    # -- lifecycle (receive, ping and hold: see ReplicaShell) -------------------------------
    async def status(self) -> dict[str, Any]:
        self._ensure_started()
        st = self.group.status()
        st["writable"] = self.engine.is_leader
        st["ack_outbox"] = len(self._outbox)  # acks the stream has not confirmed yet
        st["damage"] = self.damage  # what made this replica rejoin empty at its start
        # stream reads the read-ahead did not hold: each blocked this process's event loop
        st["blocking_reads"] = self.remote.blocking_reads
        return st

    async def until_leading(self, timeout: float) -> None:
        """Wait until this replica leads and decides deliveries."""
        self._ensure_started()
        try:
            await asyncio.wait_for(self._leading.wait(), timeout)
        except TimeoutError:
            raise ServiceUnavailableError(f"consumer {self.name!r} did not start leading "
                                          f"within {timeout:.1f}s") from None

    async def close(self, why: str = "Consumer Deleted") -> None:
        """Stop without deleting anything on disk; open pulls end with 409 ``why``."""
        await self._stop(why)

    async def destroy(self) -> None:
        await self._stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    async def shutdown(self) -> None:
        """Stop and keep the data (the replica starts again from it)."""
        await self._stop("Server Shutdown")

    async def _stop(self, why: str = "Consumer Deleted") -> None:
        for task in (self._timer, self._ack_task, self._metrics_task, self._watch):
            if task is not None:
                await cancel_and_wait(task)
        for fetch in self._fetches.values():
            if not fetch.future.done():
                fetch.status = (409, why)
                fetch.future.set_result(None)
        await self.host.stop()
        with contextlib.suppress(Exception):
            self.group.storage.close()
