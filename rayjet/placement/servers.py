"""What placement knows about a server: a Ray node seen through its labels.

A rayjet "server" is a Ray node. Its cluster name (a region, for stretch and super-cluster
layouts) comes from one node label, ``rayjet.cluster`` by default; nodes without that label
belong to :data:`DEFAULT_CLUSTER`. Its tags come from the labels too: every label ``k=v`` gives
the tag ``k:v`` (the ``az:us-east-1a`` style NATS servers use), and the label ``rayjet.tags``
holds extra plain tags separated by commas. Tags compare case-insensitively (stored lower-case).

Everything here is plain data: :func:`servers_from_ray_nodes` takes the list of dicts that
``ray.nodes()`` returns, it never calls Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

DEFAULT_CLUSTER = "rayjet"
"""The cluster of nodes that carry no cluster label."""

CLUSTER_LABEL = "rayjet.cluster"
"""Default node label naming a node's cluster (region)."""

TAGS_LABEL = "rayjet.tags"
"""Node label holding comma-separated plain tags (``ssd,fast``)."""

DRAIN_LABEL = "rayjet.drain"
"""Node label that marks a node as draining when set to a true value (``1``, ``true``, ``yes``)."""

NODE_ID_LABEL = "ray.io/node-id"
"""Ray's own per-node label; not turned into a tag (the node id is not a placement attribute)."""

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ServerInfo:
    """One candidate server (a Ray node) for replica placement.

    ``alive`` False means the node is gone (Ray reports it dead): never chosen, never kept.
    ``offline`` means known but currently unreachable: not chosen for a new replica, but a
    replica already there is kept. ``draining`` means replicas should leave the node: it is
    neither chosen nor kept. ``cpu``/``memory``/``disk`` are what is known to be available
    (``None`` = unknown, treated as enough); ``load`` is the number of replicas already placed
    on the node, used to spread new ones.
    """

    node_id: str
    cluster: str = DEFAULT_CLUSTER
    tags: frozenset[str] = frozenset()
    alive: bool = True
    offline: bool = False
    draining: bool = False
    name: str = ""
    cpu: float | None = None
    memory: int | None = None
    disk: int | None = None
    load: int = 0
    labels: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ValueError("a server needs a node_id")
        object.__setattr__(self, "tags", frozenset(normalize_tags(self.tags)))
        object.__setattr__(self, "cluster", self.cluster or DEFAULT_CLUSTER)

    @property
    def selectable(self) -> bool:
        """True if a new replica may be placed here (alive, online, not draining)."""
        return self.alive and not self.offline and not self.draining

    @property
    def keepable(self) -> bool:
        """True if a replica already here may stay (alive and not draining)."""
        return self.alive and not self.draining

    def has_tag(self, tag: str) -> bool:
        return tag.strip().lower() in self.tags

    def describe(self) -> str:
        """``node [tag, tag] (offline)`` for error messages."""
        state = []
        if not self.alive:
            state.append("dead")
        elif self.offline:
            state.append("offline")
        if self.draining:
            state.append("draining")
        if self.load:
            state.append(f"load {self.load}")
        tags = ", ".join(sorted(self.tags))
        text = f"{self.node_id} [{tags}]"
        return f"{text} ({', '.join(state)})" if state else text


def normalize_tags(tags: Iterable[str] | str | None) -> list[str]:
    """Strip, lower-case and de-duplicate tags, keeping first-seen order; empty ones dropped."""
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = tags.split(",")
    out: list[str] = []
    for tag in tags:
        norm = str(tag).strip().lower()
        if norm and norm not in out:
            out.append(norm)
    return out


def tags_from_labels(labels: Mapping[str, str], *, tags_label: str = TAGS_LABEL) -> list[str]:
    """Sorted tags of a node: ``k:v`` for every label (but Ray's node id) and ``rayjet.tags``."""
    tags: list[str] = []
    for key in sorted(labels):
        value = labels[key]
        if key == tags_label:
            tags.extend(normalize_tags(str(value)))
        elif key != NODE_ID_LABEL:
            tags.append(f"{key}:{value}")
    return sorted(normalize_tags(tags))


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in _TRUE


