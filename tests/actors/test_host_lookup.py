"""Finding a hosted replica: its record first when its stream is known to be hosted, and
the host's handle looked up each time (a host killed for good is made anew under its
name: a handle kept from before would reach the dead one)."""

from __future__ import annotations

import pytest
import ray

from rayjet.actors import host as host_mod
from rayjet.actors.host import HostedHandle, find_replica


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
    return actors, asked


def test_a_hosted_replica_is_found_from_its_record(control_store):
    actors, asked = control_store
    one = find_replica("rep.1", hosted=True)
    assert isinstance(one, HostedHandle) and one.host is actors["H"]
    assert asked == ["record rep.1", "actor H"]  # no failed actor lookup first


def test_a_replica_not_known_to_be_hosted_is_looked_up_as_an_actor_first(control_store):
    _, asked = control_store
    assert isinstance(find_replica("rep.1"), HostedHandle)
    assert asked == ["actor rep.1", "record rep.1", "actor H"]


def test_a_host_made_anew_is_found(control_store):
    actors, _ = control_store
    old = find_replica("rep.1", hosted=True)
    actors["H"] = object()  # killed for good and made anew under its name
    assert find_replica("rep.1", hosted=True).host is actors["H"] is not old.host
