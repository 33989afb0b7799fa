"""The cluster's recent advisories and metrics (``$JS.EVENT.>``), numbered, for readers that
follow them (each gateway hands them to its subscribers).

As nats-server's, they are core NATS messages: nobody who was not listening sees an old
one, unless a stream captures its subject. The ring keeps the last ``capacity`` so a reader
that polls again finds what came meanwhile; a reader that fell further behind is told how
many it missed."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    subject: str
    payload: bytes  # the JSON body


class EventRing:
    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._events: deque[Event] = deque(maxlen=capacity)
        self.last_seq = 0

    def append(self, subject: str, payload: bytes) -> Event:
        self.last_seq += 1
        event = Event(self.last_seq, subject, payload)
        self._events.append(event)
        return event

    def since(self, after: int, limit: int = 1000) -> tuple[list[Event], int]:
        """The events after seq ``after`` (at most ``limit``), and how many of those are no
        longer kept (a reader that fell behind the ring)."""
        if after >= self.last_seq or not self._events:
            return [], 0
        first = self._events[0].seq
        missed = max(first - after - 1, 0)
        start = max(after + 1 - first, 0)
        out = [self._events[i] for i in range(start, min(start + limit, len(self._events)))]
        return out, missed
