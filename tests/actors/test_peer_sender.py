"""PeerSender drops a handle whose actor died, forgets peers removed from the group, and
bounds what waits in actor calls a peer does not answer."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest
from ray.exceptions import ActorDiedError

from rayjet.actors import router
from rayjet.actors.raft_host import RaftHost
from rayjet.raft import ConfChange, ConfChangeType, Entry, Message, MessageType
from rayjet.replication import Output


def msg(tag: str, payload: int = 0) -> Message:
    entries = [Entry(term=1, index=1, data=b"x" * payload)] if payload else []
    return Message(MessageType.APP, to="r1", frm="r0", entries=entries, context=tag.encode())


class FakeActor:
    def __init__(self, name):
        self.name = name
        self.sent: list = []
        self.futures: list[Future] = []
        self.receive = self

    def remote(self, messages):
        self.sent.append(messages)
        fut: Future = Future()
        self.futures.append(fut)
        return type("Ref", (), {"future": lambda _self, f=fut: f})()


@pytest.fixture
def actors(monkeypatch):
    live: dict[str, FakeActor] = {}
    lookups: list[str] = []

    def get_actor(name, namespace=None):
        lookups.append(name)
        if name not in live:
            raise ValueError(f"no actor {name}")
        return live[name]

    monkeypatch.setattr(router.ray, "get_actor", get_actor)
    return live, lookups


def test_a_handle_whose_actor_died_is_dropped_and_looked_up_again(actors):
    live, lookups = actors
    send = router.PeerSender(lambda peer: f"x.{peer}")
    first = live["x.r1"] = FakeActor("first")
    send("r1", [msg("a")])
    send("r1", [msg("b")])
    assert lookups == ["x.r1"] and first.sent == [[msg("a")], [msg("b")]]
    first.futures[0].set_result(None)
    first.futures[1].set_exception(ActorDiedError())
    assert send.stats["failed"] == 1 and send.stats["dropped"] == 1
    second = live["x.r1"] = FakeActor("second")  # Ray restarted it, or a successor
    send("r1", [msg("c")])
    assert second.sent == [[msg("c")]] and lookups == ["x.r1", "x.r1"]


def test_a_missing_peer_is_not_looked_up_on_every_tick(actors, monkeypatch):
    _live, lookups = actors
    now = [100.0]
    monkeypatch.setattr(router.time, "monotonic", lambda: now[0])
    send = router.PeerSender(lambda peer: f"x.{peer}")
    with pytest.raises(ValueError):
        send("r9", [msg("a")])
    for _ in range(5):
        with pytest.raises(LookupError):
            send("r9", [msg("a")])
    assert lookups == ["x.r9"]
    now[0] += router.LOOKUP_BACKOFF + 0.1
    with pytest.raises(ValueError):
        send("r9", [msg("a")])
    assert lookups == ["x.r9", "x.r9"]


def test_failures_are_counted_on_the_event_loop(actors):
    live, _ = actors
    actor = live["x.r1"] = FakeActor("a")

    async def main():
        send = router.PeerSender(lambda peer: f"x.{peer}")
        send("r1", [msg("a")])
        for _ in range(200):  # the handle is looked up in a thread, then "a" goes out
            if actor.futures:
                break
            await asyncio.sleep(0.01)
        actor.futures[0].set_exception(ActorDiedError())
        assert send.stats["failed"] == 0  # scheduled on the loop, not run on Ray's thread
        await asyncio.sleep(0)
        return send.stats

    stats = asyncio.run(main())
    assert stats["failed"] == 1 and stats["dropped"] == 1


def test_a_removed_peer_is_forgotten_and_messages_to_it_counted(actors):
    live, lookups = actors
    live["x.r1"] = FakeActor("a")
    send = router.PeerSender(lambda peer: f"x.{peer}")

    class Group:
        id = "r0"
        quiet = False

        def process(self):
            return Output(conf_changes=[(ConfChange(ConfChangeType.REMOVE, "r1"), None)])

    host = RaftHost(Group(), send)
    send("r1", [msg("a")])
    host.pump()
    assert host.transport_stats()["dropped"] == 1
    assert send.stats["to_removed"] == 0
    send("r1", [msg("late")])  # only a reused id (or a raft bug) addresses a removed replica
    assert send.stats["to_removed"] == 1 and lookups == ["x.r1", "x.r1"]


def test_calls_a_peer_does_not_answer_hold_at_most_the_budget(actors, monkeypatch):
    # a paused peer: its calls wait in Ray with their arguments in the sender's memory
    live, _ = actors
    monkeypatch.setattr(router, "CALL_BUDGET", 9_250)  # 3 of 3,081 bytes
    actor = live["x.r1"] = FakeActor("paused")
    send = router.PeerSender(lambda peer: f"x.{peer}")
    for i in range(5):
        send("r1", [msg(str(i), payload=3_000)])
    assert len(actor.sent) == 3 and send.stats["call_dropped"] == 2
    send("r1", [msg("beat")])  # small, but over the budget too: dropped
    assert send.stats["call_dropped"] == 3
    actor.futures[0].set_result(None)  # an answer makes room again
    send("r1", [msg("5", payload=3_000)])
    assert len(actor.sent) == 4
    for fut in actor.futures:  # a failed call makes room too
        if not fut.done():
            fut.set_exception(TimeoutError())
    send("r1", [msg("big", payload=50_000)])  # alone, one batch goes whatever its size
    assert len(actor.sent) == 5 and send._in_calls == {"r1": 50_000 + 16 + 64 + 3}
