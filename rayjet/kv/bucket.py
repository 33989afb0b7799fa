"""Key and bucket names, and the stream a key-value bucket lives in (as nats-py builds it)."""

from __future__ import annotations

import dataclasses
import re

from rayjet.api import (
    DiscardPolicy,
    KeyValueConfig,
    StoreCompression,
    StreamConfig,
    StreamSource,
    SubjectTransformConfig,
    validate_key_value_config,
)
from rayjet.api.kv import BUCKET_NAME
from rayjet.errors import BadBucketNameError, InvalidKeyError

STREAM_PREFIX = "KV_"
SUBJECT_PREFIX = "$KV"
DEFAULT_DUPLICATE_WINDOW = 120.0
VALID_KEY = re.compile(r"^[-/_=\.a-zA-Z0-9]+$")
# a filter may also use the NATS wildcards '*' (one token) and '>' (the rest)
VALID_FILTER = re.compile(r"^[-/_=\.a-zA-Z0-9*>]+$")


def is_valid_key(key: object) -> bool:
    """Letters, digits and ``-/_=.``, no leading or trailing dot (and, as the key is a
    subject, no empty token)."""
    return (isinstance(key, str) and bool(key) and key[0] != "." and key[-1] != "."
            and ".." not in key and VALID_KEY.match(key) is not None)


def validate_key(key: object) -> str:
    """The key, or InvalidKeyError (letters, digits and ``-/_=.``, no leading/trailing dot)."""
    if not is_valid_key(key):
        raise InvalidKeyError(key=key)
    return key  # type: ignore[return-value]


def validate_key_filter(pattern: object) -> str:
    """A key filter: a key whose tokens may be ``*``, or end with ``>``."""
    if not (isinstance(pattern, str) and pattern and pattern[0] != "." and pattern[-1] != "."
            and VALID_FILTER.match(pattern)):
        raise InvalidKeyError(key=pattern)
    toks = pattern.split(".")
    for i, tok in enumerate(toks):
        if not tok or (("*" in tok or ">" in tok) and len(tok) != 1) or (
                tok == ">" and i != len(toks) - 1):
            raise InvalidKeyError(key=pattern)
    return pattern


def validate_bucket(bucket: object) -> str:
    if not isinstance(bucket, str) or not BUCKET_NAME.match(bucket):
        raise BadBucketNameError(name=bucket)
    return bucket


def stream_name(bucket: str) -> str:
    return STREAM_PREFIX + validate_bucket(bucket)


def subject_prefix(bucket: str) -> str:
    """``$KV.<bucket>.``: a key's subject is this prefix plus the key."""
    return f"{SUBJECT_PREFIX}.{bucket}."


def _origin_name(name: str) -> str:
    return name if name.startswith(STREAM_PREFIX) else STREAM_PREFIX + name


def bucket_stream_config(config: KeyValueConfig) -> StreamConfig:
    """The stream behind a bucket: ``KV_<bucket>`` on ``$KV.<bucket>.>``.

    history is max_msgs_per_subject, ttl is max_age, max_value_size is max_msg_size; discard
    new, roll-ups allowed (purge), deletes denied (keys are deleted with markers), per-message
    TTLs allowed (per-key TTL), direct gets on unless ``direct=False``. A mirror of another
    bucket has no subjects of its own; sources are renamed into this bucket's subjects.
    """
    cfg = validate_key_value_config(config)
    window = DEFAULT_DUPLICATE_WINDOW
    if cfg.ttl and cfg.ttl < window:
        window = cfg.ttl
    marker_ttl = cfg.limit_marker_ttl or 0.0
    stream = StreamConfig(
        name=stream_name(cfg.bucket),
        description=cfg.description,
        subjects=(subject_prefix(cfg.bucket) + ">",),
        max_msgs_per_subject=cfg.history,
        max_bytes=cfg.max_bytes,
        max_age=cfg.ttl or 0.0,
        max_msg_size=cfg.max_value_size,
        max_msgs=-1,
        max_consumers=-1,
        storage=cfg.storage,
        num_replicas=cfg.replicas,
        placement=cfg.placement,
        republish=cfg.republish,
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True if cfg.direct is None else bool(cfg.direct),
        allow_msg_ttl=True,
        subject_delete_marker_ttl=marker_ttl,
        discard=DiscardPolicy.NEW,
        duplicate_window=window,
        compression=StoreCompression.S2 if cfg.compression else StoreCompression.NONE,
        metadata=cfg.metadata,
        hosting=cfg.hosting,
    )
    if cfg.mirror is not None:
        mirror = dataclasses.replace(cfg.mirror, name=_origin_name(cfg.mirror.name))
        return dataclasses.replace(stream, subjects=(), mirror=mirror, mirror_direct=True)
    if cfg.sources:
        sources: list[StreamSource] = []
        for src in cfg.sources:
            origin = src.name[len(STREAM_PREFIX):] if src.name.startswith(
                STREAM_PREFIX) else src.name
            src = dataclasses.replace(src, name=_origin_name(src.name))
            if src.external is None or origin != cfg.bucket:
                src = dataclasses.replace(src, filter_subject=None, subject_transforms=(
                    SubjectTransformConfig(src=subject_prefix(origin) + ">",
                                           dest=subject_prefix(cfg.bucket) + ">"),))
            sources.append(src)
        return dataclasses.replace(stream, sources=tuple(sources))
    return stream


def bucket_of_stream(stream: StreamConfig) -> tuple[str, str]:
    """``(bucket, key subject prefix)`` for a bucket's stream (a mirror reads and writes
    the keys of its origin bucket)."""
    if not stream.name.startswith(STREAM_PREFIX) or stream.max_msgs_per_subject < 1:
        raise BadBucketNameError(
            f"stream {stream.name!r} is not a key-value bucket (it needs the KV_ prefix and "
            "max_msgs_per_subject of at least 1)", name=stream.name)
    bucket = stream.name[len(STREAM_PREFIX):]
    if stream.mirror is not None:
        origin = stream.mirror.name
        origin = origin[len(STREAM_PREFIX):] if origin.startswith(STREAM_PREFIX) else origin
        return bucket, subject_prefix(origin)
    return bucket, subject_prefix(bucket)
