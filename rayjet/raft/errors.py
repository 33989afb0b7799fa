"""Errors raised by the raft core."""

from __future__ import annotations

from rayjet.errors import APIError, NotLeaderError


class RaftError(APIError):
    """A raft-level failure (bad input, storage misuse, broken invariant)."""

    spec_name = "RAFT_GENERAL"


class ProposalDroppedError(NotLeaderError):
    """The node cannot take the proposal now: not the leader, transfer running, or a
    membership change is still pending. ``leader`` names the leader this node knows, if any."""

    def __init__(self, reason: str, leader: str | None = None) -> None:
        super().__init__(f"proposal dropped: {reason}")
        self.leader = leader


class CompactedError(RaftError):
    """The requested index was compacted away (a snapshot covers it)."""


class UnavailableError(RaftError):
    """The requested index is past the end of the log."""


class SnapshotOutOfDateError(RaftError):
    """The snapshot is older than the one storage already holds."""


__all__ = [
    "CompactedError",
    "ProposalDroppedError",
    "RaftError",
    "SnapshotOutOfDateError",
    "UnavailableError",
]
