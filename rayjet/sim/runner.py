"""One seed, one whole cluster run: a chaos phase with faults, then a liveness phase."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from rayjet.raft import (
    ConfChange,
    ConfChangeType,
    Config,
    Message,
    MessageType,
    ProposalDroppedError,
    RaftError,
    Role,
    bootstrap,
)
from rayjet.sim.checker import Checker, Violation
from rayjet.sim.network import Network, NetworkFaults
from rayjet.sim.node import SimNode

NODE_IDS = ("n1", "n2", "n3", "n4", "n5")
CHAOS_TICKS = 300
LIVENESS_TICKS = 300


@dataclass
class Params:
    voters: int
    election_tick: int
    heartbeat_tick: int
    max_size_per_msg: int | None
    max_entries_per_msg: int | None
    max_inflight: int
    check_quorum: bool
    pre_vote: bool
    faults: NetworkFaults
    crash_rate: float
    partition_rate: float
    conf_rate: float
    # Isolate whoever leads, often: leaders come and go before their entries spread.
    flap_rate: float

    @classmethod
    def draw(cls, rng: random.Random) -> Params:
        p = cls._draw(rng)
        if p.conf_rate and not (p.check_quorum or p.pre_vote):
            # Without either, a removed node that never learned of its removal keeps
            # starting elections forever (Raft thesis 4.2.3): safe, but not live.
            p.pre_vote = True
        return p

    @classmethod
    def _draw(cls, rng: random.Random) -> Params:
        return cls(
            voters=rng.choice((1, 3, 3, 3, 5, 5)),
            election_tick=10,
            heartbeat_tick=rng.choice((1, 2, 3)),
            max_size_per_msg=rng.choice((None, 64, 1 << 20)),
            max_entries_per_msg=rng.choice((None, 1, 1, 3)),
            max_inflight=rng.choice((1, 2, 8, 256)),
            check_quorum=rng.random() < 0.8,
            pre_vote=rng.random() < 0.8,
            faults=NetworkFaults(drop=rng.choice((0.0, 0.02, 0.1, 0.25)),
                                 duplicate=rng.choice((0.0, 0.02, 0.1)),
                                 max_delay=rng.choice((0, 1, 2, 5))),
            crash_rate=rng.choice((0.0, 0.01, 0.03)),
            partition_rate=rng.choice((0.0, 0.01, 0.03)),
            conf_rate=rng.choice((0.0, 0.02, 0.05)),
            flap_rate=rng.choice((0.0, 0.05, 0.15, 0.3)),
        )


@dataclass
class Stats:
    leaders: int = 0
    committed: int = 0
    proposals: int = 0
    crashes: int = 0
    partitions: int = 0
    snapshots_sent: int = 0
    conf_changes: int = 0
    transfers: int = 0
    reads: int = 0
    messages: int = 0
    dropped: int = 0
    liveness_ticks: int = 0
    quiet_ticks: int = 0  # node-ticks spent quiescent

    def add(self, other: Stats) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))


@dataclass
class Result:
    seed: int
    ok: bool
    error: str | None = None
    tick: int = 0
    phase: str = ""
    stats: Stats = field(default_factory=Stats)


class Simulation:
    def __init__(self, seed: int, mutation: str | None = None,
                 trace: Callable[[str], None] | None = None,
                 chaos_ticks: int = CHAOS_TICKS, liveness_ticks: int = LIVENESS_TICKS) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.mutations = frozenset([mutation]) if mutation else frozenset()
        self.trace = trace
        self.chaos_ticks = chaos_ticks
        self.liveness_ticks = liveness_ticks
        self.p = Params.draw(self.rng)
        # drawn apart from the main stream so every seed keeps its schedule
        self.notify_commit = random.Random(f"{seed}/notify_commit").random() < 0.5
        # half the seeds run quiescent groups: idle leaders and followers stop ticking, and
        # a crash is reported to the survivors as Ray reports an actor's death
        self.quiesce_after = random.Random(f"{seed}/quiesce").choice((0, 3))
        self._idle_rng = random.Random(f"{seed}/idle")
        self._idle_until = 0
        self.checker = Checker()
        self.network = Network(self.rng, self.p.faults)
        self.stats = Stats()
        self.now = 0
        self.phase = "chaos"
        self.next_value = 0
        self.nodes = {nid: SimNode(nid, self._config) for nid in NODE_IDS}
        voters = list(NODE_IDS[: self.p.voters])
        for nid in voters:
            bootstrap(self.nodes[nid].disk.durable, voters)
        for node in self.nodes.values():
            node.start(self.checker)
        self._snap_reports: list[tuple[str, str, bool]] = []
        self._log(f"seed {seed}: {self.p} notify_commit={self.notify_commit} "
                  f"quiesce_after={self.quiesce_after}")

    def _config(self, nid: str, incarnation: int, applied: int) -> Config:
        p = self.p
        return Config(id=nid, election_tick=p.election_tick, heartbeat_tick=p.heartbeat_tick,
                      applied=applied, max_size_per_msg=p.max_size_per_msg,
                      max_entries_per_msg=p.max_entries_per_msg,
                      max_inflight_msgs=p.max_inflight, check_quorum=p.check_quorum,
                      pre_vote=p.pre_vote, notify_commit=self.notify_commit,
                      quiesce_after=self.quiesce_after,
                      rng=random.Random(f"{self.seed}/{nid}/{incarnation}"),
                      mutations=self.mutations)

    def _log(self, text: str) -> None:
        if self.trace is not None:
            self.trace(f"[{self.now:4d}] {text}")

    # -- running --------------------------------------------------------------------------------
    def run(self) -> Result:
        try:
            for _ in range(self.chaos_ticks):
                self._tick(chaos=True)
            self.phase = "liveness"
            self._heal_all()
            goal = b"live-%d" % self.seed
            self.checker.goal = goal
            proposed_to: tuple[str, int] | None = None
            for i in range(self.liveness_ticks):
                self._tick(chaos=False)
                if self.checker.goal_committed:
                    self.stats.liveness_ticks = i + 1
                    self._log(f"liveness: goal committed after {i + 1} ticks")
                    return self._result(True)
                leader = self._leader()
                if leader is not None and proposed_to != (leader.id, leader.rn.raft.term):
                    if self._propose(leader, [goal]):
                        proposed_to = (leader.id, leader.rn.raft.term)
            raise Violation(f"liveness: nothing committed within {self.liveness_ticks} ticks "
                            f"after healing the cluster")
        except Violation as exc:
            self._log(f"VIOLATION: {exc}")
            return self._result(False, str(exc))
        except RaftError as exc:
            self._log(f"RAFT ERROR: {exc}")
            return self._result(False, f"raft core refused a state: {exc.description}")

    def _result(self, ok: bool, error: str | None = None) -> Result:
        s = self.stats
        s.leaders = len(self.checker.leaders)
        s.committed = self.checker.max_commit
        s.reads = self.checker.reads_checked
        s.messages = self.network.sent
        s.dropped = self.network.dropped
        return Result(self.seed, ok, error, self.now, self.phase, s)

    def _tick(self, chaos: bool) -> None:
        self.now += 1
        if chaos:
            self._chaos()
        self._workload()
        for node in self.nodes.values():
            if node.alive:
                if chaos and self.rng.random() < 0.03:
                    continue  # a slow clock: this node misses a tick
                self.stats.quiet_ticks += node.rn.quiet
                node.rn.tick()
                self._after(node)
        self._deliver()

    def _after(self, node: SimNode) -> None:
        node.after_step(self.checker)
        while node.alive and node.rn.has_ready():
            rd = node.rn.ready()
            if self.trace is not None:
                self._trace_ready(node, rd)
            node.write(rd, self.checker)
            node.finish(rd, self.checker, self._send)
            node.after_step(self.checker)
        reports, self._snap_reports = self._snap_reports, []
        for frm, to, ok in reports:
            sender = self.nodes[frm]
            if sender.alive:
                sender.rn.report_snapshot(to, ok)

    def _send(self, m: Message) -> None:
        if m.type == MessageType.SNAP:
            self.stats.snapshots_sent += 1
        if not self.network.send(m, self.now) and m.type == MessageType.SNAP:
            self._snap_reports.append((m.frm, m.to, False))

    def _deliver(self) -> None:
        for _ in range(50):
            due = self.network.due(self.now)
            if not due:
                return
            for m in due:
                dst = self.nodes.get(m.to)
                if dst is None or not dst.alive or self.network.is_blocked(m.frm, m.to):
                    self.network.dropped += 1
                    continue
                if self.trace is not None:
                    self._log("  deliver " + m.describe())
                dst.rn.step(m)
                self._after(dst)

    def _trace_ready(self, node: SimNode, rd) -> None:
        parts = []
        if rd.soft_state is not None:
            parts.append(f"{rd.soft_state.role.value} lead={rd.soft_state.lead}")
        if rd.hard_state is not None:
            hs = rd.hard_state
            parts.append(f"hs term={hs.term} vote={hs.vote} commit={hs.commit}")
        if rd.snapshot is not None:
            parts.append(f"snapshot {rd.snapshot.term}/{rd.snapshot.index}")
        if rd.entries:
            parts.append(f"persist {rd.entries[0].index}..{rd.entries[-1].index}")
        if rd.committed_entries:
            parts.append(f"apply {rd.committed_entries[0].index}.."
                         f"{rd.committed_entries[-1].index}")
        if rd.read_states:
            parts.append(f"reads {[rs.index for rs in rd.read_states]}")
        if parts:
            self._log(f"  {node.id} ready: " + "; ".join(parts))

    # -- the client workload ----------------------------------------------------------------------
    def _leader(self) -> SimNode | None:
        leaders = [n for n in self.nodes.values() if n.alive and n.rn.raft.role == Role.LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: n.rn.raft.term)

    @staticmethod
    def _backlog(node: SimNode) -> int:
        log = node.rn.raft.log
        return log.last_index() - log.committed

    def _alive(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive]

    def _propose(self, node: SimNode, values: list[bytes]) -> bool:
        try:
            node.rn.propose_batch(values)
            self.stats.proposals += len(values)
            self._log(f"propose {[v.decode() for v in values]} at {node.id}")
            ok = True
        except ProposalDroppedError as exc:
            self._log(f"propose at {node.id} dropped: {exc.description}")
            ok = False
        self._after(node)
        return ok

    def _workload(self) -> None:
        rng = self.rng
        if self.quiesce_after:
            # idle stretches, so groups go quiet and faults hit quiet groups too (drawn from
            # a stream of their own: the other seeds keep their schedules)
            if self.now >= self._idle_until and self._idle_rng.random() < 0.03:
                self._idle_until = self.now + self._idle_rng.randint(10, 40)
            if self.now < self._idle_until:
                return
        if rng.random() < 0.3 and self.phase == "chaos":
            leader = self._leader()
            alive = self._alive()
            target = leader if leader is not None and rng.random() < 0.9 else \
                (rng.choice(alive) if alive else None)
            if target is not None and target is leader and self._backlog(leader) > 16:
                target = None  # client back-pressure: the group is not keeping up
            if target is not None:
                values = []
                for _ in range(rng.randint(1, 3)):
                    self.next_value += 1
                    values.append(b"v%d" % self.next_value)
                self._propose(target, values)
        if rng.random() < 0.05:
            leader = self._leader()
            if leader is not None:
                self.next_value += 1
                ctx = b"read-%d" % self.next_value
                leader.reads[ctx] = self.checker.max_commit
                try:
                    leader.rn.read_index(ctx)
                except ProposalDroppedError:
                    leader.reads.pop(ctx, None)
                self._after(leader)

    # -- faults ---------------------------------------------------------------------------------------
    def _chaos(self) -> None:
        rng, p = self.rng, self.p
        if p.crash_rate and rng.random() < p.crash_rate:
            alive = self._alive()
            if alive:
                self._crash(rng.choice(alive))
        for node in self.nodes.values():
            if not node.alive and rng.random() < 0.06:
                self._restart(node)
        if p.flap_rate and rng.random() < p.flap_rate:
            leader = self._leader()
            if leader is not None:
                self.stats.partitions += 1
                self.network.partition([[leader.id], [i for i in NODE_IDS if i != leader.id]])
                self._log(f"PARTITION isolate leader {leader.id}")
        if self.network.blocked and rng.random() < 0.05:
            self.network.heal()
            self._log("network healed")
        elif p.partition_rate and rng.random() < p.partition_rate:
            self._partition()
        if p.conf_rate and rng.random() < p.conf_rate:
            self._membership_change()
        if rng.random() < 0.01:
            self._transfer()
        if rng.random() < 0.05:
            alive = self._alive()
            if alive:
                node = rng.choice(alive)
                keep = rng.choice((0, 1, 5, 20))
                if node.create_snapshot(keep):
                    self._log(f"{node.id} snapshots at {node.sm.applied}, keeps {keep} entries")

    def _crash(self, node: SimNode) -> None:
        rng = self.rng
        self.stats.crashes += 1
        where = "idle"
        if node.rn.has_ready() and rng.random() < 0.7:
            rd = node.rn.ready()
            node.write(rd, self.checker)
            where = rng.choice(("before fsync", "after fsync", "while sending"))
            if where != "before fsync":
                node.disk.sync()
            if where == "while sending":
                for m in rd.messages[: rng.randint(0, len(rd.messages))]:
                    self._send(m)
        how = node.crash(rng)
        self._log(f"CRASH {node.id} ({where}): {how}")
        if self.quiesce_after:
            for other in self._alive():  # the failure detector quiet groups rely on
                other.rn.report_peer_down(node.id)
                self._after(other)

    def _restart(self, node: SimNode) -> None:
        node.start(self.checker)
        r = node.rn.raft
        self._log(f"RESTART {node.id}: term={r.term} commit={r.log.committed} "
                  f"last={r.log.last_index()} applied={node.sm.applied}")
        self._after(node)

    def _partition(self) -> None:
        rng = self.rng
        ids = list(NODE_IDS)
        kind = rng.choice(("split", "isolate", "one-way"))
        self.stats.partitions += 1
        if kind == "split":
            rng.shuffle(ids)
            k = rng.randint(1, len(ids) - 1)
            groups = [sorted(ids[:k]), sorted(ids[k:])]
            self.network.partition(groups)
            self._log(f"PARTITION {' '.join(groups[0])} | {' '.join(groups[1])}")
        elif kind == "isolate":
            victim = self._leader() if rng.random() < 0.5 else None
            vid = victim.id if victim is not None else rng.choice(ids)
            self.network.partition([[vid], [i for i in ids if i != vid]])
            self._log(f"PARTITION isolate {vid}")
        else:
            a, b = rng.sample(ids, 2)
            self.network.block_one_way(a, b)
            self._log(f"PARTITION one-way {a} -/-> {b}")

    def _membership_change(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        rng = self.rng
        cs = leader.rn.raft.conf_state()
        spares = [n for n in NODE_IDS if n not in cs.voters and n not in cs.learners]
        options: list[ConfChange] = []
        if spares and len(cs.voters) < 5:
            s = rng.choice(spares)
            options.append(ConfChange(ConfChangeType.ADD_VOTER, s))
            options.append(ConfChange(ConfChangeType.ADD_LEARNER, s))
        for learner in cs.learners:
            options.append(ConfChange(ConfChangeType.ADD_VOTER, learner))
            options.append(ConfChange(ConfChangeType.REMOVE, learner))
        removable = [v for v in cs.voters if len(cs.voters) > 2 or v != leader.id]
        if len(cs.voters) > 1 and removable:
            options.append(ConfChange(ConfChangeType.REMOVE, rng.choice(removable)))
        if not options:
            return
        cc = rng.choice(options)
        try:
            leader.rn.propose_conf_change(cc)
            self.stats.conf_changes += 1
            self._log(f"CONF CHANGE at {leader.id}: {cc.type.name.lower()} {cc.node_id}")
        except ProposalDroppedError as exc:
            self._log(f"conf change at {leader.id} dropped: {exc.description}")
        self._after(leader)

    def _transfer(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        others = [v for v in leader.rn.raft.voters if v != leader.id]
        if not others:
            return
        to = self.rng.choice(others)
        self.stats.transfers += 1
        self._log(f"TRANSFER leadership {leader.id} -> {to}")
        leader.rn.transfer_leader(to)
        self._after(leader)

    def _heal_all(self) -> None:
        self.network.heal()
        self.network.faults = NetworkFaults(drop=0.0, duplicate=self.p.faults.duplicate,
                                            max_delay=self.p.faults.max_delay)
        for node in self.nodes.values():
            if not node.alive:
                self._restart(node)
        self._log("LIVENESS phase: network healed, every node up, no more faults")


def run_seed(seed: int, mutation: str | None = None,
             trace: Callable[[str], None] | None = None, **kw) -> Result:
    return Simulation(seed, mutation, trace, **kw).run()
