"""The async side of the router: lookups and answers never block an actor's event loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import ray

from rayjet.actors import router
from rayjet.raft import Message, MessageType


def msg(tag: str) -> Message:
    return Message(MessageType.HEARTBEAT, to="b", frm="a", context=tag.encode())


class _Handle:
    def __init__(self, got: list) -> None:
        self.receive = self
        self.got = got

    def remote(self, messages):
        self.got.append(messages)
        fut: Future = Future()
        fut.set_result(None)
        return type("Ref", (), {"future": lambda _self: fut})()


def test_peer_sender_looks_handles_up_in_a_thread_and_delivers_what_waited(monkeypatch):
    got: list = []
    loop_thread: list = []

    def get_actor(name, namespace=None):
        loop_thread.append(threading.current_thread() is threading.main_thread())
        return _Handle(got)

    monkeypatch.setattr(ray, "get_actor", get_actor)
    send = router.PeerSender(lambda peer: f"actor-{peer}")

    async def run() -> None:
        send("b", [msg("m1")])
        send("b", [msg("m2")])  # one lookup for both
        assert got == []  # nothing blocked: the lookup runs meanwhile
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
        send("b", [msg("m3")])  # known now: straight out

    asyncio.run(run())
    assert got == [[msg("m1")], [msg("m2")], [msg("m3")]]
    assert loop_thread == [False]  # looked up once, off the event loop's thread


def test_peer_sender_forgets_a_failed_lookup(monkeypatch):
    def missing(name, namespace=None):
        raise ValueError("no such actor")

    monkeypatch.setattr(ray, "get_actor", missing)
    send = router.PeerSender(lambda peer: peer)

    async def run() -> None:
        send("x", [msg("m")])
        await asyncio.sleep(0.1)

    asyncio.run(run())
    assert send._waiting == {} and send._handles == {}
