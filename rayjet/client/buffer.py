"""A message buffer between a subscription's background thread and its reader.

``queue.Queue`` takes a lock and wakes a waiter for every item; a push poll brings up to
thousands of messages at once. Here the poller appends a whole poll with one
``deque.extend`` (atomic in CPython) and wakes readers once; a reader pops without a lock
while messages are there and only waits on the condition when the buffer is empty.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_EMPTY = object()


class MsgBuffer:
    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._ready = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> None:
        self.put_many((item,))

    def put_many(self, items: Iterable[Any]) -> None:
        self._items.extend(items)
        with self._ready:
            self._ready.notify_all()

    def put_back(self, item: Any) -> None:
        """Return ``item`` to the front (an end marker that every reader must see)."""
        self._items.appendleft(item)
        with self._ready:
            self._ready.notify_all()

    def get(self, timeout: float | None = None) -> Any:
        """The oldest item; raises ``TimeoutError`` (the builtin) after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self._items.popleft()
            except IndexError:
                pass
            with self._ready:
                if self._items:
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError
                self._ready.wait(left)


def until_quiet(next_msg: Callable[[float | None], Any],
                timeout: float | None) -> Iterator[Any]:
    """``next_msg(timeout)`` again and again until one waits in vain (a subscription's
    ``messages()``)."""
    while True:
        try:
            yield next_msg(timeout)
        except TimeoutError:  # rayjet's TimeoutError is one too
            return


__all__ = ["MsgBuffer", "until_quiet"]
