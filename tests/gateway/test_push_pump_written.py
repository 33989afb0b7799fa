"""PushPump.written: a consumer info waits for the deliveries it counts to be written out
(released as the pump writes them, or when it ends), and gives up after its timeout."""

from __future__ import annotations

import asyncio

from rayjet.gateway.pushing import PushPump


def test_written_waits_for_the_pumps_writes_and_gives_up_after_its_timeout():
    async def run():
        pump = PushPump(None, "S", "C", {"deliver_subject": "d"})
        pump.last_cseq = 3
        await pump.written(3, 0.01)  # already out: at once
        waiting = asyncio.ensure_future(pump.written(5, 5.0))
        await asyncio.sleep(0)
        assert not waiting.done()
        pump.last_cseq = 4
        pump._release_written()
        await asyncio.sleep(0)
        assert not waiting.done()  # 5 is not out yet
        pump.last_cseq = 5
        pump._release_written()
        await asyncio.wait_for(waiting, 1.0)
        await pump.written(9, 0.01)  # never written: the timeout answers, nothing kept
        assert pump._written == []
        ending = asyncio.ensure_future(pump.written(9, 5.0))
        await asyncio.sleep(0)
        pump._release_written(everything=True)  # the pump ended
        await asyncio.wait_for(ending, 1.0)

    asyncio.run(run())
