"""Raft messages bound for one replica host travel together: one call per event-loop turn,
and a failed call reaches the sender of every message it carried."""

from __future__ import annotations

import asyncio
import concurrent.futures

import ray.exceptions

from rayjet.actors.host import HostedHandle, post_to_host


class FakeRef:
    def __init__(self) -> None:
        self.fut: concurrent.futures.Future = concurrent.futures.Future()

    def future(self) -> concurrent.futures.Future:
        return self.fut


class FakeHost:
    """Records each ``deliver`` call; the test completes its reference."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, FakeRef]] = []
        host = self

        class _Deliver:
            @staticmethod
            def remote(batch):
                ref = FakeRef()
                host.calls.append((batch, ref))
                return ref

        self.deliver = _Deliver()


def handles(host, *names):
    return [HostedHandle(host, "rayjet.host.test", n) for n in names]


async def settle():
    for _ in range(3):
        await asyncio.sleep(0)


def test_one_call_per_loop_turn_carries_every_group():
    async def main():
        host = FakeHost()
        a, b, c = handles(host, "rayjet.stream.G1.r1", "rayjet.stream.G2.r1",
                          "rayjet.consumer.G3.r0")
        for h, msgs in ((a, ["m1"]), (b, ["m2"]), (c, ["m3"]), (a, ["m4"])):
            assert post_to_host(h, msgs, lambda: None)
        assert host.calls == []  # sent at the end of this turn, not one by one
        await settle()
        assert [batch for batch, _ in host.calls] == [[
            ("rayjet.stream.G1.r1", ["m1"]), ("rayjet.stream.G2.r1", ["m2"]),
            ("rayjet.consumer.G3.r0", ["m3"]), ("rayjet.stream.G1.r1", ["m4"])]]
        post_to_host(b, ["m5"], lambda: None)  # the next turn: a call of its own
        await settle()
        assert len(host.calls) == 2 and host.calls[1][0] == [("rayjet.stream.G2.r1", ["m5"])]

    asyncio.run(main())


def test_failures_reach_the_senders_they_concern():
    async def main():
        host = FakeHost()
        a, b = handles(host, "rayjet.stream.G1.r1", "rayjet.stream.G2.r1")
        gone: list[str] = []
        post_to_host(a, ["m1"], lambda: gone.append("a"))
        post_to_host(b, ["m2"], lambda: gone.append("b"))
        await settle()
        (_, ref), = host.calls
        ref.fut.set_result(["rayjet.stream.G2.r1"])  # the host no longer runs b
        await settle()
        assert gone == ["b"]

        post_to_host(a, ["m3"], lambda: gone.append("a"))
        post_to_host(b, ["m4"], lambda: gone.append("b"))
        await settle()
        host.calls[-1][1].fut.set_exception(ray.exceptions.RayActorError())  # host died
        await settle()
        assert gone == ["b", "a", "b"]

        post_to_host(a, ["m5"], lambda: gone.append("a"))
        await settle()
        host.calls[-1][1].fut.set_exception(TimeoutError())  # not a death: nothing to do
        await settle()
        assert gone == ["b", "a", "b"]

    asyncio.run(main())


def test_outside_an_event_loop_nothing_is_queued():
    host = FakeHost()
    (a,) = handles(host, "rayjet.stream.G1.r1")
    assert not post_to_host(a, ["m1"], lambda: None)
    assert host.calls == []
