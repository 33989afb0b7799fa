"""One simulated replica: a RawNode, its disk, and a tiny replicated state machine."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

from rayjet.raft import (
    ConfChange,
    Config,
    ConfState,
    EntryType,
    MemoryLogStorage,
    Message,
    RawNode,
    Ready,
    Snapshot,
)
from rayjet.sim.checker import Checker, Violation
from rayjet.sim.disk import Disk


def _chain(digest: int, index: int, term: int, data: bytes) -> int:
    return zlib.crc32(b"%d:%d:" % (index, term) + data, digest)


class StateMachine:
    """Applied entries folded into a checksum chain; its snapshot is (index, digest, count)."""

    def __init__(self) -> None:
        self.applied = 0
        self.digest = 0
        self.values = 0

    def encode(self) -> bytes:
        return b"%d:%d:%d" % (self.applied, self.digest, self.values)

    def restore(self, snap: Snapshot) -> None:
        self.applied = snap.index
        if snap.data:
            _, digest, values = snap.data.split(b":")
            self.digest, self.values = int(digest), int(values)
        else:
            self.digest, self.values = 0, 0


class SimNode:
    def __init__(self, node_id: str, config: Callable[[str, int, int], Config]) -> None:
        self.id = node_id
        self._config = config
        self.disk = Disk()
        self.storage: MemoryLogStorage | None = None
        self.rn: RawNode | None = None
        self.sm = StateMachine()
        self.conf_state = ConfState()
        self.incarnation = 0
        self.last_commit = 0
        self.last_term = 0
        self.checked_commit = 0
        # ctx -> commit index known cluster-wide when the read was requested
        self.reads: dict[bytes, int] = {}

    @property
    def alive(self) -> bool:
        return self.rn is not None

    def start(self, checker: Checker) -> None:
        """Boot (or reboot) from what the disk holds durably."""
        self.incarnation += 1
        self.storage = self.disk.durable.clone()
        snap = self.storage.snapshot()
        self.sm = StateMachine()
        self.sm.restore(snap)
        if snap.index:
            checker.on_restore(self.id, snap.index, self.sm.digest)
        self.conf_state = snap.meta.conf_state
        self.rn = RawNode(self._config(self.id, self.incarnation, snap.index), self.storage)
        r = self.rn.raft
        self.last_commit = r.log.committed
        self.last_term = r.term
        self.checked_commit = r.log.first_index()
        self.reads = {}

    def crash(self, rng: random.Random) -> str:
        self.rn = None
        self.storage = None
        self.reads = {}
        return self.disk.crash(rng)

    # -- the Ready loop ---------------------------------------------------------------------------
    def write(self, rd: Ready, checker: Checker) -> None:
        """Step 1 of a Ready: hand snapshot, entries and hard state to the disk (unsynced)."""
        st = self.storage
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
            self.disk.write_snapshot(rd.snapshot)
        if rd.entries:
            first = rd.entries[0].index
            prev = None if rd.snapshot is not None and rd.snapshot.index + 1 == first else \
                self._stored_term(first - 1)
            checker.on_new_entries(self.id, rd.entries, prev)
            st.append(rd.entries)
            self.disk.write_entries(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
            self.disk.write_hard_state(rd.hard_state)

    def _stored_term(self, index: int) -> int | None:
        try:
            return self.rn.raft.log.term(index)
        except Exception:
            return None

    def finish(self, rd: Ready, checker: Checker, send: Callable[[Message], None]) -> None:
        """Steps 2-5: sync, send, apply, serve reads, advance."""
        if rd.must_sync:
            self.disk.sync()
        for m in rd.messages:
            send(m)
        if rd.snapshot is not None:
            self.sm.restore(rd.snapshot)
            self.conf_state = rd.snapshot.meta.conf_state
            checker.on_restore(self.id, rd.snapshot.index, self.sm.digest)
        for e in rd.committed_entries:
            if e.index != self.sm.applied + 1:
                raise Violation(f"{self.id} applied {e.index} after {self.sm.applied}: gap")
            if e.type == EntryType.CONF_CHANGE:
                self.conf_state = self.rn.apply_conf_change(ConfChange.decode(e.data))
            elif e.data:
                self.sm.values += 1
            self.sm.applied = e.index
            self.sm.digest = _chain(self.sm.digest, e.index, e.term, e.data)
            checker.on_apply(self.id, e, self.sm.digest)
        for rs in rd.read_states:
            required = self.reads.pop(rs.request_ctx, None)
            if required is not None:
                checker.on_read_state(self.id, rs.index, required)
        self.rn.advance(rd)

    def after_step(self, checker: Checker) -> None:
        """Per-incarnation monotonicity plus the commit and leader checks."""
        r = self.rn.raft
        c = r.log.committed
        if c < self.last_commit:
            raise Violation(f"{self.id} commit index moved back from {self.last_commit} to {c}")
        if r.term < self.last_term:
            raise Violation(f"{self.id} term moved back from {self.last_term} to {r.term}")
        self.last_term = r.term
        if self.checked_commit <= c:
            checker.on_commit(self.id, r, self.checked_commit)
            self.checked_commit = c + 1
        self.last_commit = c
        checker.check_role(self.id, r)

    def create_snapshot(self, keep: int) -> bool:
        """Snapshot the applied state and compact the log, keeping ``keep`` entries."""
        st = self.storage
        if self.sm.applied <= st.snapshot().index:
            return False
        snap = st.create_snapshot(self.sm.applied, self.conf_state, self.sm.encode())
        to = max(snap.index - keep, st.first_index() - 1)
        st.compact(to)
        self.disk.write_local_snapshot(snap, to)
        return True
