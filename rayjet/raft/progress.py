"""The leader's view of each follower: how far it matches, and how fast to send to it."""

from __future__ import annotations

import enum
from collections import deque


class ProgressState(enum.Enum):
    # Probe: one append per heartbeat interval until the follower's position is found.
    PROBE = "Probe"
    # Replicate: stream appends optimistically, bounded by the inflight window.
    REPLICATE = "Replicate"
    # Snapshot: a snapshot is on its way; send nothing else until it lands.
    SNAPSHOT = "Snapshot"


class Inflights:
    """Sliding window of appends sent but not yet acknowledged (last index, bytes)."""

    __slots__ = ("max_count", "max_bytes", "_q", "bytes")

    def __init__(self, max_count: int, max_bytes: int | None = None) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._q: deque[tuple[int, int]] = deque()
        self.bytes = 0

    def add(self, index: int, size: int) -> None:
        self._q.append((index, size))
        self.bytes += size

    def free_le(self, index: int) -> None:
        q = self._q
        while q and q[0][0] <= index:
            self.bytes -= q.popleft()[1]

    def free_first_one(self) -> None:
        if self._q:
            self.bytes -= self._q.popleft()[1]

    def full(self) -> bool:
        if len(self._q) >= self.max_count:
            return True
        return self.max_bytes is not None and self.bytes >= self.max_bytes

    def count(self) -> int:
        return len(self._q)

    def reset(self) -> None:
        self._q.clear()
        self.bytes = 0


class Progress:
    __slots__ = ("match", "next", "state", "pending_snapshot", "recent_active", "probe_sent",
                 "inflights", "is_learner", "snapshot_ticks")

    def __init__(self, next_index: int, max_inflight: int, max_inflight_bytes: int | None,
                 is_learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        # A freshly added peer counts as active so check-quorum does not trip at once.
        self.recent_active = True
        self.probe_sent = False
        self.inflights = Inflights(max_inflight, max_inflight_bytes)
        self.is_learner = is_learner
        self.snapshot_ticks = 0

    def _reset_state(self, state: ProgressState) -> None:
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snapshot_ticks = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state == ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        self._reset_state(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def sent_entries(self, count: int, size: int) -> None:
        """Account for an append of ``count`` entries starting at ``self.next``."""
        if self.state == ProgressState.REPLICATE:
            if count:
                last = self.next + count - 1
                self.next = last + 1
                self.inflights.add(last, size)
        elif self.state == ProgressState.PROBE:
            self.probe_sent = True

    def maybe_update(self, n: int) -> bool:
        """The follower acknowledged index ``n``; returns whether ``match`` moved."""
        updated = False
        if self.match < n:
            self.match = n
            updated = True
            self.probe_sent = False
        self.next = max(self.next, n + 1)
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """The follower rejected an append at ``rejected``; returns False if it is stale."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                # stale, unless the follower's log now ends below its acknowledgement
                return match_hint < self.match and self.restart_from(match_hint)
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        if match_hint < self.match:
            return self.restart_from(match_hint)
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def restart_from(self, match_hint: int) -> bool:
        """The follower's log ends below what it had acknowledged: it lost its log (a
        replaced disk, a process that lost unsynced writes), or the answer is an old one
        overtaken by the acknowledgement. Believing it is safe either way (a lower
        ``match`` only costs a resend): start over from what it has, a snapshot when that
        is compacted away."""
        self.match = match_hint
        self.next = match_hint + 1
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def describe(self) -> str:
        text = f"{self.state.value} match={self.match} next={self.next}"
        if self.is_learner:
            text += " learner"
        if self.state == ProgressState.SNAPSHOT:
            text += f" pending_snap={self.pending_snapshot}"
        if self.probe_sent:
            text += " paused"
        if self.inflights.count():
            text += f" inflight={self.inflights.count()}"
        return text
