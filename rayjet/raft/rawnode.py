"""RawNode: the application's handle on one raft replica.

The loop an application runs (single-threaded, one mailbox)::

    node = RawNode(Config(id="a", rng=random.Random(seed)), storage)
    while True:
        feed node.tick() on each timer tick, node.step(msg) on each message received,
        node.propose(data) for client writes
        if node.has_ready():
            rd = node.ready()
            persist rd.snapshot, rd.entries, rd.hard_state  (fsync if rd.must_sync)
            send rd.messages
            install rd.snapshot, apply rd.committed_entries (apply_conf_change for conf entries)
            serve rd.read_states once applied >= index
            node.advance(rd)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rayjet.raft.config import Config
from rayjet.raft.messages import (
    ConfChange,
    ConfState,
    HardState,
    Message,
    Ready,
    Role,
)
from rayjet.raft.node import Raft
from rayjet.raft.storage import LogStorage


@dataclass(frozen=True)
class Status:
    id: str
    role: Role
    term: int
    vote: str | None
    lead: str | None
    commit: int
    applied: int
    last_index: int
    conf_state: ConfState
    # Leader only: the replication state of every member, as text.
    progress: dict[str, str]
    lead_transferee: str | None


class RawNode:
    def __init__(self, config: Config, storage: LogStorage) -> None:
        self.raft = Raft(config, storage)
        self._prev_soft = self.raft.soft_state()
        self._prev_hard = self.raft.hard_state()

    @property
    def id(self) -> str:
        return self.raft.id

    # -- inputs ---------------------------------------------------------------------------------
    def tick(self) -> None:
        """Advance logical time by one tick (elections, heartbeats, check-quorum)."""
        self.raft.tick()

    def campaign(self) -> None:
        """Start an election now (with a pre-vote round first if enabled)."""
        self.raft.hup()

    def step(self, message: Message) -> None:
        """Feed a message received from a peer. Messages for another node are ignored."""
        if message.to != self.raft.id:
            return
        self.raft.step(message)

    def propose(self, data: bytes) -> int:
        """Append ``data`` to the log (leader only); returns its index.

        Raises ProposalDroppedError when this node is not the leader or a leadership transfer
        is running. The entry is committed once it shows up in ``committed_entries`` with the
        same index and the leader's term; if leadership changes first it may be overwritten,
        and the caller retries. Appends to followers go out with the next Ready, so many
        proposals made between two Readies travel in one message per follower.
        """
        return self.raft.propose([bytes(data)])

    def propose_batch(self, datas: Sequence[bytes]) -> int:
        """Append several entries at once; returns the index of the last one."""
        if not datas:
            return self.raft.log.last_index()
        return self.raft.propose([bytes(d) for d in datas])

    def propose_conf_change(self, cc: ConfChange) -> int:
        """Propose one membership step. Only one may be pending (proposed, not applied)."""
        return self.raft.propose_conf_change(cc)

    def apply_conf_change(self, cc: ConfChange) -> ConfState:
        """Apply a committed conf-change entry; returns the new membership to snapshot."""
        return self.raft.apply_conf_change(cc)

    def transfer_leader(self, to: str) -> None:
        """Ask leadership to move to ``to`` (leader only); it campaigns once caught up."""
        self.raft.transfer_leader(to)

    def read_index(self, ctx: bytes) -> None:
        """Request a linearizable read tagged ``ctx`` (leader only, unique per request).

        A matching ReadState appears in a later Ready once a quorum confirmed leadership;
        serve the read when the applied index reaches ``ReadState.index``. If leadership is
        lost first the request is forgotten: the caller times out and retries.
        """
        self.raft.read_index(bytes(ctx))

    def report_peer_down(self, peer: str) -> None:
        """``peer``'s process died (the application's failure detector says so). A quiet
        follower notices no missing heartbeats: this is how it learns its leader is gone."""
        self.raft.report_peer_down(peer)

    def wake(self) -> None:
        """Leave quiescence (nothing happens if awake): tick again from now on."""
        self.raft.wake()

    @property
    def quiet(self) -> bool:
        """Quiescent: ticking does nothing until a proposal or a message wakes it."""
        return self.raft.quiet

    def report_unreachable(self, peer: str) -> None:
        """The transport failed to deliver to ``peer``: stop streaming to it, probe instead."""
        self.raft.report_unreachable(peer)

    def report_snapshot(self, peer: str, ok: bool) -> None:
        """The transport finished (or failed) sending a snapshot to ``peer``."""
        self.raft.report_snapshot(peer, ok)

    # -- outputs --------------------------------------------------------------------------------
    def has_ready(self) -> bool:
        r = self.raft
        r.flush()
        log = r.log
        if r.msgs or r.read_states or log.unstable.entries or log.unstable.snapshot is not None:
            return True
        if r.soft_state() != self._prev_soft:
            return True
        if r.hard_state() != self._prev_hard:
            return True
        return log.has_next_committed()

    def ready(self) -> Ready:
        r = self.raft
        r.flush()
        log = r.log
        rd = Ready(entries=log.unstable_entries(), snapshot=log.unstable.snapshot,
                   committed_entries=log.next_committed(), messages=r.msgs,
                   read_states=r.read_states)
        r.msgs = []
        r.read_states = []
        soft = r.soft_state()
        if soft != self._prev_soft:
            rd.soft_state = soft
            self._prev_soft = soft
        hard = r.hard_state()
        if hard != self._prev_hard:
            rd.hard_state = hard
            rd.must_sync = hard.term != self._prev_hard.term or hard.vote != self._prev_hard.vote
            self._prev_hard = hard
        if rd.entries or rd.snapshot is not None:
            rd.must_sync = True
        return rd

    def advance(self, rd: Ready) -> None:
        """Mark everything in ``rd`` persisted and applied."""
        log = self.raft.log
        if rd.snapshot is not None:
            log.stable_snap_to(rd.snapshot.index)
            log.applied_to(rd.snapshot.index)
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
        if rd.committed_entries:
            log.applied_to(rd.committed_entries[-1].index)

    # -- views ----------------------------------------------------------------------------------
    def hard_state(self) -> HardState:
        return self.raft.hard_state()

    def status(self) -> Status:
        r = self.raft
        progress = {}
        if r.role == Role.LEADER:
            progress = {nid: pr.describe() for nid, pr in r.prs.items()}
        return Status(r.id, r.role, r.term, r.vote, r.lead, r.log.committed, r.log.applied,
                      r.log.last_index(), r.conf_state(), progress, r.lead_transferee)
