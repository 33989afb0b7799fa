"""StreamConfig -> StoreConfig: the limits a store enforces by itself."""

from __future__ import annotations

from typing import Any

from rayjet.api import StreamConfig
from rayjet.storage.config import StoreConfig


def store_config(cfg: StreamConfig, **overrides: Any) -> StoreConfig:
    """The store settings of a stream; ``overrides`` set store-only fields (block_size,
    sync_interval, encryption_key, cipher) or replace mapped ones."""
    cfg = cfg.with_defaults()
    fields: dict[str, Any] = dict(
        name=cfg.name, storage=cfg.storage, max_msgs=cfg.max_msgs, max_bytes=cfg.max_bytes,
        max_age=cfg.max_age or 0.0, max_msgs_per_subject=cfg.max_msgs_per_subject,
        max_msg_size=cfg.max_msg_size, discard=cfg.discard,
        discard_new_per_subject=cfg.discard_new_per_subject, allow_msg_ttl=cfg.allow_msg_ttl,
        subject_delete_marker_ttl=cfg.subject_delete_marker_ttl or 0.0,
        compression=cfg.compression,
    )
    fields.update(overrides)
    return StoreConfig(**fields)




def updated_store_config(cfg: StreamConfig, current: StoreConfig) -> StoreConfig:
    """The store settings after a stream update, keeping the store-only fields of ``current``."""
    return store_config(cfg, block_size=current.block_size, sync_interval=current.sync_interval,
                        encryption_key=current.encryption_key, cipher=current.cipher,
                        storage=current.storage)


__all__ = ["store_config", "updated_store_config"]
