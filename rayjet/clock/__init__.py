"""Injected time and randomness, so pure logic is deterministic under test.

Production code takes a :class:`Clock` (and a :class:`Rng` where it needs chance) instead of
calling ``time`` or ``random`` directly; the simulator and the tests pass the manual ones.
Times are integer nanoseconds since the Unix epoch (the unit of the NATS wire format).
"""

from __future__ import annotations

import random
import time
from typing import Protocol, runtime_checkable

NANOS_PER_SECOND = 1_000_000_000


@runtime_checkable
class Clock(Protocol):
    def now_ns(self) -> int:
        """Wall-clock time, ns since the epoch (timestamps on messages)."""

    def monotonic_ns(self) -> int:
        """A clock that never goes back (timeouts, ages)."""


@runtime_checkable
class Rng(Protocol):
    def randint(self, a: int, b: int) -> int: ...

    def random(self) -> float: ...


class SystemClock:
    """The real clock."""

    def now_ns(self) -> int:
        return time.time_ns()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


class ManualClock:
    """A clock that moves only when told to; both readings advance together."""

    def __init__(self, start_ns: int = 1_700_000_000 * NANOS_PER_SECOND) -> None:
        self._now = start_ns
        self._mono = 0

    def now_ns(self) -> int:
        return self._now

    def monotonic_ns(self) -> int:
        return self._mono

    def advance(self, seconds: float = 0.0, *, ns: int = 0) -> int:
        step = ns + round(seconds * NANOS_PER_SECOND)
        if step < 0:
            raise ValueError("a clock cannot go back")
        self._now += step
        self._mono += step
        return self._now

    def set(self, now_ns: int) -> None:
        if now_ns < self._now:
            raise ValueError("a clock cannot go back")
        self.advance(ns=now_ns - self._now)


def seeded_rng(seed: int) -> random.Random:
    """A private RNG (never the global one) that satisfies :class:`Rng`."""
    return random.Random(seed)


SYSTEM_CLOCK = SystemClock()

__all__ = ["NANOS_PER_SECOND", "SYSTEM_CLOCK", "Clock", "ManualClock", "Rng", "SystemClock", "seeded_rng"]
