"""The stream replica actor: a raft replica of one stream, holding its local store.

The leader accepts writes once it has applied its whole log (so its checks see the state
every replica will have), turns each client call into one raft entry of engine ops, and
answers when that entry is committed and applied. Any replica serves direct gets and range
reads from its own store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from typing import Any

import ray

from rayjet.actors import data_plane, events, in_process
from rayjet.actors.cancelling import cancel_and_wait
from rayjet.actors.leader_consumers import LeaderConsumers
from rayjet.actors.membership import GroupMembershipCalls
from rayjet.actors.metrics import RaftMetrics, StreamMetrics
from rayjet.actors.names import stream_actor_name
from rayjet.actors.on_demand import replica_dir
from rayjet.actors.raft_host import RaftHost, actor_group_options
from rayjet.actors.replica_shell import ReplicaShell
from rayjet.actors.router import PeerSender, meta_router
from rayjet.actors.self_start import start_when_restarted
from rayjet.actors.sourcing import SourcePump
from rayjet.actors.store_copy import StoreCopyTask
from rayjet.actors.stream_backup import StreamBackupCalls
from rayjet.actors.stream_info import state_dict, timestamp
from rayjet.actors.wire_values import STREAM_REQUESTS
from rayjet.api import PersistMode, PubAck, StorageType, StreamConfig
from rayjet.api.account import NO_LIMITS, AccountLimits
from rayjet.api.stream import validate_stream_update
from rayjet.engine import ApplyResult, direct_get, store_config
from rayjet.engine.ack_sync import AckSummary
from rayjet.engine.columnar import message_columns
from rayjet.engine.consumer.reader import StoreReader
from rayjet.engine.outbox import Outbox
from rayjet.errors import (
    APIError,
    DuplicateInProcessError,
    NotLeaderError,
    ServiceUnavailableError,
    error_for,
)
from rayjet.raft import Role
from rayjet.replication import MemoryLog, Output, ReplicaGroup
from rayjet.replication.rejoin import open_or_rejoin
from rayjet.replication.stream_files import open_stream_files, store_block_size
from rayjet.replication.stream_machine import StreamMachine, encode_entry
from rayjet.storage import MemStore
from rayjet.subjects import matches_any

log = logging.getLogger(__name__)

_READER_METHODS = frozenset({"bounds", "load_msg", "load_next_batch", "num_pending",
                             "last_seq_for", "last_per_subject", "seq_for_time",
                             "read_window", "read_many"})
# seconds between two upkeep passes at least: a stream whose messages expire one after
# another is swept in small batches instead of once per message
UPKEEP_GAP = 0.1
DEFAULT_TIMEOUT = 5.0
META_LIST_TIMEOUT = 30.0
ACCOUNT_FRESH = 2.0  # seconds the account's limits are taken as known (consumers made here)
ACCOUNT_TIMEOUT = 1.0  # a consumer made here waits no longer for the meta leader's answer
SYNC_OPS = 4096  # stream ack ops per proposal while reconciling with a consumer
OUTBOX_CAPACITY = 10_000  # republished messages the leader keeps for slow subscribers


class StreamReplica(ReplicaShell, StreamBackupCalls, GroupMembershipCalls):
    """Plain class; :mod:`rayjet.actors.stream_replicas` runs it in an actor of its own
    (:class:`~rayjet.actors.stream_actor.StreamReplicaActor`) or in a replica host."""

    DATA_PLANE_REQUESTS = STREAM_REQUESTS  # what clients may call over the data plane

    def __init__(self, config: dict[str, Any], group: str, replica_id: str,
                 voters: list[str], data_dir: str, *, created_ns: int = 0,
                 tick_seconds: float = 0.05) -> None:
        cfg = StreamConfig.from_dict(config)
        self.group_name = group
        self.id = replica_id
        self._preferred = bool(voters) and voters[0] == replica_id  # leads a new group
        self.created_ns = created_ns
        self.dir = replica_dir(data_dir, group, replica_id)
        sync = cfg.sync_interval if cfg.sync_interval is not None else 120.0

        def open_replica() -> tuple[StreamMachine, ReplicaGroup]:
            if cfg.storage is StorageType.FILE:
                store, raft_log = open_stream_files(self.dir, store_config(
                    cfg, sync_interval=sync, **store_block_size()))
            else:
                store, raft_log = MemStore(store_config(cfg)), MemoryLog()
            machine = StreamMachine(cfg, store)
            return machine, ReplicaGroup(
                replica_id, raft_log, machine, voters=voters,
                # an acknowledgement means a majority holds the entry durably: entries
                # are fsynced (one fsync per event-loop turn) before a replica acknowledges
                # them, whatever sync_interval says (that paces the store's block files,
                # which the log covers until a snapshot, taken after the store syncs);
                # persist_mode "async" (R1 only) acknowledges before the fsync, as
                # nats-server's: a power loss may lose the last acknowledged writes
                options=actor_group_options(
                    sync_always=cfg.storage is StorageType.FILE
                    and cfg.persist_mode is not PersistMode.ASYNC))

        # files that cannot be loaded: rejoin the group empty and catch up (see rejoin)
        (self.machine, rgroup), self.damage = open_or_rejoin(
            self.dir, self.dir / "raft", open_replica, f"stream {cfg.name} replica {replica_id}")
        self.machine.on_applied.append(self._after_apply)
        send = PeerSender(lambda peer: stream_actor_name(group, peer))
        self.host = RaftHost(rgroup, send, tick_seconds=tick_seconds, watch=send.watch,
                             name=f"{cfg.name}/{replica_id}",
                             actor_name=stream_actor_name(group, replica_id),
                             metrics=RaftMetrics("stream", cfg.name))
        self.host.request_target = self
        self.host.on_output.append(self._on_output)
        self._metrics = StreamMetrics(cfg.name)
        self._leader_watch = events.LeaderWatch()  # LEADER_ELECTED / QUORUM_LOST
        self._ready_index: int | None = None
        self._leader_since = 0
        self._upkeep: asyncio.Task | None = None
        self._upkeep_wake = asyncio.Event()  # set by raft activity: upkeep may have work
        self._upkeep_passes = 0
        self._reads_served = 0  # consumer reads (an idle consumer's count stands still)
        self._sweep: asyncio.Task | None = None
        self._outbox: Outbox = Outbox(OUTBOX_CAPACITY)
        self._outbox_changed = asyncio.Event()
        # set (and replaced) when the last seq moves or leadership changes: consumers wait
        # on it for new messages instead of polling
        self._stored = asyncio.Event()
        self._stored_seq = 0
        # set (and replaced) after every apply: publishes waiting on a msg id in flight
        self._applied = asyncio.Event()
        self._pump = SourcePump(self)  # copies the mirror / sources while we lead
        self._copy = StoreCopyTask(self)  # copies the store after a state-only snapshot
        self.leader_consumers = LeaderConsumers(self)  # ephemeral consumers run here
        self._account: tuple[float, AccountLimits, int] | None = None  # see _account_usage
        in_process.add_stream_replica(stream_actor_name(group, replica_id), self)
        start_when_restarted(stream_actor_name(group, replica_id))

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def engine(self):
        return self.machine.engine  # replaced when a snapshot restore rebuilds it

    @property
    def group(self) -> ReplicaGroup:
        return self.host.group

    def _start_tasks(self) -> None:
        self._upkeep = asyncio.get_running_loop().create_task(self._upkeep_loop())
        self._copy.update()

    def _on_output(self, out: Output) -> None:
        self._upkeep_wake.set()
        group = self.group
        if out.role is not None:
            events.role_changed(self._leader_watch, self.host, self.engine.name)
            self._stored_moved()  # waiters for new messages recheck who leads
            self._wake_publishers()  # a msg id in flight may never be applied now
            if out.role == Role.LEADER:
                # serve writes only once everything in our log is applied
                self._ready_index = group.node.raft.log.last_index()
                self._leader_since = time.time_ns()
                self._outbox.reset(f"{self.id}:{group.term}")
                st = self.machine.store.fast_state()
                self._metrics.became_leader(st.last_seq, st.msgs)
            else:
                self._ready_index = None
                self.engine.set_follower()
                self.leader_consumers.stop_all_soon("Leadership Change")
                self._metrics.lost_leadership()
        if (self._ready_index is not None and not self.engine.is_leader
                and group.applied >= self._ready_index and group.is_leader):
            self.engine.set_leader(group.term)
        if out.role is not None or self.engine.is_leader != self._pump.leading:
            self._pump.update()
        if group.copying:
            self._copy.update()

    def _stored_moved(self) -> None:
        self._stored.set()
        self._stored = asyncio.Event()

    def _wake_publishers(self) -> None:
        self._applied.set()
        self._applied = asyncio.Event()

    def _after_apply(self, results: list[ApplyResult]) -> None:
        self._wake_publishers()
        last = self.engine.last_seq
        if last != self._stored_seq:
            self._stored_seq = last
            self._stored_moved()
        if self.group.is_leader:
            added = 0
            for r in results:
                if r.republish:
                    added += self._outbox.extend(r.republish)
            if added:
                self._outbox_changed.set()
                self._outbox_changed = asyncio.Event()

    async def _upkeep_loop(self) -> None:
        """Local upkeep when something is due (a TTL or max_age expiry, a schedule, a log
        sync), at most once every UPKEEP_GAP: an idle replica (nothing to expire, sync or
        fire) has no timer until raft wakes it."""
        while True:
            await asyncio.sleep(UPKEEP_GAP)
            self._upkeep_wake.clear()
            self._upkeep_once()
            wait = self._seconds_to_upkeep()
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._upkeep_wake.wait(), wait)

    def _seconds_to_upkeep(self) -> float | None:
        """Seconds until the next upkeep has work (0: now), None when nothing is due."""
        engine = self.engine
        waits = [self.group.storage.seconds_to_sync()]
        if (due := engine.next_upkeep_ns()) is not None:
            waits.append((due - engine.clock.now_ns()) / 1e9)
        if engine.is_leader and engine.sweep_from:
            waits.append(0.0)
        waits = [w for w in waits if w is not None]
        return max(0.0, min(waits)) if waits else None

    def _upkeep_once(self) -> None:
        self._upkeep_passes += 1
        try:
            self._pump.update()  # follows config updates that add or drop origins
            res = self.engine.expire()
            ops = list(res.ops)
            if self.engine.is_leader:
                ops += self.engine.due()
                if ops:
                    self.host.propose_nowait(encode_entry(ops))
                if self.engine.sweep_from and (self._sweep is None or self._sweep.done()):
                    self._sweep = asyncio.get_running_loop().create_task(self._sweep_loop())
        except APIError:
            # lost leadership between the check and the proposal, or raft dropped it
            if self.engine.is_leader:
                self.engine.restart_projection()
                self._wake_publishers()
        except Exception:
            log.exception("stream upkeep failed on %s", self.host.name)
        try:
            self.group.storage.maybe_sync()  # an idle log is synced within its interval too
        except Exception:
            log.exception("raft log sync failed on %s", self.host.name)
        try:
            self._update_metrics()
        except Exception:
            log.exception("stream metrics failed on %s", self.host.name)

    async def _sweep_loop(self) -> None:
        """Remove what a removed consumer of an interest stream held, one bounded step at
        a time, each applied before the next is read (see engine.interest_sweep)."""
        try:
            while self.engine.is_leader and (op := self.engine.prepare_sweep()) is not None:
                await self.propose_ops([op], DEFAULT_TIMEOUT)
                await asyncio.sleep(0)  # let raft traffic and clients through between steps
        except APIError:
            pass  # lost leadership: the next leader goes on from the replicated position
        except Exception:
            log.exception("interest sweep failed on %s", self.host.name)

    def _update_metrics(self) -> None:
        """The leader's gauges and counters, from state it holds (no per-message work)."""
        if not self.group.is_leader:
            return
        st = self.machine.store.fast_state()
        self._metrics.update(messages=st.msgs, bytes=st.bytes, first_seq=st.first_seq,
                             last_seq=st.last_seq, lag=self.host.lag())

    def _require_writable(self) -> None:
        self._ensure_started()
        if not (self.group.is_leader and self.engine.is_leader):
            self.host.leader_wanted()
            raise NotLeaderError(f"replica {self.id} of {self.engine.name} cannot take writes",
                                 group=self.group_name, leader=self.group.leader)

    async def propose_ops(self, ops: list, timeout: float) -> list[ApplyResult]:
        """Propose ``ops``, prepared on this leader's view (``engine.prepare_*``), as one
        raft entry; their results once applied. When the proposal fails the leader starts
        its projection again: what it projected may never commit. For code in the
        replica's process (the source pump, a backup's restore); clients call the methods
        that prepare the ops."""
        try:
            return await self.host.propose(self.machine.encode(ops), timeout)
        except NotLeaderError:
            if self.engine.is_leader:
                # still leading, so raft dropped the proposal (a leadership transfer is
                # under way): none of what we projected is in the log; start again
                self.engine.restart_projection()
                self._wake_publishers()  # msg ids waited on may be free now
            raise
        except APIError:
            # what we projected may never commit: start the projection again
            if self.engine.is_leader:
                self.engine.restart_projection()
                self._wake_publishers()
            raise

    # -- raft transport (receive, ping and hold: see ReplicaShell) ---------------------------
    async def ready(self, with_info: bool = False) -> dict[str, Any]:
        """Answered once this replica runs: whether it leads and takes writes, and (asked
        for, when it does) its stream info: what a creation waits for, in one call instead
        of a ping, a look for the leader and an info call."""
        self._ensure_started()
        leads = self.group.is_leader and self.engine.is_leader
        return {"leader": leads, "info": await self.info() if with_info and leads else None}

    async def leader_id(self) -> str | None:
        self._ensure_started()
        self.host.leader_wanted()  # a client looking for the leader may not reach it
        return self.group.leader

    async def status(self) -> dict[str, Any]:
        self._ensure_started()
        st = self.group.status()
        st["writable"] = self.engine.is_leader
        st["last_seq"] = self.engine.last_seq
        st["messages"] = self.machine.store.fast_state().msgs  # this replica's own count
        st["node"] = ray.get_runtime_context().get_node_id()  # where Ray runs us now
        st["transport"] = self.host.transport_stats()
        st["data_plane"] = data_plane.stats()
        st["store_copy"] = dict(self._copy.stats)
        # what this replica found damaged at its start: files it moved aside to rejoin
        # empty, or store records it dropped to copy them again from a peer
        st["damage"] = self.damage or (
            f"store records from seq {self.machine.damaged_from} on failed their checks; "
            "copied again from a peer" if self.machine.damaged_from else None)
        st["upkeep_passes"] = self._upkeep_passes  # an idle replica's count stands still
        st["reads_served"] = self._reads_served  # consumer reads answered
        # what the file store's last open replayed (index files and checkpoint cover the rest)
        st["store_recovery"] = dict(getattr(self.machine.store, "recovery", None) or {})
        return st

    # -- copies for replicas that installed a state-only snapshot -----------------------------
    def _require_whole(self) -> None:
        self._ensure_started()
        if self.group.copying:
            raise ServiceUnavailableError(f"replica {self.id} is copying its own store")

    async def copy_chunk(self, from_seq: int, max_bytes: int) -> tuple[bytes, int, int]:
        """Records from ``from_seq`` on for a copying peer (see actors.store_copy)."""
        self._require_whole()
        return self.machine.copy_chunk(from_seq, max_bytes)

    async def copy_seal(self, have_last: int) -> dict[str, Any]:
        """The rest of our state for a copying peer, as of our applied index."""
        self._require_whole()
        seal = self.machine.copy_seal(have_last)
        seal["applied"] = self.group.applied
        return seal

    # -- writes (leader) --------------------------------------------------------------------
    async def publish(self, msgs: list[tuple], timeout: float = DEFAULT_TIMEOUT
                      ) -> list[Any]:
        """Store ``(subject, data, headers)`` messages. One answer each: the stored
        sequence (an int; the client makes the PubAck), a PubAck (duplicates, counters,
        batches) or the APIError that refused it. A message whose Nats-Msg-Id meets an
        earlier copy still in flight (a client's retry, or the same id sent twice at once)
        waits for that copy's outcome: its PubAck marked duplicate once the copy is stored,
        or its own admission if the copy never was."""
        self._require_writable()
        deadline = time.monotonic() + timeout
        answers: list[Any] = [None] * len(msgs)
        waiting, proposed = await self._publish_rows(msgs, range(len(msgs)), answers, deadline)
        await self._settle_in_flight(msgs, waiting, answers, deadline, proposed)
        return answers

    async def _publish_rows(self, msgs: list[tuple], rows: Any, answers: list[Any],
                            deadline: float) -> tuple[list[int], bool]:
        """Admit and propose ``rows`` of ``msgs``, filling ``answers``: the rows whose msg
        id is in flight already (their answer a DuplicateInProcessError for now), and
        whether anything was proposed (and applied) meanwhile."""
        engine = self.engine
        ops, slots, waiting = [], [], []
        for i in rows:
            item = msgs[i]
            subject, data, headers = item if len(item) == 3 else (*item, None)
            try:
                op = engine.prepare_publish(subject, data, headers)
            except DuplicateInProcessError as err:
                answers[i] = err
                waiting.append(i)
                continue
            except APIError as err:
                answers[i] = err
                continue
            if isinstance(op, PubAck):
                answers[i] = op  # the original's PubAck, marked duplicate
            else:
                ops.append(op)
                slots.append(i)
        if ops:
            results = await self.propose_ops(ops, max(0.001, deadline - time.monotonic()))
            for i, r in zip(slots, results, strict=True):
                answers[i] = r.answer
        return waiting, bool(ops)

    async def _settle_in_flight(self, msgs: list[tuple], rows: list[int], answers: list[Any],
                                deadline: float, proposed: bool) -> None:
        """Admit ``rows`` again each time an entry is applied (at once when we just applied
        our own) until their copies in flight are settled or ``deadline`` passes (then they
        keep their 10158)."""
        while rows:
            if not proposed and not await self._until_applied(deadline):
                return
            try:
                # the rows answered before keep their answers: they are stored
                self._require_writable()
                rows, proposed = await self._publish_rows(msgs, rows, answers, deadline)
            except APIError as err:
                for i in rows:
                    answers[i] = err
                return

    async def _until_applied(self, deadline: float) -> bool:
        """Wait until this replica applies another entry (what settles a copy in flight)
        or its projection starts again; False when ``deadline`` passed first."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        applied = self._applied
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(applied.wait(), left)
        return applied.is_set() or time.monotonic() < deadline

    async def publish_columns(self, batch: Any, timeout: float = DEFAULT_TIMEOUT
                              ) -> dict[str, Any]:
        """Store a pyarrow batch of messages (see engine.columnar); the compact answer of
        :meth:`ColumnPlan.answer`. Rows whose msg id is in flight wait for its outcome as
        :meth:`publish` does."""
        self._require_writable()
        deadline = time.monotonic() + timeout
        plan = self.engine.prepare_columns(batch)
        results = await self.propose_ops(plan.ops, timeout) if plan.ops else []
        answer = plan.answer(results)
        rows = answer["rows"]
        waiting = sorted(r for r, a in rows.items() if isinstance(a, DuplicateInProcessError))
        if waiting:
            cols = message_columns(batch)
            msgs = [cols.message(r) for r in waiting]
            again: list[Any] = list(map(rows.get, waiting))
            await self._settle_in_flight(msgs, list(range(len(msgs))), again, deadline,
                                         bool(plan.ops))
            rows.update(zip(waiting, again, strict=True))
        return answer

    async def publish_atomic(self, msgs: list[tuple], batch_id: str,
                             timeout: float = DEFAULT_TIMEOUT) -> Any:
        self._require_writable()
        op = self.engine.prepare_batch(msgs, batch_id)
        (result,) = await self.propose_ops([op], timeout)
        if not result.ok:
            raise result.error
        return result.ack

    async def purge(self, subject: str | None = None, seq: int | None = None,
                    keep: int | None = None, timeout: float = DEFAULT_TIMEOUT) -> int:
        self._require_writable()
        (result,) = await self.propose_ops(
            [self.engine.prepare_purge(subject=subject, seq=seq, keep=keep)], timeout)
        if not result.ok:
            raise result.error
        return int(result.value or 0)

    async def delete_msg(self, seq: int, erase: bool = False,
                         timeout: float = DEFAULT_TIMEOUT) -> bool:
        self._require_writable()
        (result,) = await self.propose_ops([self.engine.prepare_delete(seq, erase)], timeout)
        if not result.ok:
            raise result.error
        return bool(result.value)

    async def update_config(self, config: dict[str, Any],
                            timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        self._require_writable()
        cfg = StreamConfig.from_dict(config)
        (result,) = await self.propose_ops([self.engine.prepare_update(cfg)], timeout)
        if not result.ok:
            raise result.error
        return self.engine.config.to_dict()

    async def check_update(self, config: dict[str, Any]) -> None:
        """Raise the error an update to ``config`` would get, without proposing it."""
        self._require_writable()
        validate_stream_update(self.engine.config, StreamConfig.from_dict(config))

    # -- membership (leader) ----------------------------------------------------------------
    async def step_down(self, timeout: float = DEFAULT_TIMEOUT) -> str | None:
        """$JS.API.STREAM.LEADER.STEPDOWN: another replica leads (see RaftHost.step_down)."""
        self._ensure_started()
        return await self.host.step_down(timeout)

    # -- reads ------------------------------------------------------------------------------
    def _require_current(self) -> None:
        """Leader reads wait until the leader has applied its whole log."""
        self._ensure_started()
        if not (self.group.is_leader and self.engine.is_leader):
            self.host.leader_wanted()
            raise NotLeaderError(f"replica {self.id} is not a current leader",
                                 group=self.group_name, leader=self.group.leader)

    async def info(self, subjects_filter: str | None = None,
                   deleted_details: bool = False) -> dict[str, Any]:
        self._require_current()
        engine, store = self.engine, self.machine.store
        st = store.state()
        # the consumer count is of the consumers run here: the client adds the catalogue's
        state = state_dict(st, consumer_count=len(self.leader_consumers))
        if deleted_details:
            state["deleted"] = list(st.deleted)
        if subjects_filter:
            state["subjects"] = store.subjects_totals(subjects_filter)
        return {"config": engine.config.to_dict(), "state": state,
                "created_ns": self.created_ns, "cluster": self._cluster_info(),
                "leader": self.group.leader, "replica": self.id, **self._pump.info()}

    def _cluster_info(self) -> dict[str, Any]:
        group = self.group
        info: dict[str, Any] = {"raft_group": self.group_name, "leader": group.leader}
        replicas = self.host.replicas()
        if replicas is not None:
            info["leader_since"] = timestamp(self._leader_since)
            info["replicas"] = replicas
        return info

    async def get_msg(self, seq: int | None = None, last_by_subject: str | None = None,
                      next_by_subject: str | None = None, direct: bool = False
                      ) -> dict[str, Any]:
        cfg = self.engine.config
        if not direct or not (cfg.allow_direct or cfg.mirror_direct):
            self._require_current()
        store = self.machine.store
        if last_by_subject:
            m = store.load_last_msg(last_by_subject)
        elif next_by_subject:
            m, _ = store.load_next_msg(next_by_subject, True, seq or 0)
        elif seq:
            m = store.load_msg(seq)
        else:
            raise error_for("BAD_REQUEST", err="give seq, last_by_subject or next_by_subject")
        return {"subject": m.subject, "seq": m.seq, "data": m.data, "hdrs": m.hdr or None,
                "time": timestamp(m.ts), "stream": self.engine.name}

    async def get_msgs(self, req: dict[str, Any], direct: bool = True) -> dict[str, Any]:
        """A batched or multi_last get in one call (see :mod:`rayjet.engine.direct_get`)."""
        if not direct or not (self.engine.config.allow_direct or self.engine.config.mirror_direct):
            self._require_current()
        return direct_get.read(self.machine.store, req)

    async def read_range(self, start_seq: int, end_seq: int, *, filter: str = ">",
                         max_msgs: int = 10_000, max_bytes: int = 8 << 20,
                         columnar: bool = False) -> dict[str, Any]:
        """Messages with ``start_seq <= seq <= end_seq`` matching ``filter``, in order, as
        columns (for bulk readers): Python lists, or with ``columnar`` one Arrow record batch
        (``batch``: seq, ts, subject, hdr, data) decoded in bulk from the store's blocks.
        ``next`` is where to continue (0 when done)."""
        self._ensure_started()
        store = self.machine.store
        batch, nxt = store.read_columns(max(start_seq, 1), end_seq, filter, max_msgs, max_bytes)
        out: dict[str, Any] = {"next": nxt, "last": store.fast_state().last_seq}
        if columnar:
            out["batch"] = batch
        else:
            out.update({name: batch.column(name).to_pylist()
                        for name in ("seq", "subject", "hdr", "data", "ts")})
        return out

    # -- consumers --------------------------------------------------------------------------
    async def reader_call(self, method: str, *args: Any) -> Any:
        """Run one :class:`StreamReader` method on this leader's store (consumers read here)."""
        return self.read_local(method, *args)

    def read_local(self, method: str, *args: Any) -> Any:
        """:meth:`reader_call` in-process (the consumers this leader runs read this way)."""
        self._require_current()
        self._reads_served += 1
        if method not in _READER_METHODS:
            raise error_for("BAD_REQUEST", err=f"unknown reader method {method!r}")
        return getattr(StoreReader(self.machine.store), method)(*args)

    # -- consumers run by this leader (ephemeral ones: see placement.consumers) ---------------
    async def add_leader_consumer(self, config: dict[str, Any],
                                  generated: bool = False) -> dict[str, Any]:
        """Create an ephemeral consumer in this actor and return its info. A name must not
        be taken by a consumer of the catalogue (not asked for a ``generated`` one: random),
        whose consumers also count for max_consumers."""
        self._require_writable()
        cfg = self.engine.config
        others = 0
        if (config.get("name") and not generated) or cfg.max_consumers > 0:
            # the client waits up to a minute for a consumer (a stream just made may still
            # be starting): a busy meta leader gets more than a publish's 5 s
            listed = await meta_router().acall("list_consumers", cfg.name,
                                               timeout=META_LIST_TIMEOUT)
            if config.get("name") in {c["name"] for c in listed}:
                raise error_for("CONSUMER_NAME_EXISTS")
            others = len(listed)
            self._require_writable()
        limits, account_consumers = await self._account_usage()
        self._require_writable()
        return await self.leader_consumers.add(cfg, config, others=others, limits=limits,
                                               account_consumers=account_consumers)

    async def _account_usage(self) -> tuple[AccountLimits, int]:
        """The account's limits and the catalogue's consumer count, asked of the meta leader
        at most every ACCOUNT_FRESH seconds while the limits count no consumers (a consumer
        made here is milliseconds; limits change rarely), and each time when they do. When
        the meta group does not answer, the last answer (or none)."""
        now = time.monotonic()
        cached = self._account
        if cached is not None and now - cached[0] < ACCOUNT_FRESH \
                and cached[1].max_consumers < 0:
            return cached[1], cached[2]
        try:
            got = await meta_router().acall("account_usage", timeout=ACCOUNT_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - consumers here do not wait on the meta group
            log.info("stream %s: account limits not known (%r)", self.engine.name, err)
            return (cached[1], cached[2]) if cached is not None else (NO_LIMITS, 0)
        self._account = (now, AccountLimits.from_dict(got["limits"]), int(got["consumers"]))
        return self._account[1], self._account[2]

    async def leader_consumer_call(self, name: str, method: str, args: tuple = (),
                                   kwargs: dict | None = None) -> Any:
        """A client call (fetch, ack, info, ...) on a consumer this leader runs."""
        self._require_current()
        return await self.leader_consumers.call(name, method, tuple(args), kwargs or {})

    async def delete_leader_consumer(self, name: str) -> bool:
        self._require_current()
        if name not in self.leader_consumers:
            raise error_for("CONSUMER_NOT_FOUND")
        return await self.leader_consumers.delete(name)

    async def leader_consumer_names(self) -> list[str]:
        self._require_current()
        return self.leader_consumers.names()

    async def consumer_acked(self, consumer: str, seqs: list[int],
                             timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """A consumer acked ``seqs``: interest and work-queue streams may remove them. The
        answer comes once the acks are applied (the consumer keeps them until then) and
        names this leader's term, so the consumer sees a leader change."""
        self._require_writable()
        ops = [self.engine.prepare_ack(consumer, seq) for seq in seqs]
        removed = 0
        if ops:
            results = await self.propose_ops(ops, timeout)
            removed = sum(1 for r in results if r.ok and r.value)
        return {"removed": removed, "leader": self.id, "term": self.group.term}

    async def consumer_sync(self, consumer: str, summary: list,
                            timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Reconcile with a consumer's replicated ack state (an :class:`AckSummary` as a
        list): record every message it has acked that this stream still holds for it, a
        bounded step at a time, each applied before the next is read."""
        self._require_writable()
        want = AckSummary.from_list(summary)
        start, acked, removed = 0, 0, 0
        while True:
            ops, start = self.engine.prepare_consumer_sync(consumer, want, start)
            for i in range(0, len(ops), SYNC_OPS):
                results = await self.propose_ops(ops[i:i + SYNC_OPS], timeout)
                acked += len(results)
                removed += sum(1 for r in results if r.ok and r.value)
            if not start:
                break
            await asyncio.sleep(0)  # let raft traffic through between steps
            self._require_writable()
        return {"acked": acked, "removed": removed, "leader": self.id, "term": self.group.term}

    async def register_consumer(self, name: str, filters: list[str], start_seq: int = 0,
                                remove: bool = False, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Record (or drop) a consumer's interest, which interest/work-queue retention uses."""
        self._require_writable()
        op = self.engine.prepare_consumer(name, filters, start_seq, remove)
        (result,) = await self.propose_ops([op], timeout)
        if not result.ok:
            raise result.error

    async def wait_for_messages(self, after: int, timeout: float) -> int:
        """The stream's last seq once it is past ``after``, or when ``timeout`` seconds
        (at most 30) ran out: consumers wait here for new messages (a push poll, waiting
        pull requests) instead of polling. NotLeaderError when leadership moves meanwhile."""
        self._require_writable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, min(timeout, 30.0))
        while self.engine.last_seq <= after:
            left = deadline - loop.time()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stored.wait(), left)
            self._require_writable()
        return self.engine.last_seq

    async def republished(self, epoch: str | None, offset: int | None, filters: list[str],
                          limit: int = 1000, wait: float = 1.0) -> dict[str, Any]:
        """Republished messages for a subscriber (core NATS delivery: at most once).

        ``(epoch, offset)`` is what the previous answer returned (None, None for a new
        subscriber, who only sees what comes next). Waits up to ``wait`` seconds for a
        message that matches ``filters``."""
        self._require_writable()
        box = self._outbox
        start, ep = box.start_for(epoch, offset), box.epoch
        deadline = time.monotonic() + max(0.0, min(wait, 30.0))
        dropped = 0

        def wanted(r) -> bool:
            return not filters or matches_any(r.subject, filters)

        while True:
            got = box.read(start, max(1, limit), wanted)
            dropped += got.dropped
            start = got.next
            left = deadline - time.monotonic()
            if got.items or left <= 0:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._outbox_changed.wait(), left)
            if box.epoch != ep:  # leadership moved meanwhile: the offsets start over
                return {"epoch": ep, "next": start, "dropped": dropped, "msgs": []}
        return {"epoch": box.epoch, "next": start, "dropped": dropped,
                "msgs": [(r.subject, r.hdr, r.data) for r in got.items]}

    # -- lifecycle --------------------------------------------------------------------------
    async def destroy(self) -> None:
        """Stop and delete this replica's data (the stream was deleted or moved away)."""
        await self._stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    async def shutdown(self) -> None:
        await self._stop()

    async def _stop(self) -> None:
        in_process.drop_stream_replica(stream_actor_name(self.group_name, self.id), self)
        await self.leader_consumers.stop_all("Consumer Deleted")
        await self._pump.stop()
        await self._copy.stop()
        for task in (self._upkeep, self._sweep):
            if task is not None:
                await cancel_and_wait(task)
        await self.host.stop()
        with contextlib.suppress(Exception):
            self.machine.store.close()
        with contextlib.suppress(Exception):
            self.group.storage.close()


__all__ = ["StreamReplica"]
