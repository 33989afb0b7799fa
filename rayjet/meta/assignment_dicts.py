"""The catalogue's assignments as the plain dicts the meta group answers with.

Clients, routers and replica actors take a stream's assignment in this form (its config as
JSON, its raft group and peers); consumer assignments likewise.
"""

from __future__ import annotations

from typing import Any

from rayjet.api.stream import StreamConfig
from rayjet.meta.catalogue import ConsumerAssignment, StreamAssignment

_config_dicts: dict[int, tuple[StreamConfig, dict[str, Any]]] = {}  # id(config) -> its JSON


def _config_dict(config: StreamConfig) -> dict[str, Any]:
    """``config.to_dict()``, made once per config object (they are immutable; a listing of
    hundreds of streams would otherwise spend most of its time on them). Not to mutate."""
    hit = _config_dicts.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1]
    if len(_config_dicts) >= 10_000:
        _config_dicts.clear()
    doc = config.to_dict()
    _config_dicts[id(config)] = (config, doc)
    return doc


def assignment_dict(sa: StreamAssignment) -> dict[str, Any]:
    return {"config": _config_dict(sa.config), "created_ns": sa.created_ns, "group": sa.group,
            "peers": [list(p) for p in sa.peers],
            "consumers": sorted(sa.consumers)}


def consumer_dict(ca: ConsumerAssignment) -> dict[str, Any]:
    return {"stream": ca.stream, "name": ca.name, "config": ca.config.to_dict(),
            "created_ns": ca.created_ns, "group": ca.group, "peers": [list(p) for p in ca.peers]}
