"""The stream an object store bucket lives in (as nats-py builds it)."""

from __future__ import annotations

from rayjet.api import (
    DiscardPolicy,
    ObjectStoreConfig,
    StoreCompression,
    StreamConfig,
    validate_object_store_config,
)
from rayjet.api.kv import BUCKET_NAME
from rayjet.errors import BadBucketNameError

STREAM_PREFIX = "OBJ_"


def validate_bucket(bucket: object) -> str:
    if not isinstance(bucket, str) or not BUCKET_NAME.match(bucket):
        raise BadBucketNameError(name=bucket)
    return bucket


def stream_name(bucket: str) -> str:
    return STREAM_PREFIX + validate_bucket(bucket)


def bucket_stream_config(config: ObjectStoreConfig) -> StreamConfig:
    """``OBJ_<bucket>`` on ``$O.<bucket>.C.>`` (chunks) and ``$O.<bucket>.M.>`` (metadata):
    discard new, roll-ups allowed (one metadata message per object), direct gets on."""
    if isinstance(config, ObjectStoreConfig):
        validate_bucket(config.bucket)
    cfg = validate_object_store_config(config)
    return StreamConfig(
        name=stream_name(cfg.bucket),
        description=cfg.description,
        subjects=(f"$O.{cfg.bucket}.C.>", f"$O.{cfg.bucket}.M.>"),
        max_age=cfg.ttl or 0.0,
        max_bytes=cfg.max_bytes if cfg.max_bytes else -1,
        max_msgs=-1,
        max_consumers=-1,
        storage=cfg.storage,
        num_replicas=cfg.replicas,
        placement=cfg.placement,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
        compression=StoreCompression.S2 if cfg.compression else StoreCompression.NONE,
        metadata=cfg.metadata,
        hosting=cfg.hosting,
    )
