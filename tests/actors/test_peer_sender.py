"""PeerSender drops a handle whose actor died and forgets peers removed from the group."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest
from ray.exceptions import ActorDiedError

from rayjet.actors import router
from rayjet.actors.raft_host import RaftHost
from rayjet.raft import ConfChange, ConfChangeType
from rayjet.replication import Output


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
    send("r1", ["a"])
    send("r1", ["b"])
    assert lookups == ["x.r1"] and first.sent == [["a"], ["b"]]
    first.futures[0].set_result(None)
    first.futures[1].set_exception(ActorDiedError())
    assert send.stats["failed"] == 1 and send.stats["dropped"] == 1
    second = live["x.r1"] = FakeActor("second")  # Ray restarted it, or a successor
    send("r1", ["c"])
    assert second.sent == [["c"]] and lookups == ["x.r1", "x.r1"]


def test_a_missing_peer_is_not_looked_up_on_every_tick(actors, monkeypatch):
    _live, lookups = actors
    now = [100.0]
    monkeypatch.setattr(router.time, "monotonic", lambda: now[0])
    send = router.PeerSender(lambda peer: f"x.{peer}")
    with pytest.raises(ValueError):
        send("r9", ["a"])
    for _ in range(5):
        with pytest.raises(LookupError):
            send("r9", ["a"])
    assert lookups == ["x.r9"]
    now[0] += router.LOOKUP_BACKOFF + 0.1
    with pytest.raises(ValueError):
        send("r9", ["a"])
    assert lookups == ["x.r9", "x.r9"]


def test_failures_are_counted_on_the_event_loop(actors):
    live, _ = actors
    actor = live["x.r1"] = FakeActor("a")

    async def main():
        send = router.PeerSender(lambda peer: f"x.{peer}")
        send("r1", ["a"])
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
    send("r1", ["a"])
    host.pump()
    assert host.transport_stats()["dropped"] == 1
    assert send.stats["to_removed"] == 0
    send("r1", ["late"])  # only a reused id (or a raft bug) addresses a removed replica
    assert send.stats["to_removed"] == 1 and lookups == ["x.r1", "x.r1"]
