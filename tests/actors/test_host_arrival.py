"""A call that comes before its replica's place waits for the place, and one whose place
runs while it looks the replica up does not wait at all."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rayjet.actors import replica_host as host_mod
from rayjet.actors.host import NotHostedError
from rayjet.actors.replica_host import ReplicaHost


class Replica:
    async def ping(self) -> str:
        return "pong"


@pytest.fixture
def slow_lookup(monkeypatch):
    """``hosted_on`` that says "this host" once the test lets it answer."""
    entered, answer = threading.Event(), threading.Event()

    def hosted_on(name):
        entered.set()
        answer.wait(30)
        return "h"

    monkeypatch.setattr(host_mod, "hosted_on", hosted_on)
    monkeypatch.setattr(host_mod, "ARRIVAL_GRACE", 60.0)  # a missed wake-up shows as a hang
    return entered, answer


def test_a_place_that_runs_during_the_lookup_is_seen(tmp_path, slow_lookup):
    entered, answer = slow_lookup

    async def scenario():
        host = ReplicaHost("h", str(tmp_path))
        task = asyncio.ensure_future(host.call("x", "ping", (), {}))
        await asyncio.to_thread(entered.wait, 30)
        host._arrived("x", Replica())  # the place runs while the call looks "x" up
        answer.set()
        return await asyncio.wait_for(task, 20)

    assert asyncio.run(scenario()) == "pong"


def test_a_call_before_its_place_waits_for_it(tmp_path, slow_lookup):
    entered, answer = slow_lookup
    answer.set()

    async def scenario():
        host = ReplicaHost("h", str(tmp_path))
        task = asyncio.ensure_future(host.call("x", "ping", (), {}))
        await asyncio.to_thread(entered.wait, 30)
        while "x" not in host._arrivals:  # the call waits for its replica now
            await asyncio.sleep(0.01)
        host._arrived("x", Replica())
        return await asyncio.wait_for(task, 20)

    assert asyncio.run(scenario()) == "pong"


def test_a_replica_placed_elsewhere_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(host_mod, "hosted_on", lambda name: "another")
    host = ReplicaHost("h", str(tmp_path))
    with pytest.raises(NotHostedError):
        asyncio.run(host.call("x", "ping", (), {}))


def _resting_spec(tmp_path) -> tuple[str, tuple, dict]:
    from rayjet import StreamConfig

    cfg = StreamConfig(name="S", hosting="shared")
    return "stream", (cfg.to_dict(), "S-7", "r0", ["r0"], str(tmp_path)), {"created_ns": 5}


def test_a_call_before_an_on_demand_place_is_answered_from_it(tmp_path, slow_lookup):
    """A ``ready`` that comes before its replica's on-demand place waits for the place and
    is answered from what was placed: the replica stays at rest."""
    entered, answer = slow_lookup
    answer.set()

    async def scenario():
        host = ReplicaHost("h", str(tmp_path))
        task = asyncio.ensure_future(host.call("x", "ready", (True,), {}))
        await asyncio.to_thread(entered.wait, 30)
        while "x" not in host._arrivals:
            await asyncio.sleep(0.01)
        kind, args, kwargs = _resting_spec(tmp_path)
        await host.place("x", kind, args, kwargs, on_demand=True, recorded=True)
        return host, await asyncio.wait_for(task, 20)

    host, ready = asyncio.run(scenario())
    assert ready["leader"] is True
    assert ready["info"]["state"]["messages"] == 0
    assert ready["info"]["cluster"]["raft_group"] == "S-7"
    assert "x" in host.resting and "x" not in host.replicas


def test_a_resting_replica_starts_for_what_its_spec_cannot_answer(tmp_path, monkeypatch):
    started = []

    class Started:
        async def info(self, subjects_filter=None, deleted_details=False):
            return {"subjects": subjects_filter}

    def start(self, name, kind, args, kwargs):
        started.append(name)
        self._arrived(name, Started())
        return self.replicas[name]

    monkeypatch.setattr(ReplicaHost, "_start_replica", start)

    async def scenario():
        host = ReplicaHost("h", str(tmp_path))
        kind, args, kwargs = _resting_spec(tmp_path)
        await host.place("x", kind, args, kwargs, on_demand=True, recorded=True)
        plain = await host.call("x", "info", (), {})
        assert started == [] and plain["replica"] == "r0"
        filtered = await host.call("x", "info", ("S.>",), {})  # subject totals: the store
        return host, filtered

    host, filtered = asyncio.run(scenario())
    assert started == ["x"] and filtered == {"subjects": "S.>"}
    assert "x" in host.replicas and "x" not in host.resting
    assert sorted(asyncio.run(host.names())) == ["x"]
