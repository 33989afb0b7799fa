"""Pure replica placement: which Ray nodes hold a stream's or consumer's replicas.

No Ray here: the actors layer turns ``ray.nodes()`` into :class:`ServerInfo` with
:func:`servers_from_ray_nodes`, asks :func:`select_peers` for node ids, pins replica actors
with :func:`label_selector_for`, and walks :func:`plan_move` steps to change a live group.
See ``rayjet/placement/README.md``.
"""

from rayjet.placement.moves import ADD, REMOVE, MoveStep, plan_move, plan_update
from rayjet.placement.select import quorum, select_peers, unique_value
from rayjet.placement.servers import (
    CLUSTER_LABEL,
    DEFAULT_CLUSTER,
    DRAIN_LABEL,
    NODE_ID_LABEL,
    TAGS_LABEL,
    ServerInfo,
    cluster_of,
    clusters,
    label_selector_for,
    loads_from_assignments,
    normalize_tags,
    server_from_ray_node,
    servers_from_ray_nodes,
    servers_in_cluster,
    tags_from_labels,
    with_loads,
)

__all__ = [
    "ADD",
    "CLUSTER_LABEL",
    "DEFAULT_CLUSTER",
    "DRAIN_LABEL",
    "NODE_ID_LABEL",
    "REMOVE",
    "TAGS_LABEL",
    "MoveStep",
    "ServerInfo",
    "cluster_of",
    "clusters",
    "label_selector_for",
    "loads_from_assignments",
    "normalize_tags",
    "plan_move",
    "plan_update",
    "quorum",
    "select_peers",
    "server_from_ray_node",
    "servers_from_ray_nodes",
    "servers_in_cluster",
    "tags_from_labels",
    "unique_value",
    "with_loads",
]
