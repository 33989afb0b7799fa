"""A simulated network: delay, reordering, loss, duplication and partitions."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rayjet.raft import Message


@dataclass
class NetworkFaults:
    drop: float = 0.0
    duplicate: float = 0.0
    max_delay: int = 0  # in ticks; 0 delivers within the tick it was sent


@dataclass
class Network:
    rng: random.Random
    faults: NetworkFaults = field(default_factory=NetworkFaults)
    # Directed links that lose everything: (from, to).
    blocked: set[tuple[str, str]] = field(default_factory=set)
    _queue: dict[int, list[Message]] = field(default_factory=dict)
    sent: int = 0
    dropped: int = 0
    duplicated: int = 0

    def send(self, m: Message, now: int) -> bool:
        """Queue ``m``; returns False when it is lost on the way."""
        self.sent += 1
        f = self.faults
        if f.drop and self.rng.random() < f.drop:
            self.dropped += 1
            return False
        copies = 1
        if f.duplicate and self.rng.random() < f.duplicate:
            copies = 2
            self.duplicated += 1
        for _ in range(copies):
            at = now + (self.rng.randint(0, f.max_delay) if f.max_delay else 0)
            self._queue.setdefault(at, []).append(m)
        return True

    def due(self, now: int) -> list[Message]:
        """Messages to deliver now, in a random order."""
        out: list[Message] = []
        for t in sorted(k for k in self._queue if k <= now):
            out.extend(self._queue.pop(t))
        self.rng.shuffle(out)
        return out

    def is_blocked(self, frm: str, to: str) -> bool:
        return (frm, to) in self.blocked

    def partition(self, groups: list[list[str]]) -> None:
        """Cut every link between different groups (both directions)."""
        self.blocked = set()
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        self.blocked.add((x, y))
                        self.blocked.add((y, x))

    def block_one_way(self, frm: str, to: str) -> None:
        self.blocked.add((frm, to))

    def heal(self) -> None:
        self.blocked = set()

    def in_flight(self) -> int:
        return sum(len(v) for v in self._queue.values())
