"""Deterministic simulation of three real stream replicas: raft log, store and state machine
on real files, under crashes, power loss, disk damage, disk errors and a faulty network.

One seed (``random.Random(seed)``) decides the whole run; see README.md ("The whole replica
under simulation"). Each replica is what a stream replica actor holds: ``open_or_rejoin``
over ``open_stream_files`` (a ``FileStore`` and a ``FileLogStorage``), a ``StreamMachine``
and a ``ReplicaGroup``; the simulator plays the actor shell (``RaftHost`` and
``StreamReplica``) around it without Ray: turns that step, process, hold append answers
until the one fsync at the end of the turn, and process again; the leader's engine takes
writes once it applied its whole log; copying replicas copy the store from the leader a
request per tick. Files live in a temporary directory per seed, under :class:`FaultFS`.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from rayjet.api import PubAck, StreamConfig
from rayjet.clock import ManualClock
from rayjet.engine import store_config
from rayjet.errors import APIError, DuplicateInProcessError
from rayjet.raft import Message, MessageType, ProposalDroppedError, Role
from rayjet.replication import GroupOptions, ReplicaGroup
from rayjet.replication.rejoin import open_or_rejoin
from rayjet.replication.stream_files import open_stream_files
from rayjet.replication.stream_machine import StoreCopy, StreamMachine
from rayjet.sim.faultfs import FaultFS
from rayjet.sim.network import Network, NetworkFaults
from rayjet.sim.replica_chaos import ReplicaChaos
from rayjet.sim.replica_checker import Msg, StreamChecker, Violation
from rayjet.sim.replica_faults import (
    FAULT_CLASSES,
    KNOWN_FAILING,
    MUTATIONS,
)
from rayjet.sim.replica_state import Proposal, SimReplica

REPLICA_IDS = ("n1", "n2", "n3")
TICK_SECONDS = 0.05  # the manual clock moves one actor tick per simulated tick
HEAL_TICKS = 800  # the bound on the healing phase
CHECK_EVERY = 50  # ticks between full checks of the leader's store
MAX_PENDING = 3  # proposals a leader has in flight before the client waits
SUBJECTS = ("sim.a", "sim.b", "sim.c", "sim.d.x")
# the Nats-Msg-Id window outlasts any run (a retry is always a duplicate)
STREAM = StreamConfig(name="SIM", subjects=["sim.>"], duplicate_window=86400.0).with_defaults()


@dataclass
class ReplicaParams:
    publishes: int
    max_batch: int
    msg_id_rate: float
    retry_rate: float
    publish_rate: float
    election_tick: int
    heartbeat_tick: int
    notify_commit: bool
    quiesce_after: int
    snapshot_every: int
    sync_interval: float
    block_size: int
    wal_rewrite_bytes: int
    copy_chunk_bytes: int
    net: NetworkFaults
    crash_rate: float
    crash_before_fsync_rate: float
    power_rate: float
    power_all_share: float
    torn_share: float
    damage_rate: float
    io_fault_rate: float
    partition_rate: float

    @classmethod
    def draw(cls, rng: random.Random, publishes: tuple[int, int]) -> ReplicaParams:
        return cls(
            publishes=rng.randint(*publishes),
            max_batch=rng.choice((1, 2, 3, 5)),
            msg_id_rate=rng.choice((0.0, 0.5, 1.0)),
            retry_rate=rng.choice((0.0, 0.05, 0.2)),
            publish_rate=rng.choice((0.3, 0.6, 0.9)),
            election_tick=rng.choice((10, 20)),
            heartbeat_tick=rng.choice((1, 3)),
            notify_commit=rng.random() < 0.5,
            quiesce_after=rng.choice((0, 0, 20)),
            snapshot_every=rng.randint(15, 35),
            sync_interval=rng.choice((120.0, 120.0, 2.0)),
            block_size=rng.choice((1024, 4096, 4096)),
            wal_rewrite_bytes=rng.choice((8 << 10, 32 << 10, 64 << 20)),
            copy_chunk_bytes=rng.choice((512, 4096, 1 << 20)),
            net=NetworkFaults(drop=rng.choice((0.0, 0.02, 0.1)),
                              duplicate=rng.choice((0.0, 0.02, 0.05)),
                              max_delay=rng.choice((0, 1, 3))),
            crash_rate=rng.choice((0.0, 0.005, 0.02)),
            crash_before_fsync_rate=rng.choice((0.0, 0.005, 0.02)),
            power_rate=rng.choice((0.0, 0.005, 0.015)),
            power_all_share=rng.choice((0.0, 0.3, 0.6)),
            torn_share=rng.choice((0.0, 0.5, 1.0)),
            damage_rate=rng.choice((0.0, 0.01, 0.03)),
            io_fault_rate=rng.choice((0.0, 0.005, 0.02)),
            partition_rate=rng.choice((0.0, 0.01, 0.03)),
        )


@dataclass
class ReplicaStats:
    publishes: int = 0  # messages published (proposed, or answered as duplicates)
    acked: int = 0  # distinct seqs acknowledged
    duplicates: int = 0  # duplicate PubAcks answered
    refused: int = 0  # messages refused on apply (stale projection) or before proposing
    leaders: int = 0  # times a replica started serving writes
    crashes: int = 0
    power_losses: int = 0
    bytes_lost: int = 0  # unsynced bytes power losses took
    damages: int = 0
    rejoins: int = 0  # restarts that found damage and rejoined empty
    store_damage: int = 0  # restarts whose store dropped damaged records
    disk_errors: int = 0  # replicas stopped by an injected ENOSPC/EIO
    raw_errors: int = 0  # of which the group did not stop itself (group.failure unset)
    restarts: int = 0
    copies: int = 0  # store copies finished
    snapshots_sent: int = 0
    partitions: int = 0
    messages: int = 0
    dropped: int = 0
    checks: int = 0
    ticks: int = 0
    heal_ticks: int = 0
    stored: int = 0  # messages every replica held at the end

    def add(self, other: ReplicaStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class ReplicaResult:
    seed: int
    ok: bool
    error: str | None = None
    tick: int = 0
    phase: str = ""
    stats: ReplicaStats = field(default_factory=ReplicaStats)


class _Stop(Exception):
    """A replica stopped in the middle of a turn (crash injected before an fsync)."""


class ReplicaSimulation(ReplicaChaos):
    def __init__(self, seed: int, *, trace: Callable[[str], None] | None = None,
                 publishes: tuple[int, int] = (100, 300), mutation: str | None = None,
                 faults: frozenset[str] | None = None, heal_ticks: int = HEAL_TICKS,
                 base_dir: str | None = None) -> None:
        if mutation is not None and mutation not in MUTATIONS:
            raise ValueError(f"unknown mutation {mutation!r} (one of {MUTATIONS})")
        self.seed = seed
        self.rng = random.Random(seed)
        self.trace = trace
        self.mutation = mutation
        self.faults = frozenset(FAULT_CLASSES) - frozenset(KNOWN_FAILING) \
            if faults is None else frozenset(faults)
        unknown = self.faults - frozenset(FAULT_CLASSES)
        if unknown:
            raise ValueError(f"unknown fault classes {sorted(unknown)}")
        self.heal_ticks = heal_ticks
        # disk errors as the actor shell handles them today (see _failed)
        self.base_dir = base_dir
        self.p = ReplicaParams.draw(self.rng, publishes)
        # streams of their own, so what they decide does not move the main schedule
        self._fs_rng = random.Random(f"{seed}/fs")
        self._torn_rng = random.Random(f"{seed}/torn")
        self.clock = ManualClock()
        net = self.p.net
        if "message-loss" not in self.faults:
            net = NetworkFaults(max_delay=net.max_delay)
        self.network = Network(self.rng, net)
        self.checker = StreamChecker()
        self.stats = ReplicaStats()
        self.now = 0
        self.phase = "chaos"
        self.replicas: dict[str, SimReplica] = {}
        self.fs: FaultFS | None = None
        self.sick: str | None = None  # the replica whose disk is damaged or failing
        self._sick_target = 0  # it is well again once it applied this far
        self._max_commit = 0  # the highest commit index any replica knew
        self.io_fault_until = 0
        self._next_k = 0
        self._ids: list[Msg] = []  # messages published with a msg id (retries pick one)
        self._last_check = 0
        self._base = ""

    # -- trace ------------------------------------------------------------------------------
    def _log(self, text: str) -> None:
        if self.trace is not None:
            if self._base:  # the temporary directory's name differs between replays
                text = text.replace(self._base, "$TMP")
            self.trace(f"[{self.now:4d}] {text}")

    # -- running ----------------------------------------------------------------------------
    def run(self) -> ReplicaResult:
        # rayjet's own log lines (a replica rejoining, a failed sync) go to the trace
        logger = logging.getLogger("rayjet")
        handler = _TraceHandler(self._log if self.trace is not None else None)
        propagate = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
        try:
            return self._run_in_tmp()
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate

    def _run_in_tmp(self) -> ReplicaResult:
        base = tempfile.mkdtemp(prefix=f"rayjet-sim-{self.seed}-",
                                dir=self.base_dir or _fast_tmp())
        self._base = os.path.realpath(base)
        try:
            for rid in REPLICA_IDS:
                os.mkdir(os.path.join(base, rid))
            with FaultFS(base, self._fs_rng) as fs:
                self.fs = fs
                self.replicas = {rid: SimReplica(rid, os.path.join(fs.base, rid))
                                 for rid in REPLICA_IDS}
                try:
                    return self._run()
                finally:
                    for r in self.replicas.values():
                        fs.abandon(r.root)  # the end: every process goes
                        self._release(r)
                        r.group = r.machine = r.copy = None
                        r.pending.clear()
                    self.replicas = {}
        finally:
            self.fs = None
            self.replicas = {}
            shutil.rmtree(base, ignore_errors=True)

    def _run(self) -> ReplicaResult:
        p = self.p
        self._log(f"seed {self.seed}: {p} mutation={self.mutation} "
                  f"faults={sorted(self.faults)}")
        try:
            for r in self.replicas.values():
                self._start(r)
            limit = p.publishes * 20 + 400
            while self.stats.publishes < p.publishes and self.now < limit:
                self._tick(chaos=True)
            self._heal()
            return self._result(True)
        except Violation as exc:
            self._log(f"VIOLATION: {exc}")
            return self._result(False, str(exc))
        except Exception as exc:  # a crash of the simulated code outside any fault
            tb = traceback.format_exc(limit=-4)
            self._log(f"ERROR: {type(exc).__name__}: {exc}\n{tb}")
            return self._result(False, f"unexpected {type(exc).__name__}: {exc} "
                                f"({_where(exc)})")

    def _result(self, ok: bool, error: str | None = None) -> ReplicaResult:
        s = self.stats
        s.ticks = self.now
        s.acked = len(self.checker.acked)
        s.messages = self.network.sent
        s.dropped = self.network.dropped
        s.checks = self.checker.checks
        return ReplicaResult(self.seed, ok, error, self.now, self.phase, s)

    def _tick(self, chaos: bool) -> None:
        self.now += 1
        self.clock.advance(TICK_SECONDS)
        if chaos:
            self._chaos()
        self._restarts()
        self._client()
        order = sorted(self.replicas)
        self.rng.shuffle(order)
        for rid in order:
            r = self.replicas[rid]
            if not r.active:
                continue
            if r.group.quiet:
                continue  # a quiet group does not tick (RaftHost waits for an input)
            if chaos and self.rng.random() < 0.03:
                continue  # a slow clock: this replica misses a tick
            self._turn(r, tick=True)
        self._deliver()
        for rid in order:
            r = self.replicas[rid]
            if r.active and r.group.copying:
                self._copy_step(r)
        for rid in order:
            r = self.replicas[rid]
            if r.active:
                try:
                    r.group.storage.maybe_sync()  # the actor's upkeep timer
                except OSError as exc:  # the actor logs it and goes on
                    self._log(f"{r.id}: log sync on the timer failed: {exc}")
        self._update_sick()
        if self.now - self._last_check >= CHECK_EVERY:
            self._check_leader()

    # -- the replica shell (StreamReplica + RaftHost) ----------------------------------------
    def _options(self, r: SimReplica) -> GroupOptions:
        p = self.p
        always = self.mutation != "no-fsync-before-ack"
        return GroupOptions(sync_always=always, election_tick=p.election_tick,
                            heartbeat_tick=p.heartbeat_tick, notify_commit=p.notify_commit,
                            quiesce_after=p.quiesce_after, snapshot_every=p.snapshot_every,
                            seed=self.seed * 1000 + REPLICA_IDS.index(r.id) * 100
                            + r.incarnation)

    def _start(self, r: SimReplica) -> None:
        """Open the replica from its files, as the actor's constructor does."""
        p = self.p
        first = r.incarnation == 0
        r.incarnation += 1
        cfg = store_config(STREAM, sync_interval=p.sync_interval, block_size=p.block_size)

        def opener() -> tuple[StreamMachine, ReplicaGroup]:
            store, log = open_stream_files(r.dir, cfg, self.clock)
            if hasattr(log, "_rewrite_bytes"):
                log._rewrite_bytes = p.wal_rewrite_bytes  # small: rewrites happen
            machine = StreamMachine(STREAM, store, self.clock)
            group = ReplicaGroup(r.id, log, machine, voters=list(REPLICA_IDS),
                                 options=self._options(r))
            return machine, group

        if not first and "unsynced-after-restart" not in self.faults:
            # the kernel wrote the dead process's writes back before the restart
            self.fs.mark_durable(r.root)
        (machine, group), damage = open_or_rejoin(r.dir, os.path.join(r.dir, "raft"), opener,
                                                  f"replica {r.id}")
        group.defer_sync = bool(group.opts.sync_always)  # RaftHost: group commit
        r.machine, r.group = machine, group
        r.up, r.failed = True, None
        r.ready_index, r.held, r.sync_scheduled, r.pending = None, [], False, {}
        r.copy, r.serving_since = None, -1
        if damage:
            self.stats.rejoins += 1
        if machine.damaged_from:
            self.stats.store_damage += 1
        if not first:
            self.stats.restarts += 1
        st = machine.store.fast_state()
        self._log(f"{r.id} starts (incarnation {r.incarnation}): applied {group.applied}, "
                  f"log {group.storage.first_index()}..{group.storage.last_index()}, store "
                  f"last seq {st.last_seq} ({st.msgs} msgs)"
                  + (f", REJOINS after damage: {damage}" if damage else "")
                  + (f", store lost seqs from {machine.damaged_from}"
                     if machine.damaged_from else "")
                  + (", copying" if group.copying else "")
                  + (", rejoining" if group.rejoining else ""))
        if first and group.fresh and r.id == REPLICA_IDS[0]:
            group.campaign()  # lead_at_once: the preferred replica of a new group
        self._turn(r)

    def _turn(self, r: SimReplica, *, tick: bool = False,
              inputs: list[list[Message]] | None = None,
              propose: Callable[[], None] | None = None) -> None:
        """One turn of the actor's event loop on ``r``: inputs, process after each, then the
        one fsync for the turn, the held answers, and process again."""
        try:
            if tick:
                r.group.tick()
                self._pump(r)
            for chunk in inputs or ():
                r.group.step(chunk)
                self._pump(r)
            if propose is not None:
                propose()
            self._end_turn(r)
        except _Stop:
            return
        except Violation:
            raise
        except Exception as exc:
            self._failed(r, exc)

    def _pump(self, r: SimReplica) -> None:
        g = r.group
        out = g.process()
        if g.node.raft.log.committed > self._max_commit:
            self._max_commit = g.node.raft.log.committed
        if out.sync_first:
            r.sync_scheduled = True
        for m in out.messages:
            if r.sync_scheduled and m.type == MessageType.APP_RESP:
                r.held.append(m)  # it acknowledges entries: it leaves after the fsync
            else:
                self._send(m)
        for peer in out.snapshots_sent:
            self.stats.snapshots_sent += 1
            g.report_snapshot(peer, True)
        if out.applied:
            self._answer(r, out.applied)
        if out.role is not None:
            if out.role == Role.LEADER:
                r.ready_index = g.node.raft.log.last_index()
                self._log(f"{r.id} leads term {g.term} (serves writes once applied to "
                          f"{r.ready_index})")
            else:
                if r.pending:
                    self._log(f"{r.id} lost leadership: {len(r.pending)} proposals' outcome "
                              "unknown")
                r.pending.clear()
                r.ready_index = None
                r.serving_since = -1
                r.machine.engine.set_follower()
        if (r.ready_index is not None and not r.machine.engine.is_leader
                and g.applied >= r.ready_index and g.is_leader):
            r.machine.engine.set_leader(g.term)
            r.serving_since = self.now
            self.stats.leaders += 1
            self._log(f"{r.id} serves writes in term {g.term} (applied {g.applied}, last seq "
                      f"{r.machine.engine.last_seq})")
            self._check(r)

    def _end_turn(self, r: SimReplica) -> None:
        """RaftHost._sync_and_send: one fsync for every entry written in the turn, then the
        answers held for it, then process again (a leader counts its own copy now)."""
        for _ in range(20):
            if not r.sync_scheduled:
                return
            r.sync_scheduled = False
            held, r.held = r.held, []
            g = r.group
            if g.sync_pending:
                if self.phase == "chaos" and \
                        self._fault("crash-before-fsync", self.p.crash_before_fsync_rate):
                    self._log(f"{r.id} crashes before the turn's fsync ({len(held)} answers "
                              "held)")
                    self._crash(r, "before fsync")
                    raise _Stop()
                try:
                    g.sync()
                except Exception as exc:
                    g.failure = f"fsync of the raft log failed: {type(exc).__name__}: {exc}"
                    raise
                r.claim_stale = False  # the fsync wrote a new wal.synced
            for m in held:
                self._send(m)
            self._pump(r)

    def _failed(self, r: SimReplica, exc: BaseException) -> None:
        """An exception left the group. Expected only from an injected disk error:
        anything else is a failure. One that stopped the group (``group.failure``) stops the
        replica until it restarts; one that did not is logged and the replica goes on, as
        RaftHost's tick loop does."""
        g = r.group
        why = f"{type(exc).__name__}: {exc}"
        where = _where(exc)
        fault = self.fs.faults.get(r.root)
        if fault is None:
            raise Violation(f"{r.id} stopped without a disk fault: {why} ({where})"
                            + (f"; group.failure: {g.failure}" if g.failure else ""))
        if g.failure is None:
            self.stats.raw_errors += 1
            self._log(f"{r.id}: {why} left the group at {where} without stopping it: "
                      "the actor logs it and goes on")
            return
        r.failed = why
        r.pending.clear()
        r.serving_since = -1
        self.stats.disk_errors += 1
        self._log(f"{r.id} STOPS on its {fault.kind} fault: {why}")

    def _answer(self, r: SimReplica, applied) -> None:
        for a in applied:
            prop = r.pending.pop(a.index, None)
            if prop is None:
                continue
            if prop.term != a.term:
                self._log(f"{r.id}: proposal {a.index} replaced by term {a.term}")
                continue
            if isinstance(a.result, BaseException):
                self.stats.refused += len(prop.msgs)
                self._log(f"{r.id}: proposal {a.index} refused: {a.result}")
                continue
            seqs = []
            for res, msg in zip(a.result, prop.msgs, strict=True):
                if res.ok:
                    self.checker.ack(res.seq, msg, a.term, f"{r.id} applied entry {a.index}")
                    self.checker.check_seq(r.machine.store, res.seq, r.id)
                    seqs.append(f"m{msg.k}@{res.seq}")
                else:
                    self.stats.refused += 1
                    seqs.append(f"m{msg.k} refused ({res.error})")
            self._log(f"{r.id} acks entry {a.index}: {', '.join(seqs)}")

    def _send(self, m: Message) -> None:
        self.network.send(m, self.now)

    def _deliver(self) -> None:
        for _ in range(30):
            due = self.network.due(self.now)
            if not due:
                return
            by_dest: dict[str, list[Message]] = defaultdict(list)
            for m in due:
                dst = self.replicas.get(m.to)
                if dst is None or not dst.active or self.network.is_blocked(m.frm, m.to):
                    self.network.dropped += 1
                    continue
                by_dest[m.to].append(m)
            for rid in sorted(by_dest):
                msgs = by_dest[rid]
                r = self.replicas[rid]
                if not r.active:
                    continue
                # several arrivals in one event-loop turn: one fsync covers them
                cuts = sorted(self.rng.sample(range(1, len(msgs)), self.rng.randint(
                    0, min(3, len(msgs) - 1)))) if len(msgs) > 1 else []
                chunks, at = [], 0
                for c in [*cuts, len(msgs)]:
                    chunks.append(msgs[at:c])
                    at = c
                if self.trace is not None:
                    self._log(f"  deliver to {rid}: " + " | ".join(
                        ", ".join(_describe(m) for m in ch) for ch in chunks))
                self._turn(r, inputs=chunks)

    # -- store copies (actors.store_copy.StoreCopyTask, a request per tick) -------------------
    def _copy_step(self, r: SimReplica) -> None:
        g = r.group
        leader = g.leader
        if leader is None or leader == r.id:
            return
        src = self.replicas[leader]
        if not src.up or src.group is None or src.group.copying or \
                self.network.is_blocked(r.id, leader) or self.network.is_blocked(leader, r.id):
            return  # the call fails: retried later
        if r.copy is None:
            r.copy = StoreCopy(r.machine, self.p.copy_chunk_bytes)
            self._log(f"{r.id} copies its store from {leader}")
        try:
            kind, arg = r.copy.next_request()
            if kind == "chunk":
                answer = src.machine.copy_chunk(arg, self.p.copy_chunk_bytes)
            else:
                answer = src.machine.copy_seal(arg)
                answer["applied"] = src.group.applied
        except (APIError, LookupError, ValueError) as exc:
            self._log(f"{r.id}: copy request to {leader} failed: {exc}")
            return
        try:
            if kind == "chunk":
                with g.stop_on_disk_error():  # as StoreCopyTask does
                    r.copy.on_chunk(*answer)
                return
            if answer["applied"] < g.applied:
                return  # a new leader still applying: ask again
            with g.stop_on_disk_error():
                sealed = r.copy.on_seal(answer)
            if sealed and g.copying:
                self._log(f"{r.id} finished copying from {leader} at applied "
                          f"{answer['applied']} ({r.copy.copied} records, "
                          f"{r.copy.restarts} restarts)")
                r.copy = None
                self.stats.copies += 1
                g.finish_copy(answer["applied"])
                self._turn(r)
        except Violation:
            raise
        except Exception as exc:
            r.copy = None  # StoreCopyTask dies on it; the next update starts a new copy
            self._failed(r, exc)

    # -- the client -------------------------------------------------------------------------
    def _client(self) -> None:
        if self.phase != "chaos" or self.stats.publishes >= self.p.publishes:
            return  # healing publishes one message of its own
        if self.rng.random() >= self.p.publish_rate:
            return
        self._publish()

    def _publish(self, goal: bool = False, retry: Msg | None = None) -> list[Msg] | None:
        """Publish a batch to a leader taking writes; the messages (None: no leader)."""
        leaders = [r for rid, r in sorted(self.replicas.items()) if r.serving()]
        if not leaders:
            for r in self.replicas.values():  # asking around for the leader wakes quiet ones
                if r.active and r.group.quiet and not r.group.is_leader:
                    r.group.wake()
            return None
        r = self.rng.choice(leaders)
        if len(r.pending) >= MAX_PENDING:
            return None
        rng = self.rng
        batch: list[Msg] = [retry] if retry is not None else []
        for _ in range(0 if retry else 1 if goal else rng.randint(1, self.p.max_batch)):
            if not goal and self._ids and rng.random() < self.p.retry_rate:
                batch.append(rng.choice(self._ids))  # a client's retry: same id, same bytes
                continue
            k = self._next_k
            self._next_k += 1
            data = b"%d/m%d/" % (self.seed, k) + rng.randbytes(rng.randint(4, 150))
            msg_id = f"id-{k}" if goal or rng.random() < self.p.msg_id_rate else ""
            msg = Msg(k, SUBJECTS[k % len(SUBJECTS)], data, msg_id)
            self.checker.publish(msg)
            if msg_id:
                self._ids.append(msg)
            batch.append(msg)
        engine = r.machine.engine
        ops, msgs, notes = [], [], []
        for msg in batch:
            self.stats.publishes += 1
            headers = {"Nats-Msg-Id": msg.msg_id} if msg.msg_id else None
            try:
                op = engine.prepare_publish(msg.subject, msg.data, headers)
            except DuplicateInProcessError:
                notes.append(f"m{msg.k} in flight")
                continue
            except APIError as exc:
                self.stats.refused += 1
                notes.append(f"m{msg.k} refused: {exc}")
                continue
            if isinstance(op, PubAck):
                self.stats.duplicates += 1
                self.checker.ack(op.seq, msg, r.group.term,
                                 f"{r.id}'s duplicate PubAck for {msg.msg_id}")
                self.checker.check_seq(r.machine.store, op.seq, r.id)
                notes.append(f"m{msg.k} duplicate of seq {op.seq}")
                continue
            ops.append(op)
            msgs.append(msg)
        if notes:
            self._log(f"publish to {r.id}: " + "; ".join(notes))
        if not ops:
            return batch

        def propose() -> None:
            g = r.group
            try:
                index, term = g.propose(r.machine.encode(ops))
            except ProposalDroppedError as exc:
                self._log(f"proposal to {r.id} dropped: {exc}")
                r.machine.engine.restart_projection()
                return
            r.pending[index] = Proposal(term, msgs)
            self._log(f"publish to {r.id}: entry {index} term {term} with "
                      + ", ".join(f"m{m.k}{'(' + m.msg_id + ')' if m.msg_id else ''}"
                                  f"@{op.seq}" for m, op in zip(msgs, ops)))
            self._pump(r)

        self._turn(r, propose=propose)
        return batch

    # -- faults -----------------------------------------------------------------------------
    def _restarts(self) -> None:
        for rid in sorted(self.replicas):
            r = self.replicas[rid]
            if self.fs.faults.get(r.root) is not None:
                continue
            if r.up and r.failed is not None:
                self._log(f"{rid} restarts after its disk fault")
                self.fs.abandon(r.root)
                self._release(r)
                r.up = False
                r.down_until = self.now
            if not r.up and self.now >= r.down_until:
                try:
                    self._start(r)
                except Violation:
                    raise
                except Exception as exc:
                    raise Violation(f"{rid} cannot restart from its files: "
                                    f"{type(exc).__name__}: {exc} ({_where(exc)})") from exc

    def _check(self, r: SimReplica) -> None:
        """A leader taking writes holds every message acknowledged up to its term; any
        other replica (not copying) holds no wrong bytes."""
        if r.serving():
            self.checker.check_store(r.machine.store, f"{r.id} (leading term {r.group.term})",
                                     term=r.group.term)
        else:
            self.checker.check_store(r.machine.store, r.id)

    def _check_leader(self) -> None:
        self._last_check = self.now
        for rid in sorted(self.replicas):
            r = self.replicas[rid]
            if r.active and not r.group.copying:
                self._check(r)

    # -- healing ----------------------------------------------------------------------------
    def _heal(self) -> None:
        self.phase = "heal"
        self._log("HEAL: faults off, network whole, every replica up")
        for r in self.replicas.values():
            self.fs.clear_fault(r.root)
        self.io_fault_until = 0
        self.network.heal()
        self.network.faults = NetworkFaults()
        goal: Msg | None = None
        for i in range(self.heal_ticks):
            self._tick(chaos=False)
            leader = next((r for _, r in sorted(self.replicas.items()) if r.serving()), None)
            if leader is None:
                continue
            if goal is None or goal.data not in self.checker.acked_data:
                # progress: a fresh message acknowledged after healing
                if not leader.pending:
                    batch = self._publish(goal=True, retry=goal)
                    if batch and goal is None:
                        goal = batch[0]
                continue
            if self._converged(leader):
                self.stats.heal_ticks = i + 1
                self._log(f"healed after {i + 1} ticks")
                stores = {r.id: r.machine.store for r in self.replicas.values()}
                self.stats.stored = self.checker.converge(stores)
                return
        states = "; ".join(self._describe(r) for _, r in sorted(self.replicas.items()))
        raise Violation(f"no progress within {self.heal_ticks} ticks of healing: {states}")

    def _converged(self, leader: SimReplica) -> bool:
        target = leader.group.applied
        last = leader.machine.store.fast_state().last_seq
        for r in self.replicas.values():
            if not r.active or r.group.copying or r.group.applied < target:
                return False
            if r.machine.store.fast_state().last_seq != last:
                return False
        return True

    def _describe(self, r: SimReplica) -> str:
        if not r.up:
            return f"{r.id} down"
        g = r.group
        return (f"{r.id} {g.role.value} term {g.term} applied {g.applied} "
                f"commit {g.node.raft.log.committed} last {g.storage.last_index()}"
                + (" copying" if g.copying else "") + (" rejoining" if g.rejoining else "")
                + (f" failed: {r.failed}" if r.failed else ""))


