"""Stopping background tasks for good."""

from __future__ import annotations

import asyncio

CANCEL_AGAIN_AFTER = 0.5  # seconds


async def cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel ``task`` and wait until it has ended. Python 3.11's ``asyncio.wait_for``
    swallows a cancellation that arrives as its inner future completes (a loop waiting on
    its wake-up event through it does), so the task is cancelled again until it ends."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_AFTER)
    if not task.cancelled():
        task.exception()  # retrieved: an error it ended with is no longer news
