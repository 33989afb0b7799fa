"""Shared pieces of the data-plane tests: messages, an inbox that can be awaited, waits."""

from __future__ import annotations

import asyncio
import time

from rayjet.raft.messages import Entry, Message, MessageType

SECRET = b"cluster secret for tests"


def msg(i: int, data: bytes = b"x", frm: str = "a", to: str = "b") -> Message:
    return Message(MessageType.APP, to, frm, term=1, log_term=1, index=i,
                   entries=[Entry(1, i + 1, data)], commit=i)


def run(coro, timeout: float = 15.0):
    """Run one test's coroutine in a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def wait_until(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    """Poll a condition the code under test exposes no event for (a connection state)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Inbox:
    """A ``deliver`` callable that records batches and wakes whoever waits for them."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[Message]]] = []
        self._changed = asyncio.Event()

    def __call__(self, group: str, messages: list[Message]) -> None:
        self.batches.append((group, messages))
        self._changed.set()

    def messages(self, group: str | None = None) -> list[Message]:
        return [m for g, ms in self.batches if group in (None, g) for m in ms]

    async def wait_for(self, predicate, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    async def wait_count(self, n: int, group: str | None = None, timeout: float = 5.0) -> None:
        await self.wait_for(lambda: len(self.messages(group)) >= n, timeout)
