"""ChangeWatch: a long poll answered at the change, at its timeout, or by the check."""

from __future__ import annotations

import asyncio

import pytest

from rayjet.actors.change_watch import ChangeWatch


class Box:
    value = 0


def test_a_change_wakes_every_waiter_with_the_new_value():
    async def run():
        box = Box()
        watch = ChangeWatch(lambda: box.value)
        waiters = [asyncio.ensure_future(watch.wait_past(0, 30, lambda: None))
                   for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        box.value = 7
        watch.changed()
        return await asyncio.wait_for(asyncio.gather(*waiters), 5)

    assert asyncio.run(run()) == [7, 7, 7]


def test_a_value_already_past_answers_at_once_and_no_change_answers_at_the_timeout():
    async def run():
        box = Box()
        box.value = 3
        watch = ChangeWatch(lambda: box.value)
        assert await asyncio.wait_for(watch.wait_past(1, 30, lambda: None), 1) == 3
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await watch.wait_past(3, 0.05, lambda: None) == 3
        return loop.time() - started

    assert asyncio.run(run()) >= 0.05


def test_a_wake_without_a_change_keeps_waiting_and_the_check_may_end_it():
    class Lost(Exception):
        pass

    async def run():
        box = Box()
        watch = ChangeWatch(lambda: box.value)
        lost = False

        def check():
            if lost:
                raise Lost

        waiter = asyncio.ensure_future(watch.wait_past(0, 30, check))
        await asyncio.sleep(0)
        watch.changed()  # woken, nothing changed: it waits on
        await asyncio.sleep(0.01)
        assert not waiter.done()
        lost = True
        watch.changed()
        with pytest.raises(Lost):
            await asyncio.wait_for(waiter, 5)

    asyncio.run(run())
