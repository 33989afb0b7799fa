"""Value types exchanged between the raft core, its storage and the application."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rayjet.raft.errors import RaftError


class EntryType(enum.IntEnum):
    NORMAL = 0
    CONF_CHANGE = 1


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    data: bytes = b""
    type: EntryType = EntryType.NORMAL

    def size(self) -> int:
        # Payload plus a small fixed cost, so empty entries still count against byte limits.
        return len(self.data) + 16

    def __reduce__(self):
        # positional pickling: entries cross between processes by the thousand
        return (_entry, (self.term, self.index, self.data, int(self.type)))


class ConfChangeType(enum.IntEnum):
    ADD_VOTER = 0
    REMOVE = 1
    ADD_LEARNER = 2


@dataclass(frozen=True, slots=True)
class ConfChange:
    """One membership step: add a voter, add a learner, or remove a node."""

    type: ConfChangeType
    node_id: str

    def encode(self) -> bytes:
        return f"{int(self.type)}:{self.node_id}".encode()

    @classmethod
    def decode(cls, data: bytes) -> ConfChange:
        kind, _, node = data.decode().partition(":")
        if not node:
            raise RaftError(f"malformed conf change payload {data!r}")
        return cls(ConfChangeType(int(kind)), node)


@dataclass(frozen=True, slots=True)
class ConfState:
    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it leaves the node."""

    term: int = 0
    vote: str | None = None
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int = 0
    term: int = 0
    conf_state: ConfState = ConfState()


@dataclass(frozen=True, slots=True)
class Snapshot:
    meta: SnapshotMeta = SnapshotMeta()
    data: bytes = b""

    @property
    def index(self) -> int:
        return self.meta.index

    @property
    def term(self) -> int:
        return self.meta.term


EMPTY_SNAPSHOT = Snapshot()


class MessageType(enum.IntEnum):
    APP = 0
    APP_RESP = 1
    VOTE = 2
    VOTE_RESP = 3
    PRE_VOTE = 4
    PRE_VOTE_RESP = 5
    HEARTBEAT = 6
    HEARTBEAT_RESP = 7
    SNAP = 8
    TIMEOUT_NOW = 9


_NAMES = {
    MessageType.APP: "MsgApp",
    MessageType.APP_RESP: "MsgAppResp",
    MessageType.VOTE: "MsgVote",
    MessageType.VOTE_RESP: "MsgVoteResp",
    MessageType.PRE_VOTE: "MsgPreVote",
    MessageType.PRE_VOTE_RESP: "MsgPreVoteResp",
    MessageType.HEARTBEAT: "MsgHeartbeat",
    MessageType.HEARTBEAT_RESP: "MsgHeartbeatResp",
    MessageType.SNAP: "MsgSnap",
    MessageType.TIMEOUT_NOW: "MsgTimeoutNow",
}


@dataclass(slots=True)
class Message:
    """A message between two raft peers.

    ``index``/``log_term`` are the entry preceding ``entries`` for MsgApp, the sender's last
    entry for votes, and the acknowledged (or rejected) index for MsgAppResp. A rejecting
    MsgAppResp carries ``reject_hint`` and ``log_term``: the largest index at or below the
    probed one whose term is at most the probed term, so the leader can skip a whole term.
    """

    type: MessageType
    to: str
    frm: str
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: list[Entry] = field(default_factory=list)
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    context: bytes = b""
    quiesce: bool = False  # a heartbeat telling an up-to-date follower to stop ticking

    def __reduce__(self):
        return (_message, (int(self.type), self.to, self.frm, self.term, self.log_term,
                           self.index, self.entries, self.commit, self.reject,
                           self.reject_hint, self.snapshot, self.context, self.quiesce))

    def size(self) -> int:
        """Roughly the bytes it carries (entries, snapshot, context) plus a fixed cost."""
        snap = 0 if self.snapshot is None else len(self.snapshot.data)
        return 64 + sum(e.size() for e in self.entries) + snap + len(self.context)

    def describe(self) -> str:
        parts = [f"{self.frm}->{self.to} {_NAMES[self.type]} Term:{self.term}"]
        t = self.type
        if t in (MessageType.APP, MessageType.VOTE, MessageType.PRE_VOTE):
            parts.append(f"Log:{self.log_term}/{self.index}")
        elif t == MessageType.APP_RESP and not self.reject:
            parts.append(f"Index:{self.index}")
        if self.reject:
            parts.append("Rejected")
            if t == MessageType.APP_RESP:
                parts.append(f"Index:{self.index} Hint:{self.log_term}/{self.reject_hint}")
        if t in (MessageType.APP, MessageType.HEARTBEAT):
            parts.append(f"Commit:{self.commit}")
        if self.entries:
            parts.append("Entries:[" + ", ".join(describe_entry(e) for e in self.entries) + "]")
        if self.snapshot is not None:
            s = self.snapshot.meta
            parts.append(f"Snapshot:{s.term}/{s.index} {describe_conf(s.conf_state)}")
        if self.context:
            parts.append(f"Context:{self.context.decode(errors='replace')}")
        if self.quiesce:
            parts.append("Quiesce")
        return " ".join(parts)


def describe_entry(e: Entry) -> str:
    if e.type == EntryType.CONF_CHANGE:
        cc = ConfChange.decode(e.data)
        return f"{e.term}/{e.index} EntryConfChange {cc.type.name.lower()} {cc.node_id}"
    return f"{e.term}/{e.index} EntryNormal {e.data.decode(errors='replace')!r}"


def describe_conf(cs: ConfState) -> str:
    text = "voters=(" + " ".join(cs.voters) + ")"
    if cs.learners:
        text += " learners=(" + " ".join(cs.learners) + ")"
    return text


class Role(enum.Enum):
    FOLLOWER = "Follower"
    PRE_CANDIDATE = "PreCandidate"
    CANDIDATE = "Candidate"
    LEADER = "Leader"


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state the application may want to observe; never persisted."""

    lead: str | None
    role: Role


@dataclass(frozen=True, slots=True)
class ReadState:
    """A confirmed linearizable read: serve it once the applied index reaches ``index``."""

    index: int
    request_ctx: bytes


@dataclass(slots=True)
class Ready:
    """Work for the application, produced by :meth:`RawNode.ready`.

    The caller handles one Ready in this order, then calls :meth:`RawNode.advance`:

    1. persist ``snapshot`` (if any), then ``entries`` (truncating any conflicting tail), then
       ``hard_state`` (if any); when ``must_sync`` is true make them durable (fsync);
    2. send ``messages`` (votes and append responses promise state persisted in step 1);
    3. install ``snapshot`` into the state machine, then apply ``committed_entries`` in order,
       calling :meth:`RawNode.apply_conf_change` for conf-change entries;
    4. serve each of ``read_states`` once the applied index reaches its index;
    5. call ``advance(ready)`` before the next ``step``/``tick``/``propose``.
    """

    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    read_states: list[ReadState] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    committed_entries: list[Entry] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    must_sync: bool = False


def _entry(term: int, index: int, data: bytes, type_: int) -> Entry:
    return Entry(term, index, data, EntryType(type_))


def _message(type_: int, *fields) -> Message:
    return Message(MessageType(type_), *fields)
