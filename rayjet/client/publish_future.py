"""The future ``publish_async`` returns: a ``concurrent.futures.Future`` made cheap to hold.

A standard Future builds its own Condition (a lock, a deque and six bound methods): about
ten objects the garbage collector tracks, per message. A program holding 100,000 publish
futures spent more time in collections over them (~7 us a future) than in publishing.
These futures share their publisher's Condition instead, and start RUNNING: a queued
publish is under way and cannot be taken back, so ``cancel()`` answers False as it does
for any running Future. Everything else is the standard Future's own code, so
``concurrent.futures.wait``, ``as_completed``, ``add_done_callback`` and
``asyncio.wrap_future`` work as with any other.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import _base as futures_base  # the state names Future's code reads
from typing import Any


class PublishFuture(Future):
    """A Future whose Condition is shared: ``result`` and ``exception`` wait until this one
    is done (a shared Condition also wakes them for the others' answers)."""

    def __init__(self, condition: threading.Condition,
                 message: tuple[str, bytes, dict | None]) -> None:
        # (subject, payload, headers) until it is sent (None after: not kept with the answer)
        self.message: tuple[str, bytes, dict | None] | None = message
        # the fields Future.__init__ sets, but no Condition of its own
        self._condition = condition
        self._state = futures_base.RUNNING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []
        self._row: int | None = None

    def set_row(self, acks: Any, row: int) -> None:
        """Done: the answer is row ``row`` of ``acks`` (a PubAcks), made when read."""
        self._row = row
        self.set_result(acks)

    def _wait_done(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while not self.done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                self._condition.wait(remaining)

    def result(self, timeout: float | None = None) -> Any:
        self._wait_done(timeout)
        answer = super().result(0)  # the answer, or the standard Future's TimeoutError
        return answer if self._row is None else answer[self._row]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait_done(timeout)
        return super().exception(0)
