"""Public data types: configs, infos, enums and header names (no I/O, no Ray)."""

from rayjet.api.enums import (
    AckPolicy,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueOp,
    PersistMode,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StoreCompression,
)

__all__ = [
    "AckPolicy",
    "DeliverPolicy",
    "DiscardPolicy",
    "KeyValueOp",
    "PersistMode",
    "ReplayPolicy",
    "RetentionPolicy",
    "StorageType",
    "StoreCompression",
]
