"""The consensus core: raft as a pure, deterministic state machine.

No I/O, no clock, no global randomness: the application feeds :class:`RawNode` with
``tick()``, ``step(message)`` and ``propose(data)``, and drains :class:`Ready` values
(persist, send, apply, then ``advance``). See :mod:`rayjet.raft.rawnode` for the loop.
"""

from rayjet.raft.config import MUTATIONS, Config
from rayjet.raft.errors import (
    CompactedError,
    ProposalDroppedError,
    RaftError,
    SnapshotOutOfDateError,
    UnavailableError,
)
from rayjet.raft.messages import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ReadState,
    Ready,
    Role,
    Snapshot,
    SnapshotMeta,
    SoftState,
)
from rayjet.raft.progress import ProgressState
from rayjet.raft.rawnode import RawNode, Status
from rayjet.raft.storage import LogStorage, MemoryLogStorage, bootstrap

__all__ = [
    "MUTATIONS",
    "CompactedError",
    "ConfChange",
    "ConfChangeType",
    "ConfState",
    "Config",
    "Entry",
    "EntryType",
    "HardState",
    "LogStorage",
    "MemoryLogStorage",
    "Message",
    "MessageType",
    "ProgressState",
    "ProposalDroppedError",
    "RaftError",
    "RawNode",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotMeta",
    "SnapshotOutOfDateError",
    "SoftState",
    "Status",
    "UnavailableError",
    "bootstrap",
]
