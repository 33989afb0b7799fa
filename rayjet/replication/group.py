"""Drive one raft replica: the Ready loop between the raft core, the log, and the state machine.

Pure and synchronous (no Ray, no threads): the actor shell calls ``tick``, ``step``,
``propose`` and then ``process``, and does the I/O ``process`` hands back (messages to send,
proposals to answer). Order inside ``process`` follows the raft contract: persist (and fsync
when needed) before sending messages that promise persisted state, then apply.

Replay is exact, so state machines need not be idempotent: at start-up the machine is
restored from the last snapshot (``restore(data, full=False)``, with ``b""`` when there is
none) and must roll its own durable state back to that point (a stream store truncates to
the sequence the snapshot recorded); the log then replays every entry after it. A snapshot
shipped to a lagging follower is re-cut at the leader's applied index first.

A machine may answer a snapshot with "copy me first" (``restore`` returns True: a stream's
snapshot carries state, not its messages). The group then keeps taking part in raft
(appending, acknowledging, voting) but applies nothing and does not campaign until the
shell has copied the state from a peer and called :meth:`ReplicaGroup.finish_copy` with the
peer's applied index; the log is applied from there. A local snapshot follows at once, so
a restart before it makes the copy again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rayjet.errors import APIError, StoreFailedError, StoreLimitError
from rayjet.raft import (
    ConfChange,
    Config,
    ConfState,
    EntryType,
    Message,
    MessageType,
    ProposalDroppedError,
    RawNode,
    Role,
    Snapshot,
    bootstrap,
)


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> Any:
        """Apply one committed entry; the value (or exception) answers its proposer."""

    def snapshot(self) -> bytes:
        """Compact state for log compaction; durable data lives in the machine's own store."""

    def full_snapshot(self) -> bytes:
        """Everything a new replica needs (sent to followers behind the compaction point)."""

    def restore(self, data: bytes, *, full: bool) -> bool | None:
        """Load a snapshot: ``full`` from the leader, otherwise our own compact one. True
        asks the group to wait for a copy of the state from a peer (see the module doc)."""

    def sync(self) -> None:
        """Make applied state durable (before the log entries holding it are dropped)."""


class ReplicaFailedError(StoreFailedError):
    """This replica could not apply a committed entry (a disk error, damage found while
    applying): it stopped taking part in its group rather than diverge from it."""


def is_local_failure(exc: BaseException) -> bool:
    """Whether an exception raised by applying an entry is this replica's own trouble
    (every replica would not raise it alike) rather than a refusal for the proposer."""
    if isinstance(exc, StoreFailedError):
        return not isinstance(exc, StoreLimitError)
    return not isinstance(exc, APIError)


@dataclass(slots=True)
class Applied:
    index: int
    term: int
    result: Any  # a value or an Exception


@dataclass(slots=True)
class Output:
    """What one ``process`` call produced, for the shell to act on."""

    messages: list[Message] = field(default_factory=list)
    applied: list[Applied] = field(default_factory=list)
    conf_changes: list[tuple[ConfChange, ConfState]] = field(default_factory=list)
    read_states: list[tuple[int, bytes]] = field(default_factory=list)
    # the log holds entries not yet fsynced: make it durable (ReplicaGroup.sync) before
    # sending the append answers among ``messages`` (they acknowledge those entries), then
    # process again (a leader counts its own copy once synced; see ReplicaGroup.defer_sync)
    sync_first: bool = False
    role: Role | None = None  # set when the role changed
    leader: str | None = None
    snapshots_sent: list[str] = field(default_factory=list)  # peers to report_snapshot for


@dataclass
class GroupOptions:
    election_tick: int = 10
    heartbeat_tick: int = 1
    sync_always: bool = False  # fsync entries before acknowledging (or applying) them
    snapshot_every: int = 8192  # applied entries between compactions
    snapshot_bytes: int = 16 << 20  # or applied entry bytes, whichever comes first: the
    # raft log keeps its entries since the last compaction in memory, and a restart
    # applies them again (16 MB of 128-byte messages: about a second)
    max_size_per_msg: int = 8 << 20
    max_inflight_msgs: int = 64
    notify_commit: bool = True  # see rayjet.raft.Config.notify_commit
    quiesce_after: int = 0  # idle ticks before the group goes quiet (rayjet.raft.Config)
    seed: int | None = None


