"""What the whole-replica simulator (:mod:`rayjet.sim.replica`) holds for each replica:
its files and, while it is up, what its actor would hold. Both the simulation and its
faults (:mod:`rayjet.sim.replica_chaos`) work on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rayjet.raft import Message
from rayjet.replication import ReplicaGroup
from rayjet.replication.stream_machine import StoreCopy, StreamMachine
from rayjet.sim.replica_checker import Msg


@dataclass
class Proposal:
    term: int
    msgs: list[Msg]


class SimReplica:
    """One replica: its files and, while up, what its actor would hold."""

    def __init__(self, rid: str, root: str) -> None:
        self.id = rid
        self.root = root  # the unit of power loss and disk faults
        self.dir = os.path.join(root, "r")  # the actor's replica directory
        self.up = False
        self.incarnation = 0
        self.group: ReplicaGroup | None = None
        self.machine: StreamMachine | None = None
        self.failed: str | None = None  # stopped: why (the actor is up, its group is not)
        self.down_until = 0
        self.ready_index: int | None = None
        self.held: list[Message] = []
        self.sync_scheduled = False
        self.pending: dict[int, Proposal] = {}
        self.copy: StoreCopy | None = None
        self.serving_since = -1  # tick the engine took writes (-1: not serving)
        # lost power and its log has not fsynced since: wal.synced, which says how much of
        # wal.log was fsynced, is never fsynced itself, so the cut took it
        self.claim_stale = False
        # its store was damaged and it is not well again yet (see power-loss-during-store-repair)
        self.repairing_store = False

    @property
    def active(self) -> bool:
        """Up and taking part in its group."""
        return self.up and self.failed is None

    def serving(self) -> bool:
        return (self.active and self.group.is_leader and self.machine.engine.is_leader)
