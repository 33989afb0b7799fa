"""The leader's outbox of republished messages, read by subscribers at their own pace.

Republish is core-NATS delivery: at most once, no replay. The stream leader appends every
republished message to a bounded ring; each message gets an offset that only grows. A
subscriber keeps the offset it wants next and reads from there; when it falls so far
behind that the ring overwrote messages it had not read, the read says how many it missed
(a NATS slow consumer) and goes on from the oldest message still kept.

The ring belongs to one leadership (its ``epoch``): a new leader starts an empty one, and
a subscriber that presents another epoch is moved to the start of the new leader's ring.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_CAPACITY = 10_000


@dataclass
class OutboxRead(Generic[T]):
    items: list[T] = field(default_factory=list)
    next: int = 0  # the offset to ask for next time
    dropped: int = 0  # messages overwritten before this reader saw them


class Outbox(Generic[T]):
    def __init__(self, capacity: int = DEFAULT_CAPACITY, epoch: str = "") -> None:
        if capacity < 1:
            raise ValueError("an outbox holds at least one message")
        self.epoch = epoch
        self._ring: deque[T] = deque(maxlen=capacity)
        self._end = 0  # offset of the next message appended

    @property
    def first(self) -> int:
        """Offset of the oldest message still kept."""
        return self._end - len(self._ring)

    @property
    def end(self) -> int:
        """Offset the next appended message will get (where a new subscriber starts)."""
        return self._end

    def extend(self, items: Iterable[T]) -> int:
        n = 0
        for item in items:
            self._ring.append(item)
            n += 1
        self._end += n
        return n

    def reset(self, epoch: str) -> None:
        """A new leadership: forget what the previous one held."""
        self.epoch = epoch
        self._ring.clear()
        self._end = 0

    def start_for(self, epoch: str | None, offset: int | None) -> int:
        """Where a reader presenting ``(epoch, offset)`` goes on: a new reader (no epoch)
        from now on, a reader of an earlier leadership from the start of this one."""
        if epoch is None or offset is None:
            return self._end
        if epoch != self.epoch:
            return self.first
        return min(max(offset, 0), self._end)

    def read(self, start: int, limit: int,
             wanted: Callable[[T], bool] | None = None) -> OutboxRead[T]:
        """Up to ``limit`` messages from offset ``start`` that ``wanted`` accepts."""
        out: OutboxRead[T] = OutboxRead(next=start)
        first = self.first
        if start < first:
            out.dropped = first - start
            start = first
        pos = start
        ring = self._ring
        while pos < self._end and len(out.items) < limit:
            item = ring[pos - first]
            pos += 1
            if wanted is None or wanted(item):
                out.items.append(item)
        out.next = pos
        return out


__all__ = ["DEFAULT_CAPACITY", "Outbox", "OutboxRead"]
