"""The storage seam: what the raft core reads back from durable state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from rayjet.raft.errors import (
    CompactedError,
    RaftError,
    SnapshotOutOfDateError,
    UnavailableError,
)
from rayjet.raft.messages import ConfState, Entry, HardState, Snapshot, SnapshotMeta


@runtime_checkable
class LogStorage(Protocol):
    """Read side of a replica's durable raft state.

    The application writes into it while handling a Ready; the core only reads. Indexes
    below ``first_index()`` are covered by ``snapshot()``; ``term(first_index() - 1)`` is the
    snapshot's term and must still answer.
    """

    def initial_state(self) -> tuple[HardState, ConfState]: ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries in ``[lo, hi)``; at least one if the range is non-empty, then up to
        ``max_bytes``. Raises CompactedError / UnavailableError outside the log."""

    def term(self, index: int) -> int: ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def snapshot(self) -> Snapshot: ...


def limit_size(ents: list[Entry], max_bytes: int | None) -> list[Entry]:
    """Longest prefix within ``max_bytes`` (never fewer than one entry)."""
    if max_bytes is None or len(ents) <= 1:
        return ents
    total = 0
    for i, e in enumerate(ents):
        total += e.size()
        if total > max_bytes and i > 0:
            return ents[:i]
    return ents


class MemoryLogStorage:
    """An in-memory :class:`LogStorage`; also the write API the application uses."""

    def __init__(self) -> None:
        # _ents[0] is a placeholder carrying the snapshot's index and term.
        self._ents: list[Entry] = [Entry(term=0, index=0)]
        self._hard_state = HardState()
        self._snapshot = Snapshot()

    # -- LogStorage ---------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard_state, self._snapshot.meta.conf_state

    @property
    def hard_state(self) -> HardState:
        return self._hard_state

    def _offset(self) -> int:
        return self._ents[0].index

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def term(self, index: int) -> int:
        off = self._ents[0].index
        if index < off:
            raise CompactedError(f"index {index} is compacted (first kept {off})")
        if index - off >= len(self._ents):
            raise UnavailableError(f"index {index} is past the last index {self.last_index()}")
        return self._ents[index - off].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        off = self._ents[0].index
        if lo <= off:
            raise CompactedError(f"entries from {lo} are compacted (first kept {off + 1})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries up to {hi - 1} past last index {self.last_index()}")
        return limit_size(self._ents[lo - off : hi - off], max_bytes)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # -- writes ---------------------------------------------------------------------------
    def set_hard_state(self, hs: HardState) -> None:
        self._hard_state = hs

    def append(self, ents: Sequence[Entry]) -> None:
        """Append ``ents``, replacing any existing entries from ``ents[0].index`` on."""
        if not ents:
            return
        first = self.first_index()
        if ents[-1].index < first:
            return
        if ents[0].index < first:
            ents = ents[first - ents[0].index :]
        at = ents[0].index - self._ents[0].index
        if at > len(self._ents):
            raise RaftError(f"missing log entries: last {self.last_index()}, append at "
                            f"{ents[0].index}")
        del self._ents[at:]
        self._ents.extend(ents)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Replace the whole log with ``snap`` (a leader sent us a newer state)."""
        if snap.index <= self._snapshot.index and self._snapshot.index > 0:
            raise SnapshotOutOfDateError(f"snapshot {snap.index} is not newer than "
                                         f"{self._snapshot.index}")
        self._snapshot = snap
        self._ents = [Entry(term=snap.term, index=snap.index)]
        if self._hard_state.commit < snap.index:
            self._hard_state = HardState(max(self._hard_state.term, snap.term),
                                         self._hard_state.vote, snap.index)

    def create_snapshot(self, index: int, conf_state: ConfState, data: bytes) -> Snapshot:
        """Record the application's state as of ``index`` (which must be applied); at the
        snapshot's own index this replaces its data (the same state, said differently)."""
        if index < self._snapshot.index:
            raise SnapshotOutOfDateError(f"snapshot at {index} is not newer than "
                                         f"{self._snapshot.index}")
        if index > self.last_index():
            raise UnavailableError(f"snapshot index {index} past last index {self.last_index()}")
        self._snapshot = Snapshot(SnapshotMeta(index, self.term(index), conf_state), data)
        return self._snapshot

    def compact(self, index: int) -> None:
        """Drop entries up to and including ``index``; a snapshot must already cover it."""
        off = self._ents[0].index
        if index <= off:
            return
        if index > self._snapshot.index:
            raise RaftError(f"compact({index}) beyond the snapshot at {self._snapshot.index}")
        if index > self.last_index():
            raise UnavailableError(f"compact({index}) past last index {self.last_index()}")
        head = Entry(term=self._ents[index - off].term, index=index)
        self._ents = [head, *self._ents[index - off + 1 :]]

    def clone(self) -> MemoryLogStorage:
        other = MemoryLogStorage()
        other._ents = list(self._ents)
        other._hard_state = self._hard_state
        other._snapshot = self._snapshot
        return other

    def all_entries(self) -> list[Entry]:
        return self._ents[1:]


def bootstrap(storage: MemoryLogStorage, voters: Sequence[str], learners: Sequence[str] = (),
              index: int = 1, term: int = 1) -> None:
    """Give a brand-new group its first configuration as a snapshot at ``index``.

    Because the configuration lives in a snapshot rather than in the log, a node added later
    always catches up from a snapshot and so learns the full membership.
    """
    cs = ConfState(tuple(voters), tuple(learners))
    storage.apply_snapshot(Snapshot(SnapshotMeta(index, term, cs)))
    storage.set_hard_state(HardState(term=term, vote=None, commit=index))
