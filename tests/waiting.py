"""Polling for state the code under test announces no event for (a replica caught up, a
metric exported). A poll is synchronisation: keep the interval short, never a sleep that
hopes the state arrived meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 30.0, what: str = "condition", *,
             interval: float = 0.1,
             retry_on: type[BaseException] | tuple[type[BaseException], ...] = ()) -> T:
    """Call ``check()`` every ``interval`` seconds until it returns something truthy, and
    return that. Once ``timeout`` seconds have passed, raise AssertionError naming ``what``
    and the last value (or exception) ``check`` gave.

    An exception of a type in ``retry_on`` counts as "not yet" (a replica restarting, a
    node coming back); any other propagates at once, so a broken check fails fast."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except retry_on as err:
            last = err
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} "
                                 f"(last: {last!r})")
        time.sleep(interval)


__all__ = ["wait_for"]
