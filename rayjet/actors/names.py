"""Names of rayjet's detached actors in the ``rayjet`` Ray namespace."""

from __future__ import annotations

NAMESPACE = "rayjet"
META_MEMBERS = 3  # a meta group of three survives the loss of one member


def meta_member_id(i: int) -> str:
    return f"m{i}"


def meta_actor_name(member_id: str) -> str:
    return f"rayjet.meta.{member_id}"


def stream_actor_name(group: str, replica_id: str) -> str:
    return f"rayjet.stream.{group}.{replica_id}"


def consumer_actor_name(group: str, replica_id: str) -> str:
    return f"rayjet.consumer.{group}.{replica_id}"


def host_actor_name(node_id: str, index: int) -> str:
    """A replica host on a node (see rayjet.actors.host)."""
    return f"rayjet.host.{node_id}.{index}"


def event_hub_name() -> str:
    """The cluster's event hub (advisories and metrics, see rayjet.actors.events)."""
    return "rayjet.events"