def _resource(resources: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        if key in resources and resources[key] is not None:
            return float(resources[key])
    return None


def server_from_ray_node(
    node: Mapping[str, Any],
    *,
    cluster_label: str = CLUSTER_LABEL,
    default_cluster: str = DEFAULT_CLUSTER,
    tags_label: str = TAGS_LABEL,
    load: int = 0,
) -> ServerInfo:
    """One :class:`ServerInfo` from one ``ray.nodes()`` entry."""
    labels = {str(k): str(v) for k, v in (node.get("Labels") or {}).items()}
    resources = node.get("Resources") or {}
    memory = _resource(resources, "memory")
    disk = _resource(resources, "disk", "rayjet_disk")
    node_id = str(node.get("NodeID") or "")
    return ServerInfo(
        node_id=node_id,
        cluster=labels.get(cluster_label) or default_cluster,
        tags=frozenset(tags_from_labels(labels, tags_label=tags_label)),
        alive=bool(node.get("Alive", True)),
        offline=False,
        draining=_truthy(labels.get(DRAIN_LABEL, "")),
        name=str(node.get("NodeName") or node.get("NodeManagerAddress") or ""),
        cpu=_resource(resources, "CPU"),
        memory=None if memory is None else int(memory),
        disk=None if disk is None else int(disk),
        load=load,
        labels=labels,
    )


def servers_from_ray_nodes(
    nodes: Sequence[Mapping[str, Any]],
    *,
    cluster_label: str = CLUSTER_LABEL,
    default_cluster: str = DEFAULT_CLUSTER,
    tags_label: str = TAGS_LABEL,
    loads: Mapping[str, int] | None = None,
    include_dead: bool = False,
) -> list[ServerInfo]:
    """Convert what ``ray.nodes()`` returns (keys ``NodeID``, ``Alive``, ``Labels``,
    ``Resources``, ``NodeManagerAddress``) into servers, sorted by node id.

    Dead nodes are left out unless ``include_dead``; a node id seen twice (Ray keeps the
    record of a dead node next to a restarted one) keeps its alive record. ``loads`` maps node
    id to the number of replicas already placed there.
    """
    loads = loads or {}
    by_id: dict[str, ServerInfo] = {}
    for node in nodes:
        server = server_from_ray_node(node, cluster_label=cluster_label,
                                      default_cluster=default_cluster, tags_label=tags_label,
                                      load=int(loads.get(str(node.get("NodeID") or ""), 0)))
        if not server.alive and not include_dead:
            continue
        seen = by_id.get(server.node_id)
        if seen is None or (server.alive and not seen.alive):
            by_id[server.node_id] = server
    return [by_id[k] for k in sorted(by_id)]


def with_loads(servers: Iterable[ServerInfo], loads: Mapping[str, int]) -> list[ServerInfo]:
    """Copies of ``servers`` with ``load`` set from ``loads`` (node id -> replicas placed)."""
    return [replace(s, load=int(loads.get(s.node_id, 0))) for s in servers]


def loads_from_assignments(groups: Iterable[Sequence[str]]) -> dict[str, int]:
    """Count replicas per node from peer lists (e.g. every stream's and consumer's peers)."""
    counts: dict[str, int] = {}
    for peers in groups:
        for node_id in peers:
            counts[node_id] = counts.get(node_id, 0) + 1
    return counts


def cluster_of(server: ServerInfo | Mapping[str, Any], *, cluster_label: str = CLUSTER_LABEL,
               default_cluster: str = DEFAULT_CLUSTER) -> str:
    """The cluster (region) a server belongs to; accepts a :class:`ServerInfo` or a raw
    ``ray.nodes()`` entry."""
    if isinstance(server, ServerInfo):
        return server.cluster
    labels = server.get("Labels") or {}
    return str(labels.get(cluster_label) or default_cluster)


def servers_in_cluster(servers: Iterable[ServerInfo], cluster: str, *,
                       selectable_only: bool = False) -> list[ServerInfo]:
    """The servers of one cluster (region), in the given order."""
    return [s for s in servers
            if s.cluster == cluster and (s.selectable or not selectable_only)]


def clusters(servers: Iterable[ServerInfo]) -> dict[str, list[ServerInfo]]:
    """Servers grouped by cluster name, clusters in name order."""
    grouped: dict[str, list[ServerInfo]] = {}
    for server in servers:
        grouped.setdefault(server.cluster, []).append(server)
    return {name: grouped[name] for name in sorted(grouped)}


def label_selector_for(node_id: str) -> dict[str, str]:
    """The Ray label selector that pins an actor to one node (``ray.io/node-id``)."""
    return {NODE_ID_LABEL: node_id}
