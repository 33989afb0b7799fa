"""Long polls on a value that changes: callers wait until it differs from what they hold.

The meta leader's catalogue is watched this way (the gateway's stream catalogue follows it):
one call outstanding per watcher, answered at the change, so nobody polls and an idle meta
group stays quiet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class ChangeWatch:
    """Waiters on ``current()``; ``changed()`` wakes them (from the event loop's thread)."""

    def __init__(self, current: Callable[[], Any]) -> None:
        self.current = current
        self._waiters: list[asyncio.Future] = []

    def changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_past(self, held: Any, timeout: float, check: Callable[[], None]) -> Any:
        """The current value once it differs from ``held``, or ``held`` after ``timeout``
        seconds. ``check()`` runs at every wake-up and may raise (leadership lost)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while (value := self.current()) == held:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return value
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                pass
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
            check()
        return value
