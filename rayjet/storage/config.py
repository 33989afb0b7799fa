"""Store-level settings, named like the NATS StreamConfig fields they come from.

Units: ``max_age``, ``subject_delete_marker_ttl`` and ``sync_interval`` are seconds (float);
``-1`` means unlimited for ``max_msgs``, ``max_bytes``, ``max_msgs_per_subject`` and
``max_msg_size`` (0 is read as unlimited too, as nats-server does). ``sync_interval`` 0 or
``"always"`` fsyncs before every write call returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from rayjet.api.enums import DiscardPolicy, StorageType, StoreCompression
from rayjet.errors import InvalidConfigError

ALWAYS = "always"
DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024
MAX_BLOCK_SIZE = 1 << 30
DEFAULT_SYNC_INTERVAL = 120.0
KEY_ENV = "RAYJET_STORE_KEY"
CIPHERS = ("chacha20-poly1305", "aes-256-gcm")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    name: str = ""
    storage: StorageType = StorageType.FILE
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: float = 0.0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: DiscardPolicy = DiscardPolicy.OLD
    discard_new_per_subject: bool = False
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: float = 0.0
    # FileStore only
    block_size: int = DEFAULT_BLOCK_SIZE
    sync_interval: float | str = DEFAULT_SYNC_INTERVAL
    compression: StoreCompression = StoreCompression.NONE
    encryption_key: bytes | None = None
    cipher: str = CIPHERS[0]

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "storage", StorageType.parse(self.storage, field="storage"))
        set_(self, "discard", DiscardPolicy.parse(self.discard, field="discard"))
        set_(self, "compression", StoreCompression.parse(self.compression, field="compression"))
        for field in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidConfigError(f"{field} must be an integer, -1 for unlimited")
            if value < -1:
                raise InvalidConfigError(f"{field} must be -1 (unlimited) or positive, not {value}")
        for field in ("max_age", "subject_delete_marker_ttl"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidConfigError(f"{field} must be seconds >= 0 (0 = unlimited)")
        if self.subject_delete_marker_ttl and 0 < self.subject_delete_marker_ttl < 1:
            raise InvalidConfigError("subject_delete_marker_ttl must be at least 1 second")
        bs = self.block_size
        if isinstance(bs, bool) or not isinstance(bs, int) or not 1024 <= bs <= MAX_BLOCK_SIZE:
            raise InvalidConfigError(
                f"block_size must be an integer between 1024 and {MAX_BLOCK_SIZE}, not {bs!r}")
        si = self.sync_interval
        if si != ALWAYS and (isinstance(si, bool) or not isinstance(si, int | float) or si < 0):
            raise InvalidConfigError(
                f"sync_interval must be seconds >= 0 or 'always', not {si!r}")
        if self.discard_new_per_subject and (
                self.discard is not DiscardPolicy.NEW or self.max_msgs_per_subject <= 0):
            raise InvalidConfigError(
                "discard_new_per_subject requires discard='new' and max_msgs_per_subject > 0")
        key = self.encryption_key
        if key is not None:
            if isinstance(key, str):
                set_(self, "encryption_key", key.encode())
            elif not isinstance(key, bytes | bytearray) or not key:
                raise InvalidConfigError("encryption_key must be non-empty bytes or None")
        if self.cipher not in CIPHERS:
            raise InvalidConfigError(f"cipher must be one of {', '.join(CIPHERS)}")

    @property
    def sync_always(self) -> bool:
        return self.sync_interval == ALWAYS

    def limit(self, field: str) -> int:
        """The limit as a positive int, or 0 when unlimited."""
        value = getattr(self, field)
        return value if value > 0 else 0

    def with_env_key(self) -> StoreConfig:
        """This config with ``encryption_key`` taken from $RAYJET_STORE_KEY when not given."""
        if self.encryption_key is None and os.environ.get(KEY_ENV):
            return replace(self, encryption_key=os.environ[KEY_ENV].encode())
        return self


__all__ = ["ALWAYS", "CIPHERS", "DEFAULT_BLOCK_SIZE", "KEY_ENV", "StoreConfig"]
