"""A consumer replica's blocking reads go straight to its stream's leader when that runs in
the same process (an actor call there would wait on the event loop that must answer it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rayjet.actors import in_process
from rayjet.actors.consumer_reads import RemoteStreamReader


class FakeRouter:
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.calls: list[tuple] = []

    def call(self, method, *args, timeout=None):
        self.calls.append((method, *args))
        return ("remote", args)


class FakeReplica:
    def __init__(self, leading: bool) -> None:
        self.engine = SimpleNamespace(is_leader=leading)
        self.reads: list[tuple] = []

    def read_local(self, method, *args):
        self.reads.append((method, *args))
        return ("local", args)


@pytest.fixture
def replicas():
    added: list[tuple[str, FakeReplica]] = []

    def add(name: str, leading: bool) -> FakeReplica:
        r = FakeReplica(leading)
        in_process.add_stream_replica(name, r)
        added.append((name, r))
        return r

    yield add
    for name, r in added:
        in_process.drop_stream_replica(name, r)


def test_reads_go_to_a_leader_in_this_process(replicas):
    router = FakeRouter({"r0": "rayjet.stream.G.r0", "r1": "rayjet.stream.G.r1"})
    replicas("rayjet.stream.G.r0", leading=False)
    leader = replicas("rayjet.stream.G.r1", leading=True)
    reader = RemoteStreamReader(router)
    assert reader.load_msg(7) == ("local", (7,))
    assert leader.reads == [("load_msg", 7)] and router.calls == []


def test_reads_call_the_leader_when_it_runs_elsewhere(replicas):
    router = FakeRouter({"r0": "rayjet.stream.G.r0", "r1": "rayjet.stream.G.r1"})
    follower = replicas("rayjet.stream.G.r0", leading=False)
    reader = RemoteStreamReader(router)
    assert reader.bounds() == ("remote", ("bounds",))
    assert router.calls == [("reader_call", "bounds")] and follower.reads == []


def test_a_stopped_replica_is_no_longer_read(replicas):
    router = FakeRouter({"r0": "rayjet.stream.G.r0"})
    leader = replicas("rayjet.stream.G.r0", leading=True)
    in_process.drop_stream_replica("rayjet.stream.G.r0", leader)
    assert RemoteStreamReader(router).load_msg(1) == ("remote", ("load_msg", 1))
