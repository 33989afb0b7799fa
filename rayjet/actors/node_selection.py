"""Where a replica may run: node labels, Ray label selectors and the choice of a live node.

A replica placed by cluster (region), by ``k:v`` tags or under a unique tag carries a hard
Ray ``label_selector`` built from those labels, so when its node dies Ray restarts it only
on a node that still fits (another node of its region and zone) or keeps it pending until
one joins; it never drifts silently into another region. The node placement chose is a
preference on top (its other labels, with the hard selector as the fallback). Replicas of
unlabelled nodes keep a soft node affinity.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.api import Placement, StreamConfig
from rayjet.errors import ClusterNoPeersError
from rayjet.placement import CLUSTER_LABEL, NODE_ID_LABEL, normalize_tags

UNIQUE_TAG_ENV = "RAYJET_UNIQUE_TAG"  # e.g. "az": replicas of a group on distinct zones
STRETCH_CLUSTER = "*"
"""``Placement(cluster="*")``: a stretch group, its replicas spread over clusters (regions)."""
STRETCH_UNIQUE_TAG_ENV = "RAYJET_STRETCH_UNIQUE_TAG"  # default: the cluster label itself
NODES_TTL = 1.0
_nodes_cache: tuple[float, list[dict[str, Any]]] = (0.0, [])


def recent_ray_nodes() -> list[dict[str, Any]]:
    """``ray.nodes()`` as seen within the last NODES_TTL seconds (one control-store call
    for a reconcile pass, or for many stream creations in a row)."""
    global _nodes_cache
    seen, nodes = _nodes_cache
    if time.monotonic() - seen > NODES_TTL:
        nodes = ray.nodes()
        _nodes_cache = (time.monotonic(), nodes)
    return nodes


def _all_node_labels() -> dict[str, tuple[bool, dict[str, str]]]:
    """(alive, labels) of every Ray node the control store knows, dead ones included."""
    return {n["NodeID"]: (bool(n.get("Alive")),
                          {str(k): str(v) for k, v in (n.get("Labels") or {}).items()})
            for n in recent_ray_nodes()}


def node_labels() -> dict[str, dict[str, str]]:
    """Labels of the alive Ray nodes by node id."""
    return {node: labels for node, (alive, labels) in _all_node_labels().items() if alive}


def is_stretch(placement: Placement | None) -> bool:
    return placement is not None and placement.cluster == STRETCH_CLUSTER


def unique_tag_for(placement: Placement | None) -> str | None:
    """The unique tag placement enforces: for a stretch group the region (cluster label)."""
    if is_stretch(placement):
        return os.environ.get(STRETCH_UNIQUE_TAG_ENV) or CLUSTER_LABEL
    return os.environ.get(UNIQUE_TAG_ENV) or None


def _label(labels: Mapping[str, str], key: str) -> tuple[str, str] | None:
    """The node label whose key equals ``key`` ignoring case (tags are lower-case)."""
    for k, v in labels.items():
        if k.lower() == key.lower():
            return k, v
    return None


def hard_selector(placement: Placement | None, labels: Mapping[str, str] | None,
                  unique_tag: str | None) -> dict[str, str]:
    """The Ray label selector every node hosting this replica must match.

    ``labels`` are those of the node placement chose (None when that node is gone: then the
    placement alone says what it can). Covers the node's cluster, the placement's ``k:v``
    tags and ``!k:v`` exclusions, and the chosen node's value of the unique tag; plain tags
    (from ``rayjet.tags``, a comma list) have no label selector form and are left out.
    """
    sel: dict[str, str] = {}
    labels = labels or {}
    if CLUSTER_LABEL in labels:
        sel[CLUSTER_LABEL] = labels[CLUSTER_LABEL]
    elif placement is not None and placement.cluster and not is_stretch(placement):
        sel[CLUSTER_LABEL] = placement.cluster
    excluded: dict[str, list[str]] = {}
    for tag in normalize_tags(placement.tags if placement else ()):
        negate = tag.startswith("!")
        key, sep, value = tag.lstrip("!").partition(":")
        if not sep or not key or not value:
            continue
        found = _label(labels, key)
        if negate:
            excluded.setdefault(found[0] if found else key, []).append(value)
        elif found and f"{found[0]}:{found[1]}".lower() == tag:
            sel[found[0]] = found[1]
        elif not labels:
            sel[key] = value
    for key, values in excluded.items():
        if key not in sel:
            sel[key] = f"!{values[0]}" if len(values) == 1 else f"!in({','.join(values)})"
    if unique_tag:
        key = unique_tag.rstrip(":=")
        found = _label(labels, key)
        if found and found[0] not in sel:
            sel[found[0]] = found[1]
    return sel


def scheduling_options(config: StreamConfig | None, node_id: str,
                       labels: Mapping[str, str] | None) -> dict[str, Any]:
    """Ray options that put a replica on ``node_id`` and keep it where its placement allows."""
    placement = config.placement if config is not None else None
    hard = hard_selector(placement, labels, unique_tag_for(placement))
    if not hard:
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)}
    # Ray turns a node-id label into a hard affinity that fails once the node is gone, so the
    # preferred node is named by its other labels, with the hard selector as the fallback.
    prefer = {k: v for k, v in (labels or {}).items()
              if k != NODE_ID_LABEL and not k.startswith("ray.io/") and k not in hard}
    if not prefer:
        return {"label_selector": hard}
    return {"label_selector": {**hard, **prefer}, "fallback_strategy": [{"label_selector": hard}]}


def _selects(value: str | None, want: str) -> bool:
    """One term of a Ray label selector (``v``, ``!v``, ``!in(a,b)``) against a label."""
    if want.startswith("!in(") and want.endswith(")"):
        return value not in want[4:-1].split(",")
    if want.startswith("!"):
        return value != want[1:]
    return value == want


def live_node_for(node: str | None, config: StreamConfig | None) -> str:
    """``node`` while it is alive; else an alive node that fits the placement's labels (a
    dead node's replicas, or every node id after Ray restarted on the same data dir),
    preferring this process's node. Raises ClusterNoPeersError when no alive node fits: a
    replica of a region whose nodes are all gone waits for one to come back."""
    alive = node_labels()
    if node in alive:
        return node
    placement = config.placement if config is not None else None
    # the gone node's labels, while Ray remembers them, keep the replica in its region (a
    # stretch group's replica belongs to its node's region, which the placement can't say)
    _, gone_labels = _all_node_labels().get(node or "", (False, None))
    need = hard_selector(placement, gone_labels or None, unique_tag_for(placement))
    here = ray.get_runtime_context().get_node_id()
    fitting = [n for n, labels in alive.items()
               if all(_selects(labels.get(k), v) for k, v in need.items())]
    if not fitting:
        raise ClusterNoPeersError(
            f"no alive node fits the placement {need} of a replica whose node is gone")
    return here if here in fitting else sorted(fitting)[0]
