"""The NATS protocol gateway: any NATS client (nats.py, nats.go, the ``nats`` CLI) is a
rayjet client. See docs/gateway.md.

The names below are imported on first use; ``rayjet.gateway.protocol`` loads without Ray
(the CLI's NATS client is :mod:`rayjet.remote`).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Gateway": "rayjet.gateway.server",
    "GatewayOptions": "rayjet.gateway.server",
    "GatewayThread": "rayjet.gateway.embedded",
    "JetStreamBridge": "rayjet.gateway.jetstream",
    "serve": "rayjet.gateway.embedded",
    "tls_context": "rayjet.gateway.tls",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'rayjet.gateway' has no attribute {name!r}")


__all__ = ["Gateway", "GatewayOptions", "GatewayThread", "JetStreamBridge", "serve",
           "tls_context"]
