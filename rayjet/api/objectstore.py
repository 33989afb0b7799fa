"""Object store configuration and object descriptions (as in nats-py / nats.go)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rayjet.api.base import DURATION, ENUM, HEADERS, MAP, OBJ, TIME, FrozenDict, Wire, wire_field
from rayjet.api.enums import StorageType
from rayjet.api.kv import BUCKET_NAME
from rayjet.api.stream import MAX_REPLICAS, Placement
from rayjet.errors import InvalidConfigError

DEFAULT_CHUNK_SIZE = 128 * 1024


@dataclass(frozen=True)
class ObjectStoreConfig(Wire):
    bucket: str = ""
    description: str | None = None
    ttl: float | None = wire_field(None, kind=DURATION)
    max_bytes: int = -1
    storage: StorageType = wire_field(StorageType.FILE, kind=ENUM, type_=StorageType)
    replicas: int = 1
    placement: Placement | None = wire_field(None, kind=OBJ, type_=Placement)
    compression: bool = False
    metadata: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)
    # rayjet extension: "shared" (unset: the connection's default, else shared) runs the
    # bucket's replicas in shared host actors, "dedicated" in actors of their own
    hosting: str | None = None


def validate_object_store_config(cfg: ObjectStoreConfig) -> ObjectStoreConfig:
    """Check an object store config; returns it normalised (replicas 0 -> 1)."""
    if not isinstance(cfg, ObjectStoreConfig):
        raise InvalidConfigError(f"an ObjectStoreConfig is required, not {type(cfg).__name__}")
    if not isinstance(cfg.bucket, str) or not BUCKET_NAME.match(cfg.bucket):
        raise InvalidConfigError(spec="KV_BAD_BUCKET", name=cfg.bucket)
    changes: dict[str, Any] = {}
    if cfg.replicas == 0:
        changes["replicas"] = 1
    if cfg.replicas < 0 or cfg.replicas > MAX_REPLICAS:
        raise InvalidConfigError(f"replicas {cfg.replicas} is out of range: use 1 to "
                                 f"{MAX_REPLICAS}")
    if cfg.ttl is not None and cfg.ttl < 0:
        raise InvalidConfigError("ttl can not be negative: leave it unset for no limit")
    return dataclasses.replace(cfg, **changes) if changes else cfg


@dataclass(frozen=True)
class ObjectLink(Wire):
    """A link to another bucket (``name`` None) or to one object in it."""

    bucket: str = ""
    name: str | None = None


@dataclass(frozen=True)
class ObjectMetaOptions(Wire):
    link: ObjectLink | None = wire_field(None, kind=OBJ, type_=ObjectLink)
    max_chunk_size: int | None = None


@dataclass(frozen=True)
class ObjectMeta(Wire):
    """What a writer says about an object."""

    name: str = ""
    description: str | None = None
    headers: FrozenDict | None = wire_field(None, kind=HEADERS)
    options: ObjectMetaOptions | None = wire_field(None, kind=OBJ, type_=ObjectMetaOptions)
    metadata: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)


@dataclass(frozen=True)
class ObjectInfo(Wire):
    """An object's meta plus what the store knows of it (size, chunks, SHA-256 digest)."""

    name: str = ""
    bucket: str = ""
    nuid: str = ""
    size: int = 0
    mtime: datetime | None = wire_field(None, kind=TIME)
    chunks: int = 0
    digest: str | None = None  # "SHA-256=<base64url>"
    deleted: bool = False
    description: str | None = None
    headers: FrozenDict | None = wire_field(None, kind=HEADERS)
    options: ObjectMetaOptions | None = wire_field(None, kind=OBJ, type_=ObjectMetaOptions)
    metadata: FrozenDict = wire_field(kind=MAP, default_factory=FrozenDict)

    @property
    def meta(self) -> ObjectMeta:
        return ObjectMeta(name=self.name, description=self.description, headers=self.headers,
                          options=self.options, metadata=self.metadata)

    def is_link(self) -> bool:
        return self.options is not None and self.options.link is not None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if not self.deleted:
            out.pop("deleted", None)
        return out
