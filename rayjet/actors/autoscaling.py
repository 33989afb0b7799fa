"""Asking the autoscaler for nodes when a placement needs nodes that do not exist."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from rayjet.actors.node_selection import hard_selector, is_stretch
from rayjet.api import StreamConfig
from rayjet.placement import CLUSTER_LABEL

log = logging.getLogger(__name__)

CapacityHook = Callable[[list[dict], list[dict]], None]


def _request_resources(bundles: list[dict], selectors: list[dict]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles, bundle_label_selectors=selectors)


capacity_hook: CapacityHook = _request_resources
"""Called with (bundles, label selectors) when a placement needs nodes that do not exist."""
_capacity_requested = False


def request_capacity(cfg: StreamConfig) -> None:
    """Ask the autoscaler for one node-sized bundle per replica with the placement's labels
    (a hint: the add or update still fails now, and succeeds once nodes have joined)."""
    global _capacity_requested
    sel = hard_selector(cfg.placement, None, None)
    if is_stretch(cfg.placement):
        sel.pop(CLUSTER_LABEL, None)
    try:
        capacity_hook([{"CPU": 1} for _ in range(cfg.num_replicas)],
                      [dict(sel) for _ in range(cfg.num_replicas)])
        _capacity_requested = True
    except Exception as exc:  # noqa: BLE001 - a hint only; the placement error is what counts
        log.warning("could not ask the autoscaler for nodes: %s", exc)


def clear_capacity_request() -> None:
    """Withdraw the request of :func:`request_capacity` once a placement fits again."""
    global _capacity_requested
    if _capacity_requested:
        with contextlib.suppress(Exception):
            capacity_hook([], [])
        _capacity_requested = False