class _TraceHandler(logging.Handler):
    def __init__(self, log: Callable[[str], None] | None) -> None:
        super().__init__(logging.WARNING)
        self._to = log

    def emit(self, record: logging.LogRecord) -> None:
        if self._to is not None:
            self._to(f"  log {record.levelname.lower()} {record.name}: {record.getMessage()}")


def _fast_tmp() -> str | None:
    """A memory file system when there is one (nothing here needs a real disk: fsync is
    simulated), else the default temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return None


def _describe(m: Message) -> str:
    kind = m.type.name.lower()
    extra = ""
    if m.type == MessageType.APP:
        extra = f" {m.index}+{len(m.entries)} c{m.commit}"
    elif m.type == MessageType.APP_RESP:
        extra = f" {m.index}{' reject' if m.reject else ''}"
    elif m.type == MessageType.SNAP and m.snapshot is not None:
        extra = f" @{m.snapshot.meta.index}"
    return f"{m.frm}>{m.to} {kind} t{m.term}{extra}"


def _where(exc: BaseException) -> str:
    """The innermost frame of ``exc`` outside the simulator (where rayjet raised it)."""
    tb = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.abspath(__file__))
    outside = [f for f in tb if os.path.dirname(os.path.abspath(f.filename)) != here]
    if not outside:
        return "?"
    f = outside[-1]
    return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"


def run_replica_seed(seed: int, trace: Callable[[str], None] | None = None, **kw
                     ) -> ReplicaResult:
    return ReplicaSimulation(seed, trace=trace, **kw).run()


__all__ = ["FAULT_CLASSES", "KNOWN_FAILING", "MUTATIONS", "REPLICA_IDS", "ReplicaParams",
           "ReplicaResult", "ReplicaSimulation", "ReplicaStats", "run_replica_seed"]
