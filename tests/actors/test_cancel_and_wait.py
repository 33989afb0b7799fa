"""Stopping a replica waits for its background tasks even when one swallows a
cancellation (Python 3.11's asyncio.wait_for does when its inner future completes as the
cancellation arrives)."""

from __future__ import annotations

import asyncio
import contextlib

from rayjet.actors.cancelling import cancel_and_wait


async def _ends_within(stop, seconds: float) -> None:
    """``stop`` ends within ``seconds`` (waited for without cancelling it: a timeout that
    cancelled it would cancel the task it awaits once more, hiding a hang)."""
    stopper = asyncio.ensure_future(stop)
    done, _ = await asyncio.wait({stopper}, timeout=seconds)
    assert stopper in done, f"still stopping after {seconds}s"
    stopper.result()


def test_a_task_that_swallows_one_cancellation_still_ends():
    async def main():
        swallowed = []

        async def stubborn():
            while True:
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    if not swallowed:  # as wait_for does when its event was just set
                        swallowed.append(True)
                        continue
                    raise

        task = asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        await _ends_within(cancel_and_wait(task), 5)  # a plain cancel+await hangs here
        return task, swallowed

    task, swallowed = asyncio.run(main())
    assert swallowed == [True] and task.cancelled()


def test_a_timer_loop_cancelled_as_its_wake_up_event_is_set_ends():
    """The consumer timer's shape: a loop waiting on an event through wait_for. Setting the
    event and cancelling in the same turn is the race Python 3.11 loses."""
    async def main():
        wake = asyncio.Event()
        rounds = []

        async def timer():
            while True:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), 30)
                rounds.append(1)

        task = asyncio.get_running_loop().create_task(timer())
        await asyncio.sleep(0.01)
        wake.set()
        await _ends_within(cancel_and_wait(task), 5)
        return task

    assert asyncio.run(main()).cancelled()


def test_a_task_that_failed_or_finished_is_waited_for_quietly():
    async def main():
        async def fails():
            raise ValueError("boom")

        async def done():
            return 1

        failed = asyncio.get_running_loop().create_task(fails())
        finished = asyncio.get_running_loop().create_task(done())
        await asyncio.sleep(0)
        await cancel_and_wait(failed)
        await cancel_and_wait(finished)
        return failed, finished

    failed, finished = asyncio.run(main())
    assert isinstance(failed.exception(), ValueError) and finished.result() == 1
