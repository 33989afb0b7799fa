"""Finding a hosted replica: its record first when its stream is known to be hosted, the
host's handle looked up once per process and dropped when that host died."""

from __future__ import annotations

import pytest
import ray
from ray.exceptions import RayActorError

from rayjet.actors import host as host_mod
from rayjet.actors import router
from rayjet.actors.host import HostedHandle, find_replica, forget_host


@pytest.fixture
def control_store(monkeypatch):
    """Named actors and hosted-name records in dicts, counting the lookups."""
    actors: dict[str, object] = {"H": object()}
    records = {"rep.1": "H", "rep.2": "H"}
    asked: list[str] = []

    def get_actor(name, namespace=None):
        asked.append(f"actor {name}")
        if name not in actors:
            raise ValueError(f"no actor {name}")
        return actors[name]

    def hosted_on(name):
        asked.append(f"record {name}")
        return records.get(name)

    monkeypatch.setattr(ray, "get_actor", get_actor)
    monkeypatch.setattr(host_mod, "hosted_on", hosted_on)
    monkeypatch.setattr(host_mod, "_host_handles", {})
    return actors, asked


def test_a_hosted_replica_is_found_from_its_record_and_its_host_once(control_store):
    actors, asked = control_store
    one = find_replica("rep.1", hosted=True)
    two = find_replica("rep.2", hosted=True)
    assert isinstance(one, HostedHandle) and one.host is actors["H"] and two.host is one.host
    # no failed actor lookup per replica, and the host's handle asked for once
    assert asked == ["record rep.1", "actor H", "record rep.2"]


def test_a_replica_not_known_to_be_hosted_is_looked_up_as_an_actor_first(control_store):
    _, asked = control_store
    assert isinstance(find_replica("rep.1"), HostedHandle)
    assert asked == ["actor rep.1", "record rep.1", "actor H"]


def test_a_dead_host_is_looked_up_again(control_store):
    actors, asked = control_store
    old = find_replica("rep.1", hosted=True)
    actors["H"] = object()  # killed for good and made anew under its name
    forget_host(old)
    assert find_replica("rep.1", hosted=True).host is actors["H"]
    assert asked.count("actor H") == 2


def test_the_router_forgets_the_host_of_a_replica_that_died(control_store):
    actors, _ = control_store
    r = router.GroupRouter({"r0": "rep.1"}, "a stream", hosted=True)
    first = r.handle("r0")
    actors["H"] = object()
    r._failed("r0", RayActorError(), retry_unknown=True, attempt_timeout=None)
    assert r.handle("r0").host is actors["H"] is not first.host
