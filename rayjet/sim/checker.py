"""Safety invariants, checked incrementally after every simulated step."""

from __future__ import annotations

from rayjet.raft import Entry, Role
from rayjet.raft.errors import CompactedError, UnavailableError


class Violation(AssertionError):
    """An invariant broke; the message says which and where."""


class Checker:
    def __init__(self) -> None:
        # (index, term) -> (data, type, previous entry's term): log matching, inductively.
        self.seen: dict[tuple[int, int], tuple[bytes, int, int | None]] = {}
        # index -> (term, data): every entry some node knows to be committed.
        self.committed: dict[int, tuple[int, bytes]] = {}
        self.max_commit = 0
        # term -> leader id
        self.leaders: dict[int, str] = {}
        # index -> digest of the applied state after that index
        self.digests: dict[int, int] = {}
        self.goal: bytes | None = None
        self.goal_committed = False
        self.reads_checked = 0

    # -- log matching ---------------------------------------------------------------------------
    def on_new_entries(self, node: str, ents: list[Entry], prev_term: int | None) -> None:
        prev = prev_term
        for e in ents:
            key = (e.index, e.term)
            val = (e.data, int(e.type), prev)
            old = self.seen.get(key)
            if old is None:
                self.seen[key] = val
            elif old[:2] != val[:2] or (old[2] is not None and prev is not None
                                        and old[2] != prev):
                raise Violation(f"log matching: {node} holds entry {e.index}@{e.term} "
                                f"{val} but another node holds {old}")
            prev = e.term

    # -- elections --------------------------------------------------------------------------------
    def on_leader(self, node: str, term: int, raft) -> None:
        who = self.leaders.get(term)
        if who == node:
            return
        if who is not None:
            raise Violation(f"two leaders in term {term}: {who} and {node}")
        self.leaders[term] = node
        # Leader completeness: a new leader holds every entry known to be committed.
        log = raft.log
        lo = log.first_index()
        for i in range(lo, self.max_commit + 1):
            rec = self.committed.get(i)
            if rec is None:
                continue
            try:
                t = log.term(i)
            except (CompactedError, UnavailableError):
                t = None
            if t != rec[0]:
                raise Violation(f"leader completeness: {node} leads term {term} but has "
                                f"term {t} at committed index {i} (committed term {rec[0]})")

    # -- commitment --------------------------------------------------------------------------------
    def on_commit(self, node: str, raft, from_index: int) -> None:
        """Check entries ``from_index..committed`` of ``node`` against what is committed."""
        log = raft.log
        hi = log.committed
        lo = max(from_index, log.first_index())
        if lo > hi:
            return
        for e in log.slice(lo, hi + 1):
            rec = self.committed.get(e.index)
            if rec is None:
                self.committed[e.index] = (e.term, e.data)
                if self.goal is not None and e.data == self.goal:
                    self.goal_committed = True
            elif rec != (e.term, e.data):
                raise Violation(f"committed entry changed: {node} commits {e.index}@{e.term} "
                                f"{e.data!r}, but {e.index}@{rec[0]} {rec[1]!r} was committed")
        if hi > self.max_commit:
            self.max_commit = hi

    # -- state machine ----------------------------------------------------------------------------
    def on_apply(self, node: str, e: Entry, digest: int) -> None:
        rec = self.committed.get(e.index)
        if rec is not None and rec != (e.term, e.data):
            raise Violation(f"{node} applied {e.index}@{e.term} {e.data!r} but the committed "
                            f"entry is {e.index}@{rec[0]} {rec[1]!r}")
        self._digest(node, e.index, digest)

    def on_restore(self, node: str, index: int, digest: int) -> None:
        self._digest(node, index, digest)

    def _digest(self, node: str, index: int, digest: int) -> None:
        old = self.digests.setdefault(index, digest)
        if old != digest:
            raise Violation(f"{node}'s state after applying up to {index} differs from another "
                            f"replica's (digest {digest:#x} vs {old:#x})")

    # -- reads --------------------------------------------------------------------------------------
    def on_read_state(self, node: str, index: int, required: int) -> None:
        self.reads_checked += 1
        if index < required:
            raise Violation(f"stale read: {node} answered a read at index {index}, but "
                            f"{required} was committed before the read began")

    def check_role(self, node: str, raft) -> None:
        if raft.role == Role.LEADER:
            self.on_leader(node, raft.term, raft)
