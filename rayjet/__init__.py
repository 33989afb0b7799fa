"""rayjet: durable, replicated streams, a key-value store and an object store on Ray.

``import rayjet`` stays light: the Ray-backed client is imported on first use of
``rayjet.connect``.
"""

from __future__ import annotations

import importlib
from typing import Any

from rayjet import errors
from rayjet.api import (
    AckPolicy,
    DeliverPolicy,
    DiscardPolicy,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StoreCompression,
)

__version__ = "0.1.0"

_LAZY = {"connect", "JetStream"}


def __getattr__(name: str) -> Any:
    # imported by name so that pure packages importing `rayjet` do not depend on Ray
    if name in _LAZY:
        return getattr(importlib.import_module("rayjet.client"), name)
    raise AttributeError(f"module 'rayjet' has no attribute {name!r}")


__all__ = [
    "AckPolicy",
    "DeliverPolicy",
    "DiscardPolicy",
    "JetStream",
    "ReplayPolicy",
    "RetentionPolicy",
    "StorageType",
    "StoreCompression",
    "connect",
    "errors",
]