class ReplicaGroup:
    def __init__(self, node_id: str, storage: Any, sm: StateMachine, *,
                 voters: Sequence[str] = (), options: GroupOptions | None = None) -> None:
        self.id = node_id
        self.storage = storage
        self.sm = sm
        self.opts = options or GroupOptions()
        hard, conf = storage.initial_state()
        self.fresh = False  # bootstrapped now: an empty replica of its first membership
        if not conf.voters and not conf.learners and storage.last_index() == 0:
            if not voters:
                raise ProposalDroppedError("a new replica needs its voters to bootstrap")
            bootstrap(storage, sorted(voters))
            storage.sync()
            self.fresh = True
        # the log was lost to damage and this replica rejoins empty (see rayjet.raft's
        # Raft.rejoining): it says so until it has caught up with a leader
        self.rejoining = bool(getattr(storage, "rejoining", False))
        if self.rejoining:
            self.fresh = False  # never the new group's first leader
        hard = storage.initial_state()[0]
        self._vote = (hard.term, hard.vote)  # the term and vote known to be durable
        snap = storage.snapshot()
        # roll back to the snapshot; the log replays the rest
        copying = bool(sm.restore(snap.data, full=False))
        self.conf_state = storage.initial_state()[1]
        self.snapshot_index = snap.meta.index
        rng = random.Random(self.opts.seed if self.opts.seed is not None else node_id)
        self.node = RawNode(Config(
            id=node_id, election_tick=self.opts.election_tick,
            heartbeat_tick=self.opts.heartbeat_tick, applied=snap.meta.index,
            max_size_per_msg=self.opts.max_size_per_msg,
            max_inflight_msgs=self.opts.max_inflight_msgs,
            notify_commit=self.opts.notify_commit, quiesce_after=self.opts.quiesce_after,
            rng=rng), storage)
        self.node.raft.rejoining = self.rejoining
        self.applied = snap.meta.index
        self._applied_bytes = 0  # entry data applied since the last compaction
        self._handed = snap.meta.index  # the last committed entry raft handed us
        self._snapshot_due = False  # take a local snapshot as soon as the log allows
        self.copying = False
        self._set_copying(copying)
        # the shell batches fsyncs: entries are handed to the OS in ``process`` and one
        # ``sync`` covers every process call of an event-loop turn (group commit); off, each
        # process call fsyncs entries itself before returning its messages
        self._defer_sync = False
        self.sync_pending = False
        last = storage.last_index()
        self.node.raft.persisted_to(last, storage.term(last))  # what was loaded is durable
        self.failure: str | None = None  # why this replica stopped (see ReplicaFailedError)
        self.role = Role.FOLLOWER
        self.leader: str | None = None

    # -- inputs -----------------------------------------------------------------------------
    def tick(self) -> None:
        self.node.tick()

    def step(self, messages: Sequence[Message]) -> None:
        for m in messages:
            self.node.step(m)

    def campaign(self) -> None:
        self.node.campaign()

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append ``data``; returns (index, term) to match the answer in ``Output.applied``."""
        index = self.node.propose(data)
        return index, self.node.raft.term

    def propose_conf_change(self, cc: ConfChange) -> tuple[int, int]:
        index = self.node.propose_conf_change(cc)
        return index, self.node.raft.term

    def transfer_leader(self, to: str) -> None:
        self.node.transfer_leader(to)

    def read_index(self, ctx: bytes) -> None:
        self.node.read_index(ctx)

    def report_unreachable(self, peer: str) -> None:
        self.node.report_unreachable(peer)

    def report_snapshot(self, peer: str, ok: bool) -> None:
        self.node.report_snapshot(peer, ok)

    def report_peer_down(self, peer: str) -> None:
        self.node.report_peer_down(peer)

    @property
    def quiet(self) -> bool:
        return self.node.quiet

    def wake(self) -> None:
        self.node.wake()

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    @property
    def term(self) -> int:
        return self.node.raft.term

    # -- the Ready loop ---------------------------------------------------------------------
    @contextlib.contextmanager
    def stop_on_disk_error(self) -> Iterator[None]:
        """Run a step that writes this replica's files: a disk error (EIO, ENOSPC) stops
        the replica (``failure``; ReplicaFailedError) instead of leaving it to go on over
        files that may not hold what it thinks they hold; a restart reopens it."""
        try:
            yield
        except OSError as exc:
            if self.failure is None:
                self.failure = f"disk error: {type(exc).__name__}: {exc}"
            raise ReplicaFailedError(spec="STREAM_STORE_FAILED",
                                     description=f"replica {self.id} stopped: {self.failure}"
                                     ) from exc

    def process(self) -> Output:
        if self.failure is not None:
            raise ReplicaFailedError(spec="STREAM_STORE_FAILED",
                                     description=f"replica {self.id} stopped: {self.failure}")
        with self.stop_on_disk_error():
            return self._process()

    def _process(self) -> Output:
        out = Output()
        while self.node.has_ready():
            rd = self.node.ready()
            if rd.soft_state is not None:
                self.role, self.leader = rd.soft_state.role, rd.soft_state.lead
                out.role, out.leader = self.role, self.leader
            self.storage.save(rd.hard_state, rd.entries, rd.snapshot)
            # everything reaches the OS before messages leave (a killed process loses
            # nothing); a new term or vote and snapshots are fsynced, also when entries
            # travel with them (etcd's MustSync), entries alone only under "always"
            vote = (rd.hard_state.term, rd.hard_state.vote) if rd.hard_state else self._vote
            if vote != self._vote or rd.snapshot is not None:
                self.sync()
                self._vote = vote
            elif self.opts.sync_always and rd.entries:
                if self.defer_sync:
                    self.storage.flush()
                    self.sync_pending = out.sync_first = True
                else:
                    self.sync()
            elif rd.hard_state is not None or rd.entries:
                self.storage.flush()
            for m in rd.messages:
                if m.type == MessageType.SNAP and m.snapshot is not None:
                    m = dataclasses.replace(m, snapshot=self._shippable_snapshot())
                    out.snapshots_sent.append(m.to)
                out.messages.append(m)
            if rd.snapshot is not None and rd.snapshot.meta.index > 0:
                self._set_copying(bool(self.sm.restore(rd.snapshot.data, full=True)))
                self.conf_state = rd.snapshot.meta.conf_state
                self.applied = self._handed = rd.snapshot.meta.index
                self.snapshot_index = rd.snapshot.meta.index
                self._applied_bytes = 0
            for entry in rd.committed_entries:
                self._handed = entry.index
                if entry.type == EntryType.CONF_CHANGE:
                    # membership is raft's own state: applied even while copying
                    result = self._apply_conf_change(entry.data, out)
                    if self.copying or entry.index <= self.applied:
                        continue
                elif self.copying or entry.index <= self.applied:
                    continue  # the copy will hold it (or already did)
                elif entry.data:
                    result = self._apply(entry.index, entry.data)
                else:
                    result = None  # the empty entry a new leader appends
                out.applied.append(Applied(entry.index, entry.term, result))
                self.applied = entry.index
                self._applied_bytes += len(entry.data)
            out.read_states.extend((rs.index, rs.request_ctx) for rs in rd.read_states)
            self.node.advance(rd)
        if self.rejoining and not self.node.raft.rejoining:
            self.storage.rejoined()  # durable: a restart from here votes again
            self.rejoining = False
        self._maybe_compact()
        return out

    def _apply(self, index: int, data: bytes) -> Any:
        """Apply one entry: its value, or the refusal every replica makes alike (the
        proposer gets it). Anything else (a disk error, damage) stops this replica: it
        applies, acknowledges and votes no more, so it cannot diverge from its group; a
        restart reopens it from its files."""
        try:
            return self.sm.apply(index, data)
        except Exception as exc:
            if not is_local_failure(exc):
                return exc
            self.failure = f"applying entry {index} failed: {type(exc).__name__}: {exc}"
            raise ReplicaFailedError(spec="STREAM_STORE_FAILED",
                                     description=f"replica {self.id} stopped: {self.failure}"
                                     ) from exc

    @property
    def defer_sync(self) -> bool:
        return self._defer_sync

    @defer_sync.setter
    def defer_sync(self, on: bool) -> None:
        # the leader's appends leave before its own fsync; its own copy counts toward a
        # commit once synced (a group of one commits only then)
        self._defer_sync = on
        self.node.raft.persist_async = on

    def sync(self) -> None:
        """Make everything ``process`` wrote durable (what ``Output.sync_first`` asks);
        a leader may commit more now (run ``process`` again)."""
        with self.stop_on_disk_error():
            self.storage.sync()
        self.sync_pending = False
        last = self.storage.last_index()
        self.node.raft.persisted_to(last, self.storage.term(last))

    def _apply_conf_change(self, data: bytes, out: Output) -> ConfState:
        cc = ConfChange.decode(data)
        self.conf_state = self.node.apply_conf_change(cc)
        out.conf_changes.append((cc, self.conf_state))
        return self.conf_state

    def _set_copying(self, copying: bool) -> None:
        self.copying = copying
        self.node.raft.campaign_allowed = not copying  # a copying replica must not lead

    def finish_copy(self, index: int) -> list[Applied]:
        """The machine now holds the state as of ``index`` (copied from a peer that had
        applied that far): apply the committed entries past it that the log already has."""
        if index < self.applied:
            raise ValueError(f"a copy at {index} is older than the snapshot at {self.applied}")
        with self.stop_on_disk_error():
            return self._finish_copy(index)

    def _finish_copy(self, index: int) -> list[Applied]:
        self._set_copying(False)
        self.applied = index
        done: list[Applied] = []
        if index < self._handed:
            for entry in self.storage.entries(index + 1, self._handed + 1):
                if entry.type == EntryType.CONF_CHANGE:
                    result: Any = self.conf_state  # applied when raft handed it over
                elif entry.data:
                    result = self._apply(entry.index, entry.data)
                else:
                    result = None
                done.append(Applied(entry.index, entry.term, result))
                self.applied = entry.index
        self._snapshot_due = True
        self._maybe_compact()
        return done

    def _maybe_compact(self) -> None:
        if self.copying:
            return  # the entries past the snapshot are not applied yet
        if self._snapshot_due:
            # our own snapshot replaces the installed one (at the same index if nothing
            # was applied since), once the log holds our applied index as committed
            if self.node.raft.log.committed >= self.applied <= self.storage.last_index():
                self._compact(recut=True)
                self._snapshot_due = False
            return
        if (self.applied - self.snapshot_index >= self.opts.snapshot_every
                or self._applied_bytes >= self.opts.snapshot_bytes):
            self._compact()

    def _compact(self, recut: bool = False) -> None:
        if self.applied < self.snapshot_index or (self.applied == self.snapshot_index
                                                  and not recut):
            return
        self.storage.sync()  # the log first: the store must never keep a change its log lost
        self.sm.sync()  # the store must hold what the dropped entries carried
        self.storage.create_snapshot(self.applied, self.conf_state, self.sm.snapshot())
        self.storage.compact(self.applied)
        scrubbed = getattr(self.sm, "take_scrubbed", None)
        if scrubbed is not None and scrubbed():
            self.storage.rewrite()  # erased or purged payloads leave the log with their entries
        self.storage.sync()
        self.snapshot_index = self.applied
        self._applied_bytes = 0

    def _shippable_snapshot(self) -> Snapshot:
        """A snapshot at the applied index carrying the machine's full state."""
        self._compact()
        snap = self.storage.snapshot()
        return Snapshot(snap.meta, self.sm.full_snapshot())

    def status(self) -> dict[str, Any]:
        st = self.node.status()
        return {"id": st.id, "role": st.role.value, "term": st.term, "leader": st.lead,
                "commit": st.commit, "applied": self.applied, "last_index": st.last_index,
                "first_index": self.storage.first_index(), "snapshot_index": self.snapshot_index,
                "copying": self.copying, "quiet": self.quiet, "rejoining": self.rejoining,
                "failure": self.failure,
                "voters": list(st.conf_state.voters), "learners": list(st.conf_state.learners),
                "progress": st.progress,
                # why a follower has or has not stood for election (liveness reports)
                "election": {"elapsed": self.node.raft.election_elapsed,
                             "timeout": self.node.raft.randomized_election_timeout,
                             "vote": self.node.raft.vote}}
