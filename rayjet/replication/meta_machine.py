"""The meta group's state machine: raft entries are catalogue ops.

An entry's data is one encoded :class:`~rayjet.meta.MetaOp`; the catalogue lives in the
raft log and its snapshots. :func:`unsettled` tells whether a member's catalogue is the
committed one, which the leader checks before acting on what the catalogue lacks.
"""

from __future__ import annotations

from typing import Any

from rayjet.meta import Catalogue, decode_meta_op
from rayjet.replication.group import ReplicaGroup


class MetaMachine:
    """The catalogue as a replication state machine."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue

    def apply(self, index: int, data: bytes) -> Any:
        return self.catalogue.apply(index, decode_meta_op(data))

    def snapshot(self) -> bytes:
        return self.catalogue.snapshot()

    def full_snapshot(self) -> bytes:
        return self.catalogue.snapshot()

    def restore(self, data: bytes, *, full: bool) -> None:
        if data:  # no snapshot yet: the log replays the whole catalogue
            self.catalogue.restore(data)

    def sync(self) -> None:
        pass  # the catalogue lives in the raft log and its snapshots


def unsettled(group: ReplicaGroup) -> str | None:
    """Why ``group``'s catalogue may not be the committed one (None: it is). Only a leader
    that committed an entry of its own term holds every entry any earlier leader committed,
    and only once it applied them is its catalogue complete: a stale or damaged member
    that deleted what its catalogue lacks would destroy live streams."""
    if not group.is_leader:
        return "not the leader"
    if group.rejoining:
        return "rejoining after damage"
    raft = group.node.raft
    committed = raft.log.committed
    if committed == 0 or raft.log.term_or_zero(committed) != raft.term:
        return f"no entry of term {raft.term} committed yet"
    if group.applied < committed:
        return f"applied {group.applied} of {committed} committed entries"
    return None
