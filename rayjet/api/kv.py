"""Key-value bucket configuration (a naming convention over a stream, as in nats-py)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from rayjet.api.base import DURATION, ENUM, MAP, OBJ, OBJS, FrozenDict, Wire, wire_field
from rayjet.api.enums import StorageType
from rayjet.api.stream import MAX_REPLICAS, Placement, RePublish, StreamSource
from rayjet.errors import BadBucketNameError, InvalidConfigError, KeyHistoryTooLargeError

KV_MAX_HISTORY = 64
BUCKET_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


@dataclass(frozen=True)
class KeyValueConfig(Wire):
    bucket: str = ""
    description: str | None = None
    max_value_size: int = -1
    history: int = 1
    ttl: float | None = wire_field(None, kind=DURATION)  # seconds; None keeps keys forever
    max_bytes: int = -1
    storage: StorageType = wire_field(StorageType.FILE, kind=ENUM, type_=StorageType)
    replicas: int = 1
    placement: Placement | None = wire_field(None, kind=OBJ, type_=Placement)
    republish: RePublish | None = wire_field(None, kind=OBJ, type_=RePublish)
    mirror: StreamSource | None = wire_field(None, kind=OBJ, type_=StreamSource)
    sources: tuple[StreamSource, ...] = wire_field((), kind=OBJS, type_=StreamSource)
    compression: bool = False
    metadata: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)
    # rayjet extension: "shared" (unset: the connection's default, else shared) runs the
    # bucket's replicas in shared host actors, "dedicated" in actors of their own
    hosting: str | None = None
    # how long delete markers left by TTL expiry stay (enables per-key TTLs)
    limit_marker_ttl: float | None = wire_field(None, kind=DURATION)
    direct: bool | None = None


def validate_key_value_config(cfg: KeyValueConfig) -> KeyValueConfig:
    """Check a bucket config; returns it normalised (history 0 -> 1, replicas 0 -> 1)."""
    if not isinstance(cfg, KeyValueConfig):
        raise InvalidConfigError(f"a KeyValueConfig is required, not {type(cfg).__name__}")
    if not isinstance(cfg.bucket, str) or not BUCKET_NAME.match(cfg.bucket):
        raise BadBucketNameError(name=cfg.bucket)
    changes: dict[str, Any] = {}
    if cfg.history < 1:
        changes["history"] = 1
    if cfg.history > KV_MAX_HISTORY:
        raise KeyHistoryTooLargeError(history=cfg.history)
    if cfg.replicas == 0:
        changes["replicas"] = 1
    if cfg.replicas < 0 or cfg.replicas > MAX_REPLICAS:
        raise InvalidConfigError(f"replicas {cfg.replicas} is out of range: use 1 to "
                                 f"{MAX_REPLICAS}")
    for name in ("ttl", "limit_marker_ttl"):
        value = getattr(cfg, name)
        if value is not None and value < 0:
            raise InvalidConfigError(f"{name} can not be negative: leave it unset for no limit")
    if cfg.limit_marker_ttl and cfg.limit_marker_ttl < 1:
        raise InvalidConfigError("limit_marker_ttl must be at least 1 second")
    return dataclasses.replace(cfg, **changes) if changes else cfg
