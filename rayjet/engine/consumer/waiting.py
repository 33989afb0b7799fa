"""Waiting pull requests of a consumer leader (leader-local, never replicated).

Requests are served round robin, one message at a time: the request at the head gets the
next message and, if it still wants more, moves to the back (as nats-server's wait queue).
A request ends when its batch is full, its max_bytes cannot fit the next message, it
expires (408), or, for no_wait, the stream has nothing more for it (404).

With the ``prioritized`` priority policy the queue stays sorted by request priority (lower
first, arrival order within a priority), so round robin happens within the lowest priority
that is waiting. The engine may serve a request other than the head (priority groups);
:meth:`WaitQueue.served` and :meth:`WaitQueue.remove` take any waiting request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rayjet.engine.consumer.types import RequestStatus

NO_MESSAGES = (404, "No Messages")
REQUEST_TIMEOUT = (408, "Request Timeout")
REQUESTS_PENDING = (408, "Requests Pending")
EXCEEDED_MAX_WAITING = (409, "Exceeded MaxWaiting")
MAX_BYTES_EXCEEDED = (409, "Message Size Exceeds MaxBytes")
BATCH_COMPLETED = (409, "Batch Completed")
LEADERSHIP_CHANGE = (409, "Leadership Change")
CONSUMER_DELETED = (409, "Consumer Deleted")
PUSH_BASED = (409, "Consumer is push based")
# a waiting pull carries a pin id that is no longer the consumer's pin
WRONG_PIN_ID = (423, "Nats-Wrong-Pin-Id")
IDLE_HEARTBEAT = (100, "Idle Heartbeat")


@dataclass(slots=True, eq=False)  # identity: two requests are never "the same"
class Waiting:
    reply: str
    n: int  # messages still wanted
    b: int  # bytes still allowed (0: no max_bytes)
    expires_ns: int  # 0: never
    no_wait: bool
    hb_ns: int  # heartbeat interval, 0: none
    hb_next_ns: int
    received_ns: int
    d: int = 0  # messages delivered so far
    # priority groups
    priority: int = 0
    min_pending: int = 0
    min_ack_pending: int = 0
    pin: str = ""  # the pin id the request carries (set when it gets pinned)

    def status(self, code_desc: tuple[int, str], with_pending: bool = True) -> RequestStatus:
        code, desc = code_desc
        if not with_pending:
            return RequestStatus(self.reply, code, desc)
        return RequestStatus(self.reply, code, desc, self.n, self.b)


class WaitQueue:
    def __init__(self, max_waiting: int, *, prioritized: bool = False) -> None:
        self.max_waiting = max_waiting
        self.prioritized = prioritized
        self.items: deque[Waiting] = deque()
        self.last_ns = 0  # last time a request arrived or was served (inactivity)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def full(self) -> bool:
        return self.max_waiting > 0 and len(self.items) >= self.max_waiting

    def add(self, w: Waiting) -> bool:
        if self.full:
            return False
        self._enqueue(w)
        return True

    def _enqueue(self, w: Waiting) -> None:
        items = self.items
        if not self.prioritized or not items or items[-1].priority <= w.priority:
            items.append(w)
            return
        # behind every request of the same or a lower priority number
        i = len(items)
        while i > 0 and items[i - 1].priority > w.priority:
            i -= 1
        items.insert(i, w)

    def head(self) -> Waiting | None:
        return self.items[0] if self.items else None

    def served(self, w: Waiting) -> None:
        """``w`` got one message: drop it when done, else send it to the back (of its
        priority, when prioritized)."""
        self.remove(w)
        if w.n > 0:
            self._enqueue(w)

    def remove(self, w: Waiting) -> None:
        items = self.items
        if items and items[0] is w:
            items.popleft()
            return
        for i, x in enumerate(items):
            if x is w:
                del items[i]
                return

    def remove_reply(self, reply: str) -> bool:
        """Drop the request answering to ``reply`` (its client left); False if none waits."""
        for w in self.items:
            if w.reply == reply:
                self.remove(w)
                return True
        return False

    def drop_head(self) -> None:
        self.items.popleft()

    def wanted(self) -> int:
        return sum(w.n for w in self.items)

    def expire(self, now: int) -> list[RequestStatus]:
        """408 for requests past their expiry; idle heartbeats that are due."""
        out: list[RequestStatus] = []
        keep: deque[Waiting] = deque()
        for w in self.items:
            if w.expires_ns and now >= w.expires_ns:
                out.append(w.status(REQUEST_TIMEOUT))
                continue
            if w.hb_ns and now >= w.hb_next_ns:
                out.append(w.status(IDLE_HEARTBEAT, with_pending=False))
                w.hb_next_ns = now + w.hb_ns
            keep.append(w)
        if len(keep) != len(self.items):
            self.last_ns = max(self.last_ns, now)
        self.items = keep
        return out

    def end_of_stream(self) -> list[RequestStatus]:
        """Nothing more to deliver: no_wait requests end (404), unless one that has an
        expiry and got nothing yet, which waits for its expiry."""
        out: list[RequestStatus] = []
        keep: deque[Waiting] = deque()
        for w in self.items:
            if w.no_wait and (not w.expires_ns or w.d > 0):
                out.append(w.status(NO_MESSAGES, with_pending=False))
                continue
            keep.append(w)
        self.items = keep
        return out

    def next_deadline(self) -> int:
        """The earliest expiry or heartbeat among waiting requests (0: none)."""
        best = 0
        for w in self.items:
            for t in (w.expires_ns, w.hb_next_ns if w.hb_ns else 0):
                if t and (not best or t < best):
                    best = t
        return best

    def clear(self, code_desc: tuple[int, str] | None = None) -> list[RequestStatus]:
        out = [w.status(code_desc) for w in self.items] if code_desc else []
        self.items.clear()
        return out


__all__ = [
    "BATCH_COMPLETED", "CONSUMER_DELETED", "EXCEEDED_MAX_WAITING", "IDLE_HEARTBEAT",
    "LEADERSHIP_CHANGE", "MAX_BYTES_EXCEEDED", "NO_MESSAGES", "PUSH_BASED", "REQUESTS_PENDING",
    "REQUEST_TIMEOUT", "WRONG_PIN_ID", "WaitQueue", "Waiting",
]
