"""The raft log: durable entries (in storage) plus an unstable tail not yet persisted."""

from __future__ import annotations

from collections.abc import Sequence

from rayjet.raft.errors import CompactedError, RaftError, UnavailableError
from rayjet.raft.messages import Entry, Snapshot
from rayjet.raft.storage import LogStorage, limit_size


class Unstable:
    """Entries (and possibly a snapshot) handed out in a Ready but not yet persisted.

    ``entries[i]`` has index ``offset + i``.
    """

    __slots__ = ("snapshot", "entries", "offset")

    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset

    def maybe_first_index(self) -> int | None:
        return self.snapshot.index + 1 if self.snapshot is not None else None

    def maybe_last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.index
        return None

    def maybe_term(self, i: int) -> int | None:
        if i < self.offset:
            if self.snapshot is not None and self.snapshot.index == i:
                return self.snapshot.term
            return None
        k = i - self.offset
        if k >= len(self.entries):
            if not self.entries and self.snapshot is not None and self.snapshot.index == i:
                return self.snapshot.term
            return None
        return self.entries[k].term

    def stable_to(self, i: int, t: int) -> None:
        # The term check guards against the tail having been replaced since the Ready.
        if i < self.offset or self.maybe_term(i) != t:
            return
        del self.entries[: i + 1 - self.offset]
        self.offset = i + 1

    def stable_snap_to(self, i: int) -> None:
        if self.snapshot is not None and self.snapshot.index == i:
            self.snapshot = None

    def restore(self, snap: Snapshot) -> None:
        self.offset = snap.index + 1
        self.entries = []
        self.snapshot = snap

    def truncate_and_append(self, ents: Sequence[Entry]) -> None:
        after = ents[0].index
        if after == self.offset + len(self.entries):
            self.entries.extend(ents)
        elif after <= self.offset:
            # Replaces everything unstable; storage will truncate its own tail on persist.
            self.offset = after
            self.entries = list(ents)
        else:
            del self.entries[after - self.offset :]
            self.entries.extend(ents)

    def slice(self, lo: int, hi: int) -> list[Entry]:
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    def __init__(self, storage: LogStorage, max_applying_bytes: int | None = None) -> None:
        self.storage = storage
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(last + 1)
        self.committed = first - 1
        self.applied = first - 1
        self.max_applying_bytes = max_applying_bytes

    # -- indexes and terms ------------------------------------------------------------------
    def first_index(self) -> int:
        i = self.unstable.maybe_first_index()
        return i if i is not None else self.storage.first_index()

    def last_index(self) -> int:
        i = self.unstable.maybe_last_index()
        return i if i is not None else self.storage.last_index()

    def term(self, i: int) -> int:
        """Term of entry ``i``; raises CompactedError / UnavailableError outside the log."""
        t = self.unstable.maybe_term(i)
        if t is not None:
            return t
        if i < self.first_index() - 1:
            raise CompactedError(f"index {i} is compacted")
        if i > self.last_index():
            raise UnavailableError(f"index {i} is past the last index {self.last_index()}")
        return self.storage.term(i)

    def term_or_zero(self, i: int) -> int:
        try:
            return self.term(i)
        except (CompactedError, UnavailableError):
            return 0

    def last_term(self) -> int:
        return self.term(self.last_index())

    def match_term(self, i: int, t: int) -> bool:
        try:
            return self.term(i) == t
        except (CompactedError, UnavailableError):
            return False

    def is_up_to_date(self, last_index: int, term: int) -> bool:
        """Raft's election restriction: is a candidate's log at least as new as ours?"""
        lt = self.last_term()
        return term > lt or (term == lt and last_index >= self.last_index())

    # -- appending ----------------------------------------------------------------------------
    def maybe_append(self, index: int, log_term: int, committed: int,
                     ents: Sequence[Entry]) -> int | None:
        """Follower side of MsgApp; returns the last index now known to match the leader."""
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(ents)
        ci = self.find_conflict(ents)
        if ci:
            if ci <= self.committed:
                raise RaftError(f"entry {ci} conflicts with committed entry "
                                f"(committed {self.committed})")
            self.append(ents[ci - (index + 1) :])
        self.commit_to(min(committed, last_new))
        return last_new

    def append(self, ents: Sequence[Entry]) -> int:
        if not ents:
            return self.last_index()
        if ents[0].index - 1 < self.committed:
            raise RaftError(f"append at {ents[0].index} would rewrite committed entries "
                            f"(committed {self.committed})")
        self.unstable.truncate_and_append(ents)
        return self.last_index()

    def find_conflict(self, ents: Sequence[Entry]) -> int:
        """Index of the first entry that is new or disagrees with our log, else 0."""
        last = self.last_index()
        for e in ents:
            if e.index > last:
                return e.index
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest ``(i, term(i))`` with ``i <= index`` and ``term(i) <= term``.

        Lets a leader skip every entry of a term the follower never had in one round trip.
        """
        i = min(index, self.last_index())
        while i > 0:
            try:
                t = self.term(i)
            except CompactedError:
                return i, 0
            if t <= term:
                return i, t
            i -= 1
        return 0, 0

    # -- reading -----------------------------------------------------------------------------
    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise CompactedError(f"entries from {lo} are compacted")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"slice up to {hi - 1} past last index {self.last_index()}")
        off = self.unstable.offset
        out: list[Entry] = []
        if lo < off:
            out = self.storage.entries(lo, min(hi, off), max_bytes)
            if len(out) < min(hi, off) - lo:
                return out  # storage hit the byte limit
        if hi > off:
            tail = self.unstable.slice(max(lo, off), hi)
            out = out + tail if out else tail
        return limit_size(out, max_bytes)

    def entries(self, i: int, max_bytes: int | None = None) -> list[Entry]:
        if i > self.last_index():
            return []
        return self.slice(i, self.last_index() + 1, max_bytes)

    def unstable_entries(self) -> list[Entry]:
        return list(self.unstable.entries)

    def has_next_committed(self) -> bool:
        return self.committed > max(self.applied, self.first_index() - 1)

    def next_committed(self) -> list[Entry]:
        lo = max(self.applied + 1, self.first_index())
        if self.committed + 1 <= lo:
            return []
        return self.slice(lo, self.committed + 1, self.max_applying_bytes)

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    # -- moving the pointers -------------------------------------------------------------------
    def commit_to(self, c: int) -> None:
        if c > self.committed:
            if c > self.last_index():
                raise RaftError(f"commit {c} is past the last index {self.last_index()}")
            self.committed = c

    def maybe_commit(self, max_index: int, term: int, any_term: bool = False) -> bool:
        # Only an entry of the leader's own term may be committed by counting replicas;
        # earlier ones become committed with it (Raft paper, section 5.4.2).
        if max_index > self.committed and (any_term or self.term_or_zero(max_index) == term):
            self.commit_to(max_index)
            return True
        return False

    def applied_to(self, i: int) -> None:
        if i and i > self.applied:
            if i > self.committed:
                raise RaftError(f"applied {i} is past committed {self.committed}")
            self.applied = i

    def stable_to(self, i: int, t: int) -> None:
        self.unstable.stable_to(i, t)

    def stable_snap_to(self, i: int) -> None:
        self.unstable.stable_snap_to(i)

    def restore(self, snap: Snapshot) -> None:
        self.committed = snap.index
        self.unstable.restore(snap)
